"""The tile language's compiler: a kernel's Python AST to ember's loop IR, C and a native library.

frontend.py walks the AST (values.py: the compile-time values; ops.py: arithmetic with Triton's
typing; builtins.py: the tl.* calls); lower.py builds the loop nests of block operations;
launch.py specializes, caches and calls. `launch(jit_fn, grid, bound, options)` is what
`JITFunction.run` calls.
"""

from .launch import Compiled, launch, prepare

__all__ = ["Compiled", "launch", "prepare"]
