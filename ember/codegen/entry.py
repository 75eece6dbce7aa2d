"""The entry function of a compiled model: one C function that runs every kernel in order.

Generated apart from the kernels (Inductor's wrapper), and appended to the translation unit
that holds them:

    int ember_model_run(void* const* inputs, void* const* outputs, char* workspace,
                        const int64_t* offsets, void* const* weights, const int64_t* sizes,
                        int num_threads)

A kernel argument points into the model's inputs, its outputs, its weights, or the workspace
(at `offsets[k]`, the memory plan's offset of workspace tensor k for this call's sizes); a
kernel's size arguments are entries of `sizes`, the model's symbolic dimensions. Outputs that no
kernel writes (an input or a weight returned as is, an output listed twice) are copied at the
end. `num_threads` > 0 sets the OpenMP threads of the calling thread first. Returns 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ENTRY = "ember_model_run"
KINDS = ("input", "output", "weight", "workspace", "size")


@dataclass(frozen=True)
class Ref:
    """Entry `index` of one of the entry function's arrays (KINDS)."""

    kind: str
    index: int

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"reference kind {self.kind!r} is not one of {KINDS}")

    def c(self) -> str:
        match self.kind:
            case "input" | "output" | "weight":
                return f"{self.kind}s[{self.index}]"
            case "workspace":
                return f"(void*)(workspace + offsets[{self.index}])"
            case _:
                return f"sizes[{self.index}]"


@dataclass(frozen=True)
class KernelCall:
    symbol: str  # the kernel's C name
    args: tuple[Ref, ...]  # one per buffer parameter
    sizes: tuple[Ref, ...]  # one per size parameter ("size" references)
    comment: str = ""


@dataclass(frozen=True)
class Copy:
    """dst = src, `itemsize` bytes per element, `dims` ints or "size" references."""

    dst: Ref
    src: Ref
    dims: tuple[int | Ref, ...]
    itemsize: int


def render_entry(calls: Sequence[KernelCall], copies: Sequence[Copy] = ()) -> str:
    """The C text of the entry function."""
    lines = [
        "/* The model: every kernel in order (ember.codegen.entry). */",
        f"int {ENTRY}(void* const* inputs, void* const* outputs, char* workspace, const int64_t* offsets,",
        "                    void* const* weights, const int64_t* sizes, int num_threads) {",
        "  (void)inputs; (void)outputs; (void)workspace; (void)offsets; (void)weights; (void)sizes;",
        "  if (num_threads > 0) ember_set_num_threads(num_threads);",
    ]
    for call in calls:
        if call.comment:
            comment = " ".join(call.comment.replace("*/", "* /").split())
            lines.append(f"  /* {comment} */")
        args = ", ".join([r.c() for r in call.args] + [r.c() for r in call.sizes])
        lines.append(f"  {call.symbol}({args});")
    for cp in copies:
        count = " * ".join([f"(size_t){d.c() if isinstance(d, Ref) else d}" for d in cp.dims] + [str(cp.itemsize)])
        lines.append(f"  __builtin_memcpy({cp.dst.c()}, {cp.src.c()}, {count});")
    lines += ["  return 0;", "}"]
    return "\n".join(lines)
