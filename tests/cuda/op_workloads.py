"""A small workload of every operator the CPU lowers (ember.ops.all_ops), for the enumeration of
the GPU's schedules (test_gpu_every_op.py): `workload(op, rng)` is (inputs, attributes,
tolerance). Element-wise and broadcast operators without attributes take a generic
one; the rest are listed in CASES. NOT_ON_GPU names the operators that stay off the GPU, and why."""

import numpy as np

from ember.ops.registry import get
from ember.testing import random_array

# op -> why no GPU kernel of it is enumerated
NOT_ON_GPU = {
    "if": "control flow: the CUDA backend refuses a model with it at compile time",
    "loop": "control flow: the CUDA backend refuses a model with it at compile time",
    "nonzero": "a data-dependent output size (its length a symbol bound by the values)",
    "unique": "a data-dependent output size (its length a symbol bound by the values)",
    "non_max_suppression": "a data-dependent output size (its length a symbol bound by the values)",
    "bincount": "a data-dependent output size (its length a symbol bound by the values)",
    # made only by the CPU's target graph passes, which the CUDA backend does not run
    "avg_pool2d_nchwc": "a blocked layout of the CPU's layout pass",
    "max_pool2d_nchwc": "a blocked layout of the CPU's layout pass",
    "conv2d_nchwc": "a blocked layout of the CPU's layout pass",
    "conv2d_nchwc_bf16": "a blocked layout of the CPU's layout pass (AVX-512 BF16)",
    "layout_transform": "a blocked layout of the CPU's layout pass",
    "conv2d_winograd": "the CPU's Winograd pass",
    "gemm_bf16": "the CPU's bf16 weight packing (AVX-512 BF16)",
    "gemm_nbits": "weight-only quantized weights, which target 'cuda' refuses (weights=)",
    "qconv": "int8 quantized models, which target 'cuda' does not compile",
    "qdepthwise": "int8 quantized models, which target 'cuda' does not compile",
    "qgemm": "int8 quantized models, which target 'cuda' does not compile",
    "quantize_rows": "int8 quantized models, which target 'cuda' does not compile",
    "quantize_groups": "int8 quantized models, which target 'cuda' does not compile",
    "im2col": "int8 quantized convolutions (qconv's columns), which target 'cuda' does not compile",
    "kv_int8_rows": "the CPU decode's int8 key/value cache",
    "lstm": "recurrent: a time loop whose steps each read the whole previous state (a kernel of one block, not "
            "written yet): a model with one is a CompileError naming it",
    "gru": "recurrent (as lstm)",
    "rnn": "recurrent (as lstm)",
    "size": "a dimension's value needs symbolic input types, which these workloads' arrays are not: "
            "test_gpu_scalars.py runs it (a scalar on one thread) in a model over a symbolic batch",
    "scaled_dot_product_attention": "unfolded on the GPU (ember.passes.unfold_attention): flash_attention or "
                                    "matmul, softmax, matmul",
}

FLOAT_DOMAINS = {  # element-wise operators defined on part of the line: (offset, scale) of [-1, 1)
    "acosh": (2.0, 0.9), "log": (1.1, 1.0), "sqrt": (1.1, 1.0), "rsqrt": (1.1, 1.0), "reciprocal": (2.0, 0.5),
    "acos": (0.0, 0.9), "asin": (0.0, 0.9), "atanh": (0.0, 0.9),
}
INTEGER = {"bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "mod", "floor_divide", "trunc_divide"}
BOOLEAN = {"logical_and", "logical_or", "logical_not"}
EXACT, TOL = 0.0, 1e-4


def _f(rng, *shape, dtype="float32"):
    return random_array(shape, dtype, rng)


def _ints(rng, *shape, hi=5, dtype="int64"):
    return rng.integers(0, hi, size=shape).astype(dtype)


def _conv(rng, x, w, b=True):
    return [_f(rng, *x), _f(rng, *w)] + ([_f(rng, w[0])] if b else [])


CASES = {  # op -> lambda rng: (inputs, attributes[, tolerance])
    "adaptive_avg_pool2d": lambda r: ([_f(r, 1, 2, 7, 6)], {"output_size": (3, 4)}),
    "arange": lambda r: ([], {"length": 7, "start": 2, "step": 3}),
    "argmax": lambda r: ([_f(r, 3, 20)], {"axis": 1}),
    "argmin": lambda r: ([_f(r, 3, 5, 4)], {"axis": 1, "keepdims": True}),
    "avg_pool1d": lambda r: ([_f(r, 1, 2, 9)], {"kernel": (3,), "strides": (2,), "padding": (1, 1)}),
    "avg_pool2d": lambda r: ([_f(r, 1, 2, 7, 7)], {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    "avg_pool3d": lambda r: ([_f(r, 1, 1, 4, 4, 4)], {"kernel": (2, 2, 2), "strides": (2, 2, 2)}),
    "batch_norm": lambda r: ([_f(r, 1, 3, 4, 4), _f(r, 3), _f(r, 3) + 2, _f(r, 3), _f(r, 3)], {}),  # x, mean, var, ..
    "bitcast": lambda r: ([_f(r, 3, 8)], {"dtype": "int32"}, EXACT),
    "cast": lambda r: ([_f(r, 3, 8) * 10], {"dtype": "int32"}, EXACT),
    "clip": lambda r: ([_f(r, 3, 8)], {"min": -0.5, "max": 0.25}),
    "concat": lambda r: ([_f(r, 2, 3), _f(r, 2, 5)], {"axis": 1}, EXACT),
    "conv1d": lambda r: (_conv(r, (1, 2, 9), (3, 2, 3)), {"padding": (1, 1)}),
    "conv2d": lambda r: (_conv(r, (1, 2, 6, 6), (4, 2, 3, 3)), {"strides": (2, 2), "padding": (1, 1, 1, 1)}),
    "conv2d_gemm": lambda r: (_conv(r, (1, 2, 6, 6), (4, 18)), {"kernel": (3, 3), "padding": (1, 1, 1, 1)}),
    "conv2d_gemm_partials": lambda r: (_conv(r, (1, 2, 6, 6), (2, 1, 4, 9), b=False), {"kernel": (3, 3)}),
    "conv2d_nhwc_gemm": lambda r: (_conv(r, (1, 6, 6, 8), (4, 72)), {"kernel": (3, 3), "padding": (1, 1, 1, 1)}),
    "conv2d_nhwc_gemm_partials": lambda r: (_conv(r, (1, 6, 6, 8), (2, 1, 4, 36), b=False), {"kernel": (3, 3)}),
    "max_pool2d_nhwc": lambda r: ([_f(r, 1, 7, 7, 8)], {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    "avg_pool2d_nhwc": lambda r: ([_f(r, 1, 7, 6, 8)], {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1),
                                                         "count_include_pad": False, "ceil_mode": True}),
    "depthwise_conv2d_nhwc": lambda r: ([_f(r, 1, 6, 6, 8), _f(r, 3, 3, 8), _f(r, 8)],
                                        {"kernel": (3, 3), "strides": (2, 2), "padding": (1, 1, 1, 1)}),
    "conv3d": lambda r: (_conv(r, (1, 2, 4, 4, 4), (3, 2, 2, 2, 2)), {}),
    "conv_transpose2d": lambda r: (_conv(r, (1, 2, 4, 4), (2, 3, 3, 3), b=False) + [_f(r, 3)], {"strides": (2, 2)}),
    "conv_transpose3d": lambda r: (_conv(r, (1, 2, 3, 3, 3), (2, 2, 2, 2, 2)), {"strides": (2, 2, 2)}),
    "cumprod": lambda r: ([1 + _f(r, 3, 40) / 10], {"axis": 1, "exclusive": True}),
    "cumsum": lambda r: ([_f(r, 3, 40)], {"axis": 1, "reverse": True}),
    "deform_conv2d": lambda r: ([_f(r, 1, 2, 5, 5), _f(r, 2, 2, 3, 3), _f(r, 1, 18, 3, 3)], {}),
    "det": lambda r: ([_f(r, 2, 3, 3)], {}),
    "dynamic_slice": lambda r: ([_f(r, 4, 6), np.array([1, 2], "int64")], {"axes": (0, 1), "sizes": (2, 3)}, EXACT),
    "elu": lambda r: ([_f(r, 3, 8)], {"alpha": 0.5}),
    "embedding": lambda r: ([_f(r, 10, 4), _ints(r, 2, 3, hi=10)], {}, EXACT),
    "expand": lambda r: ([_f(r, 3, 1)], {"shape": (2, 3, 4)}, EXACT),
    "flash_attention": lambda r: ([_f(r, 1, 2, 5, 8), _f(r, 1, 2, 6, 8), _f(r, 1, 2, 6, 8)], {}),
    "flatten": lambda r: ([_f(r, 2, 3, 4)], {}, EXACT),
    "gather": lambda r: ([_f(r, 10, 6), np.array([3, -1, 9], "int64")], {"axis": 0}, EXACT),
    "gather_elements": lambda r: ([_f(r, 4, 5), _ints(r, 4, 3, hi=5)], {"axis": 1}, EXACT),
    "gather_nd": lambda r: ([_f(r, 4, 5, 3), _ints(r, 2, 2, hi=4)], {}, EXACT),
    "gelu": lambda r: ([_f(r, 3, 8)], {"approximate": "tanh"}),
    "gemm": lambda r: ([_f(r, 5, 7), _f(r, 7, 3), _f(r, 3)], {}),
    "gemm_partials": lambda r: ([_f(r, 5, 8), _f(r, 2, 3, 4)], {}),
    "global_avg_pool": lambda r: ([_f(r, 1, 3, 5, 5)], {}),
    "grid_sample": lambda r: ([_f(r, 1, 2, 4, 5), _f(r, 1, 3, 3, 2)], {}),
    "group_norm": lambda r: ([_f(r, 1, 4, 3, 3), _f(r, 4), _f(r, 4)], {"num_groups": 2}),
    "grouped_matmul": lambda r: ([_f(r, 6, 4), _f(r, 2, 4, 3), np.array([2, 6], "int64")], {}),
    "histc": lambda r: ([_f(r, 30)], {"bins": 6, "min": -1.0, "max": 1.0}, EXACT),
    "instance_norm": lambda r: ([_f(r, 1, 3, 4, 4), _f(r, 3), _f(r, 3)], {}),
    "l2_norm": lambda r: ([_f(r, 3, 8)], {"axes": (1,)}),
    "layer_norm": lambda r: ([_f(r, 3, 16), _f(r, 16), _f(r, 16)], {}),
    "leaky_relu": lambda r: ([_f(r, 3, 8)], {"alpha": 0.2}),
    "log_softmax": lambda r: ([_f(r, 3, 16)], {}),
    "matmul": lambda r: ([_f(r, 2, 5, 7), _f(r, 7, 3)], {}),
    "max": lambda r: ([_f(r, 3, 8)], {"axes": (1,)}),
    "max_pool1d": lambda r: ([_f(r, 1, 2, 9)], {"kernel": (3,), "strides": (2,)}),
    "max_pool2d": lambda r: ([_f(r, 1, 2, 6, 6)], {"kernel": (2, 2), "strides": (2, 2)}),
    "max_pool3d": lambda r: ([_f(r, 1, 1, 4, 4, 4)], {"kernel": (2, 2, 2), "strides": (2, 2, 2)}),
    "max_pool_indices": lambda r: ([_f(r, 1, 2, 6, 6)], {"kernel": (2, 2), "strides": (2, 2)}, EXACT),
    "mean": lambda r: ([_f(r, 3, 8)], {"axes": (0,)}),
    "min": lambda r: ([_f(r, 3, 8)], {"axes": (1,), "keepdims": True}),
    "pad": lambda r: ([_f(r, 3, 4)], {"pads": (1, 0, 0, 2)}, EXACT),
    "pow": lambda r: ([_f(r, 3, 8) + 2, _f(r, 8)], {}),
    "prod": lambda r: ([1 + _f(r, 3, 8) / 4], {"axes": (1,)}),
    "reshape": lambda r: ([_f(r, 2, 6)], {"shape": (3, 4)}, EXACT),
    "resize": lambda r: ([_f(r, 1, 2, 3, 4)], {"sizes": (1, 2, 5, 7), "mode": "linear"}),
    "rms_norm": lambda r: ([_f(r, 3, 16), _f(r, 16)], {}),
    "roi_align": lambda r: ([_f(r, 1, 2, 6, 6), np.array([[0.5, 0.5, 4.0, 3.5]], "float32"), np.array([0], "int64")],
                            {"output_height": 2, "output_width": 2, "sampling_ratio": 2}),
    "reduce_parts": lambda r: ([_f(r, 300)], {"kind": "max", "parts": 7}),
    "round_tf32": lambda r: ([_f(r, 3, 8)], {}, EXACT),
    "scatter_elements": lambda r: ([_f(r, 5, 4), np.array([[1, 0, 2, 3], [4, 1, 0, 2]], "int64"), _f(r, 2, 4)],
                                   {"axis": 0}, EXACT),
    "scatter_nd": lambda r: ([_f(r, 5, 3), np.array([[4], [1]], "int64"), _f(r, 2, 3)], {}, EXACT),
    "slice": lambda r: ([_f(r, 5, 6)], {"starts": (1, 0), "ends": (4, 6), "axes": (0, 1), "steps": (2, 3)}, EXACT),
    "softmax": lambda r: ([_f(r, 3, 16)], {}),
    "softplus": lambda r: ([_f(r, 3, 8) * 30], {}),
    "split": lambda r: ([_f(r, 2, 7)], {"axis": 1, "sizes": (3, 4)}, EXACT),
    "squeeze": lambda r: ([_f(r, 2, 1, 3)], {"axes": (1,)}, EXACT),
    "std": lambda r: ([_f(r, 3, 8)], {"axes": (1,), "correction": 1}),
    "sum": lambda r: ([_f(r, 3, 8)], {"axes": (1,)}),
    "sum_partials": lambda r: ([_f(r, 3, 4, 5)], {}),
    "tensor_scatter": lambda r: ([_f(r, 1, 2, 8, 4), _f(r, 1, 2, 3, 4), np.array([2], "int64")], {}, EXACT),
    "topk": lambda r: ([_f(r, 3, 10)], {"k": 3}, EXACT),
    "transpose": lambda r: ([_f(r, 3, 5, 7)], {"perm": (2, 0, 1)}, EXACT),
    "unsqueeze": lambda r: ([_f(r, 3, 5)], {"axes": (1,)}, EXACT),
    "var": lambda r: ([_f(r, 3, 8)], {"axes": (1,)}),
    "where": lambda r: ([r.random((3, 8)) < 0.5, _f(r, 3, 8), _f(r, 8)], {}, EXACT),
}


def workload(op: str, rng: np.random.Generator):
    """(inputs, attributes, tolerance) of a small application of `op`."""
    if op in CASES:
        inputs, attrs, *tol = CASES[op](rng)
        return inputs, attrs, tol[0] if tol else TOL
    pattern, (least, _) = get(op).pattern, get(op).num_inputs
    if pattern not in ("elementwise", "broadcast") or get(op).attrs:
        raise KeyError(f"no workload of operator {op!r}: add one to CASES or NOT_ON_GPU")
    if op in BOOLEAN:
        inputs = [rng.random((3, 8)) < 0.5, rng.random((8,)) < 0.5]
    elif op in INTEGER:
        inputs = [_ints(rng, 3, 8, hi=50, dtype="int32") - 25, _ints(rng, 8, hi=9, dtype="int32") + 1]
    else:
        offset, scale = FLOAT_DOMAINS.get(op, (0.0, 1.0))
        inputs = [(offset + scale * _f(rng, 3, 8)).astype("float32"), _f(rng, 8) + (2 if op in ("div",) else 0)]
    return inputs[:least], {}, EXACT if op in INTEGER | BOOLEAN else TOL
