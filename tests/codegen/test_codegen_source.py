"""The text that code generation writes: signatures, pragmas, names, allocations, and the errors
for functions that are not lowered."""

from __future__ import annotations

import re

import numpy as np
import pytest
from ir_builders import Var, bcast, buf, const, func, load, loop, ramp, rand, store

from ember.codegen.c import codegen_c
from ember.codegen.python import codegen_python, load_python
from ember.errors import LowerError
from ember.runtime.build import build_library
from ember.runtime.module import build_c, build_c_module
from ember.tir.expr import Binary, BufferLoad
from ember.tir.stmt import Allocate, Block, BufferStore, seq


def _vadd(kind="parallel"):
    n, i = Var("n"), Var("i")
    A, B, C = buf("A", [n]), buf("B", [n]), buf("C", [n])
    return func("vadd", [A, B, C], loop(i, n, store(C, i, load(A, i) + load(B, i)), kind=kind))


def test_signature_restrict_const_and_parallel_pragma():
    src = codegen_c(_vadd())
    assert ("void vadd(const float* restrict A, const float* restrict B, float* restrict C, int64_t n) {"
            in src)
    assert "#pragma omp parallel for schedule(static) if(n >= 16384)\n  for (int64_t i = 0; i < n; ++i) {" in src
    assert "    C[i] = A[i] + B[i];" in src
    assert ("void ember_launch_vadd(void* ember_p0, void* ember_p1, void* ember_p2, int64_t ember_s0, "
            "int ember_threads) {\n"
            "  const int ember_threads_before __attribute__((cleanup(ember_leave_threads))) = "
            "ember_enter_threads(ember_threads);\n"
            "  vadd(ember_p0, ember_p1, ember_p2, ember_s0);\n}" in src)
    assert src.count("static inline int ember_enter_threads(int n) {") == 1


def test_launchers_pass_every_argument_and_hide_no_kernel():
    """Kernels named like a launcher's parameters and locals, checked (the status pointer comes
    last, before the threads): each launcher calls its own kernel with its own arguments."""
    n, i = Var("n"), Var("i")
    funcs = []
    for k, name in enumerate(["num_threads", "p0", "threads_before", "ember_threads"]):
        A, B, Q = buf("A", [n], "int32"), buf("B", [n], "int32"), buf("Q", [n], "int32")
        funcs.append(func(name, [A, B, Q], loop(i, n, store(Q, i, load(A, i) // load(B, i) + k), kind="parallel")))
    kernels = build_c_module(funcs, checked=True, num_threads=2)
    src = kernels["p0"].source
    assert "void ember_launch_p0(void* ember_p0, void* ember_p1, void* ember_p2, int64_t ember_s0, " \
           "int64_t* ember_status, int ember_threads) {" in src
    assert "  p0(ember_p0, ember_p1, ember_p2, ember_s0, ember_status);" in src
    rng = np.random.default_rng()
    a, b = rng.integers(-50, 50, 37).astype("int32"), rng.integers(1, 9, 37).astype("int32")
    for k, f in enumerate(funcs):
        q = np.zeros(37, "int32")
        kernels[f.name](a, b, q)
        np.testing.assert_array_equal(q, a // b + k)
    b[3] = 0
    with pytest.raises(ZeroDivisionError, match="kernel ember_threads"):
        kernels["ember_threads"](a, b, np.zeros(37, "int32"))


def test_only_the_outermost_parallel_loop_is_parallel():
    i, j, k = Var("i"), Var("j"), Var("k")
    A = buf("A", [64 * 64 * 4])
    inner = loop(k, 4, store(A, i * 256 + j * 4 + k, 1.0), kind="parallel")
    src = codegen_c(func("nest", [A], loop(i, 64, loop(j, 64, inner, kind="parallel"), kind="parallel")))
    assert src.count("#pragma omp parallel for") == 1
    # nor inside an omp simd loop, where OpenMP forbids it
    src = codegen_c(func("simd", [A], loop(i, 4, loop(j, 16, store(A, i * 16 + j, 1.0), kind="parallel"),
                                          kind="vectorized")))
    assert "#pragma omp simd" in src and "#pragma omp parallel" not in src


@pytest.mark.parametrize("extent, inner, pragma", [
    (4, 4, None),  # 16 stores: a parallel region costs more than the work it spreads
    (4096, 4, "#pragma omp parallel for schedule(static)\n"),  # 16384 stores
    ("n", 4, "#pragma omp parallel for schedule(static) if(n >= 4096)\n"),  # decided at run time
    ("n", "n", "#pragma omp parallel for schedule(static)\n"),  # unknown work: parallel
])
def test_a_parallel_loop_over_little_work_runs_serially(extent, inner, pragma):
    n, i, j = Var("n"), Var("i"), Var("j")
    sizes = {"n": n}
    outer, width = sizes.get(extent, extent), sizes.get(inner, inner)
    A = buf("A", [outer * width])
    src = codegen_c(func("small", [A], loop(i, outer, loop(j, width, store(A, i * width + j, 1.0)),
                                            kind="parallel")))
    if pragma is None:
        assert "#pragma omp parallel" not in src
    else:
        assert f"{pragma}  for (int64_t i = 0; i < " in src


def test_unroll_and_simd_pragmas():
    n, i, j = Var("n"), Var("i"), Var("j")
    A = buf("A", [n])
    src = codegen_c(func("u", [A], loop(i, 4, store(A, i, 1.0), kind="unrolled"),
                         loop(j, n, store(A, j, 2.0), kind="unrolled")))
    assert "#pragma GCC unroll 4\n" in src and "#pragma GCC unroll 8\n" in src
    assert "#pragma omp simd\n  for (int64_t i" in codegen_c(_vadd("vectorized"))


def test_distinct_variables_get_distinct_names():
    i1, i2, i3 = Var("i"), Var("i"), Var("i.x")
    A = buf("A", [16])
    f = func("names", [A], loop(i1, 4, loop(i2, 4, store(A, i1 * 4 + i2, 1.0))),
             loop(i3, 16, store(A, i3, 2.0)))
    src = codegen_c(f)
    assert "for (int64_t i = 0; i < 4; ++i)" in src and "for (int64_t i_1 = 0; i_1 < 4; ++i_1)" in src
    assert "A[i * 4 + i_1] = 1.0f;" in src and "for (int64_t i_x = 0;" in src
    assert "for i_1 in range(4):" in codegen_python(f)


def test_reserved_names_are_renamed():
    A = buf("free", [4])
    f = func("exp", [A], store(A, 0, 1.0))
    src = codegen_c(f)
    assert "void exp_v(float* restrict free_v)" in src
    assert "def exp(free):" in codegen_python(f)  # not reserved in Python


def test_allocations_stack_and_heap():
    """Local scratch up to 64 KiB and any buffer up to 1 KiB on the stack, the rest on the heap."""
    n = Var("n")
    A = buf("A", [n])
    small, big = buf("S", [4, 4], scope="local"), buf("L", [20000], scope="local")
    glob, glob_big, sym = buf("G", [8]), buf("H", [1024]), buf("Y", [n, 3], "float16", scope="local")
    body = store(A, 0, load(small, 0) + load(big, 0) + load(glob, 0) + load(glob_big, 0) + load(sym, 0))
    src = codegen_c(func("alloc", [A], Allocate(small, Allocate(big, Allocate(glob, Allocate(glob_big, Allocate(
        sym, body)))))))
    assert "float S[16] __attribute__((aligned(64)));" in src and "float G[8] __attribute__((aligned(64)));" in src
    assert "float* restrict L = (float*)aligned_alloc(64, ember_padded_bytes(20000, sizeof(float)));" in src
    assert "float* restrict H = (float*)aligned_alloc(64" in src
    assert "Y = (_Float16*)aligned_alloc(64, ember_padded_bytes(n * 3, sizeof(_Float16)))" in src
    assert all(f"free({b});" in src for b in "LHY") and "free(S)" not in src and "free(G)" not in src


def test_vector_types_and_helpers_only_when_used():
    src = codegen_c(_vadd())
    assert "typedef" not in src  # and no helper but the launcher's
    assert re.findall(r"static inline \w+ (\w+)\(", src) == ["ember_enter_threads", "ember_leave_threads"]
    i = Var("i")
    A, C = buf("A", [24]), buf("C", [24])
    r = ramp(i * 3, 1, 3)
    src = codegen_c(func("v3", [A, C], loop(i, 8, store(C, r, load(A, r) * bcast(2.0, 3)))))
    assert "typedef float float32x3 __attribute__((vector_size(16)));" in src  # padded to 4 lanes
    assert "ember_store_float32x3(C + i * 3, ember_load_float32x3(A + i * 3) * ember_broadcast_" in src


def test_literals():
    C, D = buf("C", [3]), buf("D", [2], "int64")
    f = func("lits", [C, D], store(C, 0, const(0.1, "float32")), store(C, 1, const(float("-inf"), "float32")),
             store(C, 2, const(1e-3, "float16")),
             store(D, 0, Binary("*", const(65536), const(65536), "int64")), store(D, 1, const(-2**63)))
    src = codegen_c(f)
    assert "C[0] = 0.10000000149011612f;" in src and "C[1] = -INFINITY;" in src
    assert "C[2] = 0.0010004043579101562f;" in src  # the float16 nearest 1e-3
    assert "D[0] = (int64_t)65536 * 65536;" in src and "D[1] = INT64_MIN;" in src
    c, d = rand(3), np.zeros(2, "int64") + 5
    build_c(f)(c, d)
    assert d.tolist() == [2**32, -2**63]
    assert c[2] == np.float32(np.float16(1e-3))


def test_generated_c_is_warning_free():
    """A unit that uses most helpers compiles cleanly under -Wall -Werror."""
    i, v = Var("i"), Var("v")
    A, I, M = buf("A", [64]), buf("I", [64], "int32"), buf("M", [64], "bool")
    H = buf("H", [64], "float16")
    r, g = ramp(v * 8, 1, 8), ramp(v * 4, 2, 8)
    f = func("everything", [A, I, M, H], loop(v, 4, seq(
        store(A, r, Binary("max", load(A, g), bcast(0.0, 8), "float32x8") // bcast(0.5, 8)),
        store(I, r, load(I, r) % bcast(const(3, "int32"), 8)),
        store(M, r, (load(A, r) < bcast(1.0, 8)) & ~load(M, r)),
        store(H, g, load(H, r) + load(A, r)),
    )), loop(i, 64, store(A, i, Binary("min", load(A, i) % 2.0, load(A, i) // 3.0, "float32"))))
    build_library(codegen_c(f), cflags="-O2 -march=native -fopenmp -shared -fPIC -std=gnu11 -Wall -Werror")


def _unlowered_cases():
    i = Var("i")
    A, B = buf("A", [4, 4]), buf("B", [4])
    block = Block("b", (), (), (), store(B, 0, 1.0))
    stray = buf("stray", [4])
    return {
        "Block": func("f", [A, B], block),
        "2 indices": func("f", [A, B], BufferStore(A, const(1.0), (const(0), const(1)))),
        "neither a parameter": func("f", [A, B], store(B, 0, BufferLoad(stray, (const(0),), "float32"))),
        "variable i": func("f", [A, B], store(B, i, 1.0)),
    }


@pytest.mark.parametrize("what", list(_unlowered_cases()))
@pytest.mark.parametrize("codegen", [codegen_c, codegen_python])
def test_functions_that_are_not_lowered_are_rejected(codegen, what):
    with pytest.raises(LowerError, match=what):
        codegen(_unlowered_cases()[what])


def test_two_kernels_with_one_name_are_rejected():
    with pytest.raises(ValueError, match="both be called 'vadd'"):
        codegen_c([_vadd(), _vadd()])


def test_interpreter_tracebacks_show_the_generated_line():
    i = Var("i")
    A = buf("A", [4])
    f = func("oob", [A], loop(i, 5, store(A, i, 1.0)))
    kernel = load_python(codegen_python(f), f)
    with pytest.raises(IndexError) as info:
        kernel(np.zeros(4, "float32"))
    assert re.search(r"A\[i\] = f32\(1\.0\)", "".join(info.traceback[-1].statement.lines))
