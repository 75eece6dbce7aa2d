"""The helpers a unit's C needs around its values: the OpenMP threads of a call (set for the
call, the caller's setting given back when it returns), per-thread scratch and heap sizes at the
unit's alignment, and the checked INDEX intrinsic, which records an index out of range in the
kernel's status (ember.codegen.entry).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .c_prelude import CPrelude

# The loop IR's INDEX intrinsic: an index i of an axis of n, negative counting from the end; one
# out of range gives 0 (inside the axis: nothing is read or written outside a tensor) and the
# first thread to see one stores 2 to status[0], i to status[1] and n to status[2]. That path is a
# cold function of its own, so the loop around the test keeps its registers (inlined, GCC
# computed the loop's index arithmetic twice around it).
_INDEX = """\
__attribute__((cold, noinline)) static int64_t ember_index_failed(int64_t i, int64_t n, int64_t* status) {
  int64_t none = 0;
  if (__atomic_compare_exchange_n(status, &none, 2, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    status[1] = i;
    status[2] = n;
  }
  return 0;
}

static inline int64_t ember_index(int64_t i, int64_t n, int64_t* status) {
  int64_t w = i < 0 ? i + n : i;
  return __builtin_expect((uint64_t)w < (uint64_t)n, 1) ? w : ember_index_failed(i, n, status);
}"""

# A call's OpenMP threads (a kernel's launcher, a model's entry): ember_enter_threads(n) gives the
# calling thread n threads when n > 0 and returns its setting before; ember_leave_threads, the
# cleanup of the variable that holds it, gives that setting back when the call returns, however it
# returns. The setting is the calling thread's own (torch.set_num_threads sets the same one).
_THREADS = """\
static inline int ember_enter_threads(int n) {
#ifdef _OPENMP
  if (n <= 0) return 0;
  int before = omp_get_max_threads();
  if (before != n) omp_set_num_threads(n);
  return before;
#else
  (void)n;
  return 0;
#endif
}
static inline void ember_leave_threads(const int* before) {
#ifdef _OPENMP
  if (*before > 0 && *before != omp_get_max_threads()) omp_set_num_threads(*before);
#else
  (void)before;
#endif
}"""


# A routine's own parallel region (one call, one region, rather than a loop's): the calling
# thread's team where the call is not inside a parallel region already, at most `enough` threads
# (its work over a thread's least) and one per item (the units it splits).
_TEAM = """\
static inline int ember_team(int64_t enough, int64_t items) {
#ifdef _OPENMP
  if (omp_in_parallel()) return 1;
  int64_t t = omp_get_max_threads();
  if (enough < t) t = enough;
  if (items < t) t = items;
  return t < 1 ? 1 : (int)t;
#else
  (void)enough; (void)items;
  return 1;
#endif
}"""


def enter_threads(count: str) -> str:
    """The C declaration that starts a function: the rest of the call runs on `count` (an int
    expression: 0 keeps the calling thread's setting) OpenMP threads, and the calling thread's
    setting comes back when the function returns (the helpers: `threads`)."""
    return (f"const int ember_threads_before __attribute__((cleanup(ember_leave_threads))) = "
            f"ember_enter_threads({count});")


def index(lib: CPrelude) -> str:
    """`int64_t ember_index(int64_t i, int64_t n, int64_t* status)`: the INDEX intrinsic."""
    return lib._helper("ember_index", lambda: _INDEX)


def threads(lib: CPrelude) -> None:
    """The helpers of `enter_threads`."""
    lib._helper("ember_enter_threads", lambda: _THREADS)


def team(lib: CPrelude) -> str:
    """`int ember_team(int64_t enough, int64_t items)`: the threads of a routine's own parallel
    region (_TEAM)."""
    return lib._helper("ember_team", lambda: _TEAM)


def padded_bytes(lib: CPrelude) -> str:
    """`size_t ember_padded_bytes(int64_t count, size_t size)`: bytes for aligned_alloc at the
    unit's alignment (a multiple of it)."""
    name = "ember_padded_bytes"
    return lib._helper(name, lambda: (
        f"static inline size_t {name}(int64_t count, size_t size) {{\n"
        "  size_t bytes = count > 0 ? (size_t)count * size : 1;\n"
        f"  return (bytes + {lib.align - 1}) / {lib.align} * {lib.align};  "
        "/* aligned_alloc wants a multiple of the alignment */\n}"
    ))


def thread_scratch(lib: CPrelude) -> str:
    """`void* ember_thread_scratch(size_t bytes)`: this thread's scratch of at least `bytes`
    at the unit's alignment, kept for the thread's life and grown when asked for more. A
    routine called per tile (a panel's dequantized or repacked codes) takes it instead of
    aligned_alloc and free per call, which returned the pages to the system above malloc's
    trim threshold and faulted them in again at every call."""
    name = "ember_thread_scratch"
    return lib._helper(name, lambda: (
        f"static void* {name}(size_t bytes) {{\n"
        "  static __thread void* buf = NULL;\n"
        "  static __thread size_t cap = 0;\n"
        "  if (bytes > cap) {\n"
        "    free(buf);\n"
        f"    cap = (bytes + {lib.align - 1}) / {lib.align} * {lib.align};\n"
        f"    buf = aligned_alloc({lib.align}, cap);\n"
        "  }\n"
        "  return buf;\n}"
    ))
