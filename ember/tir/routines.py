"""The routines a `CallRoutine` may name, and their calling conventions: the operators that emit
the calls (ember.ops) and the code generators that implement them (ember.codegen.routines) both
read them here.

attention (params: mask "none" | "bool" | "additive", causal: bool, lanes: the target's float32
lanes, the routine's vector width, appended: bool, absent when false), float32: softmax(q k^T + mask)
v for the query rows q0 .. q0 + nq - 1 (nq <= ATTENTION_ROWS) of one (batch, head), with an online
softmax over blocks of keys (a running maximum and sum per row; the accumulated output rescaled
when the maximum grows), so no row of scores outlives its block of keys.

    reads:   q     q[i, e] at q + i * q_rs + e (the routine multiplies the scores by `scale`)
             k     k[j, e] at k + j * k_rs + e
             v     v[j, c] at v + j * v_rs + c
             mask  (if any) mask[i, j] at mask + i * m_rs + j * m_cs (bool: bytes, additive: float32)
             k_new, v_new  (if appended) key and value S - 1, at k_new + e and v_new + c: k and v
                   hold keys 0 .. S - 2 only (a decode step's own row after a cache read in place)
    writes:  out   out[i, c] at out + i * o_rs + c
    scalars: q0, nq, S, E, Ev, q_rs, k_rs, v_rs, o_rs, m_rs, m_cs (int64), scale (float32)

causal keeps key j for query i when j <= i. A row whose keys are all masked out is 0 (torch's).
"""

ATTENTION = "attention"
ATTENTION_ROWS = 32  # the most query rows one call takes (whole vectors of up to 32 lanes)
ATTENTION_MASKS = ("none", "bool", "additive")

ATTENTION_DECODE = "attention_decode"
"""attention_decode (params: mask as attention's, kv: "float32" | "bfloat16" | "int8", the cache's
type, lanes, dims: (E, Ev, G), the scalars' that the C writes as constants, appended: bool, absent
when false): one query of each of the H * G query heads, G of
them over each of H key/value heads (a decode step; grouped-query attention when G > 1),
softmax(q k^T + mask) v, with an online softmax over blocks of keys, every head's keys of a block
before the next block, so that a position-major cache streams once; the routine shares the blocks
among the caller's OpenMP threads itself (one per key range, merged at the end) unless it runs
inside a parallel region already.

    reads:   q     query head i's row at q + i * q_hs (float32; scaled by `scale`)
             k     key/value head h's k[j, e] at k + h * k_hs + j * k_rs + e (kv)
             v     its v[j, c] at v + h * v_hs + j * v_rs + c (kv)
             mask  (if any) query head i's key j at mask + i * m_hs + j * m_cs
             k_new, v_new  (if appended) key and value S - 1 of head h, float32, at k_new + h * kn_hs
                   and v_new + h * vn_hs
    writes:  out   query head i's row at out + i * o_hs
    scalars: H, G, S, E, Ev, q_hs, k_hs, k_rs, v_hs, v_rs, o_hs, m_hs, m_cs, kn_hs, vn_hs (int64),
             scale (float32)

Query head i = h * G + g reads key/value head h. A head whose keys are all masked out is 0 (torch's).
"""

GEMM_NBITS = "gemm_nbits"
GEMM_NBITS_STREAM = 4  # fewer rows than this stream the codes per row; more dequantize the panel once
"""gemm_nbits (params: bits 8 | 4, group: rows per scale (int8: 0, one scale per column), offsets: bool, bias:
bool, lanes: the target's float32 lanes), float32: out = x w (+ bias) for M rows of x and one
panel of a weight-only quantized w (ember.tir.nbits: the layout and its dequantization).

    reads:   x        x[m, k] at x + m * x_rs + k
             codes    the panel's codes, (K, 32) int8 or (K, 16) uint8
             scales   scales[g, c] at scales + g * s_rs + c (the panel's first column at c = 0; g = 0
                      throughout for group 0)
             offsets  (if offsets) offsets[g, c] at offsets + g * s_rs + c
             bias     (if bias) bias[c] at bias + c, 32 columns readable
    writes:  out      out[m, c] at out + m * o_rs + c for c < ncols
    scalars: M, K, ncols, x_rs, o_rs, s_rs (int64)

With `act` "int8" (a prefill on a target with VNNI: ember.passes.quantize_rows) two reads follow x,
the rows quantized by quantize_rows (xq at xq + m * K + k, uint8; their meta at meta + m * (1 + K /
32)): M >= GEMM_NBITS_STREAM rows multiply xq's integers by the codes (vpdpbusd), M < it reads x
as above. K is then a multiple of 32.

With `act` "int8_rows" (a prefill's product of constant codes on a target with VNNI:
ember.passes.quantize_rows; params residual: bool, glu: None | "silu", k: K, a constant of the C's
text, which the threads' region reads) a call is every row and
every panel, in a parallel region of its own (the threads' shares: ember.tir.nbits_split): reads
x, then the packed codes of every panel (ember.tir.nbits.pack_vnni, panel p at codes + p * p_rs),
scales (and offsets, bias) of every column, and with `residual` residual[m, c] at residual + m *
o_rs + c; writes out[m, c] for c < N; scalars M, K, N, x_rs, o_rs, s_rs, p_rs. The
rows are quantized in the call as quantize_rows quantizes them, and multiplied as act "int8"
multiplies them; the residual is added to the product; glu "silu": the codes have 2 N columns (N a
multiple of 32) and out = silu(the first N) * the last N; param activation (None | "gelu_tanh" |
"gelu", also act "int8_groups"'s): out = that activation of the product (+ bias), no residual or glu.

With `act` "int8_groups" (a decode step's GEMV on a target with VNNI and VBMI:
ember.passes.quantize_rows; param xgroup: x's columns per scale, ember.tir.nbits.row_group's) the
two reads after x are quantize_groups' (xq at xq + m * K + k, int8; meta at meta + m * 2 * (K /
xgroup)), and every row multiplies xq's integers by the codes: out = sum over x's groups of xs_g *
(scales[g] * (sum_k xq q) + offsets[g] * sum_k xq), int4's symmetric codes q - 8, int8 per channel
the same scales in every group (x itself is not read).
"""

QUANTIZE_ROWS = "quantize_rows"
"""quantize_rows (params: none), float32 -> uint8: each row of x quantized to 8 bits, as the int8
products of gemm_nbits read it: s = max |x[m, :]| / 127 (1 for a zero row; NaN for a row with a
NaN or an infinity, whose output row is then NaN), xq = rint(x * (127 / max)) + 128 in 1..255, so
that x ~ s (xq - 128); and the float32 sum of each block of 32 columns
of x (int4 weights with zero points add offset * sum(x of the group)).

    reads:   x     x[m, k] at x + m * x_rs + k
    writes:  xq    xq[m, k] at xq + m * K + k
             meta  meta[m, 0] = s, meta[m, 1 + b] = sum of x[m, 32 b: 32 b + 32], at meta + m * (1 + K / 32)
    scalars: M, K, x_rs (int64); K a multiple of 32
"""

QUANTIZE_GROUPS = "quantize_groups"
"""quantize_groups (params: group), float32 -> int8: each row of x quantized per group of `group`
columns, as gemm_nbits' act "int8_groups" reads it (llama.cpp's Q8_0 at the group of row_group):
s_g = max |x[m, group g]| / 127 (1 for a zero group; NaN for a group with a NaN or an infinity,
whose row's output is then NaN), xq = rint(x * (127 / max)) in -127..127, so
that x ~ s_g xq; and each group's sum of xq (exact in float32), which the symmetric codes' 8 and
zero points' offsets multiply.

    reads:   x     x[m, k] at x + m * x_rs + k
    writes:  xq    xq[m, k] at xq + m * K + k
             meta  meta[m, 2 g] = s_g, meta[m, 2 g + 1] = sum of xq over group g, at meta + m * 2 * (K / group)
    scalars: M, K, x_rs (int64); K a multiple of group
"""

WINOGRAD_INPUT = "winograd_input"
WINOGRAD_PRODUCT = "winograd_product"
"""Winograd's F(m x m, 3 x 3) over NCHW{b}c tensors (ember.tir.winograd: the matrices, the packed
weights u (alpha^2, OC/ob, C, ob)), float32, in two routines around a scratch V (alpha^2, rows, C),
rows the tiles rounded up to whole calls of winograd_product. Tiles are numbered over (image,
tile row, tile column) of a grid_h x grid_w grid of m x m output tiles.

winograd_input (params: m, ib: the input's channel block, r: tiles a call): V[tap, p, :] =
B^T d B of input tiles p0 .. p0 + r - 1 (zero for p >= P), d the alpha x alpha window of x at
(p's tile row * m - pad_t, p's tile column * m - pad_l), zero outside x.

    reads:   x  (N, C/ib, H, W, ib)
    writes:  v  (alpha^2, rows, C)
    scalars: p0, P, rows, C, H, W, grid_h, grid_w, pad_t, pad_l, N (int64)

winograd_product (params: m, c: the input channels, ob: the output's channel block, r, rg: r x rg tiles a call, nb:
blocks of ob output channels a call, bias, residual, relu: bool): for tiles p0 .. p0 + r * rg - 1
below P and output channel blocks j * nb .. j * nb + nb - 1, A^T (sum_c U . V) A, plus bias, plus
the residual at the same place, ReLU, written where inside the OH x OW output.

    reads:   v, u, bias (OC,) if bias, res (N, OC/ob, OH, OW, ob) if residual
    writes:  y  (N, OC/ob, OH, OW, ob)
    scalars: p0, j, P, rows, OCB (= OC / ob), OH, OW, grid_h, grid_w, N (int64)
"""
