"""The host's time per GPU launch, measured without a GPU: microseconds of Python from a call to
the driver's return, for the tutorial kernels of examples/triton (target "cuda"), a kernel of
`ember.build(..., target="cuda")` and a small CUDAModel (its call replaying a CUDA graph).

The driver is cuda.bindings itself over a libcuda.so.1 of our own whose every function does
nothing and succeeds (built here with the C compiler; GPU 0 reports sm_90's limits), so the
bindings' own cost is counted and the GPU's is not. Tensors are torch tensors in host memory that
say they are on cuda:0 (a subclass whose `device` is cuda:0, torch functions not intercepted),
and torch's current stream is the default one: what torch does on a GPU build at these points
(`torch.empty(device="cuda")`, its raw stream) costs about the same.

    python benchmarks/launch_host.py [--launches 3000] [--rounds 3] [--tree OTHER_CHECKOUT ...] [--profile]
    python benchmarks/launch_host.py --gpu [--launches 2000]      # on a GPU, against Triton

Each tree (this checkout by default; `--tree` adds others, say the main branch exported, for a
before/after in one run) runs in processes of its own, the trees taking turns over `--rounds`; a
figure is the median over the rounds of the median over 5 batches of the batch's mean.
`--profile` adds, for this checkout, each step of a vector add's and a softmax's launch timed
alone (the signature, the cache lookup, the grid, the arguments, the stream, the context, the
packing, the driver call) and per case the functions that take the most of the host's time
(cProfile). The CPU is named in the first line: on a GPU machine the same
calls also cost the driver's real launch (`benchmarks/gpu_checks.sh launch`).

With `--gpu` (a GPU, torch with CUDA; Triton where installed) the same calls run for real on small
sizes, where the host's time is the launch's: per launch, the host's microseconds issuing
`--launches` back to back, the wall time per launch of those including the wait for the GPU at
the end, and one launch waited for alone (median of 200); ember's vector add and softmax next to
Triton compiling the very same source (benchmarks/tile.py's kernels), and torch's own op.
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = ("vector add", "softmax", "matmul (autotuned)", "layer norm", "attention", "ember.build kernel",
         "CUDAModel (graph replay)")

# every driver function succeeds and does nothing, but for what the device's description asks
NO_OP_DRIVER = r"""
#include <stdlib.h>
#include <string.h>
static int ok(void) { return 0; }
static int count(int *n) { *n = 1; return 0; }
static int get(int *device, int ordinal) { *device = ordinal; return 0; }
static int name(char *s, int len, int device) { strncpy(s, "no-op GPU", len); return 0; }
static int version(int *v) { *v = 13000; return 0; }
static int alloc(unsigned long long *p, size_t n) { *p = (unsigned long long)malloc(n ? n : 1); return 0; }
static int attribute(int *v, int attr, int device) {
    switch (attr) {
    case 1: *v = 1024; break;                 /* threads per block */
    case 8: *v = 48 * 1024; break;            /* shared memory per block */
    case 12: *v = 65536; break;               /* registers per block */
    case 16: *v = 132; break;                 /* multiprocessors */
    case 75: *v = 9; break; case 76: *v = 0; break;  /* compute capability */
    case 97: *v = 227 * 1024; break;          /* opt-in shared memory */
    default: *v = 0;
    }
    return 0;
}
int cuGetProcAddress_v2(const char *s, void **f, int v, unsigned long long flags, int *status) {
    *f = !strcmp(s, "cuDeviceGetCount") ? (void *)count : !strcmp(s, "cuDeviceGet") ? (void *)get
       : !strcmp(s, "cuDeviceGetName") ? (void *)name : !strcmp(s, "cuDeviceGetAttribute") ? (void *)attribute
       : !strcmp(s, "cuDriverGetVersion") ? (void *)version : !strcmp(s, "cuMemAlloc") ? (void *)alloc : (void *)ok;
    if (status) *status = 0;
    return 0;
}
"""


def load_no_op_driver() -> None:
    """Build the no-op libcuda.so.1 and load it, so that cuda.bindings' dlopen finds it by its name."""
    folder = Path(tempfile.mkdtemp(prefix="ember-no-op-cuda-"))
    (folder / "nocuda.c").write_text(NO_OP_DRIVER)
    lib = folder / "libcuda.so.1"
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o", str(lib),
                    str(folder / "nocuda.c")], check=True)
    ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)


def cuda_like_torch():
    """torch with host tensors that say they are on cuda:0 (`cuda(t)`), torch.empty(device="cuda")
    making them, and the default stream as the current one."""
    import torch

    on_gpu = torch.device("cuda", 0)

    class CUDATensor(torch.Tensor):
        __torch_function__ = torch._C._disabled_torch_function_impl
        device = property(lambda self: on_gpu)
        is_cuda = property(lambda self: True)

    empty = torch.empty

    def empty_on(*shape, device=None, **kwargs):
        t = empty(*shape, **kwargs)
        return t.as_subclass(CUDATensor) if device is not None and str(device).startswith("cuda") else t

    torch.empty = empty_on
    torch._C._cuda_getCurrentRawStream = lambda ordinal: 0
    torch.cuda.current_stream = lambda device=None: _Stream()
    return torch, lambda t: t.contiguous().as_subclass(CUDATensor)


class _Stream:
    cuda_stream = 0


def example(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "examples" / "triton" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tile_cases(rand) -> dict:
    """The vector add and softmax tutorials' launches: name -> (kernel, grid, args, kwargs)."""
    vadd = example("01_vector_add")
    x, y, o = rand(98432), rand(98432), rand(98432)
    n = o.numel()
    sm = example("02_fused_softmax")
    a, b = rand(1823, 781), rand(1823, 781)
    return {"vector add": (vadd.add_kernel, lambda meta: (vadd.triton.cdiv(n, meta["BLOCK_SIZE"]),), (x, y, o, n),
                           {"BLOCK_SIZE": 1024}),
            "softmax": (sm.softmax_kernel, (1823,), (b, a, 781, 781, 781), {"BLOCK_SIZE": 1024})}


def phases(kernel, grid, args: tuple, kwargs: dict, launches: int) -> dict[str, float]:
    """Microseconds of each step of a remembered launch on this tree's path, each timed alone over
    `launches` (the thread's CPU time; the whole launch last: its steps and the calls between them)."""
    from ember.cuda import driver as cuda_driver
    from ember.cuda.streams import torch_stream
    from ember.triton.compiler import relaunch

    kernel[grid](*args, **kwargs)  # (remembered)
    key = relaunch.signature(kernel, args, kwargs)
    table = kernel._launches
    entry = table[key]
    launcher = entry.compiled.cfunc
    bound = {**entry.defaults, **dict(zip(entry.defaults, args)), **kwargs}
    sizes = kernel.grid_of(grid, bound)
    values = entry.values(args, kwargs)
    params = cuda_driver.Params.mine(launcher._local, launcher._types)
    address = params.write([*values, 0, 0, *sizes])
    blocks = (sizes[0] * sizes[1] * sizes[2], 1, 1)
    steps = {
        "signature (the specialization's key)": lambda: relaunch.signature(kernel, args, kwargs),
        "cache lookup, globals checked": lambda: table.get(key).valid(),
        "grid": lambda: kernel.grid_of(grid, dict(bound) if callable(grid) else None),
        "arguments (addresses, scalars)": lambda: entry.values(args, kwargs),
        "stream (torch's current)": lambda: torch_stream(0),
        "context made current": lambda: cuda_driver.device(0).activate(),
        "parameters packed": lambda: params.write([*values, 0, 0, *sizes]),
        "driver call (cuLaunchKernel)": lambda: launcher._module.launch(blocks, launcher.block, address, 0,
                                                                              launcher.shared),
        "the whole launch": lambda: kernel[grid](*args, **kwargs),
    }
    return {name: per_launch_us(step, launches, time.thread_time) for name, step in steps.items()}


def cases(torch, cuda) -> dict:
    """Case name -> a call launching it once, on cuda:0's stand-ins."""
    import math

    g = torch.Generator().manual_seed(0)
    rand = lambda *shape, dtype=torch.float32: cuda(torch.randn(*shape, generator=g).to(dtype))  # noqa: E731
    out = {}
    for name, (kernel, grid, args, kwargs) in tile_cases(rand).items():
        out[name] = lambda kernel=kernel, grid=grid, args=args, kwargs=kwargs: kernel[grid](*args, **kwargs)
    mm = example("03_matmul")
    p, q, r = rand(256, 128, dtype=torch.float16), rand(128, 192, dtype=torch.float16), rand(256, 192,
                                                                                             dtype=torch.float16)
    out["matmul (autotuned)"] = lambda: mm.matmul_kernel[
        lambda meta: (mm.triton.cdiv(256, meta["BLOCK_SIZE_M"]) * mm.triton.cdiv(192, meta["BLOCK_SIZE_N"]),)](
        p, q, r, 256, 192, 128, 128, 1, 192, 1, 192, 1, ACTIVATION="")
    ln = example("04_layer_norm")
    xs, ys, w, bias, mean, rstd = rand(1151, 1000), rand(1151, 1000), rand(1000), rand(1000), rand(1151), rand(1151)
    out["layer norm"] = lambda: ln._layer_norm_fwd_fused[(1151,)](xs, ys, w, bias, mean, rstd, 1000, 1000, 1e-5,
                                                                  BLOCK_SIZE=1024)
    at = example("05_fused_attention")
    qs, ks, vs, os_ = (rand(2, 3, 200, 64) for _ in range(4))
    strides = [*qs.stride()] * 4
    out["attention"] = lambda: at._attn_fwd[(7, 6)](qs, ks, vs, os_, 1 / math.sqrt(64), *strides, 3, 200, HEAD_DIM=64,
                                                     BLOCK_M=32, BLOCK_N=32, CAUSAL=False)
    import ember
    from ember import te
    from ember.cuda import schedules

    A, B = te.placeholder((4096,), name="A"), te.placeholder((4096,), name="B")
    C = te.compute((4096,), lambda i: A[i] * B[i] + A[i], name="C")
    s = te.create_schedule(C.op)
    schedules.elementwise(s, C, 128)
    kernel = ember.build(s, [A, B, C], target="cuda")
    ka, kb, kc = rand(4096), rand(4096), rand(4096)
    out["ember.build kernel"] = lambda: kernel(ka, kb, kc)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    cm = ember.compile(model, (torch.randn(2, 16),), target="cuda")
    xm = rand(2, 16)
    out["CUDAModel (graph replay)"] = lambda: cm(xm)
    return out


def per_launch_us(fn, launches: int, clock=time.perf_counter) -> float:
    """Microseconds per call of fn by `clock` (the median of 5 batches' means), after 3 calls
    (compiled, autotuned, captured, remembered)."""
    for _ in range(3):
        fn()
    batch = max(1, launches // 5)
    means = []
    for _ in range(5):
        start = clock()
        for _ in range(batch):
            fn()
        means.append((clock() - start) / batch * 1e6)
    return statistics.median(means)


def profile(fn, launches: int, top: int = 8) -> list[str]:
    """The functions taking the most of the host's time over `launches` calls (cProfile's own time)."""
    import cProfile
    import pstats

    prof = cProfile.Profile(time.thread_time)
    prof.enable()
    for _ in range(launches):
        fn()
    prof.disable()
    stats = pstats.Stats(prof).stats
    total = sum(v[2] for v in stats.values()) or 1.0
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return [f"{100 * v[2] / total:4.0f}%  {Path(f).name}:{line} {name}" for (f, line, name), v in rows]


def worker(launches: int, with_profile: bool) -> dict:
    load_no_op_driver()
    torch, cuda = cuda_like_torch()
    torch.set_num_threads(1)
    result = {}
    for name, fn in cases(torch, cuda).items():
        result[name] = {"us": per_launch_us(fn, launches), "cpu": per_launch_us(fn, launches, time.thread_time)}
        if with_profile:
            result[name]["profile"] = profile(fn, max(200, launches // 5))
    if with_profile:
        rand = lambda *shape: cuda(torch.randn(*shape))  # noqa: E731
        for name, case in tile_cases(rand).items():
            result[name]["phases"] = phases(*case, launches)
    return result


def gpu_main(launches: int) -> None:
    """The real launches on this machine's GPU (the module doc)."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("--gpu needs a GPU and torch with CUDA")
    sys.path.insert(0, str(ROOT))
    import ember
    from benchmarks import tile
    from ember import te
    from ember.cuda import schedules

    twins = tile.triton_twins()
    x, y = torch.rand(4096, device="cuda"), torch.rand(4096, device="cuda")
    out = torch.empty_like(x)
    rows = torch.randn(128, 1024, device="cuda")
    soft = torch.empty_like(rows)
    calls = {}
    for who, ns in (("ember", tile), ("triton", twins)):
        if ns is not None:
            calls[f"vector add 4096: {who}"] = lambda ns=ns: ns.add_kernel[(4,)](x, y, out, 4096, BLOCK=1024)
            calls[f"softmax (128, 1024): {who}"] = lambda ns=ns: ns.softmax_kernel[(128,)](soft, rows, 1024, 1024,
                                                                                        1024, BLOCK=1024)
    calls["vector add 4096: torch"] = lambda: torch.add(x, y, out=out)
    calls["softmax (128, 1024): torch"] = lambda: torch.softmax(rows, 1)
    A, B = te.placeholder((4096,), name="A"), te.placeholder((4096,), name="B")
    C = te.compute((4096,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    schedules.elementwise(s, C, 128)
    kernel = ember.build(s, [A, B, C], target="cuda")
    calls["ember.build vector add 4096"] = lambda: kernel(x, y, out)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)).eval()
    cm = ember.compile(model, (torch.randn(2, 16),), target="cuda")  # (from the host's copy, called on the GPU's)
    xm = torch.randn(2, 16, device="cuda")
    calls["CUDAModel MLP (graph replay)"] = lambda: cm(xm)
    print(f"host us per launch on {torch.cuda.get_device_name()} with {_cpu()}: issuing {launches} back to back; "
          f"wall per launch including the wait at the end; one launch waited for alone (median of 200)")
    for name, fn in calls.items():
        try:
            for _ in range(3):
                fn()
            torch.cuda.synchronize()
            start = time.perf_counter()
            for _ in range(launches):
                fn()
            issued = time.perf_counter()
            torch.cuda.synchronize()
            end = time.perf_counter()
            alone = []
            for _ in range(200):
                t = time.perf_counter()
                fn()
                torch.cuda.synchronize()
                alone.append(time.perf_counter() - t)
        except Exception as e:  # noqa: BLE001 (a peer that fails is reported, the others still run)
            print(f"{name}: failed: {type(e).__name__}: {str(e)[:300]}")
            continue
        per = 1e6 / launches
        print(f"{name:36s} host {(issued - start) * per:6.1f} us, wall {(end - start) * per:6.1f} us, "
              f"alone {statistics.median(alone) * 1e6:6.1f} us")


def _cpu() -> str:
    """This machine's CPU model, as /proc/cpuinfo names it."""
    if Path("/proc/cpuinfo").exists():
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "an unknown CPU"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--launches", type=int, default=3000)
    ap.add_argument("--tree", action="append", default=[], help="another checkout of ember to time (before/after)")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=3, help="processes per tree, taking turns; the median is kept")
    ap.add_argument("--gpu", action="store_true", help="real launches on this machine's GPU, against Triton")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.gpu:
        gpu_main(args.launches)
        return
    if args.worker:
        print(json.dumps(worker(args.launches, args.profile)))
        return
    trees = [str(ROOT), *args.tree]
    runs: dict[str, list[dict]] = {tree: [] for tree in trees}
    for r in range(args.rounds):  # (the trees take turns, so that a busy moment of the machine falls on each)
        for tree in trees if r % 2 == 0 else trees[::-1]:
            env = {**os.environ, "PYTHONPATH": tree, "EMBER_NUM_THREADS": "1"}
            run = subprocess.run([sys.executable, __file__, "--worker", "--launches", str(args.launches),
                                  *(["--profile"] if args.profile and tree == trees[0] and r == 0 else [])],
                                 capture_output=True, text=True, env=env, cwd=tree, timeout=1800)
            if run.returncode:
                raise SystemExit(f"{tree}: {run.stderr[-3000:]}")
            runs[tree].append(json.loads(run.stdout.strip().splitlines()[-1]))
    results = {tree: {case: {**got[0][case], **{k: statistics.median(g[case][k] for g in got) for k in ("us", "cpu")}}
                      for case in CASES} for tree, got in runs.items()}
    print(f"host us per launch on {_cpu()} ({os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}), a no-op "
          f"driver under cuda.bindings; medians over {args.rounds} processes of medians of 5 batches of "
          f"{args.launches // 5}")
    names = ["this tree", *(Path(t).name for t in args.tree)]
    print(f"{'case (us: wall, CPU of the thread)':36s}" + "".join(f"{n[:20]:>22s}" for n in names))
    for case in CASES:
        print(f"{case:36s}" + "".join(f"{results[t][case]['us']:12.1f} {results[t][case]['cpu']:9.1f}" for t in trees))
        for step, us in results[trees[0]][case].get("phases", {}).items():
            print(f"      {us:5.2f} us  {step}")
        for line in results[trees[0]][case].get("profile", []):
            print(f"      {line}")


if __name__ == "__main__":
    main()
