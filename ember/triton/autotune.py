"""`@triton.autotune` and `@triton.heuristics`: choosing a kernel's meta-parameters, as Triton does.

    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128})],
                     key=["n"], reset_to_zero=["out_ptr"], database="tile_tuning.db")
    @triton.jit
    def kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr): ...

An Autotuner wraps a kernel (a JITFunction, or another wrapper such as Heuristics). At a launch
the values of the `key` arguments, with the dtypes of every argument that has one, select an
entry of its cache; a new entry times every config that survives `prune_configs_by` (each call
of the timing starts with the `reset_to_zero` arguments zeroed and the `restore_value` ones put
back afterwards) with `do_bench` (ember.triton.testing: ember's timer, in ms; or the `do_bench`
given) and keeps the fastest. A config that fails (a TileError, a CompileError: a static_assert
it breaks, a size the kernel refuses) times as infinite. `num_warps`, `num_stages`, `num_ctas`
and `maxnreg` reach the launch as Triton's options: they do not matter on the CPU.

`database=` (a path or an `ember.tune.Database`) keeps every timing in ember's tuning database
and reads the best one back, so a new process skips the timing. A workload there is the kernel
(its source, the configs, the key's values) on one target: the launch's (its `target=` option,
else the kernel's own, else "c": `KernelFunction.launch_target`), filed under the target's key
("c | <cpu> | <features>"), or "interpret" in the interpreter (the choices kept in memory are
per target too). Each config's timing is a record whose trace is one `triton_config`
instruction holding the config. `TRITON_PRINT_AUTOTUNING=1` prints the choice.

`@triton.heuristics({"BLOCK": lambda args: ...})` computes meta-parameters from the others at
each launch.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import CompileError, ConfigError, TileError, TuneError
from . import testing
from .args import on_device
from .compiler import relaunch
from .jit import KernelInterface, interpret

QUANTILES = (0.5, 0.2, 0.8)


class Config:
    """One choice of meta-parameters (`kwargs`) and Triton's launch options."""

    def __init__(self, kwargs: dict, num_warps: int = 4, num_stages: int = 3, num_ctas: int = 1,
                 maxnreg: int | None = None, pre_hook: Callable | None = None):
        self.kwargs = dict(kwargs)
        self.num_warps = num_warps
        self.num_stages = num_stages
        self.num_ctas = num_ctas
        self.maxnreg = maxnreg
        self.pre_hook = pre_hook

    def options(self) -> dict:
        return {k: v for k, v in (("num_warps", self.num_warps), ("num_stages", self.num_stages),
                                  ("num_ctas", self.num_ctas), ("maxnreg", self.maxnreg)) if v is not None}

    def all_kwargs(self) -> dict:
        return {**self.kwargs, **self.options()}

    def describe(self) -> list:
        """The config as JSON-able data (what the tuning database keeps)."""
        return [sorted((k, _plain(v)) for k, v in self.kwargs.items()), sorted(self.options().items())]

    def __str__(self) -> str:
        return ", ".join(f"{k}: {v}" for k, v in self.all_kwargs().items())

    __repr__ = __str__


def _plain(value):
    value = getattr(value, "value", value)  # a constexpr
    return value if isinstance(value, bool | int | float | str | type(None)) else repr(value)


def _key_value(value):
    """A hashable stand-in for an argument in the cache key."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return ("tensor", tuple(value.shape), str(value.dtype))
    return _plain(value)


def _zero(value) -> None:
    if hasattr(value, "zero_"):
        value.zero_()
    else:
        value[...] = 0


def _copy(value):
    return value.clone() if hasattr(value, "clone") else np.array(value, copy=True)


def _put(dst, src) -> None:
    if hasattr(dst, "copy_"):
        dst.copy_(src)
    else:
        dst[...] = src


class Autotuner(KernelInterface):
    def __init__(self, fn, arg_names: list[str], configs: list[Config], key: list[str], reset_to_zero=None,
                 restore_value=None, pre_hook=None, post_hook=None, prune_configs_by: dict | None = None,
                 warmup: float | None = None, rep: float | None = None, do_bench: Callable | None = None,
                 database=None):
        self.fn = fn
        self.base_fn = getattr(fn, "base_fn", fn)
        self.arg_names = list(arg_names)
        self.configs = list(configs) or [Config({})]
        self.keys = list(key)
        unknown = [n for n in [*self.keys, *(reset_to_zero or []), *(restore_value or [])] if n not in self.arg_names]
        if unknown:
            raise ConfigError(f"autotune of {self.base_fn.__name__}: {unknown} are not parameters of the kernel "
                              f"({', '.join(self.arg_names)})")
        self.reset_to_zero = list(reset_to_zero or [])
        self.restore_value = list(restore_value or [])
        self.user_pre_hook, self.user_post_hook = pre_hook, post_hook
        prune = dict(prune_configs_by or {})
        self.perf_model = prune.get("perf_model")
        self.configs_top_k = prune.get("top_k", 1.0)
        self.early_config_prune = prune.get("early_config_prune")
        self.warmup = 25 if warmup is None else warmup
        self.rep = 100 if rep is None else rep
        self._do_bench = do_bench or (lambda call, quantiles: testing.do_bench(
            call, warmup=self.warmup, rep=self.rep, quantiles=quantiles))
        self.database = database
        self.cache: dict[tuple[str, tuple], Config] = {}  # (target's key, key) -> config
        self._targets: dict[tuple, str] = {}  # (target option, GPU arguments, environment) -> the target's key
        self.configs_timings: dict[Config, object] | None = None
        self.best_config: Config | None = None
        self.bench_time = 0.0

    def __repr__(self) -> str:
        return f"Autotuner({self.base_fn!r})"

    # --- Triton's hooks ------------------------------------------------------------------------------
    def pre_hook(self, nargs: dict, reset_only: bool = False) -> None:
        for name in self.reset_to_zero:
            _zero(nargs[name])
        if not reset_only:
            self.restore_copies = {name: _copy(nargs[name]) for name in self.restore_value}
        if self.user_pre_hook is not None and not reset_only:
            self.user_pre_hook(nargs)

    def post_hook(self, nargs: dict, exception) -> None:
        for name, saved in getattr(self, "restore_copies", {}).items():
            _put(nargs[name], saved)
        self.restore_copies = {}
        if self.user_post_hook is not None:
            self.user_post_hook(nargs, exception)

    # --- choosing --------------------------------------------------------------------------------------
    def prune_configs(self, nargs: dict, kwargs: dict) -> list[Config]:
        configs = self.configs
        if self.early_config_prune is not None:
            configs = list(self.early_config_prune(self.configs, nargs, **kwargs))
        if self.perf_model is not None:
            top_k = self.configs_top_k
            if isinstance(top_k, float) and top_k <= 1.0:
                top_k = builtins.max(1, int(len(self.configs) * top_k))
            if len(configs) > top_k:
                estimate = {c: self.perf_model(**nargs, **kwargs, **c.all_kwargs()) for c in configs}
                configs = sorted(configs, key=estimate.get)[:top_k]
        if not configs:
            raise TuneError(f"autotune of {self.base_fn.__name__}: prune_configs_by left no config")
        return configs

    def _bench(self, args: tuple, nargs: dict, grid, kwargs: dict, config: Config):
        conflicts = kwargs.keys() & config.kwargs.keys()
        if conflicts:
            raise ConfigError(f"autotune of {self.base_fn.__name__}: {sorted(conflicts)} are given at the launch and "
                              f"chosen by the autotuner too: don't pass the auto-tuned meta-parameters")
        full = {**nargs, **kwargs, **config.all_kwargs()}

        def call():
            if config.pre_hook is not None:
                config.pre_hook(full)
            self.pre_hook(full)
            try:
                self.fn.run(*args, grid=grid, **kwargs, **config.all_kwargs())
            except Exception as e:
                self.post_hook(full, e)
                raise
            self.post_hook(full, None)

        try:
            return self._do_bench(call, quantiles=QUANTILES)
        except (TileError, CompileError):
            return [math.inf] * len(QUANTILES)

    def run(self, *args, grid, **kwargs):
        nargs = dict(zip(self.arg_names, args))
        config, tuned = self.configs[0], False
        if len(self.configs) > 1:
            every = {**nargs, **kwargs}
            key = tuple(_key_value(every[k]) for k in self.keys if k in every)
            key += tuple(str(v.dtype) for v in every.values() if hasattr(v, "dtype") and hasattr(v, "shape"))
            target = self._target(kwargs, every.values())
            if (target, key) not in self.cache:
                self.cache[target, key] = self._stored(key, target) or self._tune(key, target, args, nargs, grid,
                                                                                  kwargs)
                tuned = True
                self.pre_hook({**nargs, **kwargs, **self.cache[target, key].all_kwargs()}, reset_only=True)
            config = self.cache[target, key]
        self.best_config = config
        if tuned and os.environ.get("TRITON_PRINT_AUTOTUNING") == "1":
            print(f"autotuning {self.base_fn.__name__} took {self.bench_time:.3f} s; best config: {config}")
        if config.pre_hook is not None:
            config.pre_hook({**nargs, **kwargs, **config.all_kwargs()})
        return self.fn.run(*args, grid=grid, **kwargs, **config.all_kwargs())

    def _tune(self, key: tuple, target: str, args, nargs, grid, kwargs) -> Config:
        start = time.perf_counter()
        configs = self.prune_configs(nargs, kwargs)
        timings = {c: self._bench(args, nargs, grid, kwargs, c) for c in configs}
        self.bench_time = time.perf_counter() - start
        self.configs_timings = timings
        best = builtins.min(timings, key=lambda c: _as_list(timings[c]))
        if math.isinf(_as_list(timings[best])[0]):
            raise TuneError(f"autotune of {self.base_fn.__name__}: every config failed ({len(configs)} tried)")
        self._store(key, target, timings)
        return best

    # --- the tuning database ---------------------------------------------------------------------------
    def _db(self):
        if self.database is None or not isinstance(self.database, str | Path):
            return self.database
        from ..tune.database import Database

        self.database = Database(self.database)
        return self.database

    def _workload(self, key: tuple) -> _Workload:
        text = json.dumps({"kernel": self.base_fn.src, "configs": [c.describe() for c in self.configs],
                           "key": [repr(k) for k in key]}, sort_keys=True)
        digest = hashlib.sha256(text.encode()).hexdigest()
        return _Workload(f"triton:{digest}", f"triton.autotune:{self.base_fn.__name__}", text)

    def _target(self, kwargs: dict, values) -> str:
        """The key of the target a launch with these keyword arguments and argument values
        compiles for (kept per target option, GPU arguments or not, and the environment the
        compiler reads: making a Target at each launch cost more than the launch)."""
        if interpret():
            return "interpret"
        kwargs = {} if "target" in self.arg_names else kwargs
        values = list(values)
        memo = (kwargs.get("target"), any(map(on_device, values)), relaunch.environment())
        try:
            return self._targets[memo]
        except KeyError:
            pass
        except TypeError:  # an unhashable target option
            return self.base_fn.launch_target(kwargs, values).key
        key = self._targets[memo] = self.base_fn.launch_target(kwargs, values).key
        return key

    def _stored(self, key: tuple, target: str) -> Config | None:
        db = self._db()
        if db is None:
            return None
        record = db.best(self._workload(key).key, target)
        if record is None:
            return None
        stored = dict(record.trace.instructions[0].attrs).get("config")
        return next((c for c in self.configs if json.dumps(c.describe()) == stored), None)

    def _store(self, key: tuple, target: str, timings: dict) -> None:
        db = self._db()
        if db is None:
            return
        from ..tir.schedule import Trace
        from ..tir.schedule.trace import Instruction
        from ..tune.measure import MeasureResult

        workload = self._workload(key)
        db.commit_workload(workload, target)
        for config, timing in timings.items():
            median_ms = _as_list(timing)[0]
            result = (MeasureResult((), "failed") if math.isinf(median_ms)
                      else MeasureResult((median_ms / 1e3,)))
            trace = Trace([Instruction("triton_config", (), (("config", json.dumps(config.describe())),), ())])
            db.add(workload.key, target, trace, result)


@dataclass(frozen=True)
class _Workload:
    """What the tuning database records of a workload (the fields of a tune.Task it reads)."""

    key: str
    name: str
    func: str
    flops: int = 0


def _as_list(timing) -> list[float]:
    return list(timing) if isinstance(timing, list | tuple) else [timing]


def autotune(configs: list[Config], key: list[str], prune_configs_by: dict | None = None, reset_to_zero=None,
             restore_value=None, pre_hook=None, post_hook=None, warmup: float | None = None,
             rep: float | None = None, use_cuda_graph: bool = False, do_bench: Callable | None = None,
             cache_results: bool = False, database=None):
    """`@triton.autotune(configs=[...], key=[...])` over a `@triton.jit` kernel (see the module)."""
    def decorate(fn):
        return Autotuner(fn, fn.arg_names, configs, key, reset_to_zero, restore_value, pre_hook=pre_hook,
                         post_hook=post_hook, prune_configs_by=prune_configs_by, warmup=warmup, rep=rep,
                         do_bench=do_bench, database=database)

    return decorate


class Heuristics(KernelInterface):
    """Meta-parameters computed at each launch from the arguments (`values`: name -> function of
    the dict of arguments)."""

    def __init__(self, fn, arg_names: list[str], values: dict[str, Callable]):
        self.fn = fn
        self.base_fn = getattr(fn, "base_fn", fn)
        self.arg_names = list(arg_names)
        self.values = dict(values)

    def run(self, *args, grid, **kwargs):
        for name, heuristic in self.values.items():
            kwargs[name] = heuristic({**dict(zip(self.arg_names, args)), **kwargs})
        return self.fn.run(*args, grid=grid, **kwargs)


def heuristics(values: dict[str, Callable]):
    """`@triton.heuristics({"EVEN_N": lambda args: args["n"] % args["BLOCK"] == 0})`."""
    return lambda fn: Heuristics(fn, fn.arg_names, values)
