"""Winograd's minimal filtering for 3x3 convolutions (Lavin and Gray, "Fast Algorithms for
Convolutional Neural Networks", 2016): F(m x m, 3 x 3) computes an m x m tile of outputs from an
alpha x alpha tile of inputs (alpha = m + 2) with alpha^2 products per channel pair where the
direct form takes 9 m^2:

    Y = A^T [ (G g G^T) . (B^T d B) ] A        (. : elementwise; summed over input channels)

F(2x2) (alpha 4, 2.25x fewer products) and F(4x4) (alpha 6, 4x fewer) over the points 0, +-1
(and +-2, infinity). The larger tile rounds more: its transforms carry coefficients up to 8 (A)
and 5 (B), and G's 1/6 and 1/24 are inexact in binary.

The packed weights, U = G g G^T per (output, input) channel pair, are laid out as the conv2d_winograd
routine reads them (ember.tir.routines): (alpha^2, OC/ob, C, ob), a vector of ob output channels
per (tap, block, input channel). The NumPy forms of the transforms (float64) are the operator's
reference and the interpreter's twins of the routines.
"""

from __future__ import annotations

import numpy as np

TILES = (2, 4)  # the output tile sizes m of F(m x m, 3 x 3)

_MATRICES = {
    2: ([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
        [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
        [[1, 1, 1, 0], [0, 1, -1, -1]]),
    4: ([[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0], [0, -2, -1, 2, 1, 0],
         [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
        [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
         [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
        [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]]),
}


def matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) in float64: (alpha, alpha), (alpha, 3), (m, alpha)."""
    bt, g, at = _MATRICES[m]
    return np.array(bt, np.float64), np.array(g, np.float64), np.array(at, np.float64)


def pack_weights(w: np.ndarray, m: int, ob: int) -> np.ndarray:
    """OIHW 3x3 weights (OC a multiple of ob) as U = G w G^T in the routine's layout
    (alpha^2, OC/ob, C, ob), float32 (the transform in float64, rounded once)."""
    _, g, _ = matrices(m)
    oc, c = w.shape[:2]
    u = np.einsum("ea,ocab,nb->enoc", g, w.astype(np.float64), g)  # (alpha, alpha, OC, C)
    alpha = m + 2
    u = u.reshape(alpha * alpha, oc // ob, ob, c).transpose(0, 1, 3, 2)
    return np.ascontiguousarray(u.astype(np.float32))


def tile_grid(out_h: int, out_w: int, m: int) -> tuple[int, int]:
    """Tiles down and across an out_h x out_w output (the last ones partial)."""
    return -(-out_h // m), -(-out_w // m)


def tile_origin(p, grid: tuple[int, int], m: int, pads: tuple[int, int]):
    """(image, tile row, tile column, first input row, first input column) of tile(s) p."""
    grid_h, grid_w = grid
    ty, tx = p // grid_w % grid_h, p % grid_w
    return p // (grid_h * grid_w), ty, tx, ty * m - pads[0], tx * m - pads[1]


def transform_input(x: np.ndarray, m: int, pads: tuple[int, int], grid: tuple[int, int], first: int,
                    count: int) -> np.ndarray:
    """B^T d B of the input tiles first .. first + count - 1 (numbered over (image, tile row, tile
    column)) of NCHW x, zero outside x: (count, alpha^2, C) in float64."""
    bt, _, _ = matrices(m)
    alpha = m + 2
    n, c, h, w = x.shape
    img, _, _, top, left = tile_origin(np.arange(first, first + count), grid, m, pads)
    padded = np.zeros((n, c, h + 2 * alpha, w + 2 * alpha))
    padded[:, :, alpha:alpha + h, alpha:alpha + w] = x
    rows = (top + alpha)[:, None] + np.arange(alpha)[None, :]  # (count, alpha)
    cols = (left + alpha)[:, None] + np.arange(alpha)[None, :]
    d = padded[img[:, None, None, None], np.arange(c)[None, :, None, None], rows[:, None, :, None],
               cols[:, None, None, :]]  # (count, C, alpha, alpha)
    return np.einsum("ea,pcab,nb->penc", bt, d, bt).reshape(count, alpha * alpha, c)


def transform_output(v: np.ndarray, u: np.ndarray, m: int) -> np.ndarray:
    """A^T (sum over channels of U . V) A for transformed tiles v (count, alpha^2, C) and packed
    weights u: (count, OC, m, m) in float64."""
    _, _, at = matrices(m)
    alpha, count = m + 2, v.shape[0]
    oc = u.shape[1] * u.shape[3]
    uu = u.astype(np.float64).transpose(0, 2, 1, 3).reshape(alpha * alpha, u.shape[2], oc)
    prod = np.einsum("pkc,kco->pko", v.astype(np.float64), uu).reshape(count, alpha, alpha, oc)
    return np.einsum("ie,penk,jn->pkij", at, prod, at)


def convolve(x: np.ndarray, u: np.ndarray, m: int, pads: tuple[int, int], out_hw: tuple[int, int]) -> np.ndarray:
    """The convolution of NCHW x with packed weights u by F(m x m, 3 x 3), NCHW, in float64."""
    n = x.shape[0]
    grid = tile_grid(*out_hw, m)
    count = n * grid[0] * grid[1]
    y = transform_output(transform_input(x, m, pads, grid, 0, count), u, m)
    oc = y.shape[1]
    y = y.reshape(n, *grid, oc, m, m).transpose(0, 3, 1, 4, 2, 5).reshape(n, oc, grid[0] * m, grid[1] * m)
    return y[:, :, :out_hw[0], :out_hw[1]]
