"""A torch module's compile through the model cache (ember.runtime.model_cache): its key before
any trace (ember.frontend.module_key), else its first trace's (ember.frontend.torch.module), each
with the options' key; a hit loaded whole, a miss compiled and kept under both keys. Also the
CompiledModel of a saved folder (`from_artifact`: ember.load and the cache's hits)."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

from . import config
from .compile_stats import Clock, CompileStats, with_import
from .passes.bf16_weights import kept_fp32
from .passes.pipeline import disabled_passes_of
from .passes.plan_memory import MemoryPlan
from .runtime.model import CompiledModel
from .runtime.segmented import SegmentedModel
from .target import Target, as_target


def compile_module(model, example_inputs, dynamic_shapes, options: dict, clock: Clock, cache: str,
                   compile_graph: Callable[..., CompiledModel | SegmentedModel]) -> CompiledModel | SegmentedModel:
    """A torch module through the model cache (ember.runtime.model_cache; not cached where
    `_options_key` is None): loaded whole where a process compiled the same module with the same options before,
    found by the module's key (ember.frontend.module_key: nothing traced), else by its trace (a
    recording or torch.export's: ember.frontend.torch.module.first_trace, then the digest of its
    program and weights); else converted, compiled by `compile_graph` (ember.compiler's, which
    imports this module) and kept under both keys."""
    from .frontend.module_key import module_key
    from .runtime import model_cache

    options_key = _options_key(options)
    inputs = (example_inputs,) if isinstance(example_inputs, sys.modules["torch"].Tensor) else tuple(example_inputs)
    keyed = cache == "module" and options_key is not None
    mkey, unkeyed = module_key(model, inputs, dynamic_shapes) if keyed else (None, "")
    mkey = None if mkey is None else f"module {mkey}|{options_key}"
    key = None if mkey is None else model_cache.aliased(mkey)
    if key is not None and (hit := _hit(key, clock, options, untraced=True)) is not None:
        return hit
    from .frontend.torch.digest import program_digest
    from .frontend.torch.module import checked_inputs, first_trace, import_traced, symbol_names

    example_inputs = checked_inputs(example_inputs)
    traced, exported = first_trace(model, example_inputs, dynamic_shapes)
    program = None if options_key is None else \
        program_digest(traced, symbol_names(traced, model, example_inputs, dynamic_shapes))
    key = None if program is None else f"{program}|{options_key}"
    if key is not None and (hit := _hit(key, clock, options, unkeyed=unkeyed)) is not None:
        if mkey is not None:
            model_cache.alias(mkey, key)
        return hit
    import_s, import_cpu = clock.lap()
    graph = import_traced(traced, model, example_inputs, dynamic_shapes)
    more_s, more_cpu = clock.lap()
    compiled = compile_graph(graph, **options)
    if isinstance(compiled, CompiledModel):
        clock.lap()
        kept = (0.0, 0.0)
        if key is not None and type(compiled) is CompiledModel:  # (a CUDA or interpreted model is not saved)
            model_cache.put(key, compiled, aliases=() if mkey is None else (mkey,))  # (saved in the background)
            kept = clock.lap()
        compiled.stats = dataclasses.replace(
            with_import(compiled.stats, import_s + more_s, import_cpu + more_cpu, kept=kept), unkeyed=unkeyed,
            exported=exported)
    return compiled


def _hit(key: str, clock: Clock, options: dict, untraced: bool = False, unkeyed: str = "") -> CompiledModel | None:
    """The model of the model cache's entry `key` with the stats of a hit (the import: `clock`'s
    lap less the load), or None: no entry."""
    from .runtime import model_cache

    load = Clock()
    art = model_cache.get(key)
    if art is None:
        return None
    compiled = from_artifact(art, options.get("num_threads"))
    (load_s, load_cpu), (total_s, total_cpu) = load.lap(), clock.lap()
    import_s, import_cpu = total_s - load_s, total_cpu - load_cpu
    compiled.stats = CompileStats(0, len(art.spec.kernels), 0, 0, 0.0, 0.0, 0.0, import_s + load_s, True, hit=True,
                                  import_s=import_s, load_s=load_s, cpu={"import": import_cpu, "load": load_cpu},
                                  kept_fp32=_kept_fp32(compiled, options), untraced=untraced, unkeyed=unkeyed)
    return compiled


def _options_key(options: dict) -> str | None:
    """What of the options and the configuration a compiled model depends on, as text, or None
    where the model cache does not apply: turned off, a target other than C, output asked for
    (printed IR, debug checks), or options it cannot key (a tuning database, schedules, host
    functions, weights given quantized). num_threads and jobs change no compiled code."""
    if not config.get("model_cache") or config.get("debug") or config.get("print_lower") or config.get("print_ir"):
        return None
    if options.get("print_ir") or any(options.get(o) is not None for o in ("database", "schedules", "host")):
        return None
    if not isinstance(options.get("weights"), str | None):
        return None
    target = as_target(options.get("target", "c"), cc=options.get("cc"), cflags=options.get("cflags"))
    if target.kind != "c":
        return None
    checked = options.get("checked")
    rest = {k: v for k, v in options.items() if k not in ("num_threads", "jobs", "target", "cc", "cflags", "checked")}
    return repr((sorted(rest.items()), target, target.key, config.get("checked") if checked is None else bool(checked),
                 config.get("disable_passes")))


def _kept_fp32(compiled: CompiledModel, options: dict) -> tuple[str, ...]:
    """The products of a bf16 model from the model cache that kept fp32 (as its compile said)."""
    if options.get("precision") != "bf16" or "bf16_weights" in disabled_passes_of(options.get("disabled_passes", ())) \
            or compiled.graph is None:
        return ()
    return tuple(kept_fp32(compiled.graph))


def from_artifact(art, num_threads: int | None) -> CompiledModel:
    """The CompiledModel of a folder read and checked (ember.runtime.artifact.read_artifact)."""
    # (a model saved before manifests recorded the alignment was built for the default one)
    plan = MemoryPlan.from_json(art.workspace, art.spec.target.get("align", Target.align))
    return CompiledModel(art.spec, art.library, art.weights, plan,
                         graph=art.read_graph if art.has_graph else None, source=art.source,
                         num_threads=config.threads(num_threads), own_weights=True)
