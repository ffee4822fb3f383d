"""symgrad.nn.functional against torch.nn.functional: values, gradients and second derivatives
(float32 and float64), compiled functions against eager ones, and the errors for unsupported arguments."""

import numpy as np
import pytest

import symgrad
import symgrad.nn.functional as SF

torch = pytest.importorskip("torch")
TF = torch.nn.functional


def _normal(*shape):
    return lambda r: r.standard_normal(shape)


def _uniform(lo, hi, *shape):
    return lambda r: r.uniform(lo, hi, shape)


def _ints(lo, hi, *shape):
    return lambda r: r.integers(lo, hi, shape).astype(np.int64)


def _fixed(array):
    return lambda r: np.asarray(array)


def _with_ignored(lo, hi, ignore, *shape):
    def make(r):
        t = r.integers(lo, hi, shape).astype(np.int64)
        t.flat[::3] = ignore
        return t
    return make


def _probs(*shape):
    def make(r):
        e = np.exp(r.standard_normal(shape))
        return e / e.sum(1, keepdims=True)
    return make


def _bool_mask(*shape):
    def make(r):
        m = r.random(shape) > 0.3
        m[..., 0] = True     # no fully masked row
        return m
    return make


# (id, call(F, *args), argument makers, indices of the arguments to differentiate, second order?)
CASES = [
    ("relu", lambda F, x: F.relu(x), [_normal(3, 4)], [0], True),
    ("gelu", lambda F, x: F.gelu(x), [_normal(3, 4)], [0], True),
    ("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh"), [_normal(3, 4)], [0], True),
    ("silu", lambda F, x: F.silu(x), [_normal(3, 4)], [0], True),
    ("softplus", lambda F, x: F.softplus(x), [_uniform(-30, 30, 5, 4)], [0], True),
    ("softplus_at_zero", lambda F, x: F.softplus(x), [_fixed([0.0, -1.0, 1.0])], [0], True),
    ("softplus_beta", lambda F, x: F.softplus(x, beta=2.0, threshold=1.0), [_normal(4, 4)], [0], True),
    ("logsigmoid", lambda F, x: F.logsigmoid(x), [_uniform(-40, 40, 5, 3)], [0], True),
    ("elu", lambda F, x: F.elu(x, alpha=0.7), [_normal(3, 4)], [0], True),
    ("elu_at_zero", lambda F, x: F.elu(x), [_fixed([0.0, 100.0, -2.0])], [0], True),
    ("celu_at_zero", lambda F, x: F.celu(x, 0.5), [_fixed([0.0, 100.0, -2.0, -800.0])], [0], True),
    ("selu_at_zero", lambda F, x: F.selu(x), [_fixed([0.0, 100.0, -2.0, -800.0])], [0], True),
    ("threshold_at_threshold", lambda F, x: F.threshold(x, 0.5, 3.0), [_fixed([0.5, 0.4, 0.6, -1.0])], [0], True),
    ("leaky_relu", lambda F, x: F.leaky_relu(x, 0.2), [_normal(3, 4)], [0], True),
    ("hardtanh", lambda F, x: F.hardtanh(x, -0.5, 0.5), [_normal(3, 4)], [0], True),
    ("hardtanh_bounds", lambda F, x: F.hardtanh(x), [_fixed([-1.0, 1.0, 0.5, -3.0])], [0], True),
    ("relu6", lambda F, x: F.relu6(x * 4), [_normal(3, 4)], [0], True),
    ("sigmoid", lambda F, x: F.sigmoid(x), [_normal(3, 4)], [0], True),
    ("tanh", lambda F, x: F.tanh(x), [_normal(3, 4)], [0], True),
    ("softmax", lambda F, x: F.softmax(x, dim=1), [_normal(3, 4, 2)], [0], True),
    ("softmax_last", lambda F, x: F.softmax(x, -1), [_normal(3, 4)], [0], True),
    ("log_softmax", lambda F, x: F.log_softmax(x, dim=0), [_normal(3, 4)], [0], True),
    ("mse_loss", lambda F, x, y: F.mse_loss(x, y), [_normal(3, 4), _normal(3, 4)], [0, 1], True),
    ("mse_loss_sum", lambda F, x, y: F.mse_loss(x, y, reduction="sum"), [_normal(3, 4), _normal(3, 4)], [0], True),
    ("mse_loss_none_weight", lambda F, x, y, w: F.mse_loss(x, y, reduction="none", weight=w),
     [_normal(3, 4), _normal(3, 4), _uniform(0, 1, 3, 4)], [0, 1], True),
    ("l1_loss", lambda F, x, y: F.l1_loss(x, y), [_normal(3, 4), _normal(3, 4)], [0, 1], True),
    ("l1_loss_none", lambda F, x, y: F.l1_loss(x, y, reduction="none"), [_normal(3, 4), _normal(3, 4)], [0], True),
    ("smooth_l1", lambda F, x, y: F.smooth_l1_loss(x, y), [_normal(5, 4), _normal(5, 4)], [0, 1], True),
    ("smooth_l1_beta", lambda F, x, y: F.smooth_l1_loss(x, y, reduction="sum", beta=0.5),
     [_normal(5, 4), _normal(5, 4)], [0], True),
    ("smooth_l1_beta0", lambda F, x, y: F.smooth_l1_loss(x, y, beta=0.0), [_normal(5, 4), _normal(5, 4)], [0], True),
    ("huber", lambda F, x, y: F.huber_loss(x, y), [_normal(5, 4), _normal(5, 4)], [0, 1], True),
    ("huber_delta", lambda F, x, y: F.huber_loss(x, y, reduction="none", delta=0.3),
     [_normal(5, 4), _normal(5, 4)], [0], True),
    ("cross_entropy", lambda F, x, t: F.cross_entropy(x, t), [_normal(6, 5), _ints(0, 5, 6)], [0], True),
    ("cross_entropy_weight_ignore", lambda F, x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=2),
     [_normal(7, 5), _with_ignored(0, 5, 2, 7), _uniform(0.5, 2, 5)], [0], True),
    ("cross_entropy_none", lambda F, x, t: F.cross_entropy(x, t, reduction="none", ignore_index=-1),
     [_normal(7, 5), _with_ignored(0, 5, -1, 7)], [0], True),
    ("cross_entropy_sum_4d", lambda F, x, t: F.cross_entropy(x, t, reduction="sum"),
     [_normal(2, 4, 3, 3), _ints(0, 4, 2, 3, 3)], [0], True),
    ("cross_entropy_4d_mean", lambda F, x, t: F.cross_entropy(x, t), [_normal(2, 4, 3), _ints(0, 4, 2, 3)], [0], True),
    ("cross_entropy_unbatched", lambda F, x, t: F.cross_entropy(x, t), [_normal(5), _fixed(np.int64(3))], [0], True),
    ("cross_entropy_smoothing", lambda F, x, t: F.cross_entropy(x, t, label_smoothing=0.2),
     [_normal(6, 5), _ints(0, 5, 6)], [0], True),
    ("cross_entropy_smoothing_weight_ignore",
     lambda F, x, t, w: F.cross_entropy(x, t, weight=w, ignore_index=1, label_smoothing=0.1),
     [_normal(7, 4), _with_ignored(0, 4, 1, 7), _uniform(0.5, 2, 4)], [0], True),
    ("cross_entropy_smoothing_none", lambda F, x, t: F.cross_entropy(x, t, reduction="none", label_smoothing=0.3),
     [_normal(2, 4, 3), _with_ignored(0, 4, -100, 2, 3)], [0], True),
    ("cross_entropy_smoothing_sum", lambda F, x, t: F.cross_entropy(x, t, reduction="sum", label_smoothing=0.3),
     [_normal(6, 4), _ints(0, 4, 6)], [0], True),
    ("cross_entropy_probs", lambda F, x, p: F.cross_entropy(x, p), [_normal(6, 5), _probs(6, 5)], [0, 1], True),
    ("cross_entropy_probs_weight_smoothing",
     lambda F, x, p, w: F.cross_entropy(x, p, weight=w, label_smoothing=0.25, reduction="none"),
     [_normal(3, 5, 2), _probs(3, 5, 2), _uniform(0.5, 2, 5)], [0, 1], True),
    ("nll_loss", lambda F, x, t: F.nll_loss(F.log_softmax(x, 1), t), [_normal(6, 5), _ints(0, 5, 6)], [0], True),
    ("nll_loss_weight_ignore", lambda F, x, t, w: F.nll_loss(x, t, weight=w, ignore_index=0, reduction="sum"),
     [_normal(7, 5), _with_ignored(0, 5, 0, 7), _uniform(0.5, 2, 5)], [0], True),
    ("nll_loss_none_4d", lambda F, x, t: F.nll_loss(x, t, reduction="none"),
     [_normal(2, 3, 4, 2), _ints(0, 3, 2, 4, 2)], [0], True),
    ("bce", lambda F, x, y: F.binary_cross_entropy(x, y), [_uniform(0.05, 0.95, 4, 3), _uniform(0, 1, 4, 3)],
     [0, 1], True),
    ("bce_weight_none", lambda F, x, y, w: F.binary_cross_entropy(x, y, weight=w, reduction="none"),
     [_uniform(0.05, 0.95, 4, 3), _uniform(0, 1, 4, 3), _uniform(0, 1, 3)], [0, 1], True),
    ("bce_at_edges", lambda F, x, y: F.binary_cross_entropy(x, y, reduction="sum"),
     [_fixed([0.0, 1.0, 0.5]), _fixed([0.0, 1.0, 1.0])], [], False),
    ("bce_logits", lambda F, x, y: F.binary_cross_entropy_with_logits(x, y),
     [_uniform(-30, 30, 5, 3), _uniform(0, 1, 5, 3)], [0, 1], True),
    ("bce_logits_zero", lambda F, x, y: F.binary_cross_entropy_with_logits(x, y),
     [_fixed([0.0, 0.0]), _fixed([0.0, 1.0])], [0, 1], True),
    ("bce_logits_pos_weight", lambda F, x, y, w, pw: F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw,
                                                                                         reduction="sum"),
     [_normal(5, 3), _uniform(0, 1, 5, 3), _uniform(0, 1, 5, 1), _uniform(0.5, 3, 3)], [0, 1], True),
    ("mse_loss_none", lambda F, x, y: F.mse_loss(x, y, reduction="none"), [_normal(3, 4), _normal(3, 4)], [0, 1],
     True),
    ("mse_loss_broadcast", lambda F, x, y: F.mse_loss(x, y), [_normal(3, 4), _normal(4)], [0, 1], True),
    ("smooth_l1_none", lambda F, x, y: F.smooth_l1_loss(x, y, reduction="none", beta=0.7),
     [_normal(5, 4), _normal(5, 4)], [0, 1], True),
    ("huber_sum", lambda F, x, y: F.huber_loss(x, y, reduction="sum", delta=0.4), [_normal(5, 4), _normal(5, 4)],
     [0, 1], True),
    ("nll_loss_unbatched", lambda F, x, t: F.nll_loss(x, t), [_normal(5), _fixed(np.int64(3))], [0], True),
    ("nll_loss_unbatched_none", lambda F, x, t: F.nll_loss(x, t, reduction="none"), [_normal(5), _fixed(np.int64(1))],
     [0], True),
    ("nll_loss_mean_weight_ignore_4d", lambda F, x, t, w: F.nll_loss(x, t, weight=w, ignore_index=1),
     [_normal(2, 3, 4), _ints(0, 3, 2, 4), _uniform(0.5, 2, 3)], [0], True),
    ("bce_sum", lambda F, x, y: F.binary_cross_entropy(x, y, reduction="sum"),
     [_uniform(0.05, 0.95, 4, 3), _uniform(0, 1, 4, 3)], [0, 1], True),
    ("bce_logits_none", lambda F, x, y: F.binary_cross_entropy_with_logits(x, y, reduction="none"),
     [_uniform(-30, 30, 5, 3), _uniform(0, 1, 5, 3)], [0, 1], True),
    ("bce_logits_pos_weight_mean", lambda F, x, y, pw: F.binary_cross_entropy_with_logits(x, y, pos_weight=pw),
     [_normal(5, 3), _uniform(0, 1, 5, 3), _uniform(0.5, 3, 3)], [0, 1], True),
    ("kl_div_batchmean", lambda F, x, y: F.kl_div(F.log_softmax(x, 1), y, reduction="batchmean"),
     [_normal(4, 5), _probs(4, 5)], [0, 1], True),
    ("kl_div_zero_target", lambda F, x, y: F.kl_div(x, y, reduction="sum"),
     [_normal(3), _fixed([0.0, 0.5, 0.5])], [0, 1], True),
    ("kl_div_log_target", lambda F, x, y: F.kl_div(x, y, reduction="none", log_target=True),
     [_normal(4, 5), _normal(4, 5)], [0, 1], True),
    ("linear", lambda F, x, w, b: F.linear(x, w, b), [_normal(4, 3), _normal(5, 3), _normal(5)], [0, 1, 2], True),
    ("linear_3d_nobias", lambda F, x, w: F.linear(x, w), [_normal(2, 4, 3), _normal(5, 3)], [0, 1], True),
    ("layer_norm", lambda F, x, w, b: F.layer_norm(x, (4,), w, b), [_normal(3, 4), _normal(4), _normal(4)],
     [0, 1, 2], True),
    ("layer_norm_2d_plain", lambda F, x: F.layer_norm(x, [3, 4], eps=1e-3), [_normal(2, 3, 4)], [0], True),
    ("normalize", lambda F, x: F.normalize(x), [_normal(3, 4)], [0], True),
    ("normalize_p1", lambda F, x: F.normalize(x, p=1.0, dim=-1), [_normal(3, 4)], [0], True),
    ("normalize_zero_row", lambda F, x: F.normalize(x, dim=1), [_fixed([[0.0, 0.0], [3.0, 4.0]])], [0], True),
    ("embedding", lambda F, i, w: F.embedding(i, w), [_ints(0, 6, 3, 4), _normal(6, 3)], [1], True),
    ("embedding_padding", lambda F, i, w: F.embedding(i, w, padding_idx=-2), [_ints(0, 6, 5, 4), _normal(6, 3)], [1],
     True),
    ("pad_constant", lambda F, x: F.pad(x, (1, 2)), [_normal(2, 3)], [0], True),
    ("pad_constant_value_2d", lambda F, x: F.pad(x, (1, 0, 2, 1), value=1.5), [_normal(2, 3, 3)], [0], True),
    ("pad_crop", lambda F, x: F.pad(x, (-1, 2, 1, -1)), [_normal(2, 4, 5)], [0], True),
    ("pad_reflect", lambda F, x: F.pad(x, (2, 1, 1, 2), mode="reflect"), [_normal(2, 2, 4, 5)], [0], True),
    ("pad_replicate", lambda F, x: F.pad(x, (3, 1), mode="replicate"), [_normal(2, 2, 4)], [0], True),
    ("pad_circular", lambda F, x: F.pad(x, (1, 2, 2, 0), mode="circular"), [_normal(1, 2, 3, 4)], [0], True),
    ("conv1d", lambda F, x, w, b: F.conv1d(x, w, b), [_normal(2, 3, 9), _normal(4, 3, 3), _normal(4)], [0, 1, 2],
     True),
    ("conv1d_stride_pad_dil", lambda F, x, w: F.conv1d(x, w, stride=2, padding=2, dilation=2),
     [_normal(2, 3, 11), _normal(4, 3, 3)], [0, 1], True),
    ("conv1d_same_groups", lambda F, x, w: F.conv1d(x, w, padding="same", groups=2),
     [_normal(2, 4, 7), _normal(6, 2, 4)], [0, 1], True),
    ("conv1d_unbatched", lambda F, x, w: F.conv1d(x, w), [_normal(3, 6), _normal(2, 3, 2)], [0, 1], True),
    ("conv2d", lambda F, x, w, b: F.conv2d(x, w, b), [_normal(2, 3, 6, 5), _normal(4, 3, 3, 3), _normal(4)],
     [0, 1, 2], True),
    ("conv2d_stride_pad", lambda F, x, w: F.conv2d(x, w, stride=2, padding=1),
     [_normal(2, 3, 7, 6), _normal(4, 3, 3, 3)], [0, 1], True),
    ("conv2d_asym", lambda F, x, w: F.conv2d(x, w, stride=(1, 2), padding=(2, 0), dilation=(2, 1)),
     [_normal(1, 2, 7, 8), _normal(3, 2, 2, 3)], [0, 1], True),
    ("conv2d_same_even_kernel", lambda F, x, w: F.conv2d(x, w, padding="same", dilation=(1, 2)),
     [_normal(2, 2, 5, 6), _normal(3, 2, 2, 4)], [0, 1], True),
    ("conv2d_valid_groups", lambda F, x, w, b: F.conv2d(x, w, b, padding="valid", groups=3),
     [_normal(2, 6, 5, 5), _normal(9, 2, 3, 2), _normal(9)], [0, 1, 2], True),
    ("conv2d_depthwise", lambda F, x, w: F.conv2d(x, w, padding=1, groups=4),
     [_normal(2, 4, 5, 5), _normal(4, 1, 3, 3)], [0, 1], True),
    ("conv2d_unbatched", lambda F, x, w: F.conv2d(x, w), [_normal(3, 5, 5), _normal(2, 3, 3, 3)], [0, 1], True),
    ("max_pool2d", lambda F, x: F.max_pool2d(x, 2), [_normal(2, 3, 6, 6)], [0], True),
    ("max_pool2d_stride_pad", lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1), [_normal(2, 3, 7, 6)], [0], True),
    ("max_pool2d_ceil_dil", lambda F, x: F.max_pool2d(x, (2, 3), stride=2, dilation=(2, 1), ceil_mode=True),
     [_normal(1, 2, 8, 7)], [0], True),
    ("max_pool2d_indices", lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True),
     [_normal(2, 2, 7, 6)], [0], True),
    ("max_pool2d_unbatched_ceil", lambda F, x: F.max_pool2d(x, 2, ceil_mode=True), [_normal(3, 5, 5)], [0], True),
    ("avg_pool2d", lambda F, x: F.avg_pool2d(x, 2), [_normal(2, 3, 6, 6)], [0], True),
    ("avg_pool2d_pad_exclude", lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False),
     [_normal(2, 3, 7, 6)], [0], True),
    ("avg_pool2d_ceil", lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1, ceil_mode=True), [_normal(1, 2, 6, 8)],
     [0], True),
    ("avg_pool2d_ceil_exclude", lambda F, x: F.avg_pool2d(x, (2, 3), stride=2, ceil_mode=True,
                                                          count_include_pad=False), [_normal(1, 2, 5, 8)], [0], True),
    ("avg_pool2d_divisor", lambda F, x: F.avg_pool2d(x, 2, padding=1, divisor_override=3), [_normal(1, 2, 5, 5)], [0],
     True),
    ("selu", lambda F, x: F.selu(x), [_normal(3, 4)], [0], True),
    ("celu", lambda F, x: F.celu(x, 0.5), [_normal(3, 4)], [0], True),
    ("softsign", lambda F, x: F.softsign(x), [_normal(3, 4)], [0], True),
    ("mish", lambda F, x: F.mish(x), [_uniform(-30, 30, 3, 4)], [0], True),
    ("hardsigmoid", lambda F, x: F.hardsigmoid(x), [_uniform(-5, 5, 3, 4)], [0], True),
    ("hardswish", lambda F, x: F.hardswish(x), [_uniform(-5, 5, 3, 4)], [0], True),
    ("threshold", lambda F, x: F.threshold(x, 0.1, -2.0), [_normal(3, 4)], [0], True),
    ("tanhshrink", lambda F, x: F.tanhshrink(x), [_normal(3, 4)], [0], True),
    ("softmin", lambda F, x: F.softmin(x, 1), [_normal(3, 4)], [0], True),
    ("batch_norm_train", lambda F, x, w, b: F.batch_norm(x, None, None, w, b, training=True),
     [_normal(4, 3, 2, 2), _normal(3), _normal(3)], [0, 1, 2], True),
    ("batch_norm_eval", lambda F, x, m, v, w: F.batch_norm(x, m, v, w, eps=1e-3),
     [_normal(4, 3, 5), _normal(3), _uniform(0.5, 2, 3), _normal(3)], [0, 3], True),
    ("group_norm", lambda F, x, w, b: F.group_norm(x, 2, w, b), [_normal(2, 4, 3, 2), _normal(4), _normal(4)],
     [0, 1, 2], True),
    ("cosine_similarity", lambda F, a, b: F.cosine_similarity(a, b), [_normal(3, 4), _normal(1, 4)], [0, 1], True),
    ("max_pool1d", lambda F, x: F.max_pool1d(x, 3, stride=2, padding=1), [_normal(2, 3, 9)], [0], True),
    ("avg_pool1d", lambda F, x: F.avg_pool1d(x, 2, ceil_mode=True), [_normal(2, 3, 7)], [0], True),
    ("adaptive_avg_pool2d", lambda F, x: F.adaptive_avg_pool2d(x, (2, 3)), [_normal(2, 3, 4, 6)], [0], True),
    ("adaptive_avg_pool2d_uneven", lambda F, x: F.adaptive_avg_pool2d(x, (3, None)), [_normal(2, 2, 5, 4)], [0],
     True),
    ("adaptive_avg_pool2d_to_1", lambda F, x: F.adaptive_avg_pool2d(x, 1), [_normal(2, 3, 5, 5)], [0], True),
    ("unfold", lambda F, x: F.unfold(x, (2, 3), dilation=(1, 2), padding=1, stride=2), [_normal(2, 3, 5, 6)], [0],
     True),
    ("sdpa", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(2, 3, 4, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 2)], [0, 1, 2], True),
    ("sdpa_bool_mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(2, 4, 3), _normal(2, 5, 3), _normal(2, 5, 3), _bool_mask(4, 5)], [0, 1, 2], True),
    ("sdpa_float_mask_scale", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
     [_normal(2, 4, 3), _normal(2, 5, 3), _normal(2, 5, 3), _normal(4, 5)], [0, 1, 2, 3], True),
    ("sdpa_masked_row", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(1, 3, 2), _normal(1, 3, 2), _normal(1, 3, 2), _fixed([[False] * 3, [True, False, True], [True] * 3])],
     [0, 1, 2], True),
    ("sdpa_minus_inf_row", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(2, 3, 2), _normal(2, 3, 2), _normal(2, 3, 2), _fixed([[-np.inf] * 3, [0.0, -np.inf, 0.5], [0.0] * 3])],
     [0, 1, 2], True),
    ("sdpa_causal", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [_normal(1, 2, 5, 3), _normal(1, 2, 5, 3), _normal(1, 2, 5, 4)], [0, 1, 2], True),
    ("sdpa_gqa", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [_normal(1, 4, 3, 2), _normal(1, 2, 5, 2), _normal(1, 2, 5, 2)], [0, 1, 2], True),
]

# scaled_dot_product_attention where torch's CPU kernel runs (ScaledDotProductFlashAttentionForCpuBackward0: 4-d,
# one head size, no dropout, a mask without gradient); torch has no double backward for that kernel: the second
# derivatives are compared with its math backend in test_sdpa_cpu_kernel_second_derivatives_match_torch_math
SDPA_CPU_KERNEL = [
    ("sdpa_cpu_kernel", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(2, 3, 4, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 5)], [0, 1, 2], False),
    ("sdpa_cpu_kernel_causal", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
     [_normal(1, 2, 4, 3), _normal(1, 2, 6, 3), _normal(1, 2, 6, 3)], [0, 1, 2], False),
    ("sdpa_cpu_kernel_scale", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, scale=0.3),
     [_normal(2, 1, 5, 4), _normal(2, 1, 5, 4), _normal(2, 1, 5, 4)], [0, 1, 2], False),
    ("sdpa_cpu_kernel_bool_mask", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(2, 2, 4, 3), _normal(2, 2, 5, 3), _normal(2, 2, 5, 3), _bool_mask(2, 1, 4, 5)], [0, 1, 2], False),
    ("sdpa_cpu_kernel_masked_row", lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(1, 1, 3, 2), _normal(1, 1, 3, 2), _normal(1, 1, 3, 2),
      _fixed([[False] * 3, [True, False, True], [True] * 3])], [0, 1, 2], False),
    ("sdpa_cpu_kernel_float_mask_scale",
     lambda F, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.7),
     [_normal(1, 2, 4, 3), _normal(1, 2, 5, 3), _normal(1, 2, 5, 3), _normal(4, 5)], [0, 1, 2], False),
    ("sdpa_cpu_kernel_key_only", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(1, 2, 4, 3), _normal(1, 2, 5, 3), _normal(1, 2, 5, 3)], [1], False),
    ("sdpa_cpu_kernel_gqa_causal", lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                      enable_gqa=True),
     [_normal(2, 6, 4, 3), _normal(2, 2, 5, 3), _normal(2, 2, 5, 3)], [0, 1, 2], False),
]
CASES += SDPA_CPU_KERNEL


def _lib(F):
    """The library whose torch.nn.functional ``F`` is (for calls outside it: torch.norm, Tensor.masked_fill)."""
    return symgrad if F is SF else torch


# norms and masked_fill with a tensor value: ops with PyTorch's nodes too (LinalgVectorNormBackward0,
# MaskedFillBackward1)
CASES += [
    ("norm", lambda F, x: _lib(F).norm(x), [_normal(3, 4)], [0], True),
    ("norm_dim_keepdim", lambda F, x: _lib(F).norm(x, dim=1, keepdim=True), [_normal(3, 4)], [0], True),
    ("norm_p1", lambda F, x: _lib(F).norm(x, p=1, dim=0), [_normal(3, 4)], [0], True),
    ("vector_norm_3", lambda F, x: _lib(F).linalg.vector_norm(x, 3, dim=(0, 2)), [_normal(2, 3, 4)], [0], True),
    ("vector_norm_half", lambda F, x: _lib(F).linalg.vector_norm(x, 0.5), [_normal(3, 4)], [0], True),
    ("vector_norm_negative", lambda F, x: _lib(F).linalg.vector_norm(x, -2, dim=1), [_normal(3, 4)], [0], True),
    ("vector_norm_inf", lambda F, x: _lib(F).linalg.vector_norm(x, float("inf"), dim=1), [_normal(3, 4)], [0], True),
    ("vector_norm_minus_inf", lambda F, x: _lib(F).linalg.vector_norm(x, -float("inf")), [_normal(3, 4)], [0], True),
    ("vector_norm_zero_row", lambda F, x: _lib(F).linalg.vector_norm(x, dim=1), [_fixed([[0.0, 0.0], [3.0, 4.0]])],
     [0], True),
    ("masked_fill_tensor", lambda F, x, v: x.masked_fill(x > 0, v), [_normal(3, 4), _fixed(0.5)], [0, 1], True),
    ("masked_fill_broadcast_mask", lambda F, x, m, v: x.masked_fill(m, v), [_normal(2, 3, 4), _bool_mask(3, 4),
                                                                            _fixed(-1.5)], [0, 2], True),
    ("layer_norm_weight_only", lambda F, x, w: F.layer_norm(x, (3, 4), w), [_normal(2, 3, 4), _normal(3, 4)], [0, 1],
     True),
    ("pad_nothing", lambda F, x: F.pad(x, (0, 0, 1, -1)), [_normal(3, 4)], [0], True),
    ("conv2d_same_even_kernel_groups", lambda F, x, w, b: F.conv2d(x, w, b, padding="same", groups=2),
     [_normal(2, 4, 5, 6), _normal(4, 2, 2, 3), _normal(4)], [0, 1, 2], True),
]

# No second-order comparison for these, and why.
NO_TORCH_DOUBLE = {
    "elu_at_zero": "at x = 0 torch's first derivative takes the x <= 0 side (alpha), its second the x > 0 side (0)",
    "celu_at_zero": "as elu_at_zero (torch computes celu with its elu kernel)",
    "selu_at_zero": "as elu_at_zero (torch computes selu with its elu kernel)",
    "normalize_zero_row": "torch's second derivative is nan at a zero row; symgrad's is 0 (its first is 0 there too)",
    "vector_norm_zero_row": "as normalize_zero_row",
    "sdpa_gqa": "torch has no double backward for its grouped-query attention kernel",
    "hardsigmoid": "torch has no double backward for hardsigmoid",
}

TOL = {np.float32: dict(rtol=2e-4, atol=2e-5), np.float64: dict(rtol=1e-9, atol=1e-11)}
# torch's float64 hardsigmoid backward multiplies by 1/6 rounded to float32: agree to float32 precision there
LOOSE_F64 = {"hardsigmoid": dict(rtol=1e-7, atol=1e-11)}


def _build(lib, arrays, diff, dtype):
    out = []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            a = a.astype(dtype)
        if lib is torch:
            out.append(torch.tensor(a, requires_grad=i in diff))
        else:
            out.append(symgrad.tensor(a, requires_grad=i in diff))
    return out


def _outputs(out):
    return list(out) if isinstance(out, tuple) else [out]


def _numpy(t):
    if isinstance(t, torch.Tensor) and t._is_zerotensor():   # torch's symbolic zeros (l1_loss's second derivative)
        return np.zeros(tuple(t.shape))
    return t.detach().numpy()


def _cotangent_loss(lib, outs, rng_seed):
    """A scalar that weighs every float output with fixed random numbers (so no gradient is trivially uniform)."""
    r = np.random.default_rng(rng_seed)
    total = 0
    for o in outs:
        if not o.dtype.is_floating_point:
            continue
        np_dtype = o.detach().numpy().dtype if lib is torch else o.dtype.np   # no data read: o may be traced
        w = r.standard_normal(tuple(o.shape)).astype(np_dtype)
        total = total + (o * (torch.tensor(w) if lib is torch else symgrad.tensor(w))).sum()
    return total


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients_match_torch(case, dtype):
    name, call, makers, diff, second = case
    r = np.random.default_rng(abs(hash(name)) % 2**32)
    arrays = [m(r) for m in makers]
    tol = LOOSE_F64.get(name, TOL[dtype]) if dtype is np.float64 else TOL[dtype]
    got_in, want_in = _build(symgrad, arrays, diff, dtype), _build(torch, arrays, diff, dtype)
    got, want = _outputs(call(SF, *got_in)), _outputs(call(TF, *want_in))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert tuple(g.shape) == tuple(w.shape)
        assert _numpy(g).dtype == _numpy(w).dtype, name
        np.testing.assert_allclose(_numpy(g), _numpy(w), **tol)
    if not diff:
        return
    got_loss, want_loss = _cotangent_loss(symgrad, got, 1), _cotangent_loss(torch, want, 1)
    create = second and dtype is np.float64 and name not in NO_TORCH_DOUBLE
    g1 = symgrad.autograd.grad(got_loss, [got_in[i] for i in diff], create_graph=create, allow_unused=True)
    w1 = torch.autograd.grad(want_loss, [want_in[i] for i in diff], create_graph=create, allow_unused=True)
    for i, g, w in zip(diff, g1, w1):
        assert (g is None) == (w is None), f"{name}: gradient of argument {i}"
        if w is not None:
            np.testing.assert_allclose(_numpy(g), _numpy(w), err_msg=f"{name}: gradient of argument {i}", **tol)
    if not create:
        return
    # second order: the gradient of <grads, v> (a Hessian-vector product) against torch's
    got_h = _cotangent_loss(symgrad, [g for g in g1 if g is not None], 2)
    want_h = _cotangent_loss(torch, [w for w in w1 if w is not None], 2)
    # an identically zero second derivative may come back as no graph at all (relu): None counts as zeros
    g2 = _second(symgrad, got_h, [got_in[i] for i in diff])
    w2 = _second(torch, want_h, [want_in[i] for i in diff])
    for i, g, w, x in zip(diff, g2, w2, arrays):
        g = np.zeros(np.shape(x)) if g is None else _numpy(g)
        w = np.zeros(np.shape(x)) if w is None else _numpy(w)
        np.testing.assert_allclose(g, w, err_msg=f"{name}: second derivative of argument {i}", **tol)


@pytest.mark.parametrize("case", SDPA_CPU_KERNEL, ids=[c[0] for c in SDPA_CPU_KERNEL])
def test_sdpa_cpu_kernel_second_derivatives_match_torch_math(case):
    """symgrad's attention op differentiates twice; torch's CPU kernel does not: its math backend does."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    name, call, makers, diff, _ = case
    r = np.random.default_rng(abs(hash(name)) % 2**32)
    arrays = [m(r) for m in makers]
    got_in, want_in = _build(symgrad, arrays, diff, np.float64), _build(torch, arrays, diff, np.float64)
    got = call(SF, *got_in)
    assert type(got.grad_fn).__name__ == "ScaledDotProductFlashAttentionForCpuBackward0"
    with sdpa_kernel(SDPBackend.MATH):
        want = call(TF, *want_in)
    g1 = symgrad.autograd.grad(_cotangent_loss(symgrad, [got], 1), [got_in[i] for i in diff], create_graph=True)
    w1 = torch.autograd.grad(_cotangent_loss(torch, [want], 1), [want_in[i] for i in diff], create_graph=True)
    g2 = _second(symgrad, _cotangent_loss(symgrad, list(g1), 2), [got_in[i] for i in diff])
    w2 = _second(torch, _cotangent_loss(torch, list(w1), 2), [want_in[i] for i in diff])
    for i, g, w in zip(diff, g2, w2):
        np.testing.assert_allclose(_numpy(g), _numpy(w), err_msg=f"{name}: second derivative of argument {i}",
                                   **TOL[np.float64])


def _second(lib, h, inputs):
    if not getattr(h, "requires_grad", False):
        return [None] * len(inputs)
    return lib.autograd.grad(h, inputs, allow_unused=True)


# --- compiled ---------------------------------------------------------------------------------

def _scalar_program(call, n_out_float):
    """The case as a scalar loss (fixed weights on every float output), for symgrad.compile."""
    def program(*args):
        outs = _outputs(call(SF, *args))
        return _cotangent_loss(symgrad, outs, 1)
    return program


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_compiled_numpy_backend_matches_eager(case):
    """Every case traced, differentiated by the compiler and run by the numpy backend equals eager symgrad."""
    name, call, makers, diff, _ = case
    r = np.random.default_rng(abs(hash(name)) % 2**32)
    arrays = [m(r) for m in makers]
    if not diff:
        return
    program = _scalar_program(call, len(diff))
    eager_in = _build(symgrad, arrays, diff, np.float64)
    program(*eager_in).backward()
    compiled = symgrad.compile(program, backend="numpy")
    comp_in = _build(symgrad, arrays, diff, np.float64)
    out = compiled(*comp_in)
    out.backward()
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    np.testing.assert_allclose(out.item(), program(*_build(symgrad, arrays, diff, np.float64)).item(), rtol=1e-10)
    for i in diff:
        np.testing.assert_allclose(comp_in[i].grad.numpy(), eager_in[i].grad.numpy(), rtol=1e-9, atol=1e-12,
                                   err_msg=f"{name}: gradient of argument {i}")


def _cross_entropy_loss(x, w, t):
    return SF.cross_entropy(x @ w, t, label_smoothing=0.1)


def _mlp(x, w1, b1, g, b, w2, t):
    h = SF.layer_norm(SF.gelu(SF.linear(x, w1, b1)), (w1.shape[0],), g, b)
    return SF.mse_loss(SF.linear(h, w2), t)


def _cnn(x, k, kb, w, t):
    h = SF.max_pool2d(SF.relu(SF.conv2d(x, k, kb, padding=1)), 2)
    h = SF.avg_pool2d(h, 2, ceil_mode=True)
    return SF.cross_entropy(SF.linear(h.reshape(h.shape[0], -1), w), t)


def _program_args(name, r):
    return {
        "cross_entropy": [r.standard_normal((8, 5)), r.standard_normal((5, 4)), r.integers(0, 4, 8)],
        "mlp_gelu_layer_norm": [r.standard_normal(s) for s in [(6, 5), (7, 5), (7,), (7,), (7,), (3, 7), (6, 3)]],
        "cnn_conv_pool": [r.standard_normal((2, 3, 8, 8)), r.standard_normal((4, 3, 3, 3)), r.standard_normal(4),
                          r.standard_normal((5, 16)), r.integers(0, 5, 2)],
    }[name]


PROGRAMS = {"cross_entropy": _cross_entropy_loss, "mlp_gelu_layer_norm": _mlp, "cnn_conv_pool": _cnn}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_numba_programs_match_eager_and_torch(name):
    fn = PROGRAMS[name]
    compiled = symgrad.compile(fn, backend="numba")
    for seed in (0, 1):      # the second call reuses the kernels on new values
        arrays = _program_args(name, np.random.default_rng(seed))
        diff = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
        eager_in, comp_in = _build(symgrad, arrays, diff, np.float64), _build(symgrad, arrays, diff, np.float64)
        torch_in = _build(torch, arrays, diff, np.float64)
        fn(*eager_in).backward()
        out = compiled(*comp_in)
        out.backward()
        want = {"cross_entropy": lambda x, w, t: TF.cross_entropy(x @ w, t, label_smoothing=0.1),
                "mlp_gelu_layer_norm": lambda x, w1, b1, g, b, w2, t: TF.mse_loss(
                    TF.linear(TF.layer_norm(TF.gelu(TF.linear(x, w1, b1)), (7,), g, b), w2), t),
                "cnn_conv_pool": lambda x, k, kb, w, t: TF.cross_entropy(TF.linear(TF.avg_pool2d(TF.max_pool2d(
                    TF.relu(TF.conv2d(x, k, kb, padding=1)), 2), 2, ceil_mode=True).reshape(2, -1), w), t),
                }[name](*torch_in)
        want.backward()
        np.testing.assert_allclose(out.item(), want.item(), rtol=1e-10)
        for i in diff:
            np.testing.assert_allclose(comp_in[i].grad.numpy(), eager_in[i].grad.numpy(), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(comp_in[i].grad.numpy(), torch_in[i].grad.numpy(), rtol=1e-9, atol=1e-12)
    assert compiled.stats()["traces"] == 1


def test_dropout_draws_a_fresh_mask_at_every_compiled_call():
    def fn(x):       # two dropouts of one tensor: two independent masks, not one merged value
        return (SF.dropout(x, 0.5) + SF.dropout(x, 0.5) * 10.0).sum()

    compiled = symgrad.compile(fn)
    grads = []
    for _ in range(2):
        x = symgrad.tensor(np.ones(4000), requires_grad=True)
        y = compiled(x)
        y.backward()
        g = x.grad.numpy()
        assert set(np.unique(g)) == {0.0, 2.0, 20.0, 22.0}     # mask / (1 - p), for each mask
        assert y.item() == pytest.approx(g.sum())              # the backward used the forward's masks
        grads.append(g)
    assert 0.6 < np.mean(grads[0] != grads[1]) < 0.9


def test_dropout_follows_manual_seed_and_scales():
    symgrad.manual_seed(7)
    a = SF.dropout(symgrad.ones(1000), 0.25).numpy()
    symgrad.manual_seed(7)
    b = SF.dropout(symgrad.ones(1000), 0.25).numpy()
    np.testing.assert_array_equal(a, b)
    assert set(np.unique(a)) == {0.0, np.float32(1 / 0.75)}
    assert 0.18 < np.mean(a == 0) < 0.32
    x = symgrad.ones(3, requires_grad=True)
    assert SF.dropout(x, 0.5, training=False) is x
    np.testing.assert_array_equal(SF.dropout(x, 1.0).detach().numpy(), np.zeros(3))


def test_batch_norm_updates_running_statistics_as_torch():
    x = np.random.default_rng(0).standard_normal((5, 3, 4))
    got = [symgrad.tensor(np.zeros(3)), symgrad.tensor(np.ones(3))]
    want = [torch.tensor(np.zeros(3)), torch.tensor(np.ones(3))]
    for _ in range(2):
        SF.batch_norm(symgrad.tensor(x), *got, training=True, momentum=0.3)
        TF.batch_norm(torch.tensor(x), *want, training=True, momentum=0.3)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w.numpy(), rtol=1e-12)
    assert got[0]._version == 2


def test_one_hot_matches_torch():
    t = np.array([[0, 3], [2, 1]])
    got = SF.one_hot(symgrad.tensor(t))
    want = TF.one_hot(torch.tensor(t))
    assert got.dtype == symgrad.int64
    np.testing.assert_array_equal(got.numpy(), want.numpy())
    np.testing.assert_array_equal(SF.one_hot(symgrad.tensor(t), 6).numpy(), TF.one_hot(torch.tensor(t), 6).numpy())


def test_max_pool_gradient_goes_to_the_first_of_tied_maxima():
    x = np.zeros((1, 1, 2, 2))
    got, want = symgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    SF.max_pool2d(got, 2).sum().backward()
    TF.max_pool2d(want, 2).sum().backward()
    np.testing.assert_array_equal(got.grad.numpy(), want.grad.numpy())


def test_inplace_activation_writes_into_its_input():
    x = symgrad.tensor([-1.0, 2.0])
    y = SF.relu(x, inplace=True)
    assert y is x
    np.testing.assert_array_equal(x.numpy(), [0.0, 2.0])


# --- errors for unsupported or invalid arguments --------------------------------------------------

def _x(*shape):
    return symgrad.tensor(np.ones(shape))


ERRORS = [
    ("conv2d_same_strided", lambda: SF.conv2d(_x(1, 1, 5, 5), _x(1, 1, 3, 3), stride=2, padding="same"),
     ValueError, "padding='same' is not supported for strided"),
    ("conv2d_bad_padding_string", lambda: SF.conv2d(_x(1, 1, 5, 5), _x(1, 1, 3, 3), padding="full"),
     ValueError, "Invalid padding string"),
    ("conv2d_channels", lambda: SF.conv2d(_x(1, 2, 5, 5), _x(1, 3, 3, 3)), RuntimeError, "expected input"),
    ("conv2d_kernel_too_big", lambda: SF.conv2d(_x(1, 1, 2, 2), _x(1, 1, 3, 3)), RuntimeError,
     "Kernel size can't be greater"),
    ("conv2d_dtype", lambda: SF.conv2d(_x(1, 1, 5, 5), symgrad.ones(1, 1, 3, 3)), RuntimeError, "same dtype"),
    ("pad_odd", lambda: SF.pad(_x(2, 2), (1,)), ValueError, "divisible by 2"),
    ("pad_mode", lambda: SF.pad(_x(1, 2, 3), (1, 1), mode="symmetric"), NotImplementedError, "mode='symmetric'"),
    ("pad_reflect_too_wide", lambda: SF.pad(_x(1, 2, 3), (3, 0), mode="reflect"), RuntimeError, "at most 2"),
    ("max_pool_pad", lambda: SF.max_pool2d(_x(1, 1, 5, 5), 2, padding=2), RuntimeError, "at most half"),
    ("avg_pool_pad", lambda: SF.avg_pool2d(_x(1, 1, 5, 5), 2, padding=2), RuntimeError, "half of kernel size"),
    ("reduction", lambda: SF.mse_loss(_x(2), _x(2), reduction="avg"), ValueError, "not a valid value for reduction"),
    ("dropout_p", lambda: SF.dropout(_x(2), 1.5), ValueError, "between 0 and 1"),
    ("gelu_approximate", lambda: SF.gelu(_x(2), approximate="fast"), RuntimeError, "approximate"),
    ("cross_entropy_target_range", lambda: SF.cross_entropy(_x(2, 3), symgrad.tensor([0, 3])), IndexError,
     "Target 3 is out of bounds"),
    ("nll_negative_target", lambda: SF.nll_loss(_x(2, 3), symgrad.tensor([-1, 0])), IndexError, "out of bounds"),
    ("bce_range", lambda: SF.binary_cross_entropy(_x(2) * 2, _x(2)), RuntimeError, "between 0 and 1"),
    ("embedding_max_norm", lambda: SF.embedding(symgrad.tensor([0]), _x(3, 2), max_norm=1.0), NotImplementedError,
     "max_norm"),
    ("embedding_sparse", lambda: SF.embedding(symgrad.tensor([0]), _x(3, 2), sparse=True), NotImplementedError,
     "sparse"),
    ("embedding_range", lambda: SF.embedding(symgrad.tensor([3]), _x(3, 2)), IndexError, "index out of range"),
    ("one_hot_dtype", lambda: SF.one_hot(symgrad.tensor([1], dtype=symgrad.int32)), RuntimeError, "LongTensor"),
    ("one_hot_small", lambda: SF.one_hot(symgrad.tensor([4]), 3), RuntimeError, "smaller than num_classes"),
    ("layer_norm_shape", lambda: SF.layer_norm(_x(2, 3), (2,)), RuntimeError, "normalized_shape"),
    ("batch_norm_one_value", lambda: SF.batch_norm(_x(1, 3), None, None, training=True), ValueError,
     "more than 1 value per channel"),
    ("group_norm_groups", lambda: SF.group_norm(_x(2, 3, 2), 2), RuntimeError, "divisible by num_groups"),
    ("normalize_out", lambda: SF.normalize(_x(2, 3), out=_x(2, 3)), NotImplementedError, "out="),
    ("sdpa_mask_and_causal", lambda: SF.scaled_dot_product_attention(_x(2, 2), _x(2, 2), _x(2, 2),
                                                                     attn_mask=_x(2, 2), is_causal=True),
     RuntimeError, "is_causal"),
]


@pytest.mark.parametrize("call,error,message", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_unsupported_or_invalid_arguments_raise_clear_errors(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace("=", "=")):
        call()


def test_batch_norm_running_statistics_refuse_to_compile():
    mean, var = symgrad.zeros(3), symgrad.ones(3)
    compiled = symgrad.compile(lambda x: SF.batch_norm(x, mean, var, training=True).sum())
    with pytest.raises(NotImplementedError, match="running_mean"):
        compiled(symgrad.tensor(np.ones((4, 3)), requires_grad=True))


def test_one_hot_without_num_classes_refuses_to_compile():
    compiled = symgrad.compile(lambda t, x: (SF.one_hot(t).to(symgrad.float64) * x).sum())
    with pytest.raises(NotImplementedError, match="num_classes"):
        compiled(symgrad.tensor([0, 2]), symgrad.tensor(np.ones(3), requires_grad=True))


# functions whose node is the one PyTorch records (the others are compositions: their output's node is
# the last op of the composition, e.g. DivBackward0 for a mean cross_entropy)
NAMED_NODES = [
    ("relu", lambda F, x: F.relu(x)), ("gelu", lambda F, x: F.gelu(x)),
    ("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh")), ("leaky_relu", lambda F, x: F.leaky_relu(x, 0.1)),
    ("hardtanh", lambda F, x: F.hardtanh(x)), ("relu6", lambda F, x: F.relu6(x)), ("elu", lambda F, x: F.elu(x)),
    ("sigmoid", lambda F, x: F.sigmoid(x)), ("tanh", lambda F, x: F.tanh(x)), ("softmax", lambda F, x: F.softmax(x, 1)),
    ("log_softmax", lambda F, x: F.log_softmax(x, 1)), ("silu", lambda F, x: F.silu(x)),
    ("softplus", lambda F, x: F.softplus(x, beta=2.0)), ("logsigmoid", lambda F, x: F.logsigmoid(x)),
    ("mish", lambda F, x: F.mish(x)), ("hardsigmoid", lambda F, x: F.hardsigmoid(x)),
    ("hardswish", lambda F, x: F.hardswish(x)), ("celu", lambda F, x: F.celu(x, 0.7)), ("selu", lambda F, x: F.selu(x)),
    ("threshold", lambda F, x: F.threshold(x, 0.1, -1.0)), ("linear", lambda F, x: F.linear(x, x * 2)),
    ("linear_bias", lambda F, x: F.linear(x, x * 2, x[:, 0])),
    ("linear_bias_3d", lambda F, x: F.linear(x.reshape(1, 2, 3), x * 2, x[:, 0])),
    ("linear_bias_1d", lambda F, x: F.linear(x[0], x * 2, x[:, 0])),
    ("linear_bias_3d_contiguous", lambda F, x: F.linear(x.reshape(1, 2, 3), x * 2, x[:, 0].contiguous())),
    ("linear_bias_1d_contiguous", lambda F, x: F.linear(x[0], x * 2, x[:, 0].contiguous())),
]


# losses PyTorch records as one node (l1_loss is a composition there too: MeanBackward0)
_PROBS, _CLASSES = np.array([[0.2, 0.7, 0.5], [0.9, 0.1, 0.4]]), np.array([2, 0])
NAMED_LOSSES = [
    (f"{name}_{reduction}", call, reduction)
    for name, call in [
        ("mse_loss", lambda F, x, L, r: F.mse_loss(x, L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("l1_loss", lambda F, x, L, r: F.l1_loss(x, L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("smooth_l1_loss", lambda F, x, L, r: F.smooth_l1_loss(x, L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("huber_loss", lambda F, x, L, r: F.huber_loss(x, L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("bce", lambda F, x, L, r: F.binary_cross_entropy(F.sigmoid(x), L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("bce_weight", lambda F, x, L, r: F.binary_cross_entropy(F.sigmoid(x), L.tensor(_PROBS).to(x.dtype),
                                                                  weight=L.tensor(_PROBS).to(x.dtype), reduction=r)),
        ("bce_with_logits", lambda F, x, L, r: F.binary_cross_entropy_with_logits(x, L.tensor(_PROBS).to(x.dtype),
                                                                                  reduction=r)),
        ("bce_with_logits_pos_weight", lambda F, x, L, r: F.binary_cross_entropy_with_logits(
            x, L.tensor(_PROBS).to(x.dtype), pos_weight=L.tensor(_PROBS[0]).to(x.dtype), reduction=r)),
        ("nll_loss", lambda F, x, L, r: F.nll_loss(x, L.tensor(_CLASSES), reduction=r)),
        ("nll_loss_unbatched", lambda F, x, L, r: F.nll_loss(x[0], L.tensor(_CLASSES[0]), reduction=r)),
        ("cross_entropy", lambda F, x, L, r: F.cross_entropy(x, L.tensor(_CLASSES), reduction=r)),
        ("cross_entropy_unbatched", lambda F, x, L, r: F.cross_entropy(x[1], L.tensor(_CLASSES[1]), reduction=r)),
    ]
    for reduction in ("mean", "sum", "none")
]


@pytest.mark.parametrize("name,call,reduction", NAMED_LOSSES, ids=[c[0] for c in NAMED_LOSSES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_loss_grad_fn_names_and_values_match_torch(name, call, reduction, dtype):
    x = np.random.default_rng(1).standard_normal((2, 3)).astype(dtype)
    got = call(SF, symgrad.tensor(x, requires_grad=True), symgrad, reduction)
    want = call(TF, torch.tensor(x, requires_grad=True), torch, reduction)
    assert type(got.grad_fn).__name__ == type(want.grad_fn).__name__
    assert str(got.dtype).replace("symgrad.", "") == str(want.dtype).replace("torch.", "")
    rtol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got.detach().numpy(), want.detach().numpy(), rtol=rtol, atol=rtol)


def test_losses_are_decomposed_in_compiled_graphs():
    """A compiled graph holds a loss's elementwise parts and reduction (fused), not the eager op."""
    x, t = np.random.default_rng(2).standard_normal((2, 3)), _PROBS
    programs = {
        "mse_loss": lambda a, b: SF.mse_loss(a, b),
        "smooth_l1_loss": lambda a, b: SF.smooth_l1_loss(a, b),
        "huber_loss": lambda a, b: SF.huber_loss(a, b, reduction="sum"),
        "binary_cross_entropy": lambda a, b: SF.binary_cross_entropy(SF.sigmoid(a), b),
        "binary_cross_entropy_with_logits": lambda a, b: SF.binary_cross_entropy_with_logits(a, b),
        "nll_loss": lambda a, b: SF.nll_loss(a, symgrad.tensor(_CLASSES)),
    }
    for op, program in programs.items():
        graph = symgrad.trace(program, x, t)
        assert op not in [n.op for n in graph.nodes], op


@pytest.mark.parametrize("call", [c[1] for c in NAMED_NODES], ids=[c[0] for c in NAMED_NODES])
def test_grad_fn_names_match_torch(call):
    x = np.random.default_rng(0).standard_normal((2, 3))
    got = call(SF, symgrad.tensor(x, requires_grad=True))
    want = call(TF, torch.tensor(x, requires_grad=True))
    assert type(got.grad_fn).__name__ == type(want.grad_fn).__name__


def _graph(fn, depth: int = 3):
    """A node's class name and, ``depth`` levels down, those of its ``next_functions`` (None kept)."""
    if fn is None:
        return None
    if depth == 0:
        return type(fn).__name__
    return type(fn).__name__, tuple(_graph(f, depth - 1) for f, _ in fn.next_functions)


def _indices(lo, hi, *shape):
    return lambda r: r.integers(lo, hi, shape).astype(np.int64)


# (id, call(F, lib, *args), argument makers): float arguments require grad; the graph of the output, three
# levels down, is PyTorch's (the nodes of torch.nn.functional with one of their own in PyTorch, and how the
# others are composed around them)
GRAPHS = [
    ("layer_norm", lambda F, L, x: F.layer_norm(x, (4,)), [_normal(3, 4)]),
    ("layer_norm_affine", lambda F, L, x, w, b: F.layer_norm(x, (3, 4), w, b), [_normal(2, 3, 4), _normal(3, 4),
                                                                                _normal(3, 4)]),
    ("layer_norm_weight_only", lambda F, L, x, w: F.layer_norm(x, (4,), w), [_normal(2, 3, 4), _normal(4)]),
    ("embedding", lambda F, L, i, w: F.embedding(i, w), [_indices(0, 5, 2, 3), _normal(5, 4)]),
    ("embedding_padding", lambda F, L, i, w: F.embedding(i, w, padding_idx=1), [_indices(0, 5, 2, 3), _normal(5, 4)]),
    ("conv1d", lambda F, L, x, w, b: F.conv1d(x, w, b, padding=1), [_normal(2, 3, 7), _normal(4, 3, 3), _normal(4)]),
    ("conv1d_unbatched", lambda F, L, x, w: F.conv1d(x, w), [_normal(3, 7), _normal(4, 3, 3)]),
    ("conv2d", lambda F, L, x, w, b: F.conv2d(x, w, b, stride=2, padding=1), [_normal(2, 3, 7, 6), _normal(4, 3, 3, 3),
                                                                              _normal(4)]),
    ("conv2d_nobias_groups", lambda F, L, x, w: F.conv2d(x, w, groups=2, dilation=2), [_normal(2, 4, 7, 6),
                                                                                        _normal(6, 2, 2, 2)]),
    ("conv2d_same_odd", lambda F, L, x, w: F.conv2d(x, w, padding="same"), [_normal(2, 3, 5, 5), _normal(4, 3, 3, 3)]),
    ("conv2d_same_even", lambda F, L, x, w: F.conv2d(x, w, padding="same"), [_normal(2, 3, 5, 5), _normal(4, 3, 2, 2)]),
    ("conv2d_unbatched", lambda F, L, x, w: F.conv2d(x, w), [_normal(3, 5, 5), _normal(4, 3, 3, 3)]),
    ("max_pool2d", lambda F, L, x: F.max_pool2d(x, 2), [_normal(2, 3, 6, 6)]),
    ("max_pool2d_pad_ceil", lambda F, L, x: F.max_pool2d(x, 3, 2, 1, ceil_mode=True), [_normal(2, 3, 7, 6)]),
    ("max_pool2d_indices", lambda F, L, x: F.max_pool2d(x, 2, return_indices=True)[0], [_normal(2, 3, 6, 6)]),
    ("max_pool2d_unbatched", lambda F, L, x: F.max_pool2d(x, 2), [_normal(3, 6, 6)]),
    ("max_pool1d", lambda F, L, x: F.max_pool1d(x, 2), [_normal(2, 3, 6)]),
    ("avg_pool2d", lambda F, L, x: F.avg_pool2d(x, 2), [_normal(2, 3, 6, 6)]),
    ("avg_pool2d_pad", lambda F, L, x: F.avg_pool2d(x, 3, 2, 1, count_include_pad=False), [_normal(2, 3, 7, 6)]),
    ("avg_pool2d_unbatched", lambda F, L, x: F.avg_pool2d(x, 2), [_normal(3, 6, 6)]),
    ("avg_pool1d", lambda F, L, x: F.avg_pool1d(x, 2), [_normal(2, 3, 6)]),
    ("pad_constant", lambda F, L, x: F.pad(x, (1, 2)), [_normal(2, 3)]),
    ("pad_crop", lambda F, L, x: F.pad(x, (-1, 2, 1, -1), value=0.5), [_normal(2, 4, 5)]),
    ("pad_nothing", lambda F, L, x: F.pad(x, (0, 0)), [_normal(2, 3)]),
    ("pad_reflect_1d", lambda F, L, x: F.pad(x, (2, 1), mode="reflect"), [_normal(2, 3, 4)]),
    ("pad_reflect_2d", lambda F, L, x: F.pad(x, (1, 2, 2, 0), mode="reflect"), [_normal(3, 4, 5)]),
    ("pad_reflect_3d", lambda F, L, x: F.pad(x, (1, 1, 0, 2, 1, 0), mode="reflect"), [_normal(1, 2, 3, 4, 3)]),
    ("pad_replicate_1d", lambda F, L, x: F.pad(x, (3, 1), mode="replicate"), [_normal(3, 4)]),
    ("pad_replicate_2d", lambda F, L, x: F.pad(x, (1, 0, 2, 2), mode="replicate"), [_normal(2, 2, 3, 4)]),
    ("pad_replicate_3d", lambda F, L, x: F.pad(x, (1, 1, 1, 1, 1, 1), mode="replicate"), [_normal(2, 3, 2, 3)]),
    ("normalize", lambda F, L, x: F.normalize(x), [_normal(3, 4)]),
    ("dropout", lambda F, L, x: F.dropout(x, 0.3), [_normal(3, 4)]),
    ("norm", lambda F, L, x: L.norm(x), [_normal(3, 4)]),
    ("norm_dim_keepdim", lambda F, L, x: L.norm(x, dim=1, keepdim=True), [_normal(3, 4)]),
    ("norm_p1", lambda F, L, x: L.norm(x, p=1), [_normal(3, 4)]),
    ("tensor_norm", lambda F, L, x: x.norm(), [_normal(3, 4)]),
    ("vector_norm_3", lambda F, L, x: L.linalg.vector_norm(x, 3, dim=(0, 2)), [_normal(2, 3, 4)]),
    ("vector_norm_inf", lambda F, L, x: L.linalg.vector_norm(x, float("inf"), dim=1), [_normal(3, 4)]),
    ("vector_norm_0", lambda F, L, x: L.linalg.vector_norm(x, 0), [_normal(3, 4)]),
    ("linalg_norm", lambda F, L, x: L.linalg.norm(x), [_normal(3, 4)]),
    ("masked_fill_tensor", lambda F, L, x, v: x.masked_fill(x > 0, v), [_normal(3, 4), _fixed(0.5)]),
    ("masked_fill_constant_tensor", lambda F, L, x: x.masked_fill(x > 0, L.tensor(0.5, dtype=x.dtype)),
     [_normal(3, 4)]),
    # scaled_dot_product_attention: torch's CPU kernel (one node over q, k, v) or its composition
    ("sdpa_cpu_kernel", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(2, 3, 4, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 5)]),
    ("sdpa_cpu_kernel_causal_scale", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                                                                          scale=0.5),
     [_normal(1, 2, 4, 3), _normal(1, 2, 6, 3), _normal(1, 2, 6, 3)]),
    ("sdpa_cpu_kernel_bool_mask", lambda F, L, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(2, 2, 4, 3), _normal(2, 2, 5, 3), _normal(2, 2, 5, 3), _bool_mask(4, 5)]),
    ("sdpa_cpu_kernel_constant_float_mask",
     lambda F, L, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=L.tensor(m.detach().numpy())),
     [_normal(2, 2, 4, 3), _normal(2, 2, 5, 3), _normal(2, 2, 5, 3), _normal(2, 2, 4, 5)]),
    ("sdpa_cpu_kernel_gqa_equal_heads", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [_normal(1, 2, 4, 3), _normal(1, 2, 5, 3), _normal(1, 2, 5, 3)]),
    ("sdpa_cpu_kernel_gqa", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
     [_normal(1, 4, 3, 2), _normal(1, 2, 5, 2), _normal(1, 2, 5, 2)]),
    ("sdpa_cpu_kernel_transposed_query",
     lambda F, L, q, k, v: F.scaled_dot_product_attention(q.transpose(1, 2), k, v),
     [_normal(2, 4, 3, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 5)]),
    ("sdpa_cpu_kernel_query_only", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k.detach(), v.detach()),
     [_normal(2, 3, 4, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 5)]),
    ("sdpa_3d", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(3, 4, 5), _normal(3, 6, 5), _normal(3, 6, 5)]),
    ("sdpa_value_head_size", lambda F, L, q, k, v: F.scaled_dot_product_attention(q, k, v),
     [_normal(2, 3, 4, 5), _normal(2, 3, 6, 5), _normal(2, 3, 6, 2)]),
    ("sdpa_mask_with_gradient", lambda F, L, q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
     [_normal(2, 2, 4, 3), _normal(2, 2, 5, 3), _normal(2, 2, 5, 3), _normal(4, 5)]),
    ("sdpa_transposed_last_dim", lambda F, L, q, k, v: F.scaled_dot_product_attention(q.transpose(-1, -2), k, v),
     [_normal(2, 3, 5, 4), _normal(2, 3, 6, 5), _normal(2, 3, 6, 5)]),
]

# torch.einsum: the ops torch's implementation records (permutes, unsqueezes, bmm between views, mul, sum)
EINSUMS = [
    ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("i,j->ij", [(3,), (4,)]),
    ("ij->", [(2, 3)]), ("ij->j", [(2, 3)]), ("ij->ji", [(2, 3)]), ("ijk->kji", [(2, 3, 4)]), ("ij->ij", [(2, 3)]),
    ("bi,ij,bj->b", [(2, 3), (3, 4), (2, 4)]), ("...ij,...jk->...ik", [(2, 2, 3), (2, 3, 4)]),
    ("i,i->", [(3,), (3,)]), ("i,i->i", [(3,), (3,)]), ("ij,ij->ij", [(2, 3), (2, 3)]), ("ij,ij->", [(2, 3), (2, 3)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]), ("ij,j->i", [(2, 3), (3,)]), ("ij,kj->ik", [(2, 3), (4, 3)]),
    ("ji,jk->ik", [(3, 2), (3, 4)]), ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("bij,jk->bik", [(2, 3, 4), (4, 5)]),
    ("ijk,ik->j", [(2, 3, 4), (2, 4)]), ("ij,jk", [(2, 3), (3, 4)]), ("i,ij,j->", [(3,), (3, 4), (4,)]),
    ("ij,k->ik", [(2, 3), (4,)]), ("ij,jk->", [(2, 3), (3, 4)]),
]
# repeated letters: the top node and its next_functions as torch; further down torch has DiagonalBackward0,
# symgrad IndexBackward0 (its diagonal)
EINSUM_DIAGONALS = [("ii->", [(3, 3)]), ("ii->i", [(3, 3)]), ("iij->j", [(3, 3, 2)]),
                    ("bii,bi->b", [(2, 3, 3), (2, 3)])]


def _einsum_case(equation, shapes):
    return (f"einsum_{equation}", lambda F, L, *xs: L.einsum(equation, *xs), [_normal(*s) for s in shapes])


GRAPHS += [_einsum_case(e, shapes) for e, shapes in EINSUMS]


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("case", GRAPHS, ids=[c[0] for c in GRAPHS])
def test_grad_fn_graphs_match_torch(case, dtype):
    name, call, makers = case
    r = np.random.default_rng(0)
    arrays = [np.asarray(m(r)) for m in makers]
    arrays = [a.astype(dtype) if a.dtype.kind == "f" else a for a in arrays]
    got = call(SF, symgrad, *[symgrad.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays])
    want = call(TF, torch, *[torch.tensor(a, requires_grad=a.dtype.kind == "f") for a in arrays])
    assert _graph(got.grad_fn) == _graph(want.grad_fn)


@pytest.mark.parametrize("equation,shapes", EINSUM_DIAGONALS, ids=[e for e, _ in EINSUM_DIAGONALS])
def test_einsum_diagonal_top_nodes_match_torch(equation, shapes):
    arrays = [np.random.default_rng(0).standard_normal(s) for s in shapes]
    got = symgrad.einsum(equation, *[symgrad.tensor(a, requires_grad=True) for a in arrays])
    want = torch.einsum(equation, *[torch.tensor(a, requires_grad=True) for a in arrays])
    assert _graph(got.grad_fn, 1) == _graph(want.grad_fn, 1)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("equation,shapes", EINSUMS + EINSUM_DIAGONALS + [
    ("...i,...i->...", [(2, 1, 3), (4, 3)]), ("ij,jk->ik", [(0, 3), (3, 4)]), ("iii->i", [(3, 3, 3)]),
    ("ab,bc,cd,de->ae", [(2, 3), (3, 4), (4, 5), (5, 2)]), ("i,j,k->ijk", [(2,), (3,), (4,)])],
    ids=lambda v: v if isinstance(v, str) else None)
def test_einsum_values_and_gradients_match_torch(equation, shapes, dtype):
    r = np.random.default_rng(len(equation))
    arrays = [r.standard_normal(s).astype(dtype) for s in shapes]
    got_in = [symgrad.tensor(a, requires_grad=True) for a in arrays]
    want_in = [torch.tensor(a, requires_grad=True) for a in arrays]
    got, want = symgrad.einsum(equation, *got_in), torch.einsum(equation, *want_in)
    tol = TOL[dtype]
    assert tuple(got.shape) == tuple(want.shape) and _numpy(got).dtype == _numpy(want).dtype
    np.testing.assert_allclose(_numpy(got), _numpy(want), **tol)
    w = r.standard_normal(tuple(want.shape)).astype(dtype)
    got_g = symgrad.autograd.grad((got * symgrad.tensor(w)).sum(), got_in, create_graph=True)
    want_g = torch.autograd.grad((want * torch.tensor(w)).sum(), want_in, create_graph=True)
    for g, t in zip(got_g, want_g):
        np.testing.assert_allclose(_numpy(g), _numpy(t), **tol)
    if len(shapes) > 1 and dtype is np.float64:   # einsum is multilinear: second derivatives across operands
        got_h = symgrad.autograd.grad(_cotangent_loss(symgrad, list(got_g), 2), got_in, allow_unused=True)
        want_h = torch.autograd.grad(_cotangent_loss(torch, list(want_g), 2), want_in, allow_unused=True)
        for g, t, a in zip(got_h, want_h, arrays):
            np.testing.assert_allclose(np.zeros(a.shape) if g is None else _numpy(g),
                                       np.zeros(a.shape) if t is None else _numpy(t), **tol)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=["f32", "f64"])
def test_max_pool_with_nan_matches_torch_eagerly(dtype):
    """A window with a nan has the value nan and its gradient goes where torch's does (its last nan)."""
    x = np.array([[[[1.0, np.nan, 3.0], [0.5, 2.0, np.nan], [4.0, -1.0, 0.0]]]], dtype=dtype)
    w = np.array([[[[0.5, -1.0], [2.0, 1.5]]]], dtype=dtype)
    got_x, want_x = symgrad.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    got, want = SF.max_pool2d(got_x, 2, stride=1), TF.max_pool2d(want_x, 2, stride=1)
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    (got * symgrad.tensor(w)).sum().backward()
    (want * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(got_x.grad.numpy(), want_x.grad.numpy())


def test_zero_norm_counts_and_has_a_zero_gradient():
    """ord=0 counts the nonzero entries: LinalgVectorNormBackward0 as in torch, whose gradient is undefined (None);
    symgrad's is zeros eagerly (None when compiled: the count is not differentiable)."""
    x = np.array([[0.0, 1.5, -2.0], [0.0, 0.0, 3.0]])
    got = symgrad.linalg.vector_norm(symgrad.tensor(x, requires_grad=True), 0, dim=1)
    want = torch.linalg.vector_norm(torch.tensor(x, requires_grad=True), 0, dim=1)
    assert type(got.grad_fn).__name__ == type(want.grad_fn).__name__ == "LinalgVectorNormBackward0"
    np.testing.assert_array_equal(got.detach().numpy(), want.detach().numpy())
    (g,) = symgrad.autograd.grad(got.sum(), got.grad_fn.next_functions[0][0].variable)
    np.testing.assert_array_equal(g.numpy(), np.zeros_like(x))


def test_nn_ops_are_decomposed_in_compiled_graphs():
    """A compiled graph holds the compositions (im2col, matmul, reductions), not the eager ops."""
    r = np.random.default_rng(3)
    programs = {
        "convolution": (lambda x, w: SF.conv2d(x, w, padding=1), [r.standard_normal((2, 3, 5, 5)),
                                                                   r.standard_normal((4, 3, 3, 3))]),
        "max_pool2d": (lambda x: SF.max_pool2d(x, 2), [r.standard_normal((2, 3, 4, 4))]),
        "avg_pool2d": (lambda x: SF.avg_pool2d(x, 2), [r.standard_normal((2, 3, 4, 4))]),
        "constant_pad_nd": (lambda x: SF.pad(x, (1, 1)), [r.standard_normal((2, 3))]),
        "reflection_pad2d": (lambda x: SF.pad(x, (1, 1, 2, 0), mode="reflect"), [r.standard_normal((2, 3, 4))]),
        "replication_pad1d": (lambda x: SF.pad(x, (1, 2), mode="replicate"), [r.standard_normal((2, 3))]),
        "embedding": (lambda w: SF.embedding(symgrad.tensor([[0, 2]]), w), [r.standard_normal((3, 2))]),
        "native_layer_norm": (lambda x: SF.layer_norm(x, (3,)), [r.standard_normal((2, 3))]),
        "linalg_vector_norm": (lambda x: symgrad.linalg.vector_norm(x, dim=1), [r.standard_normal((2, 3))]),
        "masked_fill.Tensor": (lambda x: x.masked_fill(x > 0, symgrad.tensor(1.0, dtype=symgrad.float64)),
                               [r.standard_normal((2, 3))]),
        "_scaled_dot_product_flash_attention_for_cpu": (
            lambda q, k, v: SF.scaled_dot_product_attention(q, k, v, is_causal=True),
            [r.standard_normal((1, 2, 3, 4)), r.standard_normal((1, 2, 5, 4)), r.standard_normal((1, 2, 5, 4))]),
    }
    for op, (program, args) in programs.items():
        graph = symgrad.trace(program, *args)
        ops = [n.op for n in graph.nodes]
        assert op not in ops and ops, (op, ops)


def _activations_and_losses(x, y):
    return ((SF.silu(x) + SF.mish(x) + SF.softplus(x, beta=2.0, threshold=3.0) + SF.logsigmoid(x) + SF.hardswish(x)
             + SF.hardsigmoid(x) + SF.selu(x) + SF.celu(x, 0.5) + SF.threshold(x, 0.1, -2.0)).sum()
            + SF.mse_loss(x, y) + SF.binary_cross_entropy_with_logits(x, SF.sigmoid(y))
            + SF.huber_loss(x, y, delta=0.5) + SF.smooth_l1_loss(x, y, reduction="sum"))


@pytest.mark.parametrize("backend", ["numba", "numpy"])
def test_named_activations_and_losses_compile_as_eager(backend):
    """The activations (elementwise rule-table ops) and the losses (decomposed when traced) compiled."""
    r = np.random.default_rng(0)
    xa, ya = r.uniform(-5, 5, (6, 5)), r.standard_normal((6, 5))
    compiled = symgrad.compile(_activations_and_losses, backend=backend)
    x, y = symgrad.tensor(xa, requires_grad=True), symgrad.tensor(ya, requires_grad=True)
    out = compiled(x, y)
    out.backward()
    x2, y2 = symgrad.tensor(xa, requires_grad=True), symgrad.tensor(ya, requires_grad=True)
    want = _activations_and_losses(x2, y2)
    want.backward()
    assert type(out.grad_fn).__name__ == "CompiledFunctionBackward"
    np.testing.assert_allclose(out.item(), want.item(), rtol=1e-12)
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), y2.grad.numpy(), rtol=1e-10, atol=1e-12)
