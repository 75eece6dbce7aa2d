"""A 3-layer MLP (784-512-256-10 with GELU). small=True: 64-32-16-10."""

import torch
from torch import nn


def mlp(small: bool = False, batch: int = 1):
    torch.manual_seed(0)
    d = (64, 32, 16) if small else (784, 512, 256)
    model = nn.Sequential(nn.Linear(d[0], d[1]), nn.GELU(), nn.Linear(d[1], d[2]), nn.GELU(),
                          nn.Linear(d[2], 10)).eval()
    return model, (torch.randn(batch, d[0]),)
