"""The kernel-time model (tofu/sim/kernels.py) against independent references: the curve's limits and shape
by hand, the time formula by hand, the roofline fallback by hand, the fit against
known parameters and against brute force on a grid, the GPU profiles' numbers against their derivation from the
published measurements (tofu/sim/published.py), and the engine timing a task by the formula."""
import dataclasses
import itertools
import math
import random

import numpy as np
import pytest

from tofu.sim import kernels, published
from tofu.sim.calibrate import CALIBRATION_CASES, GRAIN_CASES, OP_SWEEPS, SWEEP_CASES, case_work
from tofu.sim.engine import kernel_seconds, simulate
from tofu.sim.flops import OpClass
from tofu.sim.hardware import K80X8, V100X8, ClassCurve, ClassRate, KernelModel, Level, Profile
from tofu.sim.kernels import busy_seconds, curve_loss, fit_curve, fit_rate, rate, seconds
from tofu.sim.program import Origin, Phase, Program, Task, TaskKind, Tensor, TensorKind

CURVES = [ClassCurve(2.9e12, 1.7e8, 0.43, 1.7e-5, 1.8e11), ClassCurve(1e9, 1e4, 1.0, 0.0),
          ClassCurve(5e10, 3e5, 0.1, 2e-6, 4e10)]


@pytest.mark.parametrize("curve", CURVES, ids=str)
def test_large_work_runs_at_the_peak_and_the_half_work_at_half_of_it(curve):
    assert rate(curve, curve.w_half) == pytest.approx(curve.peak / 2, rel=1e-12)
    big = curve.w_half * 10 ** (7 / curve.alpha)          # (h / w)^a = 1e-7
    assert rate(curve, big) == pytest.approx(curve.peak, rel=1e-6)
    assert busy_seconds(curve, big) == pytest.approx(big / curve.peak, rel=1e-6)
    assert rate(dataclasses.replace(curve, w_half=0.0), 1.0) == curve.peak          # h = 0: no fall


@pytest.mark.parametrize("curve", CURVES, ids=str)
def test_the_rate_and_the_time_rise_with_the_work(curve):
    works = np.geomspace(curve.w_half * 1e-6, curve.w_half * 1e6, 400)
    rates = [rate(curve, w) for w in works]
    times = [busy_seconds(curve, w) for w in works]
    assert all(a < b for a, b in zip(rates, rates[1:]))
    assert all(a < b for a, b in zip(times, times[1:]))
    assert all(0 < r < curve.peak for r in rates)


def test_alpha_one_is_hockneys_form():
    curve = ClassCurve(1e9, 1e4, 1.0, 3e-6)
    for w in (1.0, 1e3, 1e4, 1e7):
        assert rate(curve, w) == pytest.approx(1e9 * w / (w + 1e4), rel=1e-12)
        assert busy_seconds(curve, w) == pytest.approx((w + 1e4) / 1e9, rel=1e-12)


def test_the_time_of_a_kernel_by_hand():
    gemm = ClassCurve(4e12, 1e8, 0.5, 1e-5, 2e11)
    stream = ClassCurve(2e11, 1e7, 0.5, 2e-6, 4e12)
    model = KernelModel(tuple((c, gemm if c.contraction else stream) for c in OpClass))
    f, b = 1e9, 1e6                                     # compute bound: F / r(F) >> B / O
    assert seconds(OpClass.GEMM, f, b, model) == pytest.approx(1e-5 + (f + math.sqrt(1e8 * f)) / 4e12, rel=1e-12)
    f, b = 1e6, 1e9                                     # memory bound: the other side
    assert seconds(OpClass.CONVOLUTION, f, b, model) == pytest.approx(1e-5 + b / 2e11, rel=1e-12)
    b, f = 4e6, 1e6                                     # a memory class: bytes on the curve
    assert seconds(OpClass.ELEMENTWISE, f, b, model) == pytest.approx(2e-6 + (b + math.sqrt(1e7 * b)) / 2e11,
                                                                      rel=1e-12)
    assert seconds(OpClass.ELEMENTWISE, 1e12, 1.0, model) == pytest.approx(2e-6 + 1e12 / 4e12, rel=1e-12)
    assert seconds(OpClass.POOLING, 0.0, b, model, launch=7e-6) == pytest.approx(
        7e-6 + (b + math.sqrt(1e7 * b)) / 2e11, rel=1e-12)


TINY = Profile(name="tiny", devices=4, peak_flops=1e9, mem_bandwidth=2e9, memory_bytes=1e6,
               levels=(Level("dev", 1, 1e9),), host_bandwidth=1e9, launch_seconds=1e-6,
               classes=tuple((c, ClassRate(0.5 if c.contraction else 0.25, 0.8, 1e-6 * (i + 1)))
                             for i, c in enumerate(OpClass)), concurrency=4, source="test")


@pytest.mark.parametrize("prof", [TINY, dataclasses.replace(K80X8, kernels=None)], ids=lambda p: p.name)
@pytest.mark.parametrize("op_class", list(OpClass), ids=lambda c: c.value)
def test_a_profile_without_curves_is_timed_by_its_classes_roofline(prof, op_class):
    """max(F / (e_c P), B / (e_m W)) + L, by hand from the profile's class rates."""
    r = prof.rate(op_class)
    for flops, nbytes in ((1e3, 1e9), (1e12, 1e3), (0.0, 4e6), (5e8, 5e8)):
        by_hand = max(flops / (r.compute * prof.peak_flops), nbytes / (r.memory * prof.mem_bandwidth)) + r.launch
        assert seconds(op_class, flops, nbytes, kernels.kernel_model(prof)) == pytest.approx(by_hand, rel=1e-12)


# ------------------------------------------------------------------------------------------------ fitting

def _synthetic(curve: ClassCurve, works, call=1e-6, calls=2, noise=0.0, seed=0):
    rng = random.Random(seed)
    out = []
    for w in works:
        ws = tuple(w * (1 + i) for i in range(calls))            # e.g. a forward and a twice-as-large backward
        t = call + sum(curve.launch + busy_seconds(curve, x) for x in ws)
        out.append((t * (1 + noise * rng.uniform(-1, 1)), call, ws))
    return out


@pytest.mark.parametrize("curve", [ClassCurve(3e10, 1e5, 0.6, 4e-6), ClassCurve(1e10, 2e6, 0.3, 0.0),
                                   ClassCurve(2.9e12, 1.7e8, 0.43, 1.7e-5), ClassCurve(5e9, 0.0, 1.0, 8e-6)],
                         ids=str)
def test_the_fit_recovers_known_parameters(curve):
    scale = curve.w_half or 1e5
    fit = fit_curve(_synthetic(curve, np.geomspace(scale * 1e-3, scale * 1e3, 13)))
    assert fit.loss < 1e-8
    assert fit.peak == pytest.approx(curve.peak, rel=1e-3)
    assert fit.launch == pytest.approx(curve.launch, abs=1e-3 * curve.launch + 1e-9)
    if curve.w_half:
        assert fit.w_half == pytest.approx(curve.w_half, rel=1e-2) and fit.alpha == pytest.approx(curve.alpha,
                                                                                                  rel=1e-2)
    else:
        assert busy_seconds(ClassCurve(fit.peak, fit.w_half, fit.alpha, 0), 1e5) == pytest.approx(1e5 / 5e9,
                                                                                                  rel=1e-3)


@pytest.mark.parametrize("noise, max_rate, seed", [(0.2, math.inf, 1), (0.3, math.inf, 2), (0.2, 2e10, 3),
                                                    (0.5, math.inf, 4)])
def test_the_fit_is_the_constrained_optimum_against_brute_force(noise, max_rate, seed):
    """The fit's loss is no larger than the smallest on a grid of (R, h, a, L) inside the constraints."""
    points = _synthetic(ClassCurve(3e10, 1e5, 0.6, 4e-6), np.geomspace(1e2, 1e8, 9), noise=noise, seed=seed)
    fit = fit_curve(points, max_rate=max_rate)
    assert 0 < fit.peak <= max_rate and fit.launch >= 0 and 0 <= fit.w_half <= 2e8 and 0 < fit.alpha <= 1
    assert fit.loss == pytest.approx(curve_loss(points, fit.peak, fit.w_half, fit.alpha, fit.launch), rel=1e-9)
    best = math.inf
    top = min(max_rate, 3e11)
    for peak, half, alpha, launch in itertools.product(np.geomspace(3e9, top, 25), [0.0, *np.geomspace(1e2, 2e8, 13)],
                                                       (0.2, 0.4, 0.6, 0.8, 1.0), np.linspace(0, 2e-5, 21)):
        best = min(best, curve_loss(points, peak, half, alpha, launch))
    assert fit.loss <= best * (1 + 1e-9)


def test_fit_rate_is_the_linear_inner_problem():
    points = [(0.5 + 2 * 3e-6 + x / 2e9, 0.5, 2, x) for x in (1e6, 1e7, 1e8)]
    assert fit_rate(points) == pytest.approx((2e9, 3e-6), rel=1e-4)


def test_the_gpu_fit_recovers_a_known_curve_and_its_memory_side():
    true = ClassCurve(1.4e13, 6e7, 0.5, 1e-5, 6e11)
    points = [published.KernelPoint(published.kernel_time(true, published.KernelPoint(0, f, b)), f, b)
              for f in np.geomspace(1e6, 1e12, 15) for b in (f / 2, f / 60, f / 1000)]
    fit = published.fit_kernels(points)
    for got, want in ((fit.peak, true.peak), (fit.w_half, true.w_half), (fit.alpha, true.alpha),
                      (fit.launch, true.launch), (fit.other, true.other)):
        assert got == pytest.approx(want, rel=1e-3)


# ---------------------------------------------------------------------------------- the GPU profiles' sources

@pytest.mark.parametrize("prof, derive", [(K80X8, published.k80_curves), (V100X8, published.v100_curves)],
                         ids=["k80x8", "v100x8"])
def test_the_gpu_profiles_curves_are_their_documented_derivation(prof, derive):
    derived = published.rounded(derive())
    for c in OpClass:
        k = prof.kernels.curve(c)
        assert (k.peak, k.w_half, k.alpha, k.launch, k.other) == pytest.approx(derived[c], rel=5e-3), c
        assert k.source


def test_the_k80_gemm_curve_is_the_k40s_scaled_by_its_smx():
    fit = published.k40_gemm_fit()
    gemm = K80X8.kernels.curve(OpClass.GEMM)
    assert gemm.peak == pytest.approx(fit.peak * 13 / 15, rel=5e-3)
    assert gemm.w_half == pytest.approx(fit.w_half * 13 / 15, rel=5e-3)
    errors = [abs(e) for e in published.relative_errors(ClassCurve(fit.peak, fit.w_half, fit.alpha, fit.launch),
                                                        published.k40_points())]
    assert sorted(errors)[len(errors) // 2] < 0.05           # the form follows the published curve


def test_the_published_transcriptions_are_whole():
    assert len(published.K40_SGEMM) == 180 and published.K40_SGEMM[0] == (32, 3.97911)
    assert len(published.DEEPBENCH_V100_GEMM) == 160 and len(published.deepbench_conv_points()) == 272
    assert published.DEEPBENCH_V100_GEMM[0] == (1760, 16, 1760, "NN", 0.038)
    assert [b for b, _ in published.MXNET_K80_TRAIN_RESNET50] == [1, 2, 4, 8, 16, 32]


# -------------------------------------------------------------------------------------------- the engine

def test_the_engine_times_a_task_by_the_curve_formula():
    """One compute task and one update on k80x8, by hand from the curve's numbers."""
    tensors = (Tensor(0, 0, 16, TensorKind.ACTIVATION, 0), Tensor(1, 0, 16, TensorKind.PARAM, None))
    f, b = 3e9, 4e7
    tasks = (Task(0, TaskKind.COMPUTE, Phase.FORWARD, Origin.KERNEL, "FullyConnected", 0, None, OpClass.GEMM, f, b,
                  (), (), (0,)),
             Task(1, TaskKind.UPDATE, Phase.UPDATE, Origin.OPTIMIZER, "sgd_mom_update", 0, None,
                  OpClass.ELEMENTWISE, 4e6, 2e7, (0,), (1,), (1,)))
    run = simulate(Program(1, tasks, tensors), K80X8)
    g, e = K80X8.kernels.curve(OpClass.GEMM), K80X8.kernels.curve(OpClass.ELEMENTWISE)
    gemm = g.launch + max((f + g.w_half ** g.alpha * f ** (1 - g.alpha)) / g.peak, b / g.other)
    update = e.launch + max((2e7 + e.w_half ** e.alpha * 2e7 ** (1 - e.alpha)) / e.peak, 4e6 / e.other)
    assert [s.end - s.start for s in run.spans] == pytest.approx([gemm, update], rel=1e-12)
    assert kernel_seconds(tasks[0], K80X8) == pytest.approx(gemm, rel=1e-12)
    roofline = max(f / K80X8.peak_flops, b / K80X8.mem_bandwidth) + K80X8.launch_seconds
    assert gemm != pytest.approx(roofline, rel=1e-3)       # the curve, not a roofline of the datasheet peaks


def test_an_update_takes_the_profiles_update_launch_when_it_has_one():
    prof = dataclasses.replace(K80X8, update_launch_seconds=1e-3)
    task = Task(0, TaskKind.UPDATE, Phase.UPDATE, Origin.OPTIMIZER, "sgd_mom_update", 0, None, OpClass.ELEMENTWISE,
                0.0, 8.0, (), (), ())
    e = prof.kernels.curve(OpClass.ELEMENTWISE)
    assert kernel_seconds(task, prof) == pytest.approx(1e-3 + busy_seconds(e, 8.0), rel=1e-12)
    own = ClassCurve(1e10, 2e5, 1.0, 3e-6, 1e12)          # measured with its launch: the update launch is not added
    prof = dataclasses.replace(prof, kernels=dataclasses.replace(prof.kernels, ops=(("sgd_mom_update", own),)))
    assert kernel_seconds(task, prof) == pytest.approx(3e-6 + (8.0 + 2e5) / 1e10, rel=1e-12)


def test_a_kernel_measured_apart_is_timed_by_its_own_curve_and_every_other_by_its_class():
    """``KernelModel.ops``: a task whose op has a curve takes it (forward and backward alike, by the op the task
    names); a task of another op of the class, the class's curve; by hand from the curves' numbers."""
    conv_fwd = ClassCurve(1e10, 1e6, 0.5, 2e-6, 1e10, grain_half=4.0, grain_alpha=1.0)
    conv_bwd = ClassCurve(3e10, 1e5, 0.5, 1e-6, 1e10)
    prof = dataclasses.replace(K80X8, kernels=dataclasses.replace(
        K80X8.kernels, ops=(("Convolution", conv_fwd), ("_backward_Convolution", conv_bwd))))
    f, b = 4e7, 1e5

    def task(op, grain=math.inf):
        return Task(0, TaskKind.COMPUTE, Phase.FORWARD, Origin.KERNEL, op, 0, None, OpClass.CONVOLUTION, f, b, (),
                    (), (), grain=grain)
    own = 2e-6 + max((f + math.sqrt(1e6 * f)) / 1e10, f / (1e10 * 4 / (4 + 4)))      # grain 4: q = 1/2
    assert kernel_seconds(task("Convolution", 4.0), prof) == pytest.approx(own, rel=1e-12)
    assert kernel_seconds(task("_backward_Convolution", 4.0), prof) == pytest.approx(
        1e-6 + (f + math.sqrt(1e5 * f)) / 3e10, rel=1e-12)             # no grain in the backward's own curve
    c = K80X8.kernels.curve(OpClass.CONVOLUTION)
    assert kernel_seconds(task("Deconvolution"), prof) == pytest.approx(
        kernels.curve_seconds(c, OpClass.CONVOLUTION, f, b), rel=1e-12)
    with pytest.raises(ValueError, match="once"):
        KernelModel(K80X8.kernels.curves, (("Convolution", conv_fwd), ("Convolution", conv_bwd)))


def test_an_ops_forward_and_backward_curves_are_recovered_from_forward_alone_and_both_timings():
    """calibrate._op_curve_fits on timings made from two known curves (forward F, backward B) and a known
    executor call: F from the forward-alone times, B from forward + backward less F; held-out errors ~0."""
    from tofu.sim.calibrate import _op_curve_fits, fc
    from tofu.sim.flops import backward_work

    fwd = ClassCurve(4e10, 3e4, 0.5, 1e-6, 1e10)
    bwd = ClassCurve(2e10, 1e5, 0.5, 3e-6, 1e10)
    call, call_f = 1.4e-5, 0.8e-5
    measured = []
    for n in (2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 640):
        case = fc(n, n, n)
        work = case_work(case, [(n, n)])
        bf, bb = backward_work(work, case.grads)
        t_f = call_f + kernels.curve_seconds(fwd, OpClass.GEMM, work.flops, work.bytes)
        t = call + kernels.curve_seconds(fwd, OpClass.GEMM, work.flops, work.bytes) + \
            kernels.curve_seconds(bwd, OpClass.GEMM, bf, bb)
        measured.append((case, t, work, call, t_f, call_f))
    forward, backward = _op_curve_fits(measured[0::2], measured[1::2], (1e12, 1e10))
    for fit, true in ((forward, fwd), (backward, bwd)):
        assert (fit.peak, fit.w_half, fit.alpha, fit.launch) == pytest.approx(
            (true.peak, true.w_half, true.alpha, true.launch), rel=2e-2, abs=1e-8)
        assert fit.heldout_cases == 5 and fit.heldout_worst_error < 1e-3


def test_the_calibrations_op_curves_reach_the_profile_and_survive_its_cache(tmp_path):
    """An op curve of a calibration is the profile's curve of that op (its other side the calibration's peak on
    the far side of the roofline), and ``from_json`` reads back what was written."""
    import json
    from dataclasses import asdict

    from tofu.sim.calibrate import Calibration, ClassFit, CurveFit

    fits = {c.value: ClassFit("compute" if c.contraction else "memory", 1e9, 1e-6, 3, 0.1) for c in OpClass}
    curve = CurveFit("memory", 7e8, 18.0, 1.0, 7e-7, 5, 0.04, 4, 0.07, 0.15, "LayerNorm 16000x64",
                     (("LayerNorm 4x64", -0.02),))
    curves = {c.value: dataclasses.replace(curve, bound="compute" if c.contraction else "memory", peak=3e9)
              for c in OpClass}
    cal = Calibration(4e10, 1.3e10, 1.3e10, 1e-6, 1.4e-5, 1.4e-5, fits, 2e10, "h", 2, 15, curves,
                      op_curves={"_backward_LayerNorm": curve})
    back = Calibration.from_json(json.loads(json.dumps(asdict(cal))))
    assert back == cal
    k = back.profile().kernels.curve(OpClass.NORMALIZATION, "_backward_LayerNorm")
    assert (k.peak, k.w_half, k.alpha, k.launch, k.other) == (7e8, 18.0, 1.0, 7e-7, 4e10)
    assert back.profile().kernels.curve(OpClass.NORMALIZATION, "BatchNorm").peak == 3e9        # no curve of its own


# ------------------------------------------------------------------------------------------- the CPU sweep

def _key(case):
    return case.op, case.inputs, tuple(sorted(case.attrs.items()))


def test_the_sweep_is_disjoint_from_the_calibration_and_validation_sets():
    from experiments.run_cpu_validation import OP_CASES

    families = [*SWEEP_CASES.values(), *GRAIN_CASES.values()]
    sweep = {_key(c) for cases in families for c in cases}
    assert len(sweep) == sum(len(cases) for cases in families)
    assert not sweep & {_key(c) for cases in CALIBRATION_CASES.values() for c in cases}
    assert not sweep & {_key(c) for c in OP_CASES}


@pytest.mark.parametrize("op", list(OP_SWEEPS), ids=str)
def test_each_op_sweep_is_of_its_op_disjoint_from_the_calibration_and_validation_sets_and_spans_its_work(op):
    from experiments.run_cpu_validation import OP_CASES

    assert OP_SWEEPS, "no op is measured apart"
    others = {_key(c) for cases in CALIBRATION_CASES.values() for c in cases} | {_key(c) for c in OP_CASES}
    for cases in OP_SWEEPS[op]:
        assert len(cases) % 2 == 1 and len(cases) >= 9
        assert all(c.op == op for c in cases) and not {_key(c) for c in cases} & others
    works = [case_work(c, _out_shapes(c)) for c in OP_SWEEPS[op][0]]
    amounts = [w.flops if w.op_class.contraction else w.bytes for w in works]
    assert amounts == sorted(amounts) and amounts[-1] / amounts[0] > 1e3


@pytest.mark.parametrize("op_class", list(OpClass), ids=lambda c: c.value)
def test_the_sweep_spans_small_to_large_work_with_held_out_sizes_between_fitted_ones(op_class):
    """Each class's sweep is of that class (the TDL-derived class of the work it is charged), its works rise
    over four decades or more, and its odd (held-out) positions lie between even (fitted) ones."""
    cases = SWEEP_CASES[op_class]
    assert len(cases) % 2 == 1 and len(cases) >= 9
    works = []
    for case in cases:
        w = case_work(case, _out_shapes(case))
        assert w.op_class is op_class, case.name
        works.append(w.flops if op_class.contraction else w.bytes)
    assert works == sorted(works) and works[-1] / works[0] > 1e4


def _out_shapes(case):
    """The case's output shapes by MXNet's shape inference (no execution)."""
    import mxnet as mx

    args = [mx.sym.var(n) for n, _ in case.inputs]
    sym = getattr(mx.sym, case.op)(*args, **case.attrs)
    _, outs, _ = sym.infer_shape(**dict(case.inputs))
    return [tuple(o) for o in outs]


# ------------------------------------------------------------------------------------------------- the grain

def test_the_grain_factor_halves_the_rate_at_its_half_grain_and_vanishes_without_one():
    curve = ClassCurve(1e10, 1e6, 0.5, 1e-6, 1e9, grain_half=8.0, grain_alpha=1.5)
    assert kernels.grain_factor(curve, 8.0) == pytest.approx(0.5, rel=1e-12)
    assert kernels.grain_factor(curve, 2.0) == pytest.approx(2 ** 1.5 / (2 ** 1.5 + 8 ** 1.5), rel=1e-12)
    assert kernels.grain_factor(curve, math.inf) == 1.0
    assert kernels.grain_factor(dataclasses.replace(curve, grain_half=0.0), 1.0) == 1.0


def test_a_kernel_runs_at_the_slower_of_its_works_rate_and_its_grains_rate_not_their_product():
    curve = ClassCurve(1e10, 1e6, 0.5, 1e-6, 1e9, grain_half=8.0, grain_alpha=1.5)
    q = 1 / (1 + (8 / 2) ** 1.5)
    f = 3e8                                              # large work, grain 2: the grain's limit f / (R q)
    assert kernels.curve_seconds(curve, OpClass.CONVOLUTION, f, 0.0, grain=2.0) == pytest.approx(
        1e-6 + f / 1e10 / q, rel=1e-12)
    f = 1e4                                  # small work, grain 8 (q = 1/2): the curve's limit, not twice it
    assert kernels.curve_seconds(curve, OpClass.CONVOLUTION, f, 0.0, grain=8.0) == pytest.approx(
        1e-6 + (f + 1e6 ** 0.5 * f ** 0.5) / 1e10, rel=1e-12)


def test_a_convolutions_grain_is_its_output_pixels_per_image_and_other_ops_have_none():
    from tofu.graph.attrs import Attrs
    from tofu.sim.flops import op_call_work

    conv = op_call_work("Convolution", Attrs.parse({"num_filter": "4", "kernel": "(3, 3)", "pad": "(1, 1)"}),
                        [(2, 3, 5, 7), (4, 3, 3, 3), (4,)], [(2, 4, 5, 7)])
    assert conv.op_class is OpClass.CONVOLUTION and conv.grain == 35
    fc = op_call_work("FullyConnected", Attrs.parse({"num_hidden": "4"}), [(2, 3), (4, 3), (4,)], [(2, 4)])
    assert fc.op_class is OpClass.GEMM and math.isinf(fc.grain)


def test_the_engine_times_a_convolution_task_with_its_grain():
    conv = ClassCurve(1e10, 1e6, 0.5, 1e-6, 1e9, grain_half=8.0, grain_alpha=1.5)
    prof = dataclasses.replace(K80X8, kernels=KernelModel(tuple(
        (c, conv if c is OpClass.CONVOLUTION else k) for c, k in K80X8.kernels.curves)))
    task = Task(0, TaskKind.COMPUTE, Phase.FORWARD, Origin.KERNEL, "Convolution", 0, None, OpClass.CONVOLUTION,
                3e8, 1e6, (), (), (), "", 2.0)
    assert kernel_seconds(task, prof) == pytest.approx(
        kernels.curve_seconds(conv, OpClass.CONVOLUTION, 3e8, 1e6, grain=2.0), rel=1e-12)
    assert kernel_seconds(task, prof) > kernel_seconds(dataclasses.replace(task, grain=math.inf), prof) * 3


def test_fit_grain_recovers_known_parameters_and_prefers_no_grain_when_there_is_none():
    true = ClassCurve(2e10, 3e6, 0.6, 5e-6, grain_half=6.0, grain_alpha=2.0)
    pts = [(2e-6 + sum(kernels.curve_seconds(true, OpClass.CONVOLUTION, x, 0.0, grain=g) for x in (w, 2 * w)),
            2e-6, ((w, g), (2 * w, g))) for w in np.geomspace(1e4, 1e9, 6) for g in (1, 2, 4, 9, 16, 49)]
    f = kernels.fit_grain(pts)
    assert (f.grain_half, f.grain_alpha, f.peak, f.w_half) == pytest.approx((6.0, 2.0, 2e10, 3e6), rel=1e-3)
    flat = [(t, c, tuple((w, math.inf) for w, _ in calls)) for t, c, calls in
            [(2e-6 + busy_seconds(true, w) + true.launch, 2e-6, ((w, 0),)) for w in np.geomspace(1e4, 1e9, 9)]]
    assert kernels.fit_grain(flat).grain_half == 0.0


def test_a_sweep_case_rotates_over_copies_of_its_parameters_only():
    """calibrate.executors with cold parameters: as many executors as hold about PARAMETER_POOL_BYTES of the
    parameters (at most PARAMETER_POOL_MAX), each its own weight and bias, all the first's data, gradients and
    outputs' shapes; a case without parameters (relu), and any case without the option, one executor."""
    from tofu.sim import calibrate

    case = calibrate.conv(8, 512, 1, 512, 3)                 # 9.4 MB of weights: 28 copies would fill the pool
    exes = calibrate.executors(case, cold_parameters=True)
    nbytes = 4 * (512 * 512 * 9 + 512)
    assert len(exes) == min(calibrate.PARAMETER_POOL_MAX, math.ceil(calibrate.PARAMETER_POOL_BYTES / nbytes)) == 16
    first = exes[0]
    for e in exes[1:]:
        assert e.arg_dict["data"] is first.arg_dict["data"] and e.grad_dict["data"] is first.grad_dict["data"]
        assert e.grad_dict["weight"] is first.grad_dict["weight"]
        assert e.arg_dict["weight"] is not first.arg_dict["weight"] and e.arg_dict["bias"] is not first.arg_dict["bias"]
        assert not np.array_equal(e.arg_dict["weight"].asnumpy(), first.arg_dict["weight"].asnumpy())
    small = calibrate.conv(2, 8, 8, 8, 3)
    assert len(calibrate.executors(small, cold_parameters=True)) == calibrate.PARAMETER_POOL_MAX
    assert len(calibrate.executors(calibrate.activation((4, 8)), cold_parameters=True)) == 1
    assert len(calibrate.executors(case)) == 1
