"""@triton.autotune, @triton.heuristics and triton.testing: the fastest config is chosen once per
key and kept (in memory, and in a tuning database when one is given); reset_to_zero and
restore_value keep the timing runs from changing the result; pruning; and the helpers."""

import time

import numpy as np
import pytest
from tile_modes import MODES, launch_mode

import ember.triton as triton
import ember.triton.language as tl
from ember.errors import ConfigError, TuneError
from ember.target import Target, as_target, machine_features


def slow(seconds):
    """A config pre_hook that makes the config slow."""
    return lambda nargs: time.sleep(seconds)


def counting_bench(calls):
    """A do_bench that times one call after a first one (which may compile), and counts the
    benchmarks."""
    def do_bench(fn, quantiles):
        calls.append(1)
        fn()
        start = time.perf_counter()
        fn()
        t = (time.perf_counter() - start) * 1e3
        return [t] * len(quantiles)

    return do_bench


def accumulate_kernel_tuned(configs, calls, **options):
    @triton.autotune(configs=configs, key=["n"], do_bench=counting_bench(calls), **options)
    @triton.jit
    def accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.atomic_add(out_ptr + offs, tl.load(x_ptr + offs, mask=mask), mask=mask)

    return accumulate


def grid(meta):
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


CONFIGS = [triton.Config({"BLOCK": 16}, pre_hook=slow(0.03)), triton.Config({"BLOCK": 64}, num_warps=8),
           triton.Config({"BLOCK": 32}, pre_hook=slow(0.03))]


@pytest.mark.parametrize("mode", MODES)
def test_the_fastest_config_is_chosen_once_per_key(rng, mode):
    calls = []
    kernel = accumulate_kernel_tuned(CONFIGS, calls, reset_to_zero=["out_ptr"])
    with launch_mode(mode):
        for n in (100, 100, 37, 100):
            x, out = rng.standard_normal(n, dtype=np.float32), np.zeros(n, np.float32)
            kernel[grid](x, out, n)
            np.testing.assert_array_equal(out, x)  # reset_to_zero: timing runs left nothing behind
            assert kernel.best_config is CONFIGS[1]
    assert len(calls) == 2 * len(CONFIGS)  # n=100 and n=37 tuned once each
    assert len(kernel.cache) == 2
    assert set(kernel.configs_timings) == set(CONFIGS)


def test_a_key_includes_the_dtypes(rng):
    calls = []
    kernel = accumulate_kernel_tuned(CONFIGS, calls, reset_to_zero=["out_ptr"])
    with launch_mode("interpret"):
        for dtype in ("float32", "float64", "float32"):
            kernel[grid](np.ones(50, dtype), np.zeros(50, dtype), 50)
    assert len(calls) == 2 * len(CONFIGS)


def test_restore_value_puts_the_arguments_back(rng):
    calls = []
    kernel = accumulate_kernel_tuned(CONFIGS, calls, restore_value=["out_ptr"])
    x, out = rng.standard_normal(70, dtype=np.float32), rng.standard_normal(70, dtype=np.float32)
    start = out.copy()
    with launch_mode("interpret"):
        kernel[grid](x, out, 70)
    np.testing.assert_allclose(out, start + x, rtol=1e-6)


def test_without_reset_the_timing_runs_accumulate(rng):
    calls = []
    kernel = accumulate_kernel_tuned(CONFIGS, calls)
    x, out = np.ones(40, np.float32), np.zeros(40, np.float32)
    with launch_mode("interpret"):
        kernel[grid](x, out, 40)
    assert (out == 2 * len(CONFIGS) + 1).all()  # two calls per config timed, then the launch


def test_prune_configs_by():
    calls, seen = [], []

    def early(configs, nargs, **kwargs):
        seen.append(sorted(nargs))
        return [c for c in configs if c.kwargs["BLOCK"] <= 32]

    def perf_model(**kwargs):
        return -kwargs["BLOCK"]  # predicts the largest block fastest

    kernel = accumulate_kernel_tuned(CONFIGS, calls, reset_to_zero=["out_ptr"],
                                     prune_configs_by={"early_config_prune": early, "perf_model": perf_model,
                                                       "top_k": 1})
    with launch_mode("interpret"):
        kernel[grid](np.ones(30, np.float32), np.zeros(30, np.float32), 30)
    assert seen == [["n", "out_ptr", "x_ptr"]]
    assert len(calls) == 1 and kernel.best_config is CONFIGS[2]


def test_a_config_that_fails_times_as_infinite_and_all_failing_is_an_error():
    @triton.autotune(configs=[triton.Config({"BLOCK": 8}), triton.Config({"BLOCK": 16})], key=[], warmup=1, rep=1)
    @triton.jit
    def k(out_ptr, BLOCK: tl.constexpr):
        tl.static_assert(BLOCK >= 16, "BLOCK too small")
        tl.store(out_ptr + tl.arange(0, BLOCK), tl.full((BLOCK,), 1.0, tl.float32))

    out = np.zeros(16, np.float32)
    with launch_mode("interpret"):
        k[(1,)](out)
    assert k.best_config.kwargs == {"BLOCK": 16}

    @triton.autotune(configs=[triton.Config({"BLOCK": 2}), triton.Config({"BLOCK": 4})], key=[], warmup=1, rep=1)
    @triton.jit
    def never(out_ptr, BLOCK: tl.constexpr):
        tl.static_assert(BLOCK >= 16, "BLOCK too small")

    with launch_mode("interpret"), pytest.raises(TuneError, match="every config failed"):
        never[(1,)](out)


def test_auto_tuned_parameters_are_not_passed_at_the_launch():
    kernel = accumulate_kernel_tuned(CONFIGS, [])
    with launch_mode("interpret"), pytest.raises(ConfigError, match=r"\['BLOCK'\] are given at the launch"):
        kernel[grid](np.ones(4, np.float32), np.zeros(4, np.float32), 4, BLOCK=16)


def test_an_unknown_key_is_refused():
    with pytest.raises(ConfigError, match=r"\['size'\] are not parameters"):
        accumulate_kernel_tuned(CONFIGS, [], reset_to_zero=["size"])


@pytest.mark.parametrize("mode", MODES)
def test_the_tuning_database_keeps_the_choice_for_a_new_process(tmp_path, rng, mode):
    from ember.tune import Database

    path = tmp_path / "tile.db"
    first_calls = []
    with launch_mode(mode):
        first = accumulate_kernel_tuned(CONFIGS, first_calls, reset_to_zero=["out_ptr"], database=str(path))
        first[grid](np.ones(90, np.float32), np.zeros(90, np.float32), 90)
        assert len(first_calls) == len(CONFIGS)
        # another autotuner of the same kernel (as a new process builds it) reads the choice back
        second_calls = []
        second = accumulate_kernel_tuned(CONFIGS, second_calls, reset_to_zero=["out_ptr"], database=str(path))
        x, out = rng.standard_normal(90, dtype=np.float32), np.zeros(90, np.float32)
        second[grid](x, out, 90)
        assert second_calls == [] and second.best_config.kwargs == {"BLOCK": 64}
        np.testing.assert_array_equal(out, x)
        # a key never tuned is timed
        second[grid](np.ones(91, np.float32), np.zeros(91, np.float32), 91)
        assert len(second_calls) == len(CONFIGS)
    with Database(path) as db:
        workloads = db.workloads()
        assert len(workloads) == 2 and all(w.name == "triton.autotune:accumulate" for w in workloads)
        assert len(db) == 2 * len(CONFIGS)


@pytest.mark.skipif(not {"avx2", "fma"} <= (machine_features() or frozenset()), reason="this machine lacks AVX2")
def test_the_choice_is_kept_per_launch_target(tmp_path, rng):
    from ember.tune import Database

    path, calls, avx2 = tmp_path / "tile.db", [], Target.x86("avx2")
    with launch_mode("compile"):
        tuned = accumulate_kernel_tuned(CONFIGS, calls, reset_to_zero=["out_ptr"], database=str(path))
        tuned[grid](np.ones(90, np.float32), np.zeros(90, np.float32), 90)
        x, out = rng.standard_normal(90, dtype=np.float32), np.zeros(90, np.float32)
        tuned[grid](x, out, 90, target=avx2)  # the same key for another target: timed again
        assert len(calls) == 2 * len(CONFIGS)
        np.testing.assert_array_equal(out, x)
    with Database(path) as db:
        (workload,) = {w.key for w in db.workloads()}
        assert sorted(w.target for w in db.workloads()) == sorted([as_target("c").key, avx2.key])
        assert as_target("c").key != avx2.key
        assert len(db.records(workload, avx2.key)) == len(db.records(workload, as_target("c").key)) == len(CONFIGS)


def test_heuristics_compute_meta_parameters(rng):
    @triton.heuristics({"BLOCK": lambda args: triton.next_power_of_2(args["n"]),
                        "EVEN": lambda args: args["n"] == triton.next_power_of_2(args["n"])})
    @triton.jit
    def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        if EVEN:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs) + 1)
        else:
            tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) + 2, mask=offs < n)

    with launch_mode("interpret"):
        for n, add in ((16, 1), (13, 2)):
            x, out = rng.standard_normal(n, dtype=np.float32), np.zeros(n, np.float32)
            k[(1,)](x, out, n)
            np.testing.assert_allclose(out, x + add)


def test_autotune_over_heuristics(rng):
    calls = []

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"],
                     do_bench=counting_bench(calls))
    @triton.heuristics({"SCALE": lambda args: args["BLOCK"] * 2})
    @triton.jit
    def k(x_ptr, out_ptr, n, BLOCK: tl.constexpr, SCALE: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * SCALE, mask=offs < n)

    x, out = rng.standard_normal(50, dtype=np.float32), np.zeros(50, np.float32)
    with launch_mode("interpret"):
        k[grid](x, out, 50)
    np.testing.assert_allclose(out, x * 2 * k.best_config.kwargs["BLOCK"], rtol=1e-6)
    assert len(calls) == 2


# --- triton.testing and the helpers -----------------------------------------------------------------------

def test_do_bench_times_in_milliseconds():
    calls = []

    def fn():
        calls.append(1)
        time.sleep(0.002)

    t = triton.testing.do_bench(fn, warmup=5, rep=20)
    assert 1.5 < t < 500 and len(calls) >= 4  # a first call, one to estimate, at least one each to warm up and time
    low, mid, high = triton.testing.do_bench(fn, warmup=1, rep=10, quantiles=[0.2, 0.5, 0.8])
    assert low <= mid <= high
    assert isinstance(triton.testing.do_bench(fn, warmup=1, rep=5, return_mode="all"), list)
    with pytest.raises(ConfigError, match="return_mode"):
        triton.testing.do_bench(fn, return_mode="best")


def test_assert_close():
    import torch

    triton.testing.assert_close(torch.ones(3), np.ones(3) + 1e-3)
    with pytest.raises(AssertionError):
        triton.testing.assert_close(np.ones(3), np.ones(3) + 0.1)


def test_perf_report_prints_its_table(capsys):
    @triton.testing.perf_report(triton.testing.Benchmark(
        x_names=["n"], x_vals=[1, 2], line_arg="provider", line_vals=["a", "b"], line_names=["A", "B"],
        plot_name="demo", args={"scale": 10}))
    def bench(n, provider, scale):
        return float(n * scale + (provider == "b"))

    bench.run(print_data=True)
    out = capsys.readouterr().out
    assert "demo:" in out and "20" in out and "21" in out


@pytest.mark.parametrize("n,want", [(0, 0), (1, 1), (2, 2), (3, 4), (1000, 1024), (2**40 + 1, 2**41)])
def test_next_power_of_2(n, want):
    assert triton.next_power_of_2(n) == want


def test_cdiv():
    assert [triton.cdiv(n, 4) for n in (0, 1, 4, 5, 8, 9)] == [0, 1, 1, 2, 2, 3]


KERNEL_SCRIPT = '''
import sys
import numpy as np
import ember.triton as triton
import ember.triton.language as tl

calls = []

def do_bench(fn, quantiles):
    calls.append(1)
    fn()
    return [float(len(calls))] * len(quantiles)  # the first config timed is the fastest

@triton.autotune(configs=[triton.Config({"BLOCK": 32}), triton.Config({"BLOCK": 64})], key=["n"],
                 do_bench=do_bench, restore_value=["x_ptr"], database=sys.argv[1])
@triton.jit
def double(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)

x = np.ones(100, np.float32)
double[lambda meta: (triton.cdiv(100, meta["BLOCK"]),)](x, 100)
print(len(calls), double.best_config.kwargs["BLOCK"], float(x.max()))
'''


def test_the_tuning_database_serves_a_new_process(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "tuned.py"
    script.write_text(KERNEL_SCRIPT)
    env = {**os.environ, "EMBER_INTERPRET": "1", "PYTHONPATH": os.pathsep.join(sys.path)}
    runs = [subprocess.run([sys.executable, str(script), str(tmp_path / "tile.db")], capture_output=True, text=True,
                           env=env, timeout=120) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split() == ["2", "32", "2.0"]  # both configs timed, x doubled once
    assert runs[1].stdout.split() == ["0", "32", "2.0"]  # the choice read back, nothing timed
