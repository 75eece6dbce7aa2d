"""A Triton-compatible tile language, compiled to C for the CPU.

    import ember.triton as triton
    import ember.triton.language as tl

    @triton.jit
    def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    add_kernel[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)

function.py is a @jit function as the compiler and interpreter read it, jit.py launches it;
language/ declares the language; compiler/ turns a kernel into loop IR and C;
interpreter/ runs it over NumPy (EMBER_INTERPRET=1 or TRITON_INTERPRET=1); autotune.py chooses
meta-parameters (`@triton.autotune`, `@triton.heuristics`, `triton.Config`); testing.py times and
checks (`triton.testing.do_bench`, `assert_close`); utils.py has `cdiv` and `next_power_of_2`.
"""

from . import language, testing
from .autotune import Autotuner, Config, Heuristics, autotune, heuristics
from .jit import JITFunction, KernelInterface, jit
from .utils import cdiv, next_power_of_2

__all__ = ["Autotuner", "Config", "Heuristics", "JITFunction", "KernelInterface", "autotune", "cdiv", "heuristics",
           "jit", "language", "next_power_of_2", "testing"]
