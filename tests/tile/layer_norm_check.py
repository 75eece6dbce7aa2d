"""The layer-norm tutorial's forward and backward against torch's in float64, shared by the
tutorial's tests on every launch mode and on the simulated GPU."""

import numpy as np
import torch


def assert_layer_norm_as_torch(x, w, b, dy, y, dx, dw, db):
    """y, dx, dw, db (the tutorial's outputs for x, w, b and the gradient dy) within 1e-4 of
    torch's layer_norm (eps 1e-5) and its backward."""
    tx, tw, tb = (torch.from_numpy(v).double().requires_grad_() for v in (x, w, b))
    ty = torch.nn.functional.layer_norm(tx, (x.shape[-1],), tw, tb, eps=1e-5)
    ty.backward(torch.from_numpy(dy).double())
    for got, want in ((y, ty), (dx, tx.grad), (dw, tw.grad), (db, tb.grad)):
        want = want.detach().numpy()
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * (1 + np.abs(want).max()))
