"""A 2-layer LSTM over a sequence (input and hidden 256, 64 steps, batch 1) returning its output
sequence. small=True: hidden 64, 16 steps."""

import torch
from torch import nn


class SequenceLSTM(nn.Module):
    def __init__(self, size: int, layers: int):
        super().__init__()
        self.lstm = nn.LSTM(size, size, num_layers=layers)

    def forward(self, x):
        return self.lstm(x)[0]


def lstm(small: bool = False, batch: int = 1):
    torch.manual_seed(0)
    size, steps = (64, 16) if small else (256, 64)
    return SequenceLSTM(size, 2).eval(), (torch.randn(steps, batch, size),)
