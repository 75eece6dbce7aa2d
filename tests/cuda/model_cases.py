"""The models the CUDA model tests compile (an MLP, a small CNN, a transformer block), each with a
function making example inputs, and what the tests share: the simulated GPU target and the
tolerance against torch."""

import torch

from ember.target import Target

SIMULATED = Target("cuda", simulate=True)
TOL = 1e-4


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(2, 4, 3, padding=1)
        self.fc = torch.nn.Linear(4 * 3 * 3, 5)

    def forward(self, x):
        y = torch.nn.functional.max_pool2d(torch.relu(self.conv(x)), 2)
        return self.fc(y.flatten(1))


class Block(torch.nn.Module):
    """A transformer block: layer norm, causal attention over 2 heads, a GELU MLP, residuals."""

    def __init__(self, d=16, heads=2):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.proj = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.up, self.down = torch.nn.Linear(d, 2 * d), torch.nn.Linear(2 * d, d)
        self.heads = heads

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)  # one fused kernel on the GPU
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


MODELS = {
    "mlp": (lambda: torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)),
            lambda: torch.randn(2, 16)),
    "cnn": (SmallCNN, lambda: torch.randn(1, 2, 6, 6)),
    "transformer block": (Block, lambda: torch.randn(1, 4, 16)),
}

