"""Published single-GPU measurements, and the GPU profiles' kernel curves derived from them.

Input: the measurements below, transcribed by script from the named files (never the Tofu paper's results).
Output: per :class:`~tofu.sim.flops.OpClass`, the :class:`~tofu.sim.hardware.ClassCurve` of one K80 die
(:func:`k80_curves`) and of one V100 (:func:`v100_curves`). :mod:`tofu.sim.hardware` holds the results as numbers
(rounded to 3 significant digits); tests/sim/test_kernels.py checks that they equal this derivation.

Sources:

* ``K40_SGEMM``: cuBLAS 7.0 SGEMM on a Tesla K40 (GK110B, 15 SMX, clocks at boost), m = n = k = 32 .. 5760,
  op(A, B) = (N, T), GFLOP/s = 2 n^3 / (host time of 10 back-to-back calls / 10): clMathLibraries/clBLAS,
  ``doc/performance/cuBLAS_7.0/Tesla_K40/sgemm.csv`` (commit 4b9a341, methodology in its README.txt). No
  kernel-level measurement of the K80 itself was found; its GK210 die is the same Kepler SMX (13 of them, at the
  same 875 MHz boost clock), so a K80 die's rate and half-rate work are the K40's times 13/15 (ours).
* ``DEEPBENCH_V100_*``: Baidu DeepBench training results on a Tesla V100 in FP32 (CUDA 10.1, cuDNN 7.6.2),
  sheet "Results FP32" of baidu-research/DeepBench ``results/train/DeepBench_NV_V100.xlsx`` (commit 30c5115):
  every dense GEMM (M, N, K, transposes, milliseconds) and every convolution (W, H, C, N, K, S = filter width,
  R = filter height, pads, strides; forward, backward-data and backward-filter milliseconds; None where the
  sheet has N/A).
* ``MXNET_*``: MXNet 1.2.0.rc1 with cuDNN 7.0.5, apache/mxnet ``docs/faq/perf.md`` (commit 054aeee), tables
  "Training results" (example/image-classification/train_imagenet.py) and "Scoring results" (benchmark_score.py),
  images/s of one GPU ("K80 (single GPU)", the p2.xlarge's, and "V100", the p3.2xlarge's) per batch size.

Derivations (each parameter's source is also in docs/sim.md's parameter table):

* K80 GEMM: :func:`~tofu.sim.kernels.fit_curve` through the K40 points (t = 2 n^3 / rate, one call each), then
  R and h times 13/15; a and L as fitted. tau = h / R (a kernel of work h takes L + 2 tau) is the K80's time
  scale of the fall for every class, and a and L its shape and launch (assumed: no other class has a published
  small-size measurement of this GPU).
* K80 memory-bound classes (normalization, pooling, element-wise, data movement): R = 0.75 x 240 GB/s (assumed:
  the datasheet's bandwidth of one die with ECC on, as the profile stated before; no published streaming
  measurement of a K80 die was found), h = R tau, a and L the GEMM's.
* K80 convolution: R fitted (h = R tau, a and L the GEMM's) so that one device's simulated training iteration of
  ResNet-50 (``wresnet-50-1``, every task of :func:`tofu.sim.program.program_from_plan` timed by the curves)
  matches MXNet's published K80 training throughput at batch 1 .. 32 (least squares on the relative error).
* V100 GEMM: (R, h, a, L) and the streaming rate O of its memory side fitted together through every DeepBench
  GEMM (t = L + max(F / r(F), B / O), F = 2 M N K, B = 4 (M K + K N + M N), least squares on the relative error).
* V100 convolution: (R, h, a, L) through every DeepBench convolution kernel (forward, backward-data and
  backward-filter each one kernel of F = 2 N K C R S P Q FLOPs), the memory side at the GEMM's O. cuDNN picks
  Winograd and FFT algorithms, so the rate counted in direct-convolution FLOPs may exceed the FP32 peak.
* V100 memory-bound classes: R = O (what cuBLAS streams: an optimistic stand-in for element-wise kernels,
  assumed), h = R tau with the GEMM's tau, a and L the GEMM's.

The MXNet tables that no fit uses (V100 training and scoring, K80 scoring) are kept as checks
(:func:`network_checks`): one device's simulated iteration against the published one.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

from tofu.sim.flops import OpClass
from tofu.sim.hardware import ClassCurve, KernelModel
from tofu.sim.kernels import CurveFit, busy_seconds, fit_curve

GB = 1e9
K40_SMX, K80_SMX = 15, 13                 # NVIDIA Tesla K40 and K80 datasheets: SMX per GPU (die)
K80_DIE_BANDWIDTH = 240 * GB              # NVIDIA Tesla K80 datasheet: 480 GB/s per board of two dies
K80_STREAM_EFFICIENCY = 0.75              # assumed (ECC on): no published streaming measurement of a K80 die
MEMORY_CLASSES = tuple(c for c in OpClass if not c.contraction)

MXNET_K80_TRAIN_RESNET50 = ((1, 15.61), (2, 23.88), (4, 32.26), (8, 39.42), (16, 46.69), (32, 49.48))
MXNET_V100_TRAIN_RESNET50 = ((1, 34.54), (2, 65.01), (4, 113.49), (8, 174.81), (16, 251.22), (32, 298.51),
                             (64, 343.19), (128, 363.69))
MXNET_K80_SCORE_RESNET152 = ((1, 23.65), (2, 33.88), (4, 45.23), (8, 50.54), (16, 62.55), (32, 64.99),
                             (64, 70.21), (128, 71.85), (256, 57.23))
MXNET_V100_SCORE_RESNET152 = ((1, 61.38), (2, 116.30), (4, 195.17), (8, 294.19), (16, 398.79), (32, 451.82),
                              (64, 480.44), (128, 511.79), (256, 449.35))
"""(batch, images/s): apache/mxnet docs/faq/perf.md (commit 054aeee), MXNet 1.2.0.rc1, cuDNN 7.0.5."""
K40_SGEMM: tuple[tuple[int, float], ...] = (
    (32, 3.97911), (64, 24.6608), (96, 76.7334), (128, 164.289), (160, 287.539), (192, 464.733), (224, 543.099),
    (256, 732.31), (288, 934.397), (320, 1185.96), (352, 1087.23), (384, 1279.18), (416, 1185.33), (448, 1372.44),
    (480, 1367.44), (512, 1378.57), (544, 1543.45), (576, 1759.29), (608, 1633.16), (640, 2180.63), (672, 1809.14),
    (704, 1984.89), (736, 1954.4), (768, 2077.67), (800, 1960.48), (832, 2070.35), (864, 2083.88), (896, 2394.47),
    (928, 2348.25), (960, 2716.16), (992, 2405.18), (1024, 2274.73), (1056, 2227.42), (1088, 2344.43),
    (1120, 2383.68), (1152, 2703.3), (1184, 2512.67), (1216, 2614.45), (1248, 2552.61), (1280, 3009.58),
    (1312, 2722.31), (1344, 2602.76), (1376, 2692.22), (1408, 2817.5), (1440, 2732.14), (1472, 2856.67),
    (1504, 2693.53), (1536, 2701.02), (1568, 2744.06), (1600, 2858.5), (1632, 2849.46), (1664, 2971.45),
    (1696, 2884.4), (1728, 3024.61), (1760, 2968.11), (1792, 2911.38), (1824, 2940.92), (1856, 3011.91),
    (1888, 3005.63), (1920, 3187.09), (1952, 2983.85), (1984, 3088.32), (2016, 2985.92), (2048, 3159.47),
    (2080, 3004.28), (2112, 3143.35), (2144, 3032.66), (2176, 3113.98), (2208, 3004.97), (2240, 3087.58),
    (2272, 2997.36), (2304, 3137.38), (2336, 2995.4), (2368, 3069.01), (2400, 3013.48), (2432, 3107.17),
    (2464, 2955.76), (2496, 3152.14), (2528, 3043.96), (2560, 3208.24), (2592, 3077.94), (2624, 3152.33),
    (2656, 3059.59), (2688, 3133.47), (2720, 3053.69), (2752, 3128.14), (2784, 3058.3), (2816, 3188.94),
    (2848, 3064.88), (2880, 3239.46), (2912, 3121.65), (2944, 3188.38), (2976, 3109.72), (3008, 3172.39),
    (3040, 3063.9), (3072, 3240.27), (3104, 3131.28), (3136, 3196.59), (3168, 3123.56), (3200, 3186.85),
    (3232, 3105.19), (3264, 3185.27), (3296, 3123.99), (3328, 3241.21), (3360, 3141.84), (3392, 3200.51),
    (3424, 3132.12), (3456, 3230.72), (3488, 3153.98), (3520, 3205.6), (3552, 3127.98), (3584, 3240.97),
    (3616, 3160.2), (3648, 3254.24), (3680, 3177.79), (3712, 3230.99), (3744, 3155.12), (3776, 3208.55),
    (3808, 3137.72), (3840, 3296.57), (3872, 3214.6), (3904, 3265.45), (3936, 3190.31), (3968, 3238.14),
    (4000, 3164.75), (4032, 3250.24), (4064, 3184.64), (4096, 3275.29), (4128, 3208.99), (4160, 3256.53),
    (4192, 3188.44), (4224, 3259.74), (4256, 3195.44), (4288, 3242.99), (4320, 3182.62), (4352, 3282.08),
    (4384, 3167.87), (4416, 3271.03), (4448, 3221.74), (4480, 3259.13), (4512, 3193.43), (4544, 3196.28),
    (4576, 3113.92), (4608, 3315.38), (4640, 3206.18), (4672, 3205.44), (4704, 3174.2), (4736, 3208.93),
    (4768, 3119.11), (4800, 3237.65), (4832, 3153.55), (4864, 3260.31), (4896, 3160.7), (4928, 3191.98),
    (4960, 3125.23), (4992, 3210.36), (5024, 3155.2), (5056, 3163.38), (5088, 3106.3), (5120, 3206.29),
    (5152, 3128.68), (5184, 3208.48), (5216, 3154.3), (5248, 3195.15), (5280, 3130.09), (5312, 3145.16),
    (5344, 3099.87), (5376, 3295.12), (5408, 3155.32), (5440, 3188.74), (5472, 3133.55), (5504, 3145.54),
    (5536, 3083.16), (5568, 3168.53), (5600, 3117.89), (5632, 3221.5), (5664, 3123.38), (5696, 3159.69),
    (5728, 3098.44), (5760, 3201.51),
)
"""(n, GFLOP/s) of cuBLAS 7.0 SGEMM, m = n = k = n, on a Tesla K40 (see the module docstring)."""
DEEPBENCH_V100_GEMM: tuple[tuple[int, int, int, str, float], ...] = (
    (1760, 16, 1760, 'NN', 0.038), (1760, 32, 1760, 'NN', 0.041), (1760, 64, 1760, 'NN', 0.056),
    (1760, 128, 1760, 'NN', 0.088), (1760, 7000, 1760, 'NN', 3.376), (2048, 16, 2048, 'NN', 0.042),
    (2048, 32, 2048, 'NN', 0.045), (2048, 64, 2048, 'NN', 0.063), (2048, 128, 2048, 'NN', 0.106),
    (2048, 7000, 2048, 'NN', 4.387), (2560, 16, 2560, 'NN', 0.051), (2560, 32, 2560, 'NN', 0.054),
    (2560, 64, 2560, 'NN', 0.075), (2560, 128, 2560, 'NN', 0.128), (2560, 7000, 2560, 'NN', 6.948),
    (4096, 16, 4096, 'NN', 0.11), (4096, 32, 4096, 'NN', 0.11), (4096, 64, 4096, 'NN', 0.174),
    (4096, 128, 4096, 'NN', 0.332), (4096, 7000, 4096, 'NN', 15.894), (1760, 16, 1760, 'TN', 0.037),
    (1760, 32, 1760, 'TN', 0.043), (1760, 64, 1760, 'TN', 0.054), (1760, 128, 1760, 'TN', 0.088),
    (1760, 7000, 1760, 'TN', 3.145), (2048, 16, 2048, 'TN', 0.044), (2048, 32, 2048, 'TN', 0.048),
    (2048, 64, 2048, 'TN', 0.065), (2048, 128, 2048, 'TN', 0.099), (2048, 7000, 2048, 'TN', 4.604),
    (2560, 16, 2560, 'TN', 0.062), (2560, 32, 2560, 'TN', 0.062), (2560, 64, 2560, 'TN', 0.088),
    (2560, 128, 2560, 'TN', 0.145), (2560, 7000, 2560, 'TN', 6.45), (4096, 16, 4096, 'TN', 0.114),
    (4096, 32, 4096, 'TN', 0.114), (4096, 64, 4096, 'TN', 0.173), (4096, 128, 4096, 'TN', 0.327),
    (4096, 7000, 4096, 'TN', 16.243), (1760, 7133, 1760, 'NT', 3.369), (2048, 7133, 2048, 'NT', 4.601),
    (2560, 7133, 2560, 'NT', 7.058), (4096, 7133, 4096, 'NT', 16.512), (5124, 9124, 1760, 'NN', 13.004),
    (35, 8457, 1760, 'NN', 0.198), (5124, 9124, 2048, 'NN', 14.924), (35, 8457, 2048, 'NN', 0.209),
    (5124, 9124, 2560, 'NN', 18.587), (35, 8457, 2560, 'NN', 0.26), (5124, 9124, 4096, 'NN', 29.61),
    (35, 8457, 4096, 'NN', 0.39), (5124, 9124, 1760, 'TN', 12.147), (35, 8457, 1760, 'TN', 0.208),
    (5124, 9124, 2048, 'TN', 14.039), (35, 8457, 2048, 'TN', 0.212), (5124, 9124, 2560, 'TN', 17.542),
    (35, 8457, 2560, 'TN', 0.28), (5124, 9124, 4096, 'TN', 27.882), (35, 8457, 4096, 'TN', 0.411),
    (7680, 16, 2560, 'NN', 0.116), (7680, 32, 2560, 'NN', 0.122), (7680, 64, 2560, 'NN', 0.201),
    (7680, 128, 2560, 'NN', 0.398), (7680, 16, 2560, 'TN', 0.138), (7680, 32, 2560, 'TN', 0.147),
    (7680, 64, 2560, 'TN', 0.237), (7680, 128, 2560, 'TN', 0.386), (3072, 16, 1024, 'NN', 0.032),
    (3072, 32, 1024, 'NN', 0.035), (3072, 64, 1024, 'NN', 0.051), (3072, 128, 1024, 'NN', 0.081),
    (3072, 16, 1024, 'TN', 0.034), (3072, 32, 1024, 'TN', 0.036), (3072, 64, 1024, 'TN', 0.053),
    (3072, 128, 1024, 'TN', 0.08), (3072, 7435, 1024, 'NT', 3.607), (7680, 5481, 2560, 'NT', 15.075),
    (512, 8, 500000, 'NN', 1.294), (1024, 8, 500000, 'NN', 2.51), (512, 16, 500000, 'NN', 1.339),
    (1024, 16, 500000, 'NN', 2.481), (512, 8, 500000, 'TN', 1.827), (1024, 8, 500000, 'TN', 3.631),
    (512, 16, 500000, 'TN', 1.851), (1024, 16, 500000, 'TN', 3.664), (1024, 700, 512, 'NN', 0.067),
    (1024, 700, 512, 'TN', 0.071), (7680, 24000, 2560, 'NN', 72.587), (6144, 24000, 2048, 'NN', 45.941),
    (4608, 24000, 1536, 'NN', 25.936), (8448, 24000, 2816, 'NN', 87.831), (3072, 24000, 1024, 'NN', 11.491),
    (7680, 48000, 2560, 'NN', 145.035), (6144, 48000, 2048, 'NN', 91.845), (4608, 48000, 1536, 'NN', 51.779),
    (8448, 48000, 2816, 'NN', 175.494), (3072, 48000, 1024, 'NN', 22.918), (7680, 24000, 2560, 'TN', 68.151),
    (6144, 24000, 2048, 'TN', 42.783), (4608, 24000, 1536, 'TN', 24.308), (8448, 24000, 2816, 'TN', 83.485),
    (3072, 24000, 1024, 'TN', 10.992), (7680, 48000, 2560, 'TN', 137.416), (6144, 48000, 2048, 'TN', 85.729),
    (4608, 48000, 1536, 'TN', 48.507), (8448, 48000, 2816, 'TN', 166.626), (3072, 48000, 1024, 'TN', 21.977),
    (6144, 16, 2048, 'NN', 0.088), (4608, 16, 1536, 'NN', 0.048), (8448, 16, 2816, 'NN', 0.133),
    (6144, 32, 2048, 'NN', 0.085), (4608, 32, 1536, 'NN', 0.049), (8448, 32, 2816, 'NN', 0.135),
    (6144, 16, 2048, 'TN', 0.092), (4608, 16, 1536, 'TN', 0.057), (8448, 16, 2816, 'TN', 0.171),
    (6144, 32, 2048, 'TN', 0.097), (4608, 32, 1536, 'TN', 0.059), (8448, 32, 2816, 'TN', 0.172),
    (512, 24000, 2816, 'NN', 4.798), (512, 24000, 2048, 'NN', 3.858), (512, 24000, 2560, 'NN', 4.829),
    (512, 24000, 1530, 'NN', 2.902), (1024, 24000, 2816, 'NN', 10.821), (1024, 24000, 2048, 'NN', 7.704),
    (1024, 24000, 2560, 'NN', 9.783), (1024, 24000, 1530, 'NN', 5.775), (512, 16, 512, 'NN', 0.01),
    (1024, 16, 512, 'NN', 0.011), (512, 24000, 2816, 'TN', 4.815), (512, 24000, 2048, 'TN', 3.691),
    (512, 24000, 2560, 'TN', 4.598), (512, 24000, 1530, 'TN', 2.79), (1024, 24000, 2816, 'TN', 9.905),
    (1024, 24000, 2048, 'TN', 7.338), (1024, 24000, 2560, 'TN', 8.936), (1024, 24000, 1530, 'TN', 5.547),
    (512, 16, 512, 'NT', 0.013), (1024, 16, 512, 'NT', 0.014), (512, 48000, 2816, 'NN', 10.675),
    (512, 48000, 2048, 'NN', 7.607), (512, 48000, 2560, 'NN', 9.676), (512, 48000, 1530, 'NN', 5.748),
    (1024, 48000, 2816, 'NN', 21.677), (1024, 48000, 2048, 'NN', 15.462), (1024, 48000, 2560, 'NN', 19.612),
    (1024, 48000, 1530, 'NN', 11.58), (512, 32, 512, 'NN', 0.014), (1024, 32, 512, 'NN', 0.015),
    (512, 48000, 2816, 'TN', 9.939), (512, 48000, 2048, 'TN', 7.981), (512, 48000, 2560, 'TN', 9.2),
    (512, 48000, 1530, 'TN', 6.132), (1024, 48000, 2816, 'TN', 20.076), (1024, 48000, 2048, 'TN', 14.213),
    (1024, 48000, 2560, 'TN', 17.826), (1024, 48000, 1530, 'TN', 10.741), (512, 32, 512, 'NT', 0.014),
    (1024, 32, 512, 'NT', 0.014),
)
"""(M, N, K, transposes of A and B, milliseconds) of every FP32 GEMM of DeepBench's V100 training results."""
DEEPBENCH_V100_CONV: tuple[tuple, ...] = (
    (700, 161, 1, 4, 32, 20, 5, 0, 0, 2, 2, 0.078, None, 0.127),
    (700, 161, 1, 8, 32, 20, 5, 0, 0, 2, 2, 0.135, None, 0.212),
    (700, 161, 1, 16, 32, 20, 5, 0, 0, 2, 2, 0.227, None, 0.403),
    (700, 161, 1, 32, 32, 20, 5, 0, 0, 2, 2, 0.443, None, 0.768),
    (341, 79, 32, 4, 32, 10, 5, 0, 0, 2, 2, 0.307, 0.861, 0.295),
    (341, 79, 32, 8, 32, 10, 5, 0, 0, 2, 2, 0.425, 1.411, 0.556),
    (341, 79, 32, 16, 32, 10, 5, 0, 0, 2, 2, 0.865, 1.614, 1.077),
    (341, 79, 32, 32, 32, 10, 5, 0, 0, 2, 2, 1.567, 2.332, 2.124),
    (480, 48, 1, 16, 16, 3, 3, 1, 1, 1, 1, 0.056, None, 0.166),
    (240, 24, 16, 16, 32, 3, 3, 1, 1, 1, 1, 0.057, 0.088, 0.144),
    (120, 12, 32, 16, 64, 3, 3, 1, 1, 1, 1, 0.062, 0.063, 0.128),
    (60, 6, 64, 16, 128, 3, 3, 1, 1, 1, 1, 0.063, 0.06, 0.094),
    (108, 108, 3, 8, 64, 3, 3, 1, 1, 2, 2, 0.03, None, 0.053),
    (54, 54, 64, 8, 64, 3, 3, 1, 1, 1, 1, 0.092, 0.095, 0.208),
    (27, 27, 128, 8, 128, 3, 3, 1, 1, 1, 1, 0.115, 0.114, 0.086),
    (14, 14, 128, 8, 256, 3, 3, 1, 1, 1, 1, 0.059, 0.058, 0.052),
    (7, 7, 256, 8, 512, 3, 3, 1, 1, 1, 1, 0.121, 0.12, 0.077),
    (224, 224, 3, 8, 64, 3, 3, 1, 1, 1, 1, 0.167, None, 0.37),
    (112, 112, 64, 8, 128, 3, 3, 1, 1, 1, 1, 0.624, 0.602, 0.997),
    (56, 56, 128, 8, 256, 3, 3, 1, 1, 1, 1, 0.668, 0.65, 0.49),
    (28, 28, 256, 8, 512, 3, 3, 1, 1, 1, 1, 0.716, 0.741, 0.42),
    (14, 14, 512, 8, 512, 3, 3, 1, 1, 1, 1, 0.437, 0.429, 0.278),
    (7, 7, 512, 8, 512, 3, 3, 1, 1, 1, 1, 0.236, 0.244, 0.136),
    (224, 224, 3, 16, 64, 3, 3, 1, 1, 1, 1, 0.33, None, 0.741),
    (112, 112, 64, 16, 128, 3, 3, 1, 1, 1, 1, 1.246, 1.209, 1.928),
    (56, 56, 128, 16, 256, 3, 3, 1, 1, 1, 1, 0.9, 0.901, 0.936),
    (28, 28, 256, 16, 512, 3, 3, 1, 1, 1, 1, 0.801, 0.859, 0.766),
    (14, 14, 512, 16, 512, 3, 3, 1, 1, 1, 1, 0.506, 0.499, 0.477),
    (7, 7, 512, 16, 512, 3, 3, 1, 1, 1, 1, 0.273, 0.267, 0.178),
    (224, 224, 3, 16, 64, 7, 7, 3, 3, 2, 2, 0.304, None, 0.553),
    (28, 28, 192, 16, 32, 5, 5, 2, 2, 1, 1, 0.192, 0.197, 0.189),
    (28, 28, 192, 16, 64, 1, 1, 0, 0, 1, 1, 0.048, 0.043, 0.09),
    (14, 14, 512, 16, 48, 5, 5, 2, 2, 1, 1, 0.257, 0.205, 0.24),
    (14, 14, 512, 16, 192, 1, 1, 0, 0, 1, 1, 0.066, 0.065, 0.101),
    (7, 7, 832, 16, 256, 1, 1, 0, 0, 1, 1, 0.095, 0.061, 0.079),
    (7, 7, 832, 16, 128, 5, 5, 2, 2, 1, 1, 0.639, 0.574, 0.4),
    (56, 56, 64, 8, 64, 3, 3, 1, 1, 1, 1, 0.106, 0.097, 0.229),
    (56, 56, 64, 8, 256, 1, 1, 0, 0, 2, 2, 0.041, 0.076, 0.125),
    (28, 28, 128, 8, 128, 3, 3, 1, 1, 1, 1, 0.112, 0.112, 0.086),
    (28, 28, 128, 8, 512, 1, 1, 0, 0, 2, 2, 0.038, 0.139, 0.054),
    (14, 14, 256, 8, 256, 1, 1, 0, 0, 1, 1, 0.034, 0.035, 0.053),
    (14, 14, 256, 8, 256, 3, 3, 1, 1, 1, 1, 0.113, 0.112, 0.087),
    (14, 14, 256, 8, 1024, 1, 1, 0, 0, 2, 2, 0.042, 0.078, 0.055),
    (7, 7, 512, 8, 512, 1, 1, 0, 0, 1, 1, 0.046, 0.063, 0.054),
    (7, 7, 2048, 8, 512, 1, 1, 3, 3, 2, 2, 0.165, 0.115, 0.14),
    (56, 56, 64, 16, 64, 3, 3, 1, 1, 1, 1, 0.179, 0.187, 0.444),
    (56, 56, 64, 16, 256, 1, 1, 0, 0, 2, 2, 0.054, 0.111, 0.125),
    (28, 28, 128, 16, 128, 3, 3, 1, 1, 1, 1, 0.158, 0.154, 0.153),
    (28, 28, 128, 16, 512, 1, 1, 0, 0, 2, 2, 0.048, 0.146, 0.063),
    (14, 14, 256, 16, 256, 1, 1, 0, 0, 1, 1, 0.06, 0.058, 0.062),
    (14, 14, 256, 16, 256, 3, 3, 1, 1, 1, 1, 0.148, 0.148, 0.15),
    (14, 14, 256, 16, 1024, 1, 1, 0, 0, 2, 2, 0.064, 0.118, 0.11),
    (7, 7, 512, 16, 512, 1, 1, 0, 0, 1, 1, 0.063, 0.073, 0.1),
    (7, 7, 2048, 16, 512, 1, 1, 3, 3, 2, 2, 0.212, 0.22, 0.263),
    (700, 161, 1, 16, 64, 5, 5, 1, 1, 2, 2, 0.185, None, 0.449),
    (350, 80, 64, 16, 64, 3, 3, 1, 1, 1, 1, 1.491, 1.492, 3.735),
    (350, 80, 64, 16, 128, 5, 5, 1, 1, 2, 2, 3.33, 4.647, 3.42),
    (175, 40, 128, 16, 128, 3, 3, 1, 1, 1, 1, 1.155, 1.113, 1.226),
    (175, 40, 128, 16, 256, 5, 5, 1, 1, 2, 2, 3.245, 4.51, 3.05),
    (84, 20, 256, 16, 256, 3, 3, 1, 1, 1, 1, 0.887, 0.883, 0.857),
    (84, 20, 256, 16, 512, 5, 5, 1, 1, 2, 2, 3.229, 3.672, 2.979),
    (42, 10, 512, 16, 512, 3, 3, 1, 1, 1, 1, 1.108, 1.098, 0.957),
    (112, 112, 64, 8, 64, 1, 1, 0, 0, 1, 1, 0.088, 0.093, 0.211),
    (56, 56, 64, 8, 256, 1, 1, 0, 0, 1, 1, 0.086, 0.084, 0.143),
    (56, 56, 256, 8, 64, 1, 1, 0, 0, 1, 1, 0.082, 0.086, 0.203),
    (56, 56, 256, 8, 128, 1, 1, 0, 0, 2, 2, 0.058, 0.14, 0.113),
    (28, 28, 128, 8, 512, 1, 1, 0, 0, 1, 1, 0.075, 0.128, 0.128),
    (28, 28, 512, 8, 128, 1, 1, 0, 0, 1, 1, 0.098, 0.077, 0.138),
    (28, 28, 512, 8, 256, 1, 1, 0, 0, 2, 2, 0.066, 0.118, 0.061),
    (14, 14, 256, 8, 1024, 1, 1, 0, 0, 1, 1, 0.08, 0.117, 0.108),
    (28, 28, 512, 8, 1024, 1, 1, 0, 0, 2, 2, 0.143, 0.291, 0.21),
    (14, 14, 1024, 8, 256, 1, 1, 0, 0, 1, 1, 0.111, 0.082, 0.109),
    (14, 14, 256, 8, 1024, 1, 1, 0, 0, 1, 1, 0.08, 0.117, 0.108),
    (14, 14, 1024, 8, 512, 1, 1, 0, 0, 2, 2, 0.087, 0.085, 0.101),
    (7, 7, 512, 8, 512, 3, 3, 1, 1, 1, 1, 0.236, 0.244, 0.136),
    (7, 7, 512, 8, 2048, 1, 1, 0, 0, 1, 1, 0.103, 0.226, 0.159),
    (14, 14, 1024, 8, 2048, 1, 1, 0, 0, 2, 2, 0.186, 0.263, 0.299),
    (7, 7, 2048, 8, 512, 1, 1, 0, 0, 1, 1, 0.164, 0.123, 0.157),
    (112, 112, 64, 16, 64, 1, 1, 0, 0, 1, 1, 0.16, 0.166, 0.626),
    (56, 56, 64, 16, 256, 1, 1, 0, 0, 1, 1, 0.161, 0.154, 0.245),
    (56, 56, 256, 16, 64, 1, 1, 0, 0, 1, 1, 0.136, 0.167, 0.417),
    (56, 56, 256, 16, 128, 1, 1, 0, 0, 2, 2, 0.086, 0.252, 0.154),
    (28, 28, 128, 16, 512, 1, 1, 0, 0, 1, 1, 0.136, 0.147, 0.231),
    (28, 28, 512, 16, 128, 1, 1, 0, 0, 1, 1, 0.144, 0.143, 0.194),
    (28, 28, 512, 16, 256, 1, 1, 0, 0, 2, 2, 0.102, 0.198, 0.111),
    (14, 14, 256, 16, 1024, 1, 1, 0, 0, 1, 1, 0.135, 0.186, 0.206),
    (28, 28, 512, 16, 1024, 1, 1, 0, 0, 2, 2, 0.334, 0.477, 0.376),
    (14, 14, 1024, 16, 256, 1, 1, 0, 0, 1, 1, 0.186, 0.149, 0.206),
    (14, 14, 256, 16, 1024, 1, 1, 0, 0, 1, 1, 0.135, 0.186, 0.206),
    (14, 14, 1024, 16, 512, 1, 1, 0, 0, 2, 2, 0.115, 0.142, 0.162),
    (7, 7, 512, 16, 512, 3, 3, 1, 1, 1, 1, 0.273, 0.267, 0.178),
    (7, 7, 512, 16, 2048, 1, 1, 0, 0, 1, 1, 0.144, 0.246, 0.246),
    (14, 14, 1024, 16, 2048, 1, 1, 0, 0, 2, 2, 0.28, 0.43, 0.49),
    (7, 7, 2048, 16, 512, 1, 1, 0, 0, 1, 1, 0.236, 0.147, 0.254),
)
"""(W, H, C, N, K, S, R, pad_w, pad_h, stride_w, stride_h, forward, backward-data, backward-filter milliseconds;
None where the sheet has N/A) of every FP32 convolution of DeepBench's V100 training results."""


# ---------------------------------------------------------------------------------------------- the fits

@dataclass(frozen=True)
class KernelPoint:
    """One published kernel: ``seconds`` for ``flops`` and ``nbytes``."""

    seconds: float
    flops: float
    nbytes: float
    name: str = ""


def deepbench_gemm_points() -> tuple[KernelPoint, ...]:
    """Every DeepBench V100 GEMM as a kernel of F = 2 M N K FLOPs and B = 4 (M K + K N + M N) bytes."""
    return tuple(KernelPoint(ms * 1e-3, 2.0 * m * n * k, 4.0 * (m * k + k * n + m * n), f"GEMM {m}x{n}x{k} {t}")
                 for m, n, k, t, ms in DEEPBENCH_V100_GEMM)


def deepbench_conv_points() -> tuple[KernelPoint, ...]:
    """Every timed convolution kernel: forward, backward-data, backward-filter (one point each)."""
    out = []
    for w, h, c, n, k, s, r, pw, ph, sw, sh, *times in DEEPBENCH_V100_CONV:
        p, q = (w + 2 * pw - s) // sw + 1, (h + 2 * ph - r) // sh + 1
        flops = 2.0 * n * k * c * r * s * p * q
        nbytes = 4.0 * (n * c * w * h + k * c * r * s + n * k * p * q)
        name = f"conv {n}x{c}x{h}x{w} K {k} {r}x{s} stride {sh}"
        out += [KernelPoint(ms * 1e-3, flops, nbytes, f"{name} {kind}")
                for ms, kind in zip(times, ("forward", "backward data", "backward filter")) if ms is not None]
    return tuple(out)


def kernel_time(curve: ClassCurve, point: KernelPoint) -> float:
    """t = L + max(F / r(F), B / O) of a contraction's kernel."""
    return curve.launch + max(busy_seconds(curve, point.flops), point.nbytes / curve.other)


def relative_errors(curve: ClassCurve, points: Sequence[KernelPoint]) -> list[float]:
    """predicted / published - 1 per point, the curve a contraction's (t = L + max(F / r(F), B / O))."""
    return [kernel_time(curve, p) / p.seconds - 1.0 for p in points]


def fit_kernels(points: Sequence[KernelPoint], other: float | None = None) -> ClassCurve:
    """The contraction curve (R, h, a, L) and, when ``other`` is None, the streaming rate O minimising the sum of
    squared relative errors of t = L + max(F / r(F), B / O) (nonlinear least squares on log R, log h, log L,
    logit a and log O, so that every parameter stays in its range; the best of a fixed set of starts)."""
    import numpy as np
    from scipy.optimize import least_squares

    rate0 = max(p.flops / p.seconds for p in points)
    stream0 = max(p.nbytes / p.seconds for p in points)
    floor0 = min(p.seconds for p in points)

    def curve(x) -> ClassCurve:
        peak, half, launch = np.exp(x[:3])
        alpha = 1.0 / (1.0 + math.exp(-float(x[3])))
        return ClassCurve(float(peak), float(half), alpha, float(launch),
                          float(math.exp(x[4])) if other is None else other)

    best = None
    for half0 in (1e6, 1e8, 1e10):
        for logit0 in (-1.0, 1.0, 3.0):
            x0 = [math.log(rate0), math.log(half0), math.log(floor0 / 2), logit0]
            x0 += [math.log(stream0)] if other is None else []
            res = least_squares(lambda x: relative_errors(curve(x), points), x0, method="trf", xtol=1e-12,
                                ftol=1e-12)
            if best is None or res.cost < best.cost:
                best = res
    return curve(best.x)


@lru_cache(maxsize=None)
def k40_gemm_fit() -> CurveFit:
    """The curve through the K40 SGEMM points (one call each, no fixed part)."""
    return fit_curve([(2.0 * n ** 3 / (g * 1e9), 0.0, (2.0 * n ** 3,)) for n, g in K40_SGEMM])


def k40_points() -> tuple[KernelPoint, ...]:
    """Every K40 SGEMM as a kernel of 2 n^3 FLOPs and 12 n^2 bytes."""
    return tuple(KernelPoint(2.0 * n ** 3 / (g * 1e9), 2.0 * n ** 3, 12.0 * n * n, f"SGEMM n = {n}")
                 for n, g in K40_SGEMM)


def _resnet_tasks(batch: int, depth: int = 50):
    """The compute and update tasks of one device's training iteration of ResNet-``depth`` at ``batch``."""
    from tofu.api import load_graph
    from tofu.models import ModelOptions
    from tofu.search.algorithms import plan_graph
    from tofu.sim.program import TaskKind, program_from_plan

    graph = load_graph(f"wresnet-{depth}-1", ModelOptions(batch=batch))
    program = program_from_plan(graph, plan_graph(graph, 1, "tofu"))
    return tuple(t for t in program.tasks if t.kind is not TaskKind.COPY)


def iteration_seconds(model: KernelModel, tasks, forward_only: bool = False) -> float:
    """One device's iteration: the sum of its tasks' kernel times (one compute stream, no copies)."""
    from tofu.sim.kernels import seconds
    from tofu.sim.program import Phase

    return sum(seconds(t.op_class, t.flops, t.nbytes, model) for t in tasks
               if not forward_only or t.phase is Phase.FORWARD)


def _model(curves: dict[OpClass, ClassCurve]) -> KernelModel:
    return KernelModel(tuple((c, curves[c]) for c in OpClass))


def _k80_with_conv(peak: float, base: dict[OpClass, ClassCurve], tau: float) -> dict[OpClass, ClassCurve]:
    gemm = base[OpClass.GEMM]
    return {**base, OpClass.CONVOLUTION: ClassCurve(peak, peak * tau, gemm.alpha, gemm.launch, gemm.other,
                                                    "fitted to MXNet's K80 ResNet-50 training throughput")}


@lru_cache(maxsize=None)
def k80_curves() -> dict[OpClass, ClassCurve]:
    """One K80 die's curves (the module docstring's derivation, unrounded)."""
    from scipy.optimize import minimize_scalar

    fit = k40_gemm_fit()
    scale = K80_SMX / K40_SMX
    gemm_peak, gemm_half = fit.peak * scale, fit.w_half * scale
    tau = gemm_half / gemm_peak
    stream = K80_STREAM_EFFICIENCY * K80_DIE_BANDWIDTH
    base = {OpClass.GEMM: ClassCurve(gemm_peak, gemm_half, fit.alpha, fit.launch, stream,
                                     "K40 cuBLAS 7.0 SGEMM x 13/15")}
    for c in MEMORY_CLASSES:
        base[c] = ClassCurve(stream, stream * tau, fit.alpha, fit.launch, gemm_peak,
                             "assumed: 0.75 x datasheet; tau, a and L of GEMM")
    tasks = {b: _resnet_tasks(b) for b, _ in MXNET_K80_TRAIN_RESNET50}

    def loss(log_peak: float) -> float:
        model = _model(_k80_with_conv(math.exp(log_peak), base, tau))
        return sum((iteration_seconds(model, tasks[b]) * ips / b - 1.0) ** 2 for b, ips in MXNET_K80_TRAIN_RESNET50)

    res = minimize_scalar(loss, bounds=(math.log(1e11), math.log(1e14)), method="bounded", options={"xatol": 1e-9})
    return _k80_with_conv(math.exp(float(res.x)), base, tau)


@lru_cache(maxsize=None)
def v100_curves() -> dict[OpClass, ClassCurve]:
    """One V100's curves (the module docstring's derivation, unrounded)."""
    gemm = fit_kernels(deepbench_gemm_points())
    conv = fit_kernels(deepbench_conv_points(), other=gemm.other)
    tau = gemm.w_half / gemm.peak
    out = {OpClass.GEMM: ClassCurve(gemm.peak, gemm.w_half, gemm.alpha, gemm.launch, gemm.other,
                                    "DeepBench V100 GEMM"),
           OpClass.CONVOLUTION: ClassCurve(conv.peak, conv.w_half, conv.alpha, conv.launch, gemm.other,
                                           "DeepBench V100 convolution")}
    for c in MEMORY_CLASSES:
        out[c] = ClassCurve(gemm.other, gemm.other * tau, gemm.alpha, gemm.launch, gemm.peak,
                            "DeepBench V100 GEMM's streaming rate; tau, a and L of GEMM")
    return out


def rounded(curves: dict[OpClass, ClassCurve], digits: int = 3) -> dict[OpClass, tuple[float, ...]]:
    """(peak, w_half, alpha, launch, other) of each curve rounded to ``digits`` significant digits (what
    hardware.py holds)."""
    def r(x: float) -> float:
        return float(f"{x:.{digits}g}")
    return {c: (r(k.peak), r(k.w_half), r(k.alpha), r(k.launch), r(k.other)) for c, k in curves.items()}


@dataclass(frozen=True)
class NetworkCheck:
    """One published network measurement beside one device's simulated iteration."""

    gpu: str
    network: str
    mode: str                 # "training" (forward + backward + update) or "scoring" (forward)
    batch: int
    published_seconds: float
    simulated_seconds: float
    fitted: bool              # the K80 convolution rate was fitted to these points

    @property
    def relative_error(self) -> float:
        return self.simulated_seconds / self.published_seconds - 1.0


def network_checks(k80: KernelModel, v100: KernelModel) -> tuple[NetworkCheck, ...]:
    """The MXNet tables against one device's simulated iteration on ``k80`` and ``v100``."""
    cases = (("K80", k80, "ResNet-50", 50, "training", MXNET_K80_TRAIN_RESNET50, True),
             ("K80", k80, "ResNet-152", 152, "scoring", MXNET_K80_SCORE_RESNET152, False),
             ("V100", v100, "ResNet-50", 50, "training", MXNET_V100_TRAIN_RESNET50, False),
             ("V100", v100, "ResNet-152", 152, "scoring", MXNET_V100_SCORE_RESNET152, False))
    out = []
    for gpu, model, network, depth, mode, table, fitted in cases:
        for batch, ips in table:
            t = iteration_seconds(model, _resnet_tasks(batch, depth), forward_only=mode == "scoring")
            out.append(NetworkCheck(gpu, network, mode, batch, batch / ips, t, fitted))
    return tuple(out)
