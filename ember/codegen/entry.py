"""The entry function of a compiled model: its call program (ember.program) as one C function.

The C backend's wrapper renderer (ember.backends.c): generated apart from the kernels
(Inductor's wrapper), and appended to the translation unit that holds them:

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
`c_runtime.enter_threads`, which the unit the entry is appended to holds (CRenderer.render_unit),
as the launchers of single kernels use them. Returns 0.

Control flow runs here, in C, with no Python per iteration (ember.ops.control): a `Branch` runs the
calls of one region or the other on the one-byte condition it reads; a `Loop` keeps its iteration
number and condition in C locals that the body reads through `local` references, copies the
initial carried values into the loop's outputs, then, while the iteration number is below the
trip count and the condition holds, points its `Slice` locals at this iteration's slice of each
scanned input and scan output, runs the body and reads the body's condition. The carried values
are double-buffered (`Loop.carried`). A local
reference is a `void*` named after its index. In the profiling twin, the calls of a branch not
taken take no time, those of a loop the time of its last iteration.

A Ctrl-C stops a loop: Python runs its SIGINT handler only between bytecodes, never while the
entry function runs, so a loop of 10^15 iterations would ignore it. A unit with loops holds a
SIGINT handler of its own (`ember_catch_sigint`: installed once per process by
ember.runtime.interrupt, chained to the handler it replaces, so Python still raises
KeyboardInterrupt) that sets a flag; `ember_interrupt_flag` points at the process's flag (the
runtime sets it on load; NULL: never interrupted). The entry function clears the flag when it
starts, each iteration reads it, and a set flag returns INTERRUPTED (-1) at once.

Status: a kernel that takes one (`status`, the names of such kernels: every kernel in checked
mode, the `checked` option of ember.codegen.c; in every mode a kernel that checks indices read at
run time, the loop IR's INDEX intrinsic) is passed `status`, an `int64_t[3]` local of this call (so
concurrent calls from several threads never see each other's). A kernel stores 1 to status[0]
when it divides an integer by zero (checked mode), 2 when an index is out of range (its value and
the axis size in status[1] and status[2]); the entry then returns, without running the calls after
it, k + 1 for a division and -(k + 2) for an index (-1 is INTERRUPTED), k the index of that call in
`ember_model_profile_calls`, and keeps the index and the size for the calling thread, which `void
ember_model_index_error(int64_t* out)` copies to out[0] and out[1]. CompiledModel raises
ZeroDivisionError or IndexOutOfRangeError naming the kernel.

Its profiling twin, `ember_model_profile`, takes one more argument, `int64_t* ticks`, runs the
same calls and copies, and at each boundary j (before the first call, then after each of the N
calls) reads three clocks in nanoseconds: ticks[j] the wall clock (CLOCK_MONOTONIC) where call
j - 1 ended, ticks[N + 1 + j] the calling thread's CPU clock (CLOCK_THREAD_CPUTIME_ID), ticks[2 *
(N + 1) + j] the wall clock again, where call j starts. The CPU clock is a system call (about a
microsecond on a loaded machine, against 60 ns for the wall clock), so it is read between two
readings of the wall clock and no call's wall time holds it. `ember_model_profile_calls` names the
kernel of each call (a NULL-terminated array of C strings). CompiledModel.profile uses both.

`render_spec(text)` renders `const char* ember_model_spec(void)`, which returns `text`: the model's
contract (ember.runtime.contract), so that the library itself says what it expects.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..program import Branch, Copy, Launch, Loop, Ref, SizeExpr, Stmt, launches
from .c import kernel_symbol
from .c_runtime import enter_threads

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


def render_entry(body: Sequence[Stmt], *, status: frozenset[str] = frozenset()) -> str:
    """The C text of the entry function, then of its profiling twin, running the statements of a
    call program (ember.program: Program.body) in order (`status`: the kernels that take the call's
    status, see the module doc)."""
    calls = len(launches(body))
    names = ", ".join([f'"{kernel_symbol(call.kernel)}"' for call in launches(body)] + ["0"])
    checked = any(call.kernel in status for call in launches(body))
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
        *([_INTERRUPTS] if _has_loops(body) else []),
        *failed * checked,
        "/* The model: every kernel in order (ember.codegen.entry). */",
        *_function(ENTRY, "", body, checked, status),
        "",
        "/* The same, timed: the clocks at each boundary between calls (see ember.codegen.entry). */",
        "#include <time.h>",
        f"const char* const {PROFILE_CALLS}[] = {{{names}}};",
        "static int64_t ember_profile_now(clockid_t clock) {",
        "  struct timespec t;",
        "  clock_gettime(clock, &t);",
        "  return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;",
        "}",
        "static void ember_profile_tick(int64_t* ticks, int j) {",
        "  ticks[j] = ember_profile_now(CLOCK_MONOTONIC);",
        f"  ticks[{calls + 1} + j] = ember_profile_now(CLOCK_THREAD_CPUTIME_ID);",
        f"  ticks[{2 * (calls + 1)} + j] = ember_profile_now(CLOCK_MONOTONIC);",
        "}",
        *_function(PROFILE_ENTRY, ", int64_t* ticks", body, checked, status),
    ])


def _has_loops(stmts: Sequence[Stmt]) -> bool:
    return any(isinstance(st, Loop) or (isinstance(st, Branch) and _has_loops([*st.then, *st.other]))
               for st in stmts)


def _function(name: str, extra: str, body: Sequence[Stmt], checked: bool, status: frozenset[str]) -> list[str]:
    timed = bool(extra)
    lines = [
        f"int {name}(void* const* inputs, void* const* outputs, char* workspace, const int64_t* offsets,",
        f"                    void* const* weights, const int64_t* sizes, int num_threads{extra}) {{",
        "  (void)inputs; (void)outputs; (void)workspace; (void)offsets; (void)weights; (void)sizes;",
        f"  {enter_threads('num_threads')}",
    ]
    if checked:
        lines.append("  int64_t status[3] = {0, 0, 0};")
    if _has_loops(body):
        lines.append(f"  if ({INTERRUPT_FLAG}) *{INTERRUPT_FLAG} = 0;")
    if timed:
        lines.append("  ember_profile_tick(ticks, 0);")
    lines += _statements(body, "  ", timed, status, [0])
    lines += ["  return 0;", "}"]
    return lines


def _statements(stmts: Sequence[Stmt], pad: str, timed: bool, status: frozenset[str], counter: list[int]) -> list[str]:
    """The C lines of these statements; counter[0]: the number of kernel calls rendered so far."""
    lines = []
    for st in stmts:
        match st:
            case Launch():
                k = counter[0]
                counter[0] += 1
                if st.comment and not timed:
                    comment = " ".join(st.comment.replace("*/", "* /").split())
                    lines.append(f"{pad}/* {comment} */")
                takes = st.kernel in status
                args = ", ".join([_ref(a.ref) for a in st.args] + [_ref(r) for r in st.sizes] + ["status"] * takes)
                lines.append(f"{pad}{kernel_symbol(st.kernel)}({args});")
                if takes:
                    lines.append(f"{pad}if (status[0]) return ember_model_failed(status, {k + 1});")
                if timed:
                    lines.append(f"{pad}ember_profile_tick(ticks, {k + 1});")
            case Copy():
                lines.append(f"{pad}__builtin_memcpy({_ref(st.dst)}, {_ref(st.src)}, {_bytes(st.dims, st.itemsize)});")
            case Branch():
                a = counter[0]
                b, c = a + len(launches(st.then)), a + len(launches(st.then)) + len(launches(st.other))
                lines.append(f"{pad}if (*(const unsigned char*){_ref(st.cond)}) {{")
                lines += _statements(st.then, pad + "  ", timed, status, counter)
                lines += _untimed(range(b, c), pad + "  ", timed)
                lines.append(f"{pad}}} else {{")
                lines += _untimed(range(a, b), pad + "  ", timed)
                lines += _statements(st.other, pad + "  ", timed, status, counter)
                lines.append(f"{pad}}}")
            case Loop():
                i, n, c = f"it{st.index}", f"trips{st.index}", f"cond{st.index}"
                lines += [f"{pad}{{",
                          f"{pad}  int64_t {i} = 0, {n} = *(const int64_t*){_ref(st.trips)};",
                          f"{pad}  unsigned char {c} = *(const unsigned char*){_ref(st.cond_in)};",
                          f"{pad}  void* loc{st.iteration} = &{i};",
                          f"{pad}  void* loc{st.cond} = &{c};",
                          f"{pad}  (void)loc{st.iteration}; (void)loc{st.cond};"]
                lines += _statements(st.init, pad + "  ", timed, status, counter)
                lines += [f"{pad}  void* loc{v.current} = {_ref(v.output)}; void* loc{v.new} = {_ref(v.next)};"
                          for v in st.carried]
                lines += _untimed(range(counter[0], counter[0] + len(launches(st.body))), pad + "  ", timed)
                lines.append(f"{pad}  for (; {i} < {n} && {c}; ++{i}) {{")
                lines.append(f"{pad}    if ({INTERRUPT_FLAG} && *{INTERRUPT_FLAG}) return {INTERRUPTED};")
                for sl in st.slices:
                    length = _ref(sl.length) if isinstance(sl.length, Ref) else sl.length
                    at = f"({length} - 1 - {i})" if sl.reverse else i
                    lines.append(f"{pad}    void* loc{sl.local} = (char*){_ref(sl.base)} + (size_t){at} * "
                                 f"{_bytes(sl.dims, sl.itemsize)};")
                    lines.append(f"{pad}    (void)loc{sl.local};")
                lines += _statements(st.body, pad + "    ", timed, status, counter)
                lines.append(f"{pad}    {c} = *(const unsigned char*){_ref(st.cond_out)};")
                lines += [f"{pad}    {{ void* t = loc{v.current}; loc{v.current} = loc{v.new}; loc{v.new} = t; }}"
                          for v in st.carried]
                lines.append(f"{pad}  }}")
                lines += [f"{pad}  if (loc{v.current} != {_ref(v.output)}) "
                          f"__builtin_memcpy({_ref(v.output)}, loc{v.current}, {_bytes(v.dims, v.itemsize)});"
                          for v in st.carried]
                lines.append(f"{pad}}}")
    return lines


def _ref(r: Ref) -> str:
    """A reference as C: an entry of the entry function's arrays, or a local."""
    match r.kind:
        case "input" | "output" | "weight":
            return f"{r.kind}s[{r.index}]"
        case "workspace":
            return f"(void*)(workspace + offsets[{r.index}])"
        case "local":
            return f"loc{r.index}"
        case _:
            return f"sizes[{r.index}]"


def _dim(d: int | Ref | SizeExpr) -> str:
    if isinstance(d, SizeExpr):
        parts = [" * ".join([str(c)] * (c != 1 or not idx) + [f"sizes[{i}]" for i in idx]) for idx, c in d.terms]
        return "(" + " + ".join(parts or ["0"]) + ")"
    return _ref(d) if isinstance(d, Ref) else str(d)


def _untimed(calls: range, pad: str, timed: bool) -> list[str]:
    """Profiling: the calls of a branch not taken, or of a loop before it runs, take no time."""
    return [f"{pad}ember_profile_tick(ticks, {k + 1});" for k in calls] if timed else []


def _bytes(dims: Sequence[int | Ref | SizeExpr], itemsize: int) -> str:
    return " * ".join([f"(size_t){_dim(d)}" for d in dims] + [str(itemsize)])


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
