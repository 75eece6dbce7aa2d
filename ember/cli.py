"""The `ember` command.

    ember compile model.onnx -o model.ember     # progress shown while it builds
    ember run model.ember --input x.npy --output y.npy
    ember info model.onnx                       # operator histogram; unsupported operators listed
    ember info model.ember [--profile]          # and the kernels, their times, the memory plan
    ember bisect model.onnx [--rtol 1e-4]       # the first graph pass that changes the output
    ember bisect model.onnx --kernels           # the first kernel whose C disagrees with its loop IR
    ember graph model.onnx --svg g.svg          # the graph drawn with its kernels marked (or --html)
    ember tune model.onnx --trials 2000 --db tuning.db   # tune its kernels (--runner ray: on a cluster)
    ember tune --report tuning.db               # best result per workload, tuning curves (PNG)
    ember doctor                                # the EMBER_* options; what works on this machine
    ember cache [--clear]                       # each cache's size, entries and limit (or empty them)

An error ember reports on purpose (an EmberError: an unsupported operator, a model that is not
valid ONNX, an input of the wrong shape), a file that cannot be read (OSError) and Ctrl-C are
printed as one line, `ember: error: ...` (a list, such as the unsupported operators, follows it),
with exit status 1 (130 for Ctrl-C); `ember --verbose ...` (or `-v`, before or after the
subcommand) prints the traceback too. Any other exception is a bug in ember, and shows its
traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import config
from .errors import ConfigError, EmberError


def _import_model(path: str):
    """A graph from a model file (ONNX), or from a saved ember artifact."""
    p = Path(path)
    if p.is_dir():
        import ember

        return ember.load(p).graph
    if p.suffix == ".onnx":
        from .frontend.onnx import import_onnx

        return import_onnx(p)
    raise SystemExit(f"ember: {path}: expected an .onnx file or an ember artifact folder")


def _load_arrays(paths: list[str]) -> list:
    """The arrays of --input .npy files (an ArgumentTypeError names a file that holds none)."""
    import numpy as np

    from .errors import ArgumentTypeError

    arrays = []
    for path in paths:
        try:
            _check_npy_size(path)
            arrays.append(np.load(path, allow_pickle=False))
        except (ValueError, EOFError) as e:
            raise ArgumentTypeError(f"--input {path} is not a NumPy .npy file: {e}") from None
    return arrays


def _check_npy_size(path: str) -> None:
    """An ArgumentTypeError where the .npy header claims more data than the file holds: np.load
    would allocate all of it first (a MemoryError for a huge shape) before finding the file short."""
    import os

    import numpy as np

    from .errors import ArgumentTypeError

    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
        if dtype.hasobject:
            return  # (np.load refuses it without pickles)
        need = f.tell() + int(np.prod(shape, dtype=object)) * dtype.itemsize
    have = os.path.getsize(path)
    if need > have:
        raise ArgumentTypeError(f"--input {path}: its header says shape {shape} of {dtype}, {need} bytes, but the "
                                f"file has {have}")


def cmd_compile(args) -> int:
    import ember

    start = time.perf_counter()
    print(f"importing {args.model} ...", file=sys.stderr)
    graph = _import_model(args.model)
    print(f"compiling {len(graph.nodes)} operators ...", file=sys.stderr)
    database = None
    if args.db:
        from .tune import Database

        database = Database(args.db)
    model = ember.compile(graph, database=database)
    model.save(args.output)
    print(f"wrote {args.output} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    import numpy as np

    import ember

    model = ember.load(args.model)
    inputs = _load_arrays(args.input)
    outputs = model(*inputs)
    outputs = outputs if isinstance(outputs, list | tuple) else [outputs]
    if args.output:
        if len(args.output) != len(outputs):
            raise SystemExit(f"ember: the model has {len(outputs)} outputs, {len(args.output)} --output given")
        for path, out in zip(args.output, outputs):
            np.save(path, out)
    else:
        for k, out in enumerate(outputs):
            print(f"output {k}: {out.dtype}{list(out.shape)}\n{out}")
    return 0


def cmd_info(args) -> int:
    from .ops import UnsupportedOpError

    try:
        graph = _import_model(args.model)
    except UnsupportedOpError as e:
        print(f"{args.model}: {e}")
        return 1
    print(f"{args.model}: {len(graph.inputs)} inputs, {len(graph.outputs)} outputs, {len(graph.nodes)} operators, "
          f"{len(graph.constants)} constants")
    for v in graph.inputs:
        print(f"  input  {v!r}")
    for v in graph.outputs:
        print(f"  output {v!r}")
    for op, n in graph.op_histogram().items():
        print(f"  {n:5d}  {op}")
    if Path(args.model).is_dir():
        import ember

        from .debug.bisect import random_inputs

        model = ember.load(args.model)
        if args.profile:
            model.profile(*random_inputs(graph), repeat=args.profile)
        print(model.summary())
    return 0


def cmd_bisect(args) -> int:
    from .debug import bisect, bisect_kernels

    graph = _import_model(args.model)
    inputs = _load_arrays(args.input) or None
    if args.kernels:
        result = bisect_kernels(graph, inputs, rtol=args.rtol, atol=args.atol, folder=args.out)
    else:
        result = bisect(graph, inputs, rtol=args.rtol, atol=args.atol)
    print(result)
    return 0 if result.culprit is None else 1


def cmd_graph(args) -> int:
    from .debug import draw_graph
    from .ops import UnsupportedOpError
    from .passes import PIPELINES

    level = max(PIPELINES) if args.opt_level is None else args.opt_level
    if level not in PIPELINES:
        raise SystemExit(f"ember graph: --opt-level must be one of {sorted(PIPELINES)}, got {level}")
    paths = {fmt: path for fmt, path in (("svg", args.svg), ("html", args.html)) if path}
    try:
        graph = _import_model(args.model)
        pictures = {fmt: draw_graph(graph, level, fmt) for fmt in paths or ("svg",)}
    except UnsupportedOpError as e:
        print(f"{args.model}: {e}", file=sys.stderr)
        return 1
    if not paths:
        sys.stdout.write(pictures["svg"])
    for fmt, path in paths.items():
        Path(path).write_text(pictures[fmt], encoding="utf-8")
        print(f"wrote {path}", file=sys.stderr)
    return 0


def cmd_tune(args) -> int:
    from .tune import Database

    if args.report:
        from .tune.report import plot_tuning_curves, tuning_report

        if not Path(args.report).exists():
            raise SystemExit(f"ember: {args.report}: no such tuning database")
        db = Database(args.report)
        print(tuning_report(db))
        png = plot_tuning_curves(db, args.plot or str(Path(args.report).with_suffix("")) + "_curve.png")
        print(f"tuning curves: {png}")
        return 0
    if not args.model:
        raise SystemExit("ember tune: give a model to tune, or --report DB")
    from .tune import RayRunner, tune_model

    graph = _import_model(args.model)
    runner = RayRunner(address=args.ray_address) if args.runner == "ray" else None
    try:
        report = tune_model(graph, database=Database(args.db), trials=args.trials, seed=args.seed, runner=runner,
                            time_budget_s=args.minutes * 60 if args.minutes else None)
    finally:
        if runner is not None:
            runner.close()
    print(report)
    print(f"records in {args.db}; compile with: ember compile {args.model} --db {args.db} -o model.ember")
    return 0


def _check(name: str, ok: bool, detail: str) -> bool:
    print(f"  [{'ok' if ok else '--'}] {name}: {detail}")
    return ok


def cmd_doctor(args) -> int:
    from .target import Target

    print("ember doctor")
    options = config.describe()
    print("\n".join(f"  {line}" for _, line in options))
    ok = _check("options", all(usable for usable, _ in options), "EMBER_* variables as above")
    if ok:
        cc = config.get("cc")
        argv = shlex.split(cc)
        found = shutil.which(argv[0]) is not None
        out = subprocess.run([*argv, "--version"], capture_output=True, text=True).stdout if found else ""
        ok = _check("C compiler", found, f"{cc}: {(out.splitlines() or ['not found (set EMBER_CC)'])[0]}")
    if ok:
        with tempfile.TemporaryDirectory() as d:
            src = Path(d) / "t.c"
            src.write_text("#include <omp.h>\nint main(void){return omp_get_max_threads() > 0 ? 0 : 1;}\n")
            r = subprocess.run([*argv, "-fopenmp", str(src), "-o", str(Path(d) / "t")], capture_output=True,
                               text=True)
            built = r.returncode == 0 and (Path(d) / "t").exists()
            _check("OpenMP", built, "-fopenmp works" if built else r.stderr.strip()[:200] or "no program built")
        target = Target()
        missing = target.missing()
        ok = _check("SIMD", not missing, f"{target.vector_bytes * 8}-bit vectors ({target.lanes()} float32 lanes), "
               f"{' '.join(sorted(target.features)) or 'no extensions'} under {config.get('cflags')!r}"
               + (f"; this machine lacks {', '.join(missing)}" if missing else ""))
        l1, l2, l3 = (size >> 10 for size in target.caches)
        _check("machine", True, f"{target.cores} cores, caches L1d {l1} KiB, L2 {l2} KiB, L3 {l3} KiB")
        _check("call path", *_call_path())
    for module, what in (("torch", "PyTorch frontend and torch.compile backend"), ("onnx", "ONNX frontend"),
                         ("onnxruntime", "benchmarks against ONNX Runtime")):
        spec = importlib.util.find_spec(module)
        _check(module, spec is not None, what if spec else f"not installed: pip install ember[{module}]")
    for name, (works, what) in _cuda().items():
        _check(name, works, what)
    return 0 if ok else 1


def cmd_cache(args) -> int:
    from .checks import format_bytes
    from .runtime import disk_cache

    names = list(disk_cache.SHARES)
    if args.clear:
        freed = sum(disk_cache.clear(name) for name in names)
        print(f"removed {format_bytes(freed)} from {config.get('cache_dir')}")
    print(f"{config.get('cache_dir')} (EMBER_CACHE_DIR), at most {format_bytes(config.get('cache_limit'))} "
          f"(EMBER_CACHE_LIMIT)")
    used = {name: disk_cache.usage(name) for name in names}
    for name in names:
        print(f"  {name:<11} {format_bytes(used[name].bytes):>10} in {used[name].entries:6d} entries, "
              f"at most {format_bytes(disk_cache.limit(name))}")
    print(f"  {'all':<11} {format_bytes(sum(u.bytes for u in used.values())):>10} in "
          f"{sum(u.entries for u in used.values()):6d} entries")
    return 0


def _cuda() -> dict[str, tuple[bool, str]]:
    """NVRTC, the CUDA driver and the GPU, each with what it is or why it is missing (none of them
    is needed but for target "cuda")."""
    from .cuda import driver, nvrtc
    from .cuda.limits import device_gpu

    out = {}
    try:
        out["NVRTC"] = True, f"NVRTC {nvrtc.nvrtc_version()} compiles CUDA kernels"
    except EmberError as e:
        out["NVRTC"] = False, str(e)
    try:
        dev = driver.device()
        out["CUDA driver"] = True, f"CUDA {driver.driver_version()}"
        facts = device_gpu(dev)
        out["GPU"] = True, (f"{dev.name}, compute capability {dev.compute_capability[0]}."
                            f"{dev.compute_capability[1]}, {facts.multiprocessors} multiprocessors, "
                            f"{facts.threads_per_block} threads, {facts.registers_per_block // 1024} Ki registers "
                            f"and {facts.shared_per_block // 1024} KiB of shared memory per block "
                            f"({facts.shared_opt_in // 1024} KiB opted in)")
        out["GPU facts"] = _table_row(facts)
    except EmberError as e:
        out["CUDA driver / GPU"] = False, str(e)
    return out


def _table_row(facts) -> tuple[bool, str]:
    """Whether the device's facts (an ember.target.GPU) are its architecture's row of ember.target.
    ARCHS, what a build for it without the device assumes (the multiprocessors are the product's:
    they may differ)."""
    from .target import GPU

    try:
        row = GPU.of(facts.arch)
    except ConfigError as e:
        return True, f"the device's are used; without it: {e}"
    differ = {f.name: (getattr(facts, f.name), getattr(row, f.name)) for f in dataclasses.fields(GPU)
              if getattr(facts, f.name) != getattr(row, f.name)}
    said = ", ".join(f"{name} {mine} (the table's {theirs})" for name, (mine, theirs) in differ.items())
    if set(differ) <= {"multiprocessors"}:
        return True, f"the device's agree with ember.target.ARCHS' row for {facts.arch}" + (f" but for {said}" if said
                                                                                          else "")
    return False, f"the device's differ from ember.target.ARCHS' row for {facts.arch}: {said}"


def _call_path() -> tuple[bool, str]:
    """Whether a model's calls are checked and made in C (ember.runtime.fastcall), and if not why:
    every call then takes the Python path, about 15 us slower, with the same results and errors."""
    from .runtime import fastcall

    include = fastcall.python_include()
    if not config.get("fast_call"):
        return False, "EMBER_FAST_CALL=0: calls take the Python path"
    if not Path(include, "Python.h").is_file():
        return False, f"no Python.h in {include}: calls take the Python path (install Python's headers)"
    if fastcall.extension() is None:
        return False, "the call extension did not build: calls take the Python path"
    return True, "calls are checked and made in C"


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    try:
        return args.fn(args)
    except KeyboardInterrupt:
        return _report(args, "interrupted", 130)
    except (EmberError, OSError) as e:
        return _report(args, f"error: {_message(e)}", 1)


def _report(args, message: str, status: int) -> int:
    """Print the error as one line (and the traceback before it under --verbose); the exit status."""
    if args.verbose:
        traceback.print_exc()
    print(f"ember: {message}", file=sys.stderr)
    return status


def _message(e: BaseException) -> str:
    """An exception's message with its notes (where it happened), and for an OSError its file."""
    if isinstance(e, OSError) and e.strerror:
        text = f"{e.filename}: {e.strerror}" if e.filename else e.strerror
    else:
        text = str(e) or type(e).__name__
    notes = getattr(e, "__notes__", ())
    return "; ".join([text.rstrip(), *notes])


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ember", description="ember, a deep-learning compiler")
    ap.add_argument("-v", "--verbose", action="store_true", help="print the traceback of an error")
    common = argparse.ArgumentParser(add_help=False)  # --verbose after the subcommand, too
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="print the traceback of an error")
    sub = ap.add_subparsers(dest="command", required=True)

    def add_parser(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[common], **kwargs)

    p = add_parser("compile", help="compile a model into an artifact folder")
    p.add_argument("model")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--db", help="a tuning database: each kernel takes its best record's schedule")
    p.set_defaults(fn=cmd_compile)
    p = add_parser("run", help="run a compiled model on .npy inputs")
    p.add_argument("model")
    p.add_argument("--input", action="append", default=[], help="an input .npy (repeat, in order)")
    p.add_argument("--output", action="append", default=[], help="where to write an output .npy (repeat)")
    p.set_defaults(fn=cmd_run)
    p = add_parser("info", help="operator histogram of a model; unsupported operators listed; an artifact's "
                                    "kernels and memory plan")
    p.add_argument("model")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="an artifact: time its kernels over N runs on random inputs")
    p.set_defaults(fn=cmd_info)
    p = add_parser("bisect", help="the first graph pass that changes the output beyond tolerance "
                                      "(exit status 1 when one does)")
    p.add_argument("model")
    p.add_argument("--input", action="append", default=[], help="an input .npy (repeat, in order; default: random)")
    p.add_argument("--rtol", type=float, default=1e-4)
    p.add_argument("--atol", type=float, default=1e-4)
    p.add_argument("--kernels", action="store_true",
                   help="instead, run every kernel in C and on the loop-IR interpreter: the first kernel whose "
                        "C disagrees, with a repro folder")
    p.add_argument("--out", help="with --kernels: the repro folder (default: a new temporary folder)")
    p.set_defaults(fn=cmd_bisect)
    p = add_parser("graph", help="draw the graph with its kernels marked (SVG, or HTML with a table of the "
                                     "kernels); without --svg or --html, the SVG goes to stdout")
    p.add_argument("model")
    p.add_argument("--svg", metavar="PATH", help="write the picture as SVG")
    p.add_argument("--html", metavar="PATH", help="write a page with the picture and the kernels")
    p.add_argument("--opt-level", type=int, help="draw the graph as compiled at this level (default: the highest)")
    p.set_defaults(fn=cmd_graph)
    p = add_parser("tune", help="tune a model's kernels into a database (progress: trials, best GFLOP/s, "
                                    "time left); or --report a database")
    p.add_argument("model", nargs="?")
    p.add_argument("--trials", type=int, default=2000)
    p.add_argument("--minutes", type=float, help="a time budget (stops at whichever of trials and time runs out)")
    p.add_argument("--db", default="tuning.db", help="the tuning database (SQLite; created if missing)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--runner", choices=["local", "ray"], default="local",
                   help="measure in local worker processes, or on a Ray cluster")
    p.add_argument("--ray-address", help="the Ray cluster (default: start a local one, or RAY_ADDRESS)")
    p.add_argument("--report", metavar="DB", help="print the best result per workload and plot the tuning curves")
    p.add_argument("--plot", metavar="PNG", help="with --report: where the tuning curves go")
    p.set_defaults(fn=cmd_tune)
    p = add_parser("doctor", help="what works on this machine")
    p.set_defaults(fn=cmd_doctor)
    p = add_parser("cache", help="each cache's size, entries and limit (EMBER_CACHE_DIR, EMBER_CACHE_LIMIT)")
    p.add_argument("--clear", action="store_true", help="remove every entry first (not the writes under way)")
    p.set_defaults(fn=cmd_cache)
    return ap


if __name__ == "__main__":
    sys.exit(main())
