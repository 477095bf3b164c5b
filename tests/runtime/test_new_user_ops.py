"""Models a new user built with ops described here later (``_eye``, ``_linspace``, ``_full``, ``_split_v2``,
``_contrib_arange_like``, GluonNLP BERT's interleaved attention products, the straight-through estimators, the
gradient multiplier, ``_linalg_gemm``, ``_linalg_extractdiag``, ``_linalg_makediag``, ``CTCLoss``, the spatial
transformer's ops, the Cholesky factorization, triangular solves and products, inverses and determinants, a
detection head's ROIPooling, ROIAlign and PSROIPooling, FlowNet's Correlation, im2col, SVMOutput, Pooling's lp
type, cumsum, the deformable convolution, softmax with a length, a VAE's normal noise, topk's mask, the pdf ops): refused before, they train partitioned equal to one device (``tofu run --check``, the
one-device run being the reference)."""
import json

import mxnet as mx
import pytest

from tests.test_cli import run


def _constants(path):
    x, w = mx.sym.var("data"), mx.sym.var("w")                       # data (8, 16)
    h = mx.sym.dot(mx.sym.FullyConnected(x, weight=w, num_hidden=16, no_bias=True, name="fc"), mx.sym.eye(16))
    lin = mx.sym.reshape(mx.sym.linspace(0, 1, 16), shape=(1, 16))
    h = mx.sym.broadcast_add(mx.sym.broadcast_mul(h, mx.sym.full(shape=(1, 16), val=0.5)), lin)
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(h)), name="loss").save(str(path))
    return "data=8,16"


def _splits(path):
    x, w = mx.sym.var("data"), mx.sym.var("w")                       # data (8, 6, 16)
    h = mx.sym.FullyConnected(x, weight=w, num_hidden=24, no_bias=True, flatten=False, name="fc")
    a, b, c = mx.sym.split_v2(h, (8, 12), axis=2)                    # 8, 4 and 12 wide
    pos = mx.sym.reshape(mx.sym.contrib.arange_like(h, axis=1), shape=(1, 6, 1))
    ramp = mx.sym.contrib.arange_like(a)
    y = mx.sym.concat(mx.sym.broadcast_add(a, pos) * 0.01 + ramp * 0.001, b * 2, mx.sym.tanh(c), dim=2)
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(y)), name="loss").save(str(path))
    return "data=8,6,16"


def _interleaved_attention(path):
    """A BERT encoder layer as GluonNLP builds it (time-major, one projection to the heads' interleaved queries,
    keys and values) and an encoder-decoder attention over its output."""
    x, y = mx.sym.var("data"), mx.sym.var("target")                 # (8, 4, 16), (6, 4, 16): 4 heads of 4
    qkv = mx.sym.FullyConnected(x, num_hidden=48, flatten=False, name="qkv")
    att = mx.sym.softmax(mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=4), axis=-1)
    enc = x + mx.sym.FullyConnected(mx.sym.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=4),
                                    num_hidden=16, flatten=False, name="proj")
    q = mx.sym.FullyConnected(y, num_hidden=16, flatten=False, name="q")
    kv = mx.sym.FullyConnected(enc, num_hidden=32, flatten=False, name="kv")
    cross = mx.sym.softmax(mx.sym.contrib.interleaved_matmul_encdec_qk(q, kv, heads=4), axis=-1)
    out = mx.sym.contrib.interleaved_matmul_encdec_valatt(kv, cross, heads=4)
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(out)), name="loss").save(str(path))
    return "data=8,4,16", "target=6,4,16"


def _straight_through_linalg(path):
    """Quantization-aware training's straight-through rounding, a gradient reversal layer, and batched linear
    algebra (gemm with an added matrix, a diagonal taken out and put back)."""
    x, c = mx.sym.var("data"), mx.sym.var("c")                     # (8, 16), c (8, 4, 4)
    h = mx.sym.FullyConnected(x, num_hidden=16, name="fc")
    q = mx.sym.contrib.gradientmultiplier(mx.sym.contrib.round_ste(h * 4) / 4, scalar=-0.5)
    h3 = mx.sym.reshape(q + h, shape=(8, 4, 4))
    m = mx.sym.linalg.gemm(h3, h3, c, transpose_b=True, alpha=0.5, beta=2.0)
    d = mx.sym.linalg.extractdiag(m, offset=1)                   # (8, 3)
    md = mx.sym.linalg.makediag(mx.sym.contrib.sign_ste(d) * d, offset=-1)
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(md + m)), name="loss").save(str(path))
    return "data=8,16", "c=8,4,4"


def _ctc(path):
    """A speech model's head: frames (time-major) through a projection to the classes, CTC against padded labels
    (drawn by ``tofu run`` from the range the description declares)."""
    x, label = mx.sym.var("data"), mx.sym.var("label")             # (8, 4, 6), labels (4, 3)
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=12, flatten=False, name="fc1"), act_type="tanh")
    logits = mx.sym.FullyConnected(h, num_hidden=5, flatten=False, name="fc2")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.contrib.CTCLoss(logits, label)), name="loss").save(str(path))
    return "data=8,4,6", "label=4,3"


def _spatial_transformer(path):
    """A spatial transformer network: a localisation net's affine transform samples the image (SpatialTransformer),
    and the same by hand (GridGenerator, then BilinearSampler) on a warp field."""
    x = mx.sym.var("data")                                          # (4, 2, 8, 8)
    loc = mx.sym.FullyConnected(mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=8, name="loc1"),
                                                  act_type="tanh"), num_hidden=6, name="loc2")
    moved = mx.sym.SpatialTransformer(x, loc, target_shape=(6, 6), transform_type="affine", sampler_type="bilinear")
    flow = mx.sym.Convolution(x, num_filter=2, kernel=(3, 3), pad=(1, 1), name="flow")
    warped = mx.sym.BilinearSampler(x, mx.sym.GridGenerator(flow * 0.5, transform_type="warp"))
    h = mx.sym.Convolution(moved, num_filter=4, kernel=(3, 3), name="conv")
    out = mx.sym.FullyConnected(h, num_hidden=3, name="fc") + mx.sym.FullyConnected(warped, num_hidden=3, name="fw")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(out)), name="loss").save(str(path))
    return "data=4,2,8,8"


def _gaussian_process(path):
    """A Gaussian-process head: a kernel matrix per example (a feature map's Gram matrix plus a jitter), its
    Cholesky factor, triangular solves and products against targets, and the log-determinant both ways."""
    x, y = mx.sym.var("data"), mx.sym.var("target")                 # (8, 16), targets (8, 4, 2)
    h = mx.sym.reshape(mx.sym.FullyConnected(x, num_hidden=16, name="fc"), shape=(8, 4, 4))
    k = mx.sym.broadcast_add(mx.sym.linalg.syrk(h, alpha=0.25), mx.sym.reshape(mx.sym.eye(4), shape=(1, 4, 4)))
    chol = mx.sym.linalg.potrf(k)
    alpha = mx.sym.linalg.trsm(chol, mx.sym.linalg.trsm(chol, y), transpose=True)       # K^-1 y
    fit = mx.sym.sum(y * alpha) + 2 * mx.sym.sum(mx.sym.linalg.sumlogdiag(chol))
    sign, logdet = mx.sym.linalg.slogdet(k)
    rows = mx.sym.linalg.trmm(chol, mx.sym.transpose(y, axes=(0, 2, 1)), rightside=True, lower=True)
    extra = mx.sym.sum(logdet * sign) + mx.sym.sum(mx.sym.log(mx.sym.linalg.det(k))) + mx.sym.sum(
        mx.sym.square(rows)) * 0.01 + mx.sym.sum(mx.sym.linalg.inverse(k)) + mx.sym.sum(mx.sym.linalg.potri(chol))
    mx.sym.MakeLoss(fit + extra, name="loss").save(str(path))
    return "data=8,16", "target=8,4,2"


def _detection_head(path):
    """A two-stage detector's head: regions of interest (each an image index and well-formed corners computed
    from raw box parameters) pooled from a feature map by ROIPooling and by ROIAlign, then classified."""
    x, boxes = mx.sym.var("data"), mx.sym.var("boxes")             # images (2, 3, 8, 8), 8 regions' (4,)
    feat = mx.sym.Activation(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv"),
                             act_type="relu")
    image = mx.sym.reshape(mx.sym.floor(mx.sym.arange(0, 8) / 4), shape=(8, 1))    # regions 0-3: image 0
    corner = mx.sym.sigmoid(mx.sym.slice_axis(boxes, axis=1, begin=0, end=2)) * 4
    size = 1 + mx.sym.sigmoid(mx.sym.slice_axis(boxes, axis=1, begin=2, end=4)) * 3
    rois = mx.sym.concat(image, corner, corner + size, dim=1)
    pooled = mx.sym.ROIPooling(feat, rois, pooled_size=(2, 2), spatial_scale=1.0)
    aligned = mx.sym.contrib.ROIAlign(feat, rois, pooled_size=(2, 2), spatial_scale=1.0, sample_ratio=2,
                                      aligned=True)
    scores = mx.sym.FullyConnected(mx.sym.concat(pooled, aligned, dim=1), num_hidden=4, name="cls")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(scores)), name="loss").save(str(path))
    return "data=2,3,8,8", "boxes=8,4"


def _optical_flow(path):
    """FlowNet-C's correlation layer: two frames through one (shared) convolution, their features correlated over
    a 5 x 5 grid of displacements (and a 3 x 3 window of absolute differences), then a convolution to a flow."""
    a, b, w = mx.sym.var("frame1"), mx.sym.var("frame2"), mx.sym.var("conv_weight")   # frames (2, 3, 8, 8)
    f1, f2 = (mx.sym.Activation(mx.sym.Convolution(x, weight=w, num_filter=4, kernel=(3, 3), pad=(1, 1),
                                                   no_bias=True), act_type="relu") for x in (a, b))
    product = mx.sym.Correlation(f1, f2, max_displacement=2, pad_size=2)                 # (2, 25, 8, 8)
    difference = mx.sym.Correlation(f1, f2, kernel_size=3, max_displacement=1, pad_size=2, is_multiply=False)
    flow = mx.sym.Convolution(mx.sym.concat(product, difference, f1, dim=1), num_filter=2, kernel=(3, 3),
                              pad=(1, 1), name="flow")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(flow)), name="loss").save(str(path))
    return "frame1=2,3,8,8", "frame2=2,3,8,8"


def _involution(path):
    """An involution layer (a kernel generated per pixel, shared over the channels) built on im2col: each pixel's
    3 x 3 neighbourhood as columns, weighted by the kernel a 1 x 1 convolution computes there."""
    x = mx.sym.var("data")                                          # (2, 4, 6, 6)
    patches = mx.sym.reshape(mx.sym.im2col(x, kernel=(3, 3), pad=(1, 1)), shape=(2, 4, 9, 36))
    kernel = mx.sym.reshape(mx.sym.Convolution(x, num_filter=9, kernel=(1, 1), name="gen"), shape=(2, 1, 9, 36))
    out = mx.sym.reshape(mx.sym.sum(mx.sym.broadcast_mul(patches, kernel), axis=2), shape=(2, 4, 6, 6))
    y = mx.sym.Convolution(out, num_filter=3, kernel=(3, 3), name="conv")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(y)), name="loss").save(str(path))
    return "data=2,4,6,6"


def _svm(path):
    """A multi-class SVM head (MXNet's SVMOutput: the squared hinge loss's gradient, its labels drawn by ``tofu
    run`` from the range the description declares) on a two-layer network."""
    x, label = mx.sym.var("data"), mx.sym.var("svm_label")           # (8, 12), labels (8,)
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=16, name="fc1"), act_type="relu")
    mx.sym.SVMOutput(mx.sym.FullyConnected(h, num_hidden=6, name="fc2"), label, margin=0.5,
                     name="svm").save(str(path))
    return "data=8,12", "svm_label=8"


def _lp_pool_cumsum(path):
    """L2 pooling (Pooling's pool_type 'lp') of convolution features, and a cumulative sum down the rows."""
    x = mx.sym.var("data")                                          # (4, 3, 8, 8)
    h = mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv")
    pooled = mx.sym.Pooling(h, kernel=(2, 2), stride=(2, 2), pool_type="lp", p_value=2)
    out = mx.sym.FullyConnected(mx.sym.cumsum(pooled, axis=2), num_hidden=3, name="fc")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(out)), name="loss").save(str(path))
    return "data=4,3,8,8"


def _deformable(path):
    """A deformable convolution block (DCNv1): a convolution predicts each output position's 3 x 3 tap offsets,
    with which the deformable convolution samples the features."""
    x = mx.sym.var("data")                                          # (4, 4, 6, 6)
    h = mx.sym.Activation(mx.sym.Convolution(x, num_filter=4, kernel=(3, 3), pad=(1, 1), name="conv1"),
                          act_type="relu")
    offset = mx.sym.Convolution(h, num_filter=18, kernel=(3, 3), pad=(1, 1), name="offset") * 0.5
    y = mx.sym.contrib.DeformableConvolution(h, offset, kernel=(3, 3), pad=(1, 1), num_filter=4, name="dcn")
    out = mx.sym.FullyConnected(mx.sym.Activation(y, act_type="relu"), num_hidden=3, name="fc")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(out)), name="loss").save(str(path))
    return "data=4,4,6,6"


def _rfcn(path):
    """R-FCN's head: position-sensitive score maps (3 classes x 2 x 2 bins) pooled per region, each bin from its
    own map, and voted (averaged over the bins)."""
    x, boxes = mx.sym.var("data"), mx.sym.var("boxes")             # images (2, 3, 8, 8), 4 regions' (4,)
    maps = mx.sym.Convolution(x, num_filter=12, kernel=(3, 3), pad=(1, 1), name="scores")
    image = mx.sym.reshape(mx.sym.floor(mx.sym.arange(0, 4) / 2), shape=(4, 1))
    corner = mx.sym.sigmoid(mx.sym.slice_axis(boxes, axis=1, begin=0, end=2)) * 4
    rois = mx.sym.concat(image, corner, corner + 3, dim=1)
    pooled = mx.sym.contrib.PSROIPooling(maps, rois, spatial_scale=1.0, output_dim=3, pooled_size=2)
    votes = mx.sym.mean(pooled, axis=(2, 3))                       # (4, 3)
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(votes)), name="loss").save(str(path))
    return "data=2,3,8,8", "boxes=4,4"


def _masked_attention(path):
    """A BERT encoder layer over padded sequences: each sequence's valid length (an int32 input, as MXNet's
    masked softmax requires, declared so in the symbol) masks the attention weights past it."""
    x, valid = mx.sym.var("data"), mx.sym.var("valid_length", dtype="int32")    # (8, 4, 16), lengths (4,)
    qkv = mx.sym.FullyConnected(x, num_hidden=48, flatten=False, name="qkv")
    scores = mx.sym.contrib.div_sqrt_dim(mx.sym.contrib.interleaved_matmul_selfatt_qk(qkv, heads=4))  # (16, 8, 8)
    length = mx.sym.broadcast_axis(mx.sym.repeat(mx.sym.reshape(valid, shape=(4, 1)), repeats=4, axis=0),
                                   axis=1, size=8)
    att = mx.sym.softmax(scores, length, use_length=True, axis=-1)
    out = mx.sym.FullyConnected(mx.sym.contrib.interleaved_matmul_selfatt_valatt(qkv, att, heads=4),
                                num_hidden=16, flatten=False, name="proj")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(out + x)), name="loss").save(str(path))
    return "data=8,4,16", "valid_length=4"


def _vae(path):
    """A variational autoencoder: the encoder's mean and log-variance, a latent drawn by the reparameterisation
    (normal noise like the mean), the reconstruction's cross-entropy and the KL term."""
    x = mx.sym.var("data")                                          # (16, 20) in [0, 1) after the sigmoid
    target = mx.sym.sigmoid(x)
    h = mx.sym.Activation(mx.sym.FullyConnected(x, num_hidden=24, name="enc"), act_type="softrelu")
    mu, logvar = mx.sym.FullyConnected(h, num_hidden=8, name="mu"), mx.sym.FullyConnected(h, num_hidden=8, name="lv")
    z = mu + mx.sym.exp(0.5 * logvar) * mx.sym.random.normal_like(mu)
    rec = mx.sym.sigmoid(mx.sym.FullyConnected(z, num_hidden=20, name="dec"))
    bce = -mx.sym.sum(target * mx.sym.log(rec + 1e-6) + (1 - target) * mx.sym.log(1 - rec + 1e-6), axis=1)
    kl = -0.5 * mx.sym.sum(1 + logvar - mu * mu - mx.sym.exp(logvar), axis=1)
    mx.sym.MakeLoss(mx.sym.mean(bce + kl), name="loss").save(str(path))
    return "data=16,20"


def _mixture_of_experts(path):
    """A mixture of experts: a softmax gate keeps each sample's two best experts (topk's mask, which MXNet does
    not differentiate) and mixes their outputs; capsules squashed by their norm follow, scored by a margin loss
    on the label's capsule (pick)."""
    s, x = mx.sym, mx.sym.var("data")                              # (16, 12), labels (16,)
    gate = s.softmax(s.FullyConnected(x, num_hidden=4, name="gate"))
    weights = gate * s.topk(gate, k=2, ret_typ="mask")
    weights = s.broadcast_div(weights, s.sum(weights, axis=1, keepdims=True))
    experts = s.stack(*[s.Activation(s.FullyConnected(x, num_hidden=8, name=f"expert{i}"), act_type="relu")
                        for i in range(4)], axis=1)                # (16, 4, 8)
    mixed = s.sum(s.broadcast_mul(experts, s.expand_dims(weights, axis=2)), axis=1)
    caps = s.reshape(s.FullyConnected(mixed, num_hidden=24, name="caps"), shape=(16, 3, 8))
    norm = s.norm(caps, axis=2, keepdims=True)
    lengths = s.norm(s.broadcast_mul(caps, s.square(norm) / (1 + s.square(norm)) / (norm + 1e-6)), axis=2)
    hit = s.pick(lengths, s.var("label"), axis=1)
    s.MakeLoss(s.mean(s.relu(0.9 - hit)) + 0.5 * s.mean(s.sum(s.relu(lengths - 0.1), axis=1)), name="loss") \
        .save(str(path))
    return "data=16,12", "label=16"


def _density_network(path):
    """A mixture-density-style head: a network predicts, per sample, a normal's mean and scale and an exponential's
    rate, scored by the log densities of the observed targets (MXNet's pdf ops, is_log)."""
    s, x, y = mx.sym, mx.sym.var("data"), mx.sym.var("target")      # (16, 6), targets (16, 4)
    h = s.Activation(s.FullyConnected(x, num_hidden=12, name="fc1"), act_type="tanh")
    params = s.FullyConnected(h, num_hidden=3, name="params")
    mu = s.reshape(s.slice_axis(params, axis=1, begin=0, end=1), shape=(-1,))
    sigma = s.exp(s.reshape(s.slice_axis(params, axis=1, begin=1, end=2), shape=(-1,)))
    lam = s.Activation(s.reshape(s.slice_axis(params, axis=1, begin=2, end=3), shape=(-1,)), act_type="softrelu")
    normal = s.random_pdf_normal(y, mu, sigma, is_log=True)
    expo = s.random_pdf_exponential(s.abs(y), lam + 0.1, is_log=True)
    s.MakeLoss(-s.mean(normal + expo), name="loss").save(str(path))
    return "data=16,6", "target=16,4"


@pytest.mark.parametrize("build", [_constants, _splits, _interleaved_attention, _straight_through_linalg, _ctc,
                                   _spatial_transformer, _gaussian_process, _detection_head, _optical_flow,
                                   _involution, _svm, _lp_pool_cumsum, _deformable, _rfcn, _masked_attention, _vae,
                                   _mixture_of_experts, _density_network],
                         ids=["eye-linspace-full", "split_v2-arange_like", "interleaved-attention",
                              "ste-gemm-diag", "ctc", "spatial-transformer", "gaussian-process", "detection-head",
                              "optical-flow", "involution-im2col", "svm-output", "lp-pool-cumsum", "deformable-conv",
                              "rfcn-psroi", "masked-attention", "vae", "mixture-of-experts", "density-network"])
@pytest.mark.parametrize("algo", ["tofu", "data-parallel"])
def test_a_model_of_the_newly_described_ops_trains_equal_to_one_device(capsys, tmp_path, build, algo):
    path = tmp_path / "model.json"
    shapes = build(path)
    shapes = [shapes] if isinstance(shapes, str) else shapes
    rc, out, err = run(capsys, "run", str(path), *(a for s in shapes for a in ("--shape", s)), "--workers", "4",
                       "--algo", algo, "--steps", "2", "--check", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["check_passed"] and doc["gradient_max_rel_diff"] < 1e-4


def test_a_dcn_v2_block_is_planned_with_its_modulated_convolution_split(tmp_path, capsys):
    """DCNv2 (offsets and a sigmoid mask per tap): MXNet 1.9.1 implements its backward on GPUs only ("only
    implemented in GPU"), so here it is planned, not trained; its forward is checked against MXNet's kernel,
    whole and on every shard, by the registry-wide tests."""
    x = mx.sym.var("data")                                          # (8, 4, 6, 6)
    h = mx.sym.Activation(mx.sym.Convolution(x, num_filter=8, kernel=(3, 3), pad=(1, 1), name="conv1"),
                          act_type="relu")
    offset = mx.sym.Convolution(h, num_filter=18, kernel=(3, 3), pad=(1, 1), name="offset")
    mask = mx.sym.sigmoid(mx.sym.Convolution(h, num_filter=9, kernel=(3, 3), pad=(1, 1), name="mask"))
    y = mx.sym.contrib.ModulatedDeformableConvolution(h, offset, mask, kernel=(3, 3), pad=(1, 1), num_filter=8,
                                                      name="dcn2")
    mx.sym.MakeLoss(mx.sym.sum(mx.sym.square(y)), name="loss").save(str(tmp_path / "dcn2.json"))
    rc, out, err = run(capsys, "plan", str(tmp_path / "dcn2.json"), "--shape", "data=8,4,6,6", "--workers", "4",
                       "--out", str(tmp_path / "plan.json"))
    assert rc == 0, err
    steps = json.loads((tmp_path / "plan.json").read_text())["steps"]
    assert [step["ops"]["dcn2"]["var"] for step in steps] in (["b", "b"], ["b", "co"], ["co", "b"], ["co", "co"])
