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
copied at the end. `num_threads` > 0 sets the OpenMP threads of the calling thread for the call, and
its own setting comes back on return (torch.set_num_threads is the same setting): the helpers of
`c_prelude.enter_threads`, which the unit the entry is appended to holds (CRenderer.render_unit),
as the launchers of single kernels use them. Returns 0.

Control flow runs here, in C, with no Python per iteration (ember.ops.control): a `Branch` runs the
calls of one region or the other on the one-byte condition it reads; a `Loop` keeps its iteration
number and condition in C locals that the body reads through `local` references, copies the
initial carried values into the loop's outputs, then, while the iteration number is below the
trip count and the condition holds, points its `Slice` locals at this iteration's slice of each
scanned input and scan output, runs the body and reads the body's condition. The carried values
are double-buffered: the body reads them through one local pointer and writes the new ones
through another (`Loop.carried`: the loop's output buffer and a `next` buffer of the plan), and
the two are swapped after each iteration, so no carried value is copied per iteration; after the
loop, a value whose last iteration left it in the `next` buffer is copied to the output. A local
reference is a `void*` named after its index. In the profiling twin, the calls of a branch not
taken take no time, those of a loop the time of its last iteration.

A Ctrl-C stops a loop: Python runs its SIGINT handler only between bytecodes, never while the
entry function runs, so a loop of 10^15 iterations would ignore it. A unit with loops holds a
SIGINT handler of its own (`ember_catch_sigint`: installed once per process by
ember.runtime.interrupt, chained to the handler it replaces, so Python still raises
KeyboardInterrupt) that sets a flag; `ember_interrupt_flag` points at the process's flag (the
runtime sets it on load; NULL: never interrupted). The entry function clears the flag when it
starts, each iteration reads it, and a set flag returns INTERRUPTED (-1) at once.

Status: a kernel that takes one (`KernelCall.status`: every kernel in checked mode, the `checked`
option of ember.codegen.c; in every mode a kernel that checks indices read at run time, the loop
IR's INDEX intrinsic) is passed `status`, an `int64_t[3]` local of this call (so concurrent calls
from several threads never see each other's). A kernel stores 1 to status[0] when it divides an
integer by zero (checked mode), 2 when an index is out of range (its value and the axis size in
status[1] and status[2]); the entry then returns, without running the calls after it, k + 1 for a
division and -(k + 2) for an index (-1 is INTERRUPTED), k the index of that call in `ember_model_profile_calls`, and
keeps the index and the size for the calling thread, which `void ember_model_index_error(int64_t*
out)` copies to out[0] and out[1]. CompiledModel raises ZeroDivisionError or
IndexOutOfRangeError naming the kernel.

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

from .c_prelude import enter_threads

ENTRY = "ember_model_run"
PROFILE_ENTRY = "ember_model_profile"
PROFILE_CALLS = "ember_model_profile_calls"
INDEX_ERROR = "ember_model_index_error"
SPEC = "ember_model_spec"
INTERRUPT_FLAG = "ember_interrupt_flag"  # volatile sig_atomic_t*: the process's SIGINT flag, or NULL
INTERRUPT_HERE = "ember_interrupt_here"  # this unit's flag, which its handler sets
CATCH_SIGINT = "ember_catch_sigint"  # int (void): install the handler; 0 done, 1 no handler to chain to
INTERRUPTED = -1  # the entry function's return code when a SIGINT stopped a loop

_INTERRUPTS = f"""/* Ctrl-C in loops (ember.codegen.entry): a SIGINT handler chained to the one it replaces. */
#include <signal.h>
#include <string.h>
volatile sig_atomic_t {INTERRUPT_HERE} = 0;
volatile sig_atomic_t* {INTERRUPT_FLAG} = 0;
static struct sigaction ember_sigint_before;
static void ember_on_sigint(int sig, siginfo_t* info, void* context) {{
  {INTERRUPT_HERE} = 1;
  if (ember_sigint_before.sa_flags & SA_SIGINFO) ember_sigint_before.sa_sigaction(sig, info, context);
  else ember_sigint_before.sa_handler(sig);
}}
int {CATCH_SIGINT}(void) {{
  struct sigaction ours;
  if (sigaction(SIGINT, 0, &ember_sigint_before) != 0) return 1;
  if (!(ember_sigint_before.sa_flags & SA_SIGINFO) &&
      (ember_sigint_before.sa_handler == SIG_DFL || ember_sigint_before.sa_handler == SIG_IGN)) return 1;
  memset(&ours, 0, sizeof ours);
  ours.sa_sigaction = ember_on_sigint;
  ours.sa_flags = (ember_sigint_before.sa_flags | SA_SIGINFO) & ~SA_RESETHAND;
  ours.sa_mask = ember_sigint_before.sa_mask;
  return sigaction(SIGINT, &ours, 0) != 0;
}}
"""
SPEC_LINE = 96  # characters of the spec per line of C string literal
_C_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\"}
KINDS = ("input", "output", "weight", "workspace", "size", "local")


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
            case "local":
                return f"loc{self.index}"
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
    status: bool = False  # the kernel takes the call's status (see the module doc)


@dataclass(frozen=True)
class Copy:
    """dst = src, `itemsize` bytes per element, `dims` ints, "size" references or SizeExprs."""

    dst: Ref
    src: Ref
    dims: tuple[int | Ref | SizeExpr, ...]
    itemsize: int


@dataclass(frozen=True)
class Branch:
    """Run `then` when the byte at `cond` is not 0, else `other`."""

    cond: Ref
    then: tuple
    other: tuple


@dataclass(frozen=True)
class Slice:
    """Local `local` points at entry i (from the end: length - 1 - i, where `reverse`) of the
    tensor at `base`, whose entries are `dims` elements of `itemsize` bytes."""

    local: int
    base: Ref
    dims: tuple[int | Ref, ...]
    itemsize: int
    length: int | Ref
    reverse: bool = False


@dataclass(frozen=True)
class Carried:
    """A loop-carried value, double-buffered: read through local `current`, written through local
    `new`, swapped after each iteration (see Loop)."""

    current: int
    new: int
    output: Ref
    next: Ref
    dims: tuple[int | Ref, ...]
    itemsize: int


@dataclass(frozen=True)
class Loop:
    """Loop number `index`: its iteration number and condition (an int64 and a byte) are locals
    `iteration` and `cond` point at; `init` copies run first, then the iterations (see the module
    doc): `slices`, `body`, the condition read from `cond_out`. `carried`: per carried value, the
    local the body reads it through (first at `output`), the local the body writes it through
    (first at `next`), its dimensions and item size."""

    index: int
    trips: Ref
    cond_in: Ref
    iteration: int
    cond: int
    init: tuple[Copy, ...]
    slices: tuple[Slice, ...]
    body: tuple
    cond_out: Ref
    carried: tuple[Carried, ...]


Stmt = KernelCall | Copy | Branch | Loop


def render_entry(calls: Sequence[Stmt], copies: Sequence[Copy] = ()) -> str:
    """The C text of the entry function, then of its profiling twin. `calls`: the kernel calls in
    order, and the branches and loops that hold calls of their own."""
    names = ", ".join([f'"{call.symbol}"' for call in kernel_calls(calls)] + ["0"])
    checked = any(call.status for call in kernel_calls(calls))
    failed = [
        "/* An index out of range, kept for the calling thread (see ember.codegen.entry). */",
        "static __thread int64_t ember_model_index[2];",
        f"void {INDEX_ERROR}(int64_t* out) {{ out[0] = ember_model_index[0]; out[1] = ember_model_index[1]; }}",
        "static int ember_model_failed(const int64_t* status, int call) {",
        "  if (status[0] != 2) return call;",
        "  ember_model_index[0] = status[1];",
        "  ember_model_index[1] = status[2];",
        f"  return {INTERRUPTED} - call;",
        "}",
        "",
    ]
    return "\n".join([
        *([_INTERRUPTS] if _has_loops(calls) else []),
        *failed * checked,
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


def kernel_calls(stmts: Sequence, kind: type = KernelCall) -> list:
    """Every kernel call, those inside branches and loops too, in the order of the text (`kind`:
    the class of a call, KernelCall or the interpreter's)."""
    out = []
    for st in stmts:
        match st:
            case kind():
                out.append(st)
            case Branch():
                out += kernel_calls(st.then, kind) + kernel_calls(st.other, kind)
            case Loop():
                out += kernel_calls(st.body, kind)
    return out


def _has_loops(stmts: Sequence[Stmt]) -> bool:
    return any(isinstance(st, Loop) or (isinstance(st, Branch) and _has_loops([*st.then, *st.other]))
               for st in stmts)


def _function(name: str, extra: str, calls: Sequence[Stmt], copies: Sequence[Copy],
              checked: bool) -> list[str]:
    timed = bool(extra)
    lines = [
        f"int {name}(void* const* inputs, void* const* outputs, char* workspace, const int64_t* offsets,",
        f"                    void* const* weights, const int64_t* sizes, int num_threads{extra}) {{",
        "  (void)inputs; (void)outputs; (void)workspace; (void)offsets; (void)weights; (void)sizes;",
        f"  {enter_threads('num_threads')}",
    ]
    if checked:
        lines.append("  int64_t status[3] = {0, 0, 0};")
    if _has_loops(calls):
        lines.append(f"  if ({INTERRUPT_FLAG}) *{INTERRUPT_FLAG} = 0;")
    if timed:
        lines.append("  ticks[0] = ember_profile_now();")
    lines += _statements([*calls, *copies], "  ", timed, checked, [0])
    lines += ["  return 0;", "}"]
    return lines


def _statements(stmts: Sequence[Stmt], pad: str, timed: bool, checked: bool, counter: list[int]) -> list[str]:
    """The C lines of these statements; counter[0]: the number of kernel calls rendered so far."""
    lines = []
    for st in stmts:
        match st:
            case KernelCall():
                k = counter[0]
                counter[0] += 1
                if st.comment and not timed:
                    comment = " ".join(st.comment.replace("*/", "* /").split())
                    lines.append(f"{pad}/* {comment} */")
                args = ", ".join([r.c() for r in st.args] + [r.c() for r in st.sizes] + ["status"] * st.status)
                lines.append(f"{pad}{st.symbol}({args});")
                if st.status:
                    lines.append(f"{pad}if (status[0]) return ember_model_failed(status, {k + 1});")
                if timed:
                    lines.append(f"{pad}ticks[{k + 1}] = ember_profile_now();")
            case Copy():
                lines.append(f"{pad}__builtin_memcpy({st.dst.c()}, {st.src.c()}, {_bytes(st.dims, st.itemsize)});")
            case Branch():
                a = counter[0]
                b, c = a + len(kernel_calls(st.then)), a + len(kernel_calls(st.then)) + len(kernel_calls(st.other))
                lines.append(f"{pad}if (*(const unsigned char*){st.cond.c()}) {{")
                lines += _statements(st.then, pad + "  ", timed, checked, counter)
                lines += _untimed(range(b, c), pad + "  ", timed)
                lines.append(f"{pad}}} else {{")
                lines += _untimed(range(a, b), pad + "  ", timed)
                lines += _statements(st.other, pad + "  ", timed, checked, counter)
                lines.append(f"{pad}}}")
            case Loop():
                i, n, c = f"it{st.index}", f"trips{st.index}", f"cond{st.index}"
                lines += [f"{pad}{{",
                          f"{pad}  int64_t {i} = 0, {n} = *(const int64_t*){st.trips.c()};",
                          f"{pad}  unsigned char {c} = *(const unsigned char*){st.cond_in.c()};",
                          f"{pad}  void* loc{st.iteration} = &{i};",
                          f"{pad}  void* loc{st.cond} = &{c};",
                          f"{pad}  (void)loc{st.iteration}; (void)loc{st.cond};"]
                lines += _statements(st.init, pad + "  ", timed, checked, counter)
                lines += [f"{pad}  void* loc{v.current} = {v.output.c()}; void* loc{v.new} = {v.next.c()};"
                          for v in st.carried]
                lines += _untimed(range(counter[0], counter[0] + len(kernel_calls(st.body))), pad + "  ", timed)
                lines.append(f"{pad}  for (; {i} < {n} && {c}; ++{i}) {{")
                lines.append(f"{pad}    if ({INTERRUPT_FLAG} && *{INTERRUPT_FLAG}) return {INTERRUPTED};")
                for sl in st.slices:
                    length = sl.length.c() if isinstance(sl.length, Ref) else sl.length
                    at = f"({length} - 1 - {i})" if sl.reverse else i
                    lines.append(f"{pad}    void* loc{sl.local} = (char*){sl.base.c()} + (size_t){at} * "
                                 f"{_bytes(sl.dims, sl.itemsize)};")
                    lines.append(f"{pad}    (void)loc{sl.local};")
                lines += _statements(st.body, pad + "    ", timed, checked, counter)
                lines.append(f"{pad}    {c} = *(const unsigned char*){st.cond_out.c()};")
                lines += [f"{pad}    {{ void* t = loc{v.current}; loc{v.current} = loc{v.new}; loc{v.new} = t; }}"
                          for v in st.carried]
                lines.append(f"{pad}  }}")
                lines += [f"{pad}  if (loc{v.current} != {v.output.c()}) "
                          f"__builtin_memcpy({v.output.c()}, loc{v.current}, {_bytes(v.dims, v.itemsize)});"
                          for v in st.carried]
                lines.append(f"{pad}}}")
    return lines


def _untimed(calls: range, pad: str, timed: bool) -> list[str]:
    """Profiling: the calls of a branch not taken, or of a loop before it runs, take no time."""
    return [f"{pad}ticks[{k + 1}] = ember_profile_now();" for k in calls] if timed else []


def _bytes(dims: Sequence[int | Ref | SizeExpr], itemsize: int) -> str:
    return " * ".join([f"(size_t){d if isinstance(d, int) else d.c()}" for d in dims] + [str(itemsize)])


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
