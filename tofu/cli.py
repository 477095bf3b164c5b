"""The ``tofu`` command line (DESIGN.md, section 3).

Every user mistake (unknown model or op, bad file, impossible option) prints one line ``tofu: error: ...``
on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import re
import sys
from collections.abc import Sequence

from tofu.errors import TofuError
from tofu.graph import Role

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([KMGT]i?B|B)?\s*$", re.IGNORECASE)
_UNITS = {"b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def parse_bytes(text: str) -> int:
    """``12GB`` (10^9), ``12GiB`` (2^30), ``500MB``, ``1024`` -> bytes."""
    m = _SIZE.match(text)
    if not m:
        raise argparse.ArgumentTypeError(f"bad memory size '{text}' (examples: 12GB, 16GiB, 500MB)")
    return int(float(m[1]) * _UNITS[(m[2] or "B").lower()])


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):      # one line, status 2 (argparse's own usage dump is not one line)
        raise TofuError(message)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="zoo name (see `tofu inspect --list`) or a symbol JSON file")
    p.add_argument("--batch", type=int, help="batch size (default: the model family's, see docs/models.md)")
    p.add_argument("--seq-len", type=int, default=20, help="RNN unrolled timesteps (default 20)")
    p.add_argument("--vocab", type=int, default=10000, help="RNN vocabulary (default 10000)")
    p.add_argument("--shape", action="append", default=[], metavar="NAME=D1,D2,...",
                   help="input shape of a symbol file (repeat per input)")


def _graph(args):
    from tofu.api import load_graph
    from tofu.graph import parse_shape
    from tofu.models import ModelOptions

    shapes = dict(parse_shape(s) for s in args.shape)
    return load_graph(args.model, ModelOptions(batch=args.batch, seq_len=args.seq_len, vocab=args.vocab), shapes)


def cmd_inspect(args) -> int:
    graph = _graph(args)
    from tofu.graph.memory import estimate_training_memory

    mem = estimate_training_memory(graph)
    fits = mem.total <= args.device_memory
    counts = graph.op_counts()
    if args.json:
        print(json.dumps({"model": graph.name, "ops": len(graph.nodes), "op_counts": counts,
                          "param_count": sum(t.size for t in graph.by_role(Role.PARAM)),
                          "param_bytes": graph.param_bytes, "memory_bytes": mem.as_dict(),
                          "device_memory_bytes": args.device_memory, "fits": fits}))
        return 0
    print(f"model {graph.name}: {len(graph.nodes)} ops, {len(graph.tensors)} tensors")
    print("ops by type: " + ", ".join(f"{op} {n}" for op, n in counts.items()))
    nparams = sum(t.size for t in graph.by_role(Role.PARAM))
    print(f"parameters: {nparams:,} ({_gb(graph.param_bytes)})")
    print("training memory on one device (estimate):")
    for k, v in mem.as_dict().items():
        print(f"  {k:<12} {_gb(v):>12}")
    print(f"fits {_gb(args.device_memory)}: {'yes' if fits else 'no'}")
    return 0


def cmd_ops(args) -> int:
    from tofu import registry

    specs = registry.load_builtin_operators()
    rows = []
    for name, spec in sorted(specs.items()):
        attrs = {f.name: (None if f.default is dataclasses.MISSING else _jsonable(f.default))
                 for f in dataclasses.fields(spec.attrs_type)}
        rows.append({"name": name, "inputs": list(spec.inputs), "outputs": list(spec.outputs), "attrs": attrs,
                     "source": spec.source, "doc": spec.doc.splitlines()[0] if spec.doc else ""})
    if args.json:
        print(json.dumps({"ops": rows}))
        return 0
    for r in rows:
        print(f"{r['name']:<22} ({', '.join(r['inputs'])}) -> {', '.join(r['outputs'])}   {r['doc']}")
    print(f"{len(rows)} operators described")
    return 0


def _jsonable(v):
    return list(v) if isinstance(v, tuple) else v


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="tofu", description="Automatic partitioning of MXNet training graphs (Tofu).")
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress on stderr")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    p = sub.add_parser("inspect", help="ops, parameter bytes and training-memory estimate of a model")
    _model_args(p)
    p.add_argument("--device-memory", type=parse_bytes, default=parse_bytes("12GiB"),
                   help="device memory to compare with (default 12GiB)")
    p.add_argument("--json", action="store_true", help="one JSON object on stdout")
    p.set_defaults(run=cmd_inspect)

    p = sub.add_parser("ops", help="every operator with a TDL description")
    p.add_argument("--json", action="store_true")
    p.set_defaults(run=cmd_ops)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                            format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
        return args.run(args)
    except TofuError as e:
        print(f"tofu: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
