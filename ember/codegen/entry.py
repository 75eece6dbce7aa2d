"""The entry function of a compiled model: one C function that runs every kernel in order.

Generated apart from the kernels (Inductor's wrapper), and appended to the translation unit
that holds them:

    int ember_model_run(void* const* inputs, void* const* outputs, char* workspace,
                        const int64_t* offsets, void* const* weights, const int64_t* sizes,
                        int num_threads)

A kernel argument points into the model's inputs, its outputs, its weights, or the workspace
(at `offsets[k]`, the memory plan's offset of workspace tensor k for this call's sizes); a
kernel's size arguments are entries of `sizes`, the model's symbols (a dimension that is an
expression of them, "past + 1", is computed from them: `SizeExpr`). A view (a reshape
of a contiguous buffer, ember.passes.plan_memory) makes no call: its readers are handed the bytes
it views; a kernel writing in place is handed the same workspace offset for an input and its output.
Outputs that no kernel writes (an input or a weight returned as is, an output listed twice) are
copied at the end. `num_threads` > 0 sets the OpenMP threads of the calling thread first. Returns 0.

Checked mode (the `checked` option, ember.codegen.c): every kernel takes `&status`, a local of
this call (so concurrent calls from several threads never see each other's), and stores 1 there
when it divides an integer by zero; the entry then returns k + 1, k the index of that call in
`ember_model_profile_calls`, without running the calls after it. CompiledModel raises
ZeroDivisionError naming the kernel.

Its profiling twin, `ember_model_profile`, takes one more argument, `int64_t* ticks` (one more
entry than there are calls), runs the same calls and copies, and stores CLOCK_MONOTONIC
nanoseconds before the first call and after each one; `ember_model_profile_calls` names the
kernel of each call (a NULL-terminated array of C strings). CompiledModel.profile uses both.

`render_spec(text)` renders `const char* ember_model_spec(void)`, which returns `text`: the model's
contract (ember.runtime.contract), so that the library itself says what it expects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

ENTRY = "ember_model_run"
PROFILE_ENTRY = "ember_model_profile"
PROFILE_CALLS = "ember_model_profile_calls"
SPEC = "ember_model_spec"
SPEC_LINE = 96  # characters of the spec per line of C string literal
_C_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\"}
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
class SizeExpr:
    """A dimension that is an expression of the model's symbols (ember.dims): the sum over `terms`
    of coefficient * the product of the `sizes` entries it names."""

    terms: tuple[tuple[tuple[int, ...], int], ...]

    def c(self) -> str:
        parts = [" * ".join([str(c)] * (c != 1 or not idx) + [f"sizes[{i}]" for i in idx]) for idx, c in self.terms]
        return "(" + " + ".join(parts or ["0"]) + ")"

    def value(self, sizes) -> int:
        total = 0
        for idx, c in self.terms:
            for i in idx:
                c *= int(sizes[i])
            total += c
        return total


@dataclass(frozen=True)
class KernelCall:
    symbol: str  # the kernel's C name
    args: tuple[Ref, ...]  # one per buffer parameter
    sizes: tuple[Ref, ...]  # one per size parameter ("size" references)
    comment: str = ""


@dataclass(frozen=True)
class Copy:
    """dst = src, `itemsize` bytes per element, `dims` ints, "size" references or SizeExprs."""

    dst: Ref
    src: Ref
    dims: tuple[int | Ref | SizeExpr, ...]
    itemsize: int


def render_entry(calls: Sequence[KernelCall], copies: Sequence[Copy] = (), *, checked: bool = False) -> str:
    """The C text of the entry function, then of its profiling twin (`checked`: the kernels take
    a status pointer, see the module doc)."""
    names = ", ".join([f'"{call.symbol}"' for call in calls] + ["0"])
    return "\n".join([
        "/* The model: every kernel in order (ember.codegen.entry). */",
        *_function(ENTRY, "", calls, copies, checked),
        "",
        "/* The same, timed: ticks[0] before the first call, ticks[k + 1] after call k (CLOCK_MONOTONIC ns). */",
        "#include <time.h>",
        f"const char* const {PROFILE_CALLS}[] = {{{names}}};",
        "static int64_t ember_profile_now(void) {",
        "  struct timespec t;",
        "  clock_gettime(CLOCK_MONOTONIC, &t);",
        "  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;",
        "}",
        *_function(PROFILE_ENTRY, ", int64_t* ticks", calls, copies, checked),
    ])


def _function(name: str, extra: str, calls: Sequence[KernelCall], copies: Sequence[Copy],
              checked: bool) -> list[str]:
    timed = bool(extra)
    lines = [
        f"int {name}(void* const* inputs, void* const* outputs, char* workspace, const int64_t* offsets,",
        f"                    void* const* weights, const int64_t* sizes, int num_threads{extra}) {{",
        "  (void)inputs; (void)outputs; (void)workspace; (void)offsets; (void)weights; (void)sizes;",
        "  if (num_threads > 0) ember_set_num_threads(num_threads);",
    ]
    if checked:
        lines.append("  int status = 0;")
    if timed:
        lines.append("  ticks[0] = ember_profile_now();")
    for k, call in enumerate(calls):
        if call.comment and not timed:
            comment = " ".join(call.comment.replace("*/", "* /").split())
            lines.append(f"  /* {comment} */")
        args = ", ".join([r.c() for r in call.args] + [r.c() for r in call.sizes] + ["&status"] * checked)
        lines.append(f"  {call.symbol}({args});")
        if checked:
            lines.append(f"  if (status) return {k + 1};")
        if timed:
            lines.append(f"  ticks[{k + 1}] = ember_profile_now();")
    for cp in copies:
        count = " * ".join([f"(size_t){d if isinstance(d, int) else d.c()}" for d in cp.dims] + [str(cp.itemsize)])
        lines.append(f"  __builtin_memcpy({cp.dst.c()}, {cp.src.c()}, {count});")
    lines += ["  return 0;", "}"]
    return lines


def render_spec(text: str) -> str:
    """The C text of `ember_model_spec`, a function returning `text` (escaped byte by byte)."""
    data = text.encode()
    literals = [_c_string(data[k:k + SPEC_LINE]) for k in range(0, len(data), SPEC_LINE)] or ['""']
    return "\n".join([
        "/* What this library expects (ember.runtime.contract): ember.load checks a manifest against it. */",
        f"const char* {SPEC}(void) {{",
        "  return",
        *[f"    {lit}" for lit in literals[:-1]],
        f"    {literals[-1]};",
        "}",
    ])


def _c_string(data: bytes) -> str:
    """A C string literal of these bytes: printable ASCII as is (quote and backslash escaped), the
    rest as octal escapes (which, unlike hex escapes, end after three digits; '?' too, against
    trigraphs)."""
    out = "".join(_C_ESCAPES.get(b) or (chr(b) if 32 <= b < 127 and b != ord("?") else f"\\{b:03o}")
                  for b in data)
    return f'"{out}"'
