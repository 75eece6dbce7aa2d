"""Every operator the CPU lowers (the registry) against what the GPU target schedules: each one's
small workload (op_workloads.py) built for the GPU family, run on the interpreter with GPU
semantics against its NumPy reference, and compiled by NVRTC for sm_90 with its loops bound to
blocks and threads; the operators that stay off the GPU are named with the reason, and a model
holding one is a CompileError naming it."""

import numpy as np
import pytest
import torch
from gpu_kernels import needs_nvrtc
from model_cases import SIMULATED
from op_workloads import NOT_ON_GPU, workload

import ember
from ember.cuda.simt import is_gpu_kernel
from ember.errors import CompileError
from ember.graph.core import TensorType
from ember.ops import all_ops
from ember.ops.registry import infer_types
from ember.schedules.apply import node_kernel
from ember.target import Target
from ember.testing import check_op

ON_GPU = sorted(set(all_ops()) - set(NOT_ON_GPU))


def test_every_operator_has_a_gpu_workload_or_a_reason_to_stay_off():
    assert set(NOT_ON_GPU) <= set(all_ops())
    for op in ON_GPU:
        workload(op, np.random.default_rng(0))  # (a KeyError names an operator without one)


@needs_nvrtc
@pytest.mark.parametrize("op", ON_GPU)
def test_the_operator_runs_on_the_gpu_family(op):
    inputs, attrs, tol = workload(op, np.random.default_rng(17))
    check_op(op, inputs, attrs, rtol=tol, atol=tol, targets=[Target("python", schedules="gpu")])
    types = [TensorType(x.shape, x.dtype.name) for x in inputs]
    bound, outs = infer_types(op, types, attrs)
    s, args = node_kernel(op, types, bound, outs, target=Target("cuda"))
    f = ember.build(s, args, target="cuda", arch="sm_90")
    assert f.binary[:4] == b"\x7fELF" and is_gpu_kernel(f.func), f"{op}: its loops are bound to no block or thread"


@needs_nvrtc
@pytest.mark.parametrize("precision", ["fp32", "fp16"])
def test_a_model_with_an_operator_off_the_gpu_is_a_compile_error_naming_it(precision):
    model = torch.nn.LSTM(4, 3).eval()
    with pytest.raises(CompileError, match=r"lstm.*has no GPU schedule"):  # (in fp16 too: a cell takes float32)
        ember.compile(model, (torch.randn(2, 1, 4),), target=SIMULATED, precision=precision)
