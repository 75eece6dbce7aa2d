"""The C of the Winograd routines (ember.tir.routines: their calling conventions; ember.tir.winograd:
the matrices and the packed weights' layout), for F(m x m, 3 x 3) over NCHW{b}c tensors.

winograd_input: for R tiles, each alpha x alpha window of x (a vector of ib channels per pixel,
zero outside x; an interior tile loads without checks) is transformed in registers, B^T d B, as
straight-line vector code written here from B^T's nonzero coefficients (adds and subtracts for
the +-1s), and stored as V[tap][tile][channel]: the GEMMs' rows.

winograd_product: for T = R * RG tiles and one or two blocks of ob output channels, the alpha^2
GEMMs over the input channels, each in a register tile of R tiles x NB vectors of output
channels (each V element broadcast against NB weight vectors: the blocked convolution's
micro-kernel), kept per tap in a scratch of alpha^2 x T x NB vectors; then per tile the output
transform A^T M A in registers, the bias, the residual, the ReLU, and the stores of the tile's
pixels that lie inside the output.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..tir.winograd import matrices

if TYPE_CHECKING:
    from .c_prelude import CPrelude


def _combination(row, term) -> str:
    """sum_k row[k] * term(k) as C, the zero coefficients left out, +-1 without a product."""
    out = ""
    for k, c in enumerate(row):
        if c == 0:
            continue
        sign = "-" if c < 0 else "+"
        mag = abs(float(c))
        part = term(k) if mag == 1 else f"{mag!r}f * {term(k)}"
        out += f" {sign} {part}" if out else (f"-{part}" if c < 0 else part)
    return f"({out})"


_INPUT = """\
static void {name}(const float* restrict x, float* restrict v, int64_t p0, int64_t P, int64_t rows, int64_t C,
                   int64_t H, int64_t W, int64_t grid_h, int64_t grid_w, int64_t pad_t, int64_t pad_l, int64_t N) {{
  (void)N;
  enum {{ M = {m}, A = {alpha}, IB = {ib}, R = {r} }};
  const VI zero = (VI){{0}};
  for (int64_t p = p0; p < p0 + R; ++p) {{
    if (p >= P) {{
      for (int e = 0; e < A * A; ++e)
        for (int64_t c = 0; c < C; c += IB) *(UI*)(v + (e * rows + p) * C + c) = zero;
      continue;
    }}
    int64_t n = p / (grid_h * grid_w), top = p / grid_w % grid_h * M - pad_t, left = p % grid_w * M - pad_l;
    int inside = top >= 0 && left >= 0 && top + A <= H && left + A <= W;
    for (int64_t cb = 0; cb < C / IB; ++cb) {{
      const float* restrict base = x + (n * (C / IB) + cb) * H * W * IB;
      VI d[A][A], t[A][A];
      if (inside) {{
        for (int a = 0; a < A; ++a)
          for (int b = 0; b < A; ++b) d[a][b] = *(const UI*)(base + ((top + a) * W + left + b) * IB);
      }} else {{
        for (int a = 0; a < A; ++a)
          for (int b = 0; b < A; ++b) {{
            int64_t y = top + a, z = left + b;
            d[a][b] = zero;
            if (y >= 0 && y < H && z >= 0 && z < W) d[a][b] = *(const UI*)(base + (y * W + z) * IB);
          }}
      }}
      for (int b = 0; b < A; ++b) {{
{rows}      }}
      float* restrict out = v + p * C + cb * IB;
      for (int e = 0; e < A; ++e) {{
{cols}      }}
    }}
  }}
}}"""

_PRODUCT = """\
static void {name}(const float* restrict v, const float* restrict u,{params} float* restrict y, int64_t p0,
                   int64_t j, int64_t P, int64_t rows, int64_t OCB, int64_t OH, int64_t OW,
                   int64_t grid_h, int64_t grid_w, int64_t N) {{
  (void)N;
  enum {{ M = {m}, A = {alpha}, C = {c}, OB = {ob}, R = {r}, RG = {rg}, T = {r} * {rg}, NB = {nb} }};
  VO* restrict mbuf = aligned_alloc({align}, (sizeof(VO) * A * A * T * NB + {align} - 1) / {align} * {align});
  for (int e = 0; e < A * A; ++e) {{
    const float* restrict ue = u + (e * OCB + j * NB) * C * OB;
    for (int g = 0; g < RG && p0 + g * R < P; ++g) {{
      const float* restrict ve = v + (e * rows + p0 + g * R) * C;
      VO acc[R][NB];
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < NB; ++t) acc[r][t] = (VO){{0}};
      for (int64_t k = 0; k < C; ++k) {{
        VO w[NB];
        for (int t = 0; t < NB; ++t) w[t] = *(const UO*)(ue + (t * C + k) * OB);
#pragma GCC unroll {r}
        for (int r = 0; r < R; ++r) {{
          float a = ve[r * C + k];
          for (int t = 0; t < NB; ++t) acc[r][t] += a * w[t];
        }}
      }}
      for (int r = 0; r < R; ++r)
        for (int t = 0; t < NB; ++t) mbuf[(e * T + g * R + r) * NB + t] = acc[r][t];
    }}
  }}
  for (int64_t q = 0; q < T && p0 + q < P; ++q) {{
    int64_t p = p0 + q, n = p / (grid_h * grid_w), oy0 = p / grid_w % grid_h * M, ox0 = p % grid_w * M;
    for (int t = 0; t < NB; ++t) {{
      int64_t ocb = j * NB + t;
      VO s[M][A];
#define MM(e, f) mbuf[(((e) * A + (f)) * T + q) * NB + t]
      for (int f = 0; f < A; ++f) {{
{rows}      }}
#undef MM
      VO bias_v = {bias_load};
      for (int i = 0; i < M; ++i) {{
        VO o[M];
{cols}        for (int c = 0; c < M; ++c) {{
          int64_t oy = oy0 + i, ox = ox0 + c;
          if (oy >= OH || ox >= OW) continue;
          int64_t at = (((n * OCB + ocb) * OH + oy) * OW + ox) * OB;
          VO value = o[c] + bias_v;{residual}{relu}
          *(UO*)(y + at) = value;
        }}
      }}
    }}
  }}
  free(mbuf);
}}"""


def winograd_input(lib: CPrelude, m: int, ib: int, r: int) -> str:
    """The C function of winograd_input for F(m x m, 3 x 3), ib-channel blocks, R tiles a call."""
    name = f"ember_winograd_input_f{m}_c{ib}_r{r}"

    def make() -> str:
        bt, _, _ = matrices(m)
        alpha = m + 2
        rows = "".join(f"        t[{e}][b] = {_combination(bt[e], lambda a: f'd[{a}][b]')};\n" for e in range(alpha))
        cols = "".join(f"        *(UI*)(out + ((e * A + {f}) * rows) * C) = "
                       f"{_combination(bt[f], lambda b: f't[e][{b}]')};\n" for f in range(alpha))
        body = _INPUT.format(name=name, m=m, alpha=alpha, ib=ib, r=r, rows=rows, cols=cols)
        return (f"#define VI {lib.vec('float32', ib)}\n#define UI {lib.unaligned_vec('float32', ib)}\n{body}\n"
                "#undef VI\n#undef UI")

    return lib._helper(name, make)


def winograd_product(lib: CPrelude, m: int, c: int, ob: int, r: int, rg: int, nb: int, bias: bool, residual: bool,
                     relu: bool) -> str:
    """The C function of winograd_product: F(m x m, 3 x 3), c input channels (a constant, so that
    the register tile's r rows of V are addressed by displacements from one pointer), ob-channel
    blocks, a register tile of r tiles x nb blocks, rg tiles of r a call, the epilogue's parts."""
    flags = ("_bias" if bias else "") + ("_res" if residual else "") + ("_relu" if relu else "")
    name = f"ember_winograd_product_f{m}_k{c}_c{ob}_r{r}x{rg}_n{nb}{flags}"

    def make() -> str:
        _, _, at = matrices(m)
        alpha = m + 2
        rows = "".join(f"        s[{i}][f] = {_combination(at[i], lambda e: f'MM({e}, f)')};\n" for i in range(m))
        cols = "".join(f"        o[{c}] = {_combination(at[c], lambda f: f's[i][{f}]')};\n" for c in range(m))
        params = (" const float* restrict bias," if bias else "") + (" const float* restrict res," if residual else "")
        body = _PRODUCT.format(
            name=name, m=m, alpha=alpha, c=c, ob=ob, r=r, rg=rg, nb=nb, align=lib.align, params=params, rows=rows,
            cols=cols, bias_load="*(const UO*)(bias + ocb * OB)" if bias else "(VO){0}",
            residual="\n          value += *(const UO*)(res + at);" if residual else "",
            relu="\n          value = (VO)((IO)value & (IO)(value > (VO){0}));" if relu else "")
        return (f"#define VO {lib.vec('float32', ob)}\n#define UO {lib.unaligned_vec('float32', ob)}\n"
                f"#define IO {lib.vec('int32', ob)}\n{body}\n#undef VO\n#undef UO\n#undef IO")

    return lib._helper(name, make)
