"""Tutorial: Halide's separable blur, algorithm and schedule apart.

blur_x is computed inside blur_y's 32x256 tiles: each tile computes the (32+2) x 256 rows of
blur_x it needs, so blur_x never exists in full. `ember.lower` shows the tile buffer.

    python examples/kernels/blur.py
"""

import numpy as np

import ember
from ember import te

H, W = 1024, 1024
inp = te.placeholder((H + 2, W + 2), name="inp")
blur_x = te.compute((H + 2, W), lambda y, x: (inp[y, x] + inp[y, x + 1] + inp[y, x + 2]) / 3, name="blur_x")
blur_y = te.compute((H, W), lambda y, x: (blur_x[y, x] + blur_x[y + 1, x] + blur_x[y + 2, x]) / 3,
                    name="blur_y")
s = te.create_schedule(blur_y.op)
yo, xo, yi, xi = s[blur_y].tile(blur_y.op.axis[0], blur_y.op.axis[1], 32, 256)
xio, xii = s[blur_y].split(xi, factor=16)
s[blur_y].vectorize(xii)
s[blur_y].parallel(yo)
s[blur_x].compute_at(s[blur_y], xo)  # a (32+2) x 256 tile of blur_x per tile of blur_y
bxo, bxi = s[blur_x].split(s[blur_x].op.axis[1], factor=16)
s[blur_x].vectorize(bxi)

if __name__ == "__main__":
    print(ember.lower(s, [inp, blur_y]))
    f = ember.build(s, [inp, blur_y], target="c")
    x = np.random.rand(H + 2, W + 2).astype("float32")
    out = np.empty((H, W), "float32")
    f(x, out)
    bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3
    ref = (bx[:-2] + bx[1:-1] + bx[2:]) / 3
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    t = ember.bench(f, x, out).median

    def numpy_blur(a):
        b = (a[:, :-2] + a[:, 1:-1] + a[:, 2:]) / 3
        return (b[:-2] + b[1:-1] + b[2:]) / 3

    t_np = ember.bench(numpy_blur, x).median
    print(f"blur {H}x{W}: ember {t * 1e3:.2f} ms, NumPy {t_np * 1e3:.2f} ms ({t_np / t:.1f}x)")
