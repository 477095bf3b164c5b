"""The kernel model's tables of docs/sim.md: every parameter of every hardware profile with its source, how well
the kernel curves fit (held-out sizes measured on this CPU, published kernels of the GPUs), and one device's
simulated iteration against MXNet's published single-GPU throughput.

    python experiments/table_sim.py --write docs/results/sim      # write the three CSV files and sidecars
    python experiments/table_sim.py docs/results/sim/parameters.csv   # print a table from its CSV

``--write`` reads the profile objects (:mod:`tofu.sim.hardware`; the ``cpu`` profile from its calibration cache,
measured when absent or stale: ``python -m tofu.sim.calibrate --recalibrate`` measures it again) and the
published measurements (:mod:`tofu.sim.published`). Rendering reads CSV only.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments.common import RowWriter, read_rows  # noqa: E402
from experiments.table_markdown import DocTable, Rows, markdown_table, unique  # noqa: E402

PARAMETER_COLUMNS = ("profile", "group", "item", "field", "value", "unit", "source")
FIT_COLUMNS = ("profile", "op_class", "data", "cases", "median_abs_error", "worst_abs_error", "worst_case")
CHECK_COLUMNS = ("gpu", "network", "mode", "batch", "published_seconds", "simulated_seconds", "relative_error",
                 "fitted")
DEVICE_FIELDS = (("devices", ""), ("peak_flops", "FLOP/s"), ("mem_bandwidth", "B/s"), ("memory_bytes", "B"),
                 ("host_bandwidth", "B/s"), ("host_sharing", ""), ("host_memory_bytes", "B"),
                 ("launch_seconds", "s"), ("step_seconds", "s"), ("update_launch_seconds", "s"),
                 ("copy_launch_seconds", "s"), ("concurrency", ""), ("copy_engines", ""), ("task_seconds", "s"),
                 ("bulk_task_seconds", "s"))
CURVE_FIELDS = ("peak", "w_half", "alpha", "launch", "other", "grain_half", "grain_alpha")


# ----------------------------------------------------------------------------------------------- writing

def parameter_rows(prof, sources: dict[str, str], bounds: dict[str, str] | None = None) -> Iterator[dict]:
    """One row per number of ``prof`` (device fields, interconnect levels, the class rates of a profile without curves, the
    kernel curves, the curves of kernels measured apart: ``bounds`` says of each whether its work is FLOPs,
    ``compute``, or bytes), each with its source."""
    for name, unit in DEVICE_FIELDS:
        value = getattr(prof, name)
        yield dict(group="device", item=name, field="", value="" if value is None else value, unit=unit,
                   source=sources.get(name, ""))
    for lv in prof.levels:
        yield dict(group="levels", item=f"{lv.name} (size {lv.size}{', shared' if lv.shared else ''})",
                   field="bandwidth", value=lv.bandwidth, unit="B/s", source=sources.get("levels", ""))
    for c, r in prof.classes:
        for f in ("compute", "memory", "launch"):
            yield dict(group="classes", item=c.value, field=f, value=getattr(r, f), unit="s" if f == "launch" else "",
                       source=sources.get("classes", ""))
    if prof.kernels is not None:
        for c, k in prof.kernels.curves:
            work, other = ("FLOP", "B/s") if c.contraction else ("B", "FLOP/s")
            units = {"peak": f"{work}/s", "w_half": work, "alpha": "", "launch": "s", "other": other,
                     "grain_half": "px", "grain_alpha": ""}
            for f in CURVE_FIELDS:
                yield dict(group="kernels", item=c.value, field=f, value=getattr(k, f), unit=units[f],
                           source=k.source)
        for name, k in prof.kernels.ops:
            work, other = ("FLOP", "B/s") if (bounds or {}).get(name) == "compute" else ("B", "FLOP/s")
            units = {"peak": f"{work}/s", "w_half": work, "alpha": "", "launch": "s", "other": other,
                     "grain_half": "px", "grain_alpha": ""}
            for f in CURVE_FIELDS:
                yield dict(group="kernels (own op)", item=name, field=f, value=getattr(k, f), unit=units[f],
                           source=k.source)


def host_path_rows(name: str) -> Iterator[dict]:
    """The host path of ``name`` where :mod:`tofu.sim.hardware` has one (issue 21, item 3)."""
    from tofu.sim import hardware

    path = getattr(hardware, "HOST_PATHS", {}).get(name)
    if path is not None:
        yield dict(group="host path", item="through", field="", value=" ".join(path.through) or "-", unit="",
                   source=path.source)
        yield dict(group="host path", item="engines", field="", value=path.engines, unit="", source=path.source)


def fit_rows(cpu_calibration) -> Iterator[dict]:
    """Per profile and class, the curve's errors on data it was not fitted on (cpu: the held-out sizes) or on the
    published kernels it was fitted to (GPUs)."""
    from tofu.sim import published
    from tofu.sim.flops import OpClass
    from tofu.sim.hardware import K80X8, V100X8

    everything = []
    for name, f in cpu_calibration.curves.items():
        yield dict(profile="cpu", op_class=name, data="held-out sizes, measured here", cases=f.heldout_cases,
                   median_abs_error=f.heldout_median_error, worst_abs_error=f.heldout_worst_error,
                   worst_case=f.heldout_worst_case)
        everything += [(abs(e), case) for case, e in f.heldout]
    if everything:
        worst = max(everything)
        yield dict(profile="cpu", op_class="all", data="held-out sizes, measured here", cases=len(everything),
                   median_abs_error=statistics.median(e for e, _ in everything), worst_abs_error=worst[0],
                   worst_case=worst[1])
    ops = []
    for name, f in cpu_calibration.op_curves.items():
        yield dict(profile="cpu", op_class=f"op {name}", data="held-out sizes, measured here", cases=f.heldout_cases,
                   median_abs_error=f.heldout_median_error, worst_abs_error=f.heldout_worst_error,
                   worst_case=f.heldout_worst_case)
        ops += [(abs(e), f"{name}: {case}") for case, e in f.heldout]
    if ops:
        worst = max(ops)
        yield dict(profile="cpu", op_class="all ops", data="held-out sizes, measured here", cases=len(ops),
                   median_abs_error=statistics.median(e for e, _ in ops), worst_abs_error=worst[0],
                   worst_case=worst[1])
    k80_gemm = K80X8.kernels.curve(OpClass.GEMM)
    back = published.K40_SMX / published.K80_SMX            # the K80 curve scaled back to the K40 it came from
    k40 = dataclasses.replace(k80_gemm, peak=k80_gemm.peak * back, w_half=k80_gemm.w_half * back)
    cases = (("k80x8", OpClass.GEMM, "K40 cuBLAS SGEMM (fitted; curve x 15/13)", k40, published.k40_points()),
             ("v100x8", OpClass.GEMM, "DeepBench V100 GEMM (fitted)", V100X8.kernels.curve(OpClass.GEMM),
              published.deepbench_gemm_points()),
             ("v100x8", OpClass.CONVOLUTION, "DeepBench V100 convolution (fitted)",
              V100X8.kernels.curve(OpClass.CONVOLUTION), published.deepbench_conv_points()))
    for prof, c, data, curve, points in cases:
        errors = [abs(e) for e in published.relative_errors(curve, points)]
        worst = max(range(len(errors)), key=errors.__getitem__)
        yield dict(profile=prof, op_class=c.value, data=data, cases=len(points),
                   median_abs_error=statistics.median(errors), worst_abs_error=errors[worst],
                   worst_case=points[worst].name)


def check_rows() -> Iterator[dict]:
    from tofu.sim import published
    from tofu.sim.hardware import K80X8, V100X8

    for ch in published.network_checks(K80X8.kernels, V100X8.kernels):
        yield dict(gpu=ch.gpu, network=ch.network, mode=ch.mode, batch=ch.batch,
                   published_seconds=ch.published_seconds, simulated_seconds=ch.simulated_seconds,
                   relative_error=ch.relative_error, fitted=ch.fitted)


def write(out_dir: Path, args: dict) -> None:
    from experiments.common import write_sidecar
    from tofu.sim.calibrate import calibration
    from tofu.sim.hardware import GPU_PROFILES, PARAMETER_SOURCES

    cal = calibration()
    command = f"experiments/table_sim.py --write {out_dir}"
    extra = dict(source=f"re-run: `{command}`", calibration_host=cal.host)
    profiles = [*GPU_PROFILES.values(), cal.profile()]
    out = RowWriter(out_dir / "parameters.csv", PARAMETER_COLUMNS)
    for prof in profiles:
        bounds = {name: f.bound for name, f in cal.op_curves.items()} if prof.name == "cpu" else {}
        for row in [*parameter_rows(prof, PARAMETER_SOURCES.get(prof.name, {}), bounds), *host_path_rows(prof.name)]:
            out.write(dict(profile=prof.name, **row))
    out.close()
    write_sidecar(out.path, args, **extra)
    for name, columns, rows in (("kernel_fits", FIT_COLUMNS, fit_rows(cal)), ("network_checks", CHECK_COLUMNS,
                                                                              check_rows())):
        out = RowWriter(out_dir / f"{name}.csv", columns)
        for row in rows:
            out.write(row)
        out.close()
        write_sidecar(out.path, args, **extra)


# ---------------------------------------------------------------------------------------------- rendering

_PREFIX = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def quantity(value: str, unit: str) -> str:
    """A CSV value with its unit, in SI prefixes (seconds in us or ms; plain numbers as they are).

    >>> quantity("4.37e12", "FLOP/s"), quantity("1.68e-05", "s"), quantity("0.43", ""), quantity("", "s")
    ('4.37 TFLOP/s', '16.8 us', '0.43', '-')
    """
    if value == "":
        return "-"
    try:
        x = float(value)
    except ValueError:
        return value
    if math.isinf(x):
        return "inf"
    if unit == "s":
        if x == 0:
            return "0"
        return f"{x * 1e6:.3g} us" if x < 1e-3 else f"{x * 1e3:.3g} ms" if x < 1 else f"{x:.3g} s"
    if not unit:
        return f"{x:.3g}" if not x.is_integer() else str(int(x))
    scale, prefix = next(((s, p) for s, p in _PREFIX if abs(x) >= s), (1.0, ""))
    return f"{x / scale:.3g} {prefix}{unit}"


def render_parameters(sources: list[Rows]) -> str:
    """One row per profile and number (a level, a class's rates, a class's curve: its fields on one row)."""
    rows = [r for rows in sources for r in rows]
    lines = []
    for key in unique((r["profile"], r["group"], r["item"]) for r in rows):
        mine = [r for r in rows if (r["profile"], r["group"], r["item"]) == key]
        profile, group, item = key
        if group in ("kernels", "kernels (own op)"):
            v = {r["field"]: quantity(r["value"], r["unit"]) for r in mine}
            value = f"R {v['peak']}, h {v['w_half']}, a {v['alpha']}, L {v['launch']}, other side {v['other']}"
            if float({r["field"]: r["value"] for r in mine}.get("grain_half") or 0) > 0:
                value += f", grain s {v['grain_half']}, b {v['grain_alpha']}"
        elif group == "classes":
            v = {r["field"]: quantity(r["value"], r["unit"]) for r in mine}
            value = f"compute {v['compute']}, memory {v['memory']}, launch {v['launch']}"
        else:
            value = ", ".join(quantity(r["value"], r["unit"]) for r in mine)
        name = {"device": item, "levels": f"level {item}", "classes": f"class rates: {item}",
                "kernels": f"kernel curve: {item}", "kernels (own op)": f"kernel curve of the op `{item}`",
                "host path": f"host path: {item}"}[group]
        lines.append([f"`{profile}`", name, value, mine[0]["source"].replace("|", "/")])
    return markdown_table(["profile", "parameter", "value", "source"], lines)


def render_fits(sources: list[Rows]) -> str:
    rows = [r for rows in sources for r in rows]
    lines = [[f"`{r['profile']}`", r["op_class"], r["data"], r["cases"],
              f"{float(r['median_abs_error']):.0%} / {float(r['worst_abs_error']):.0%}", r["worst_case"]]
             for r in rows]
    return markdown_table(["profile", "class", "errors on", "cases", "median / worst abs error", "worst case"], lines)


def render_checks(sources: list[Rows]) -> str:
    """One row per (GPU, network, mode), one column per batch: simulated / published seconds - 1."""
    rows = [r for rows in sources for r in rows]
    batches = sorted({int(r["batch"]) for r in rows})
    lines = []
    for key in unique((r["gpu"], r["network"], r["mode"], r["fitted"]) for r in rows):
        mine = {int(r["batch"]): float(r["relative_error"]) for r in rows
                if (r["gpu"], r["network"], r["mode"], r["fitted"]) == key}
        gpu, network, mode, fitted = key
        lines.append([gpu, network, mode + (" (fitted)" if fitted == "True" else ""),
                      *[f"{mine[b]:+.0%}" if b in mine else "" for b in batches]])
    return markdown_table(["GPU", "network", "iteration", *[f"b={b}" for b in batches]], lines)


TABLES = {"sim-parameters": DocTable(render_parameters), "sim-kernel-fits": DocTable(render_fits),
          "sim-network-checks": DocTable(render_checks)}
RENDER = {"parameters": render_parameters, "kernel_fits": render_fits, "network_checks": render_checks}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("csv", type=Path, nargs="*", help="a CSV this script wrote, to print as a table")
    p.add_argument("--write", type=Path, metavar="DIR", help="write parameters.csv, kernel_fits.csv and "
                   "network_checks.csv (with sidecars) into DIR")
    args = p.parse_args(argv)
    if args.write:
        write(args.write, {"write": str(args.write)})
    for path in args.csv:
        print(RENDER[path.stem]([read_rows(path)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
