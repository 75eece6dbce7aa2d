"""The tile language's compiler: a kernel's Python AST to ember's loop IR, C and a native library.

frontend/ walks the AST (values.py: the compile-time values; ops.py: arithmetic with Triton's
typing; builtins/: the tl.* calls); an Emitter (emitter.py: the interface) builds the loop nests
of block operations, vector.py the CPU's (affine.py: the analysis of masks and offsets it reads),
cuda/ the GPU's; launch.py specializes, caches and calls (relaunch.py: a launch like an earlier
one, without binding and specializing again). Each package holds one idea a module, each a layer
of its class (frontend.Frontend, builtins.Builtins, cuda.CUDAEmitter). `launch(jit_fn, grid,
bound, options, target)` is what `JITFunction.run` calls (the compiler reads a kernel as a
function.KernelFunction), for the launch's target; the Emitter is that target's backend's
(`tile_emitter`).

Not compiled yet (each a TileError naming the kernel's line): `return` inside a loop, or of a
value under a run-time condition (the early-return idiom `if c: return` is supported); shifts
by a run-time amount (by a constant they are); bitcasts; run-time loop steps; tl.where between
pointers; element types the loop IR lacks (bfloat16, uint16/32/64 until it has them).
"""

from .launch import Compiled, launch, prepare

__all__ = ["Compiled", "launch", "prepare"]
