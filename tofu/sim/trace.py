"""The timeline of a simulated iteration, to look at: a Chrome trace and a Gantt figure.

Input: an :class:`~tofu.sim.engine.Execution`. Output: a Chrome-trace JSON document (the Trace Event Format that
Perfetto and ``chrome://tracing`` open: one process per device, a thread for its compute stream and one per copy
engine, one complete event per task, the memory each device holds as a counter) or a PNG Gantt chart (a row per
device's compute stream and per copy engine, a bar per task coloured by phase, and the memory held per device
below). Times in the trace are microseconds; in the figure, milliseconds.
"""
from __future__ import annotations

import json
from pathlib import Path

from tofu.sim.engine import Execution, Stream
from tofu.sim.program import Phase, TaskKind

_COLOURS = {("compute", Phase.FORWARD): "#4c72b0", ("compute", Phase.BACKWARD): "#dd8452",
            ("compute", Phase.UPDATE): "#55a868", ("copy", Phase.FORWARD): "#8172b3",
            ("copy", Phase.BACKWARD): "#c44e52"}
_LABELS = {("compute", Phase.FORWARD): "forward kernel", ("compute", Phase.BACKWARD): "backward kernel",
           ("compute", Phase.UPDATE): "update", ("copy", Phase.FORWARD): "forward copy",
           ("copy", Phase.BACKWARD): "backward copy"}


def _thread(stream: Stream, lane: int) -> int:
    return 0 if stream is Stream.COMPUTE else 1 + lane


def chrome_trace(execution: Execution) -> dict:
    """The iteration as a Trace Event Format document (``{"traceEvents": [...], "displayTimeUnit": "ms"}``)."""
    program = execution.program
    events: list[dict] = []
    threads = {(s.device, _thread(s.stream, s.lane)) for s in execution.spans}
    for d in range(program.workers):
        events.append({"ph": "M", "name": "process_name", "pid": d, "tid": 0, "args": {"name": f"device {d}"}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": d, "tid": 0, "args": {"sort_index": d}})
    for d, tid in sorted(threads):
        name = "compute" if tid == 0 else f"copy engine {tid - 1}"
        events.append({"ph": "M", "name": "thread_name", "pid": d, "tid": tid, "args": {"name": name}})
    for task, span in zip(program.tasks, execution.spans):
        args = {"task": task.id, "label": task.label, "origin": task.origin.value, "bytes": task.nbytes}
        if task.kind is TaskKind.COPY:
            args.update(src=task.src, dst=task.dst)
        else:
            args.update(flops=task.flops, op_class=task.op_class.value if task.op_class else None)
        events.append({"ph": "X", "name": task.op, "cat": task.phase.value, "pid": span.device,
                       "tid": _thread(span.stream, span.lane), "ts": span.start * 1e6,
                       "dur": (span.end - span.start) * 1e6, "args": args})
    for d, steps in enumerate(execution.memory):
        for time, held in steps:
            events.append({"ph": "C", "name": "memory", "pid": d, "tid": 0, "ts": time * 1e6,
                           "args": {"bytes": held}})
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"profile": execution.profile, "seconds": execution.seconds,
                          "overlap_fraction": execution.overlap_fraction}}


def write_chrome_trace(execution: Execution, path: str | Path) -> None:
    """Writes :func:`chrome_trace` as JSON to ``path``."""
    Path(path).write_text(json.dumps(chrome_trace(execution)))


def gantt(execution: Execution, path: str | Path, title: str | None = None) -> None:
    """Writes a Gantt chart of the iteration to ``path`` (any format matplotlib writes: PNG, PDF, SVG)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    program = execution.program
    rows = sorted({(s.device, _thread(s.stream, s.lane)) for s in execution.spans})
    row_of = {r: i for i, r in enumerate(rows)}
    bars: dict[tuple[int, tuple], list[tuple[float, float]]] = {}
    for task, span in zip(program.tasks, execution.spans):
        key = ("copy" if task.kind is TaskKind.COPY else "compute", task.phase)
        bars.setdefault((row_of[(span.device, _thread(span.stream, span.lane))], key), []).append(
            (span.start * 1e3, max((span.end - span.start) * 1e3, 1e-9)))
    height = max(3.0, 0.28 * len(rows) + 1.5)
    fig, (ax, mem) = plt.subplots(2, 1, figsize=(14, height + 2.5), sharex=True,
                                  gridspec_kw={"height_ratios": [height, 2.5]})
    for (row, key), spans in sorted(bars.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        ax.broken_barh(spans, (row - 0.4, 0.8), facecolors=_COLOURS[key], edgecolors="none")
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels([f"dev {d} " + ("compute" if t == 0 else f"copy {t - 1}") for d, t in rows], fontsize=7)
    ax.invert_yaxis()
    used = sorted({key for _, key in bars}, key=lambda k: list(_COLOURS).index(k))
    ax.legend(handles=[Patch(color=_COLOURS[k], label=_LABELS[k]) for k in used], loc="upper right", fontsize=7,
              ncol=len(used))
    idle = max(execution.idle) * 1e3
    ax.set_title(title or f"{execution.profile}: iteration {execution.seconds * 1e3:.3f} ms, most idle device "
                          f"{idle:.3f} ms, {execution.overlap_fraction:.0%} of communication overlapped")
    top = max(execution.peak_bytes, default=0)
    unit, scale = ("GiB", 2 ** 30) if top >= 2 ** 30 else ("MiB", 2 ** 20) if top >= 2 ** 20 else ("KiB", 2 ** 10)
    for d, steps in enumerate(execution.memory):
        kept = [(t, b) for t, b in steps if t < execution.makespan]       # everything is released at the end
        if kept:
            times = [t * 1e3 for t, _ in kept] + [execution.makespan * 1e3]
            held = [b / scale for _, b in kept]
            mem.step(times, held + held[-1:], where="post", linewidth=0.8, label=f"dev {d}")
    mem.set_ylabel(f"held ({unit})")
    mem.set_xlabel("time (ms)")
    mem.legend(fontsize=6, ncol=min(8, program.workers), loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
