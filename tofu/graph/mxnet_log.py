"""MXNet's own log lines kept from the terminal.

MXNet's C++ side writes lines such as ``[hh:mm:ss] ../src/nnvm/legacy_json_util.cc:208: Loading symbol saved by
previous version`` (a symbol file without ``mxnet_version``, upgraded as it loads) or ``MXNET_SUBGRAPH_BACKEND=NONE
is detected`` (every bind) straight to file descriptor 2: :func:`quiet` holds them back, and passes on every other
line written to stderr meanwhile. (A crash inside MXNet while it holds stderr would die unseen: the runtime, which
binds and runs, enables Python's fault handler on a copy of the real stderr, tofu.runtime.train; the graph's
probes, which crash on purpose and report it in one line, do not.)
"""
from __future__ import annotations

import contextlib
import os
import re
import sys
import tempfile

import mxnet as mx

_MXNET_LOG = re.compile(r"^\[\d\d:\d\d:\d\d\] \.\./(src|include)/")


@contextlib.contextmanager
def quiet():
    """Keeps MXNet's own log lines (``[hh:mm:ss] ../src/...``) off stderr while the block runs; every other
    line written to the process's stderr meanwhile is passed on."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            mx.nd.waitall()
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            text = sink.read().decode(errors="replace")
    kept = [ln for ln in text.splitlines() if ln.strip() and not _MXNET_LOG.match(ln)]
    if kept:
        print("\n".join(kept), file=sys.stderr)
