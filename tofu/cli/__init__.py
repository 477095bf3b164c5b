"""The ``tofu`` command line (DESIGN.md, section 3): one module per command, each a thin layer over the stages.

``tofu inspect MODEL`` summarises a model (:mod:`tofu.cli.inspect`); ``tofu ops`` lists the TDL-described
operators and their strategies (:mod:`tofu.cli.ops`); ``tofu plan MODEL --workers K`` partitions it
(:mod:`tofu.cli.plan`); ``tofu run`` trains it partitioned, measured, ``--check`` beside one device
(:mod:`tofu.cli.run`); ``tofu launch --machines M --workers K -- tofu run ...`` trains it on several machines
through MXNet's dist kvstore (:mod:`tofu.cli.launch`); ``tofu sim MODEL --workers K`` simulates one iteration
of its partitioned graph on a hardware profile (:mod:`tofu.cli.sim`).

Every user mistake (unknown model or op, bad file, impossible option) prints one line ``tofu: error: ...`` on
stderr and exits with status 2; a run that fails (a diverged loss, ``--check`` beyond its tolerance) exits 1.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from tofu.cli import inspect, launch, ops, plan, run, sim
from tofu.cli.common import Parser, dumps, parse_bytes
from tofu.cli.launch import remote_run_args
from tofu.errors import TofuError

__all__ = ["build_parser", "command", "dumps", "main", "parse_bytes"]

COMMANDS = (inspect, ops, plan, run, launch, sim)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="tofu", description="Automatic partitioning of MXNet training graphs (Tofu).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress on stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    for command in COMMANDS:
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parse(list(sys.argv[1:] if argv is None else argv))
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
        return args.run(args)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        return e.status
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:             # `tofu ops | head`: the reader has gone, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def command() -> int:
    """:func:`main` as the process's entry point (``tofu``, ``python -m tofu``): the search's cost tables are
    emptied before the process exits, since the interpreter's last collections would walk them (2.4 million
    objects: 4 s of an 11 s ``tofu plan rnn-10-8k --workers 64``). Emptied, not frozen out of the collector: a
    frozen MXNet object is never freed, and a dist kvstore left so aborts the process at exit."""
    try:
        return main()
    finally:
        cost = sys.modules.get("tofu.search.cost")
        if cost is not None:
            cost.clear_caches()


def _parse(argv: list[str]) -> argparse.Namespace:
    """The command line; for ``tofu launch``, what follows the first ``--`` is its training command
    (``args.remote``, None without ``--``)."""
    if "--" in argv:
        cut = argv.index("--")
        args = build_parser().parse_args(argv[:cut])
        if args.command == "launch":
            args.remote = argv[cut + 1:]
            return args
    if "launch" in argv and "run" in argv[argv.index("launch"):]:
        remote_run_args(None)          # `tofu launch ... tofu run ...` without the `--`
    args = build_parser().parse_args(argv)
    args.remote = None
    return args
