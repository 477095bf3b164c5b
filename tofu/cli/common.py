"""What every ``tofu`` command shares: the parser class (one-line errors), the model options and the graph they
name, checks of paths and numbers made before any work, and printing (sizes, JSON without bare NaN)."""
from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections.abc import Sequence

from tofu.errors import TofuError


# what matplotlib's Agg, PDF, PS and SVG backends write (a figure's suffix is checked before any work)
FIGURE_FORMATS = ("png", "pdf", "svg", "svgz", "eps", "ps", "jpg", "jpeg", "tif", "tiff", "webp")


_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)


_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``12GB`` (10^9), ``12GiB`` (2^30), ``500MB``, ``1024`` -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad memory size '{text}' (examples: 12GB, 16GiB, 500MB)")
    return int(float(m[1]) * _UNITS[(m[2] or "B").lower()])


def gb(n: float) -> str:
    """Bytes in the largest decimal unit that keeps the number >= 1 (12.35 GB, 310.9 KB)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {unit}"
    return f"{n:.0f} B"


class Parser(argparse.ArgumentParser):
    def error(self, message: str):      # one line, status 2 (argparse's own usage dump is not one line)
        raise TofuError(message)


def model_args(p: argparse.ArgumentParser, positional: bool = True) -> None:
    """The model and its options; ``positional=False`` makes the model an optional ``--model``."""
    help_ = ("zoo name (wresnet-{50,101,152}-{4,6,8,10}, rnn-{6,8,10}-{4k,6k,8k}, gpt-{124m,350m,774m,1.5b,2.7b,"
             "6.7b}, wresnet-tiny, rnn-tiny, gpt-tiny, mlp) or a symbol JSON file")
    if positional:
        p.add_argument("model", help=help_)
    else:
        p.add_argument("--model", help=help_ + ": list the ops of its graph")
    p.add_argument("--batch", type=int, help="batch size (default: the model family's, see docs/models.md)")
    p.add_argument("--seq-len", type=int, help="RNN unrolled timesteps (default 20), GPT tokens (default 1024)")
    p.add_argument("--vocab", type=int, help="RNN vocabulary (default 10000), GPT vocabulary (default 50304)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="input shape of a symbol file (repeat per input)")


def model_graph(args, with_loss: bool = False):
    from tofu.api import load_graph
    from tofu.graph import parse_shape

    input_path(args.model, "model file")
    from tofu.models import ModelOptions

    parsed = [parse_shape(s) for s in args.shape]
    names = [n for n, _ in parsed]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise TofuError(f"--shape gives '{twice[0]}' more than once")
    shapes = dict(parsed)
    return load_graph(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab), shapes,
                      with_loss)


def dumps(doc) -> str:
    """One JSON document: a float that is not finite (a diverged loss) becomes null, never a bare NaN."""
    def clean(v):
        if isinstance(v, float) and not math.isfinite(v):
            return None
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    return json.dumps(clean(doc), allow_nan=False)


def output_path(text: str, what: str, formats: Sequence[str] = ()) -> str:
    """A path to write ``what`` to, checked before any work: not a directory, in a directory that exists and can
    be written, with one of ``formats``' suffixes when given.

    Raises:
        TofuError: naming the path and what is wrong with it.
    """
    from pathlib import Path

    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise TofuError(f"cannot write {what} '{text}': it is a directory (give a file name)")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise TofuError(f"cannot write {what} '{text}': no directory '{parent}'")
    if not os.access(parent, os.W_OK):
        raise TofuError(f"cannot write {what} '{text}': directory '{parent}' is not writable")
    if path.exists() and not path.is_file():
        raise TofuError(f"cannot write {what} '{text}': it exists and is not a regular file")
    if formats and path.suffix.lower().lstrip(".") not in formats:
        raise TofuError(f"cannot write {what} '{text}': unknown format '{path.suffix or '(none)'}' "
                        f"(one of {', '.join('.' + f for f in formats)})")
    return text


def input_path(text: str | None, what: str) -> None:
    """That an existing ``text`` is a regular file (a named pipe would block the read forever; a directory
    would fail later); a missing one is left to the reader, which names it."""
    if text is not None and os.path.exists(text) and not os.path.isfile(text):
        raise TofuError(f"{what} '{text}' is not a regular file")


def finite(text: str) -> float:
    """An option's float: finite, or a one-line error (``--lr nan`` would train to NaN)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"'{text}' is not a finite number")
    return value


def jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def check_contexts(workers: int, ctx: str) -> None:
    if workers < 1:
        raise TofuError(f"--workers must be at least 1, got {workers}")
    if ctx == "gpu":
        import mxnet as mx

        have = mx.context.num_gpus()
        if workers > have:
            raise TofuError(f"{workers} workers need {workers} GPUs; this machine has {have}")


def split_batch(args, machines: int) -> int:
    """Sets ``args.batch`` to one machine's share of the global batch (``args.batch``, or the model's default)
    and returns the global batch.

    Raises:
        TofuError: not a zoo model, fewer than one machine, or a batch that does not divide by ``machines``.
    """
    from pathlib import Path

    from tofu.api import model_batch
    from tofu.models import ModelOptions

    if machines < 1:
        raise TofuError(f"--machines must be at least 1, got {machines}")
    if args.model.endswith(".json") or Path(args.model).is_file():
        raise TofuError(f"'{args.model}' is a symbol file: several machines train zoo models only (their batch "
                        f"is split by rows)")
    global_batch = model_batch(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab))
    if global_batch % machines:
        raise TofuError(f"the global batch {global_batch} is not divisible by {machines} machines")
    args.batch = global_batch // machines
    return global_batch
