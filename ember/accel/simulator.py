"""The accelerator's simulator, in C, one per description: the functions the host code calls to
issue instructions, and the counters and timeline Python reads back (ember.accel.report).

Functional: each instruction runs when it is issued, in program order, on the device's memories
(static arrays of the description's sizes) and the host's arrays (DRAM): a DMA copies rows, the
GEMM core multiplies in the accumulator's type (int8 products summed in int32 exactly, as VTA
does), a reset zeroes an accumulator tile.

Timed: three queues (load, compute, store) run in order, each its own clock. An instruction that
needs what another queue's instruction produced (a GEMM reading a tile a load wrote), or must
not overwrite what another queue still reads (a load into a tile the last GEMM read, a reset of
an accumulator tile a store reads), pops a dependence token that instruction pushed: it starts
when its queue is free and its tokens have arrived. Hazards are tracked per device buffer (each
cache stage's tile is one buffer, a "slot"), so tiles of separate buffers overlap their loads
with compute (double buffering) and tiles of one buffer do not. A token already implied by an
earlier token between the same two queues is not pushed again, as with VTA's token FIFOs. Costs
(ember.accel.spec.Costs): a DMA `latency + rows * row_cycles + bytes / bytes_per_cycle`; a GEMM
`gemm_latency` plus one cycle per core step (m x n x k); a reset one cycle per row; an ALU
operation `elements / alu_lanes`.

The state is global to the built library (one device per library): `ember_accel_begin` clears
it before a call; calls of one library must not overlap.
"""

from __future__ import annotations

from ..errors import ConfigError
from ..tir import dtype as dt
from .spec import ALU_OPS, OPCODES, QUEUES, Accelerator

TRACE_MAX = 1 << 14  # instructions whose times the timeline keeps (the first ones)
SLOTS = 64  # device buffers one kernel may stage tiles in
STATS = ("cycles", "busy_load", "busy_compute", "busy_store", "n_load", "n_gemm", "n_reset", "n_alu", "n_store",
         "bytes_inp", "bytes_wgt", "bytes_acc", "bytes_stored", "macs", "tokens_load_compute", "tokens_compute_load",
         "tokens_compute_store", "tokens_store_compute", "instructions", "traced", "errors")
OPS = tuple(OPCODES)  # the trace's opcode numbers, as the C enum below numbers them
C_TYPES = {"float32": "float", "int8": "int8_t", "int32": "int32_t", "int16": "int16_t", "uint8": "uint8_t"}


def simulator_source(accel: Accelerator) -> str:
    core, costs = accel.core, accel.costs
    for m in accel.memories:
        if m.dtype not in C_TYPES or m.role == "acc" and m.dtype not in _ALU:
            raise ConfigError(f"the simulator holds no {m.dtype} {m.role} memory ({accel.name})")
    return _SOURCE.format(
        name=accel.name, inp_t=C_TYPES[core.inp_dtype], wgt_t=C_TYPES[core.wgt_dtype], acc_t=C_TYPES[core.acc_dtype],
        inp_n=accel.inp_buffer.elements, wgt_n=accel.wgt_buffer.elements, acc_n=accel.acc_buffer.elements,
        inp_b=dt.bits(core.inp_dtype) // 8, wgt_b=dt.bits(core.wgt_dtype) // 8, acc_b=dt.bits(core.acc_dtype) // 8,
        cm=core.m, cn=core.n, ck=core.k, bpc=costs.dma_bytes_per_cycle, lat=costs.dma_latency,
        row=costs.dma_row_cycles, glat=costs.gemm_latency, alat=costs.alu_latency, lanes=costs.alu_lanes,
        **_ALU[core.acc_dtype], queues=", ".join(f"EMBER_Q_{q.upper()}" for q in QUEUES),
        ops=", ".join(f"EMBER_OP_{op}" for op in OPS),
        alu_ops=", ".join(f"EMBER_ALU_{op.upper()}" for op in ALU_OPS), trace=TRACE_MAX, slots=SLOTS, nstats=len(STATS))


# the ALU's add, mul and shr in the accumulator's type: integers wrap (computed unsigned), floats do not shift
_WRAP = {"add": "(ember_accel_acc_t)((uint{bits}_t)x + (uint{bits}_t)y)",
         "mul": "(ember_accel_acc_t)((uint{bits}_t)x * (uint{bits}_t)y)", "shr": "x >> y"}
_ALU = {"float32": {"add": "x + y", "mul": "x * y", "shr": "x"},
        **{f"int{b}": {k: v.format(bits=b) for k, v in _WRAP.items()} for b in (8, 16, 32)}}

_SOURCE = r"""/* ember.accel: the simulator of {name} (functional and timed; see ember/accel/simulator.py) */
#include <string.h>
typedef {inp_t} ember_accel_inp_t;
typedef {wgt_t} ember_accel_wgt_t;
typedef {acc_t} ember_accel_acc_t;
static ember_accel_inp_t ember_accel_inp[{inp_n}];
static ember_accel_wgt_t ember_accel_wgt[{wgt_n}];
static ember_accel_acc_t ember_accel_acc[{acc_n}];
static const int64_t ember_accel_elems[3] = {{{inp_n}, {wgt_n}, {acc_n}}};
static const int64_t ember_accel_esize[3] = {{{inp_b}, {wgt_b}, {acc_b}}};
enum {{ {queues} }};
enum {{ {ops} }};
enum {{ {alu_ops} }};

static struct {{
  int64_t clock[3], busy[3], count[5], bytes[4], macs, tokens[3][3], n, ntrace, errors;
  int64_t pushed[3][3];                    /* the latest instruction of queue p that pushed a token to q */
  int64_t w_idx[{slots}], w_end[{slots}], w_q[{slots}];  /* per slot: its last writer */
  int64_t r_idx[{slots}][3], r_end[{slots}][3];         /* per slot and queue: its last reader */
  int64_t trace[{trace}][6];               /* queue, opcode, start, end, bytes or MACs, tokens popped */
}} ember_accel;

void ember_accel_begin(void) {{
  memset(&ember_accel, 0, sizeof ember_accel);
  for (int s = 0; s < {slots}; s++) {{
    ember_accel.w_idx[s] = -1;
    for (int q = 0; q < 3; q++) ember_accel.r_idx[s][q] = -1;
  }}
  for (int p = 0; p < 3; p++) for (int q = 0; q < 3; q++) ember_accel.pushed[p][q] = -1;
}}

void ember_accel_stats(int64_t* out) {{
  int64_t end = 0;
  for (int q = 0; q < 3; q++) if (ember_accel.clock[q] > end) end = ember_accel.clock[q];
  int64_t v[{nstats}] = {{end, ember_accel.busy[0], ember_accel.busy[1], ember_accel.busy[2],
    ember_accel.count[0], ember_accel.count[1], ember_accel.count[2], ember_accel.count[3], ember_accel.count[4],
    ember_accel.bytes[0], ember_accel.bytes[1], ember_accel.bytes[2], ember_accel.bytes[3], ember_accel.macs,
    ember_accel.tokens[0][1], ember_accel.tokens[1][0], ember_accel.tokens[1][2], ember_accel.tokens[2][1],
    ember_accel.n, ember_accel.ntrace, ember_accel.errors}};
  memcpy(out, v, sizeof v);
}}

void ember_accel_trace(int64_t* out) {{
  memcpy(out, ember_accel.trace, (size_t)ember_accel.ntrace * 6 * sizeof(int64_t));
}}

/* Times one instruction of `op` on queue q that reads and writes these slots (see the module doc). */
static void ember_accel_issue(int op, int q, const int* reads, int nr, const int* writes, int nw,
                              int64_t cycles, int64_t work) {{
  int64_t idx = ember_accel.n++, need_idx[3] = {{-1, -1, -1}}, need_end[3] = {{0, 0, 0}};
#define EMBER_NEED(p, i, e) \
  do {{ if ((p) != q && (i) > need_idx[p]) {{ need_idx[p] = (i); need_end[p] = (e); }} }} while (0)
  for (int r = 0; r < nr; r++)
    if (ember_accel.w_idx[reads[r]] >= 0)
      EMBER_NEED(ember_accel.w_q[reads[r]], ember_accel.w_idx[reads[r]], ember_accel.w_end[reads[r]]);
  for (int w = 0; w < nw; w++) {{
    int s = writes[w];
    if (ember_accel.w_idx[s] >= 0) EMBER_NEED(ember_accel.w_q[s], ember_accel.w_idx[s], ember_accel.w_end[s]);
    for (int p = 0; p < 3; p++)
      if (ember_accel.r_idx[s][p] >= 0) EMBER_NEED(p, ember_accel.r_idx[s][p], ember_accel.r_end[s][p]);
  }}
#undef EMBER_NEED
  int64_t start = ember_accel.clock[q], popped = 0;
  for (int p = 0; p < 3; p++) {{
    if (need_idx[p] < 0 || need_idx[p] <= ember_accel.pushed[p][q]) continue;  /* implied by an earlier token */
    ember_accel.pushed[p][q] = need_idx[p];
    ember_accel.tokens[p][q]++;
    popped |= 1 << p;
    if (need_end[p] > start) start = need_end[p];
  }}
  int64_t end = start + cycles;
  ember_accel.clock[q] = end;
  ember_accel.busy[q] += cycles;
  ember_accel.count[op]++;
  for (int r = 0; r < nr; r++) {{ ember_accel.r_idx[reads[r]][q] = idx; ember_accel.r_end[reads[r]][q] = end; }}
  for (int w = 0; w < nw; w++) {{
    ember_accel.w_idx[writes[w]] = idx; ember_accel.w_end[writes[w]] = end; ember_accel.w_q[writes[w]] = q;
  }}
  if (ember_accel.ntrace < {trace}) {{
    int64_t* t = ember_accel.trace[ember_accel.ntrace++];
    t[0] = q; t[1] = op; t[2] = start; t[3] = end; t[4] = work; t[5] = popped;
  }}
}}

static int64_t ember_accel_dma_cycles(int64_t rows, int64_t bytes) {{
  return {lat} + rows * {row} + (bytes + {bpc} - 1) / {bpc};
}}

/* Whether rows x cols elements at `at`, `stride` apart, lie inside memory `mem`. */
static int ember_accel_inside(int mem, int64_t at, int64_t rows, int64_t cols, int64_t stride) {{
  int64_t last = at + (rows - 1) * stride + cols;
  int ok = rows > 0 && cols > 0 && at >= 0 && last <= ember_accel_elems[mem]
        && (rows == 1 || stride >= cols || stride == 0);  /* 0: one row read for every row (a bias) */
  if (!ok) ember_accel.errors++;
  return ok;
}}

/* Whether elements first..last lie inside memory `mem`. */
static int ember_accel_span(int mem, int64_t first, int64_t last) {{
  return first >= 0 && last < ember_accel_elems[mem];
}}

static void* ember_accel_memory(int mem) {{
  return mem == 0 ? (void*)ember_accel_inp : mem == 1 ? (void*)ember_accel_wgt : (void*)ember_accel_acc;
}}

/* LOAD: rows x cols elements from DRAM (rows `dram_stride` apart) into memory `mem` (0 inp, 1 wgt
   on the load queue; 2 acc, a bias, on the compute queue). */
static void ember_accel_load(int mem, int slot, int64_t sram, const void* dram, int64_t rows, int64_t cols,
                             int64_t dram_stride, int64_t sram_stride) {{
  int64_t es = ember_accel_esize[mem], bytes = rows * cols * es;
  if (ember_accel_inside(mem, sram, rows, cols, sram_stride))
    for (int64_t r = 0; r < rows; r++)
      memcpy((char*)ember_accel_memory(mem) + (sram + r * sram_stride) * es,
             (const char*)dram + r * dram_stride * es, (size_t)(cols * es));
  ember_accel.bytes[mem] += bytes;
  ember_accel_issue(EMBER_OP_LOAD, mem == 2 ? EMBER_Q_COMPUTE : EMBER_Q_LOAD, NULL, 0, &slot, 1,
                    ember_accel_dma_cycles(rows, bytes), bytes);
}}

/* STORE: rows x cols accumulator elements back to DRAM. */
static void ember_accel_store(int slot, int64_t sram, void* dram, int64_t rows, int64_t cols,
                              int64_t dram_stride, int64_t sram_stride, int64_t out_bytes) {{
  int64_t es = ember_accel_esize[2], bytes = rows * cols * out_bytes;
  if (ember_accel_inside(2, sram, rows, cols, sram_stride))
    for (int64_t r = 0; r < rows; r++) {{
      const ember_accel_acc_t* from = ember_accel_acc + sram + r * sram_stride;
      if (out_bytes == es)
        memcpy((char*)dram + r * dram_stride * es, from, (size_t)(cols * es));
      else  /* narrowed to an integer of out_bytes (two's complement: the low bytes), as VTA's out */
        for (int64_t c = 0; c < cols; c++) {{
          int64_t v = (int64_t)from[c];
          memcpy((char*)dram + (r * dram_stride + c) * out_bytes, &v, (size_t)out_bytes);
        }}
    }}
  ember_accel.bytes[3] += bytes;
  ember_accel_issue(EMBER_OP_STORE, EMBER_Q_STORE, &slot, 1, NULL, 0, ember_accel_dma_cycles(rows, bytes), bytes);
}}

/* RESET: an m x n accumulator tile to zero. */
static void ember_accel_reset(int slot, int64_t acc, int64_t m, int64_t n, int64_t asi, int64_t asj) {{
  if (asi >= 0 && asj >= 0 && ember_accel_span(2, acc, acc + (m - 1) * asi + (n - 1) * asj))
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) ember_accel_acc[acc + i * asi + j * asj] = 0;
  else ember_accel.errors++;
  ember_accel_issue(EMBER_OP_RESET, EMBER_Q_COMPUTE, NULL, 0, &slot, 1, m, 0);
}}

/* ALU: d = a OP (b, or imm where bs < 0) over rows x cols accumulator elements, each operand's
   rows `*rs` apart; shr shifts right arithmetically by imm. Integers wrap as NumPy's do. */
static void ember_accel_alu(int op, int ds, int as, int bs, int64_t d, int64_t a, int64_t b, int64_t imm,
                            int64_t rows, int64_t cols, int64_t drs, int64_t ars, int64_t brs) {{
  int ok = ember_accel_inside(2, d, rows, cols, drs) && ember_accel_inside(2, a, rows, cols, ars)
        && (bs < 0 || ember_accel_inside(2, b, rows, cols, brs));
  if (ok)
    for (int64_t r = 0; r < rows; r++)
      for (int64_t c = 0; c < cols; c++) {{
        ember_accel_acc_t x = ember_accel_acc[a + r * ars + c];
        ember_accel_acc_t y = bs < 0 ? (ember_accel_acc_t)imm : ember_accel_acc[b + r * brs + c], z;
        switch (op) {{
          case EMBER_ALU_ADD: z = {add}; break;
          case EMBER_ALU_MAX: z = x > y ? x : y; break;
          case EMBER_ALU_MIN: z = x < y ? x : y; break;
          case EMBER_ALU_MUL: z = {mul}; break;
          default: z = {shr}; break;
        }}
        ember_accel_acc[d + r * drs + c] = z;
      }}
  int reads[2] = {{as, bs}};
  ember_accel_issue(EMBER_OP_ALU, EMBER_Q_COMPUTE, reads, bs < 0 ? 1 : 2, &ds, 1,
                    {alat} + (rows * cols + {lanes} - 1) / {lanes}, rows * cols);
}}

/* GEMM: acc[i, j] (+)= sum_k inp[i, k] * wgt[j, k] over an m x n x k block, in core steps of
   {cm} x {cn} x {ck}; `reset` starts from zero. */
static void ember_accel_gemm(int reset, int si, int sw, int sa, int64_t inp, int64_t wgt, int64_t acc,
                             int64_t m, int64_t n, int64_t k, int64_t isi, int64_t isk, int64_t wsj, int64_t wsk,
                             int64_t asi, int64_t asj) {{
  int ok = isi >= 0 && isk >= 0 && wsj >= 0 && wsk >= 0 && asi >= 0 && asj >= 0
        && ember_accel_span(0, inp, inp + (m - 1) * isi + (k - 1) * isk)
        && ember_accel_span(1, wgt, wgt + (n - 1) * wsj + (k - 1) * wsk)
        && ember_accel_span(2, acc, acc + (m - 1) * asi + (n - 1) * asj);
  if (!ok) ember_accel.errors++;
  if (ok)
    for (int64_t i = 0; i < m; i++)
      for (int64_t j = 0; j < n; j++) {{
        ember_accel_acc_t sum = reset ? 0 : ember_accel_acc[acc + i * asi + j * asj];
        for (int64_t kk = 0; kk < k; kk++)
          sum += (ember_accel_acc_t)ember_accel_inp[inp + i * isi + kk * isk]
               * (ember_accel_acc_t)ember_accel_wgt[wgt + j * wsj + kk * wsk];
        ember_accel_acc[acc + i * asi + j * asj] = sum;
      }}
  int64_t steps = ((m + {cm} - 1) / {cm}) * ((n + {cn} - 1) / {cn}) * ((k + {ck} - 1) / {ck});
  int reads[3] = {{si, sw, sa}};
  ember_accel.macs += m * n * k;
  ember_accel_issue(EMBER_OP_GEMM, EMBER_Q_COMPUTE, reads, reset ? 2 : 3, &sa, 1, {glat} + steps, m * n * k);
}}
"""
