"""The routines a `CallRoutine` may name, and their calling conventions: the operators that emit
the calls (ember.ops) and the code generators that implement them (ember.codegen.routines) both
read them here.

attention (params: mask "none" | "bool" | "additive", causal: bool, lanes: the target's float32
lanes, the routine's vector width), float32: softmax(q k^T + mask)
v for the query rows q0 .. q0 + nq - 1 (nq <= ATTENTION_ROWS) of one (batch, head), with an online
softmax over blocks of keys (a running maximum and sum per row; the accumulated output rescaled
when the maximum grows), so no row of scores outlives its block of keys.

    reads:   q     q[i, e] at q + i * q_rs + e (the routine multiplies the scores by `scale`)
             k     k[j, e] at k + j * k_rs + e
             v     v[j, c] at v + j * v_rs + c
             mask  (if any) mask[i, j] at mask + i * m_rs + j * m_cs (bool: bytes, additive: float32)
    writes:  out   out[i, c] at out + i * o_rs + c
    scalars: q0, nq, S, E, Ev, q_rs, k_rs, v_rs, o_rs, m_rs, m_cs (int64), scale (float32)

causal keeps key j for query i when j <= i. A row whose keys are all masked out is 0 (torch's).
"""

ATTENTION = "attention"
ATTENTION_ROWS = 32  # the most query rows one call takes (whole vectors of up to 32 lanes)
ATTENTION_MASKS = ("none", "bool", "additive")

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
"""
