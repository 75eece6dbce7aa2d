"""The tensorize rule of the design space: a bf16 or int8 product in a tile unit's layout gets a
tensorize sketch on a target whose flags enable the unit and never on one without; a sampled
candidate's trace records the tensorize step, replays into the same kernel, and computes the
product (the interpreter runs the intrinsic's description; C where this CPU has the unit)."""

import numpy as np
import pytest

from ember import te
from ember.intrinsics import cpu_has
from ember.intrinsics.tiles import LANES, product
from ember.target import Target
from ember.tir.schedule import Trace
from ember.tir.structural import structural_equal
from ember.tune.space import design_space, sample, sketch_of
from ember.tune.task import task_from_tensors
from ember.tune.tuner import TaskTuner

M, N, K = 32, 32, 64  # whole tiles of every unit (AMX: 16 rows, K a multiple of 32 bf16 / 64 bytes)
KINDS = {"bf16": ("bfloat16", "bfloat16", "float32", 2), "int8": ("uint8", "int8", "int32", 4)}
SPR = "-O3 -march=sapphirerapids -fopenmp -shared -fPIC -std=gnu11"  # AMX, AVX512-BF16, VNNI: drawn, not run here


@pytest.fixture(scope="module", params=sorted(KINDS))
def task(request):
    a_dtype, b_dtype, acc, g = KINDS[request.param]
    a = te.placeholder((M, K // g, g), a_dtype, name="A")
    b = te.placeholder((N // LANES, K // g, LANES, g), b_dtype, name="Bp")
    return task_from_tensors([a, b, product(a, b, acc)], f"tile_{request.param}")


def tensorize_sketches(task, target):
    return [s.name for s in design_space(task, target) if s.unit is not None]


def test_a_tile_unit_is_offered_only_where_the_target_has_it(task):
    kind = "bf16" if task.name.endswith("bf16") else "u8s8"
    assert tensorize_sketches(task, Target.x86("avx512")) == []  # x86-64-v4: neither BF16 nor VNNI
    amx = {"bf16": ["tensorize:amx_bf16", "tensorize:bf16_avx512"],
           "u8s8": ["tensorize:amx_u8s8", "tensorize:u8s8_vnni"]}[kind]
    assert tensorize_sketches(task, Target(cflags=SPR)) == amx
    # the tuner draws from the sketches of its target
    without = TaskTuner(task, runner=None, target=Target.x86("avx512"))
    assert all(s.unit is None for s in without.search.sketches)
    with_units = TaskTuner(task, runner=None, target=Target(cflags=SPR))
    assert [s.name for s in with_units.search.sketches if s.unit] == amx


def test_a_tensorized_candidate_replays_and_computes_the_product(task):
    rng = np.random.default_rng(7)
    a, b, out = task.random_args(rng)
    g = a.shape[-1]
    want = a.reshape(M, K).astype(np.float64) @ b.transpose(1, 3, 0, 2).reshape(K, N).astype(np.float64)
    targets = [Target(cflags=SPR)] + ([Target()] if cpu_has("avx512_vnni") and cpu_has("avx512_bf16") else [])
    for target in targets:
        sketches = [s for s in design_space(task, target) if s.unit is not None]
        for sketch in sketches:
            sch = sample(task, sketch, seed=3)
            assert [i for i in sch.trace if i.kind == "tensorize"]
            assert sketch_of(design_space(task, target), sch.trace) == sketch
            again = task.schedule(Trace.from_json(sch.trace.to_json()))
            assert structural_equal(again.mod, sch.mod)
            runs_here = target.kind == "c" and not target.missing()
            kernel = task.build(sch.trace, target="c" if runs_here else "python")
            got = np.full_like(out, np.nan if out.dtype.kind == "f" else -1)
            kernel(a, b, got)
            assert got.dtype == out.dtype and g == (2 if got.dtype == np.float32 else 4)
            # bf16 products are exact in fp32; their sums in another order; int8 sums exact
            np.testing.assert_allclose(got.reshape(M, N), want, rtol=1e-5, atol=1e-4 if g == 2 else 0)


def test_a_bf16_models_linear_layer_is_offered_its_unit():
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op
    from ember.tune.extract import extract_tasks

    g = Graph("linear")
    x = g.add_input("x", TensorType((16, 32)))
    w = np.random.default_rng(1).standard_normal((32, 64)).astype(np.float32)
    (y,) = add_op(g, "matmul", [x, g.add_constant(w, "w")])
    g.set_outputs(add_op(g, "relu", [y]))
    [task] = extract_tasks(g, precision="bf16")
    assert tensorize_sketches(task, Target.x86("avx512")) == []
    sketch = next(s for s in design_space(task, Target(cflags=SPR)) if s.unit == "bf16_avx512")
    sch = sample(task, sketch, seed=5)
    assert [i for i in sch.trace if i.kind == "tensorize"]
    args = task.random_args(np.random.default_rng(2))
    want, got = (np.full_like(args[-1], np.nan) for _ in range(2))
    task.build(task.default_trace, target="python")(*args[:-1], want)  # the hand-written tile schedule
    task.build(sch.trace, target="python")(*args[:-1], got)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_an_int8_models_qgemm_is_offered_its_unit():
    """qgemm reads its rows as (M, K), which tensorize walks as the tile's (MR, K / 4, 4)."""
    from ember.graph.core import Graph, TensorType
    from ember.ops.nodes import add_op
    from ember.ops.quantized import pack
    from ember.tune.extract import extract_tasks

    rng = np.random.default_rng(1)
    g = Graph("qlinear")
    x = g.add_input("x", TensorType((16, 64), "uint8"))
    w = g.add_constant(pack(rng.integers(-128, 128, (64, 32), dtype=np.int8)), "w")
    bias = g.add_constant(rng.integers(-1000, 1000, (32,), dtype=np.int32), "bias")
    (y,) = add_op(g, "qgemm", [x, w, bias], {"out_dtype": "int32"})
    g.set_outputs([y])
    [task] = extract_tasks(g)
    assert tensorize_sketches(task, Target.x86("avx512")) == []
    assert tensorize_sketches(task, Target(cflags=SPR)) == ["tensorize:amx_u8s8", "tensorize:u8s8_vnni"]
    a, wp, b, out = task.random_args(np.random.default_rng(2))
    want = a.astype(np.int32) @ wp.transpose(1, 3, 0, 2).reshape(64, 32).astype(np.int32) + b
    for sketch in (s for s in design_space(task, Target(cflags=SPR)) if s.unit):
        sch = sample(task, sketch, seed=5)
        assert [i for i in sch.trace if i.kind == "tensorize"]
        here = sketch.unit == "u8s8_vnni" and cpu_has("avx512_vnni")
        for target in ["python"] + (["c"] if here else []):
            got = np.full_like(out, -1)
            task.build(sch.trace, target=target)(a, wp, b, got)
            np.testing.assert_array_equal(got, want, err_msg=f"{sketch.name} on {target}")
