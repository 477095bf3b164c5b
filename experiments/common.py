"""Shared plumbing of the experiment scripts: CSV rows appended as they finish, and the JSON sidecar that
records how a result file was made (arguments, git SHA, versions)."""
from __future__ import annotations

import csv
import json
import platform
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path


def git_sha() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def write_sidecar(csv_path: Path, args: Mapping, **extra) -> Path:
    """``<csv>.json`` beside the CSV: arguments, git SHA, Python/MXNet/numpy versions, machine."""
    import mxnet
    import numpy

    path = csv_path.with_suffix(".json")
    path.write_text(json.dumps({"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in args.items()},
                                "git_sha": git_sha(), "python": sys.version.split()[0],
                                "mxnet": mxnet.__version__, "numpy": numpy.__version__,
                                "machine": platform.machine(), "processor": platform.processor(),
                                "command": " ".join(sys.argv), **extra}, indent=1))
    return path


class RowWriter:
    """Appends one CSV row per finished case, flushing each, so an interrupted run keeps what it measured."""

    def __init__(self, path: Path, columns: Sequence[str]):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.columns = path, tuple(columns)
        self._file = path.open("w", newline="")
        self._writer = csv.DictWriter(self._file, fieldnames=self.columns)
        self._writer.writeheader()

    def write(self, row: Mapping) -> None:
        self._writer.writerow({c: row.get(c, "") for c in self.columns})
        self._file.flush()

    def close(self) -> None:
        self._file.close()
