"""The layers where hub CNNs and audio/vision models ran slower than torch eager, as small torch
models: ember against torch eager at batch 1 on --threads threads, in one process, alternating
rounds (the best median of each), checked against eager first.

    python benchmarks/conv_models.py [--models wav2vec2_encoder resnext_block ...] [--rounds 3]
                                     [--runs 20] [--threads 2] [--profile]

The models: wav2vec2's convolutional feature encoder (Conv1d k=10 s=5 over 16000 samples, then
k=3 s=2 and k=2 s=2 ones, GroupNorm on the first, GELU), a ResNeXt bottleneck (grouped 3x3,
32 groups), a DenseNet dense block (concatenation after every layer), DeepLabV3's dilated 3x3 at
a large map, a MobileNet depthwise block, bilinear upsampling of a large map, and ViT's patch
embedding with one attention layer at 197 tokens.

Measured on the project's 2-core AMD EPYC (Zen 5 class, AVX-512F/BW/VL/VNNI/BF16), shared and
heavily loaded (load average 15-19: figures vary 2x between runs), one thread, best of 2 rounds
of 8, each tree in its own process, alternating; ms, ember / torch eager (x eager):
    model              before                  after
    wav2vec2_encoder   1852-4272 / 115-317 (0.06x)   162-183 / 71-133 (0.44-0.73x)
    resnext_block      11.7-15.6 / 15-29 (1.3-1.9x)   8.9-13.0 / 20-28 (2.2x)
    dense_block        551-571 / 42-57 (0.08-0.10x)   44-67 / 79-136 (1.8-2.0x)
    upsample           43-52 / 23-32 (0.54-0.60x)     32-35 / 27-31 (0.85-0.89x)
    dilated            191-195 / 190-195 (1.00x)      161-187 / 160-193 (1.00-1.03x)
wav2vec2 stayed below eager: its GroupNorm over 3199 samples reduced in scalars, and the GELU
fused after each convolution ran scalar in tiles with a tail of columns. Both in vectors now (the
row schedules' guarded last vector, the tail tiles' epilogue along the channels), one thread,
load average 3, same machine, ms, ember / eager: 93-94 / 56-62 (0.6x) before, 33-36 / 30
(0.84-0.91x) after; GroupNorm 15.1 -> 0.46 ms, the 512 -> 512 k=3 s=2 convolution and GELU over
3199 samples 33 -> 21 ms. What is left is that convolution's own speed (120 GFLOP/s against
eager's oneDNN) and its weights repacked at every call.
Then the weights packed at compile time, the 1-d tiles one block wide, grouped convolutions in the
blocked layout; one thread, thread CPU time (best of 5 runs, 3 rounds), ms, ember / eager, same
machine: wav2vec2_encoder 33.0 / 39.0 (1.18x) -> 28.3 / 36.3 (1.28x); resnext_block 2.72 / 5.70
(2.10x) -> 4.06 / 5.27 (1.30x): blocked now, its last 1x1 writes NCHW (docs/design.md, the CPU
convolutions: not yet).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


class Wav2Vec2Encoder(nn.Module):
    """wav2vec2/HuBERT's feature encoder (conv_dim 512, kernels 10,3,3,3,3,2,2, strides 5,2,...),
    `width` channels."""

    def __init__(self, width: int = 512):
        super().__init__()
        kernels, strides = (10, 3, 3, 3, 3, 2, 2), (5, 2, 2, 2, 2, 2, 2)
        self.convs = nn.ModuleList(nn.Conv1d(1 if i == 0 else width, width, k, s, bias=False)
                                   for i, (k, s) in enumerate(zip(kernels, strides)))
        self.norm = nn.GroupNorm(width, width)

    def forward(self, x):
        x = nn.functional.gelu(self.norm(self.convs[0](x)))
        for conv in self.convs[1:]:
            x = nn.functional.gelu(conv(x))
        return x


class ResNeXtBlock(nn.Module):
    """ResNeXt-50's bottleneck of its second stage: 1x1, grouped 3x3 (32 groups), 1x1, residual."""

    def __init__(self, channels: int = 512, width: int = 256, groups: int = 32):
        super().__init__()
        self.a = nn.Conv2d(channels, width, 1, bias=False)
        self.b = nn.Conv2d(width, width, 3, padding=1, groups=groups, bias=False)
        self.c = nn.Conv2d(width, channels, 1, bias=False)
        self.bns = nn.ModuleList(nn.BatchNorm2d(c) for c in (width, width, channels))

    def forward(self, x):
        y = torch.relu(self.bns[0](self.a(x)))
        y = torch.relu(self.bns[1](self.b(y)))
        return torch.relu(self.bns[2](self.c(y)) + x)


class DenseBlock(nn.Module):
    """DenseNet-121's first dense block, 6 layers (BN-ReLU-1x1-BN-ReLU-3x3, growth 32), each
    concatenating its output to everything before it."""

    def __init__(self, channels: int = 64, layers: int = 6, growth: int = 32):
        super().__init__()
        self.layers = nn.ModuleList(nn.Sequential(
            nn.BatchNorm2d(channels + i * growth), nn.ReLU(),
            nn.Conv2d(channels + i * growth, 4 * growth, 1, bias=False),
            nn.BatchNorm2d(4 * growth), nn.ReLU(), nn.Conv2d(4 * growth, growth, 3, padding=1, bias=False))
            for i in range(layers))

    def forward(self, x):
        for layer in self.layers:
            x = torch.cat([x, layer(x)], 1)
        return x


class Dilated(nn.Module):
    """DeepLabV3's dilated 3x3 convolutions (dilation 2, then an ASPP branch at 12) at a large map."""

    def __init__(self, channels: int = 256):
        super().__init__()
        self.a = nn.Conv2d(channels, channels, 3, padding=2, dilation=2, bias=False)
        self.b = nn.Conv2d(channels, channels, 3, padding=12, dilation=12, bias=False)

    def forward(self, x):
        return torch.relu(self.b(torch.relu(self.a(x))))


class Depthwise(nn.Module):
    """MobileNetV2's inverted residual: 1x1 expand, depthwise 3x3, 1x1 project."""

    def __init__(self, channels: int = 32, expand: int = 6):
        super().__init__()
        hidden = channels * expand
        self.a = nn.Conv2d(channels, hidden, 1)
        self.b = nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden)
        self.c = nn.Conv2d(hidden, channels, 1)

    def forward(self, x):
        return self.c(nn.functional.relu6(self.b(nn.functional.relu6(self.a(x))))) + x


class Upsample(nn.Module):
    """A segmentation head's bilinear upsampling of a large map (x8 to 520x520), after a 1x1."""

    def __init__(self, channels: int = 64, classes: int = 21):
        super().__init__()
        self.head = nn.Conv2d(channels, classes, 1)

    def forward(self, x):
        return nn.functional.interpolate(self.head(x), scale_factor=8, mode="bilinear", align_corners=False)


class ViTLayer(nn.Module):
    """ViT-B/16's patch embedding (16x16 stride 16 conv), class token, and one encoder layer at
    197 tokens."""

    def __init__(self, dim: int = 768, heads: int = 12):
        super().__init__()
        self.patch = nn.Conv2d(3, dim, 16, 16)
        self.cls = nn.Parameter(torch.randn(1, 1, dim))
        self.layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu",
                                                batch_first=True, norm_first=True)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        return self.layer(torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1))


MODELS = {
    "wav2vec2_encoder": (Wav2Vec2Encoder, (1, 1, 16000)),
    "resnext_block": (ResNeXtBlock, (1, 512, 28, 28)),
    "dense_block": (DenseBlock, (1, 64, 56, 56)),
    "dilated": (Dilated, (1, 256, 65, 65)),
    "depthwise": (Depthwise, (1, 32, 56, 56)),
    "upsample": (Upsample, (1, 64, 65, 65)),
    "vit_layer": (ViTLayer, (1, 3, 224, 224)),
}


def run(name: str, rounds: int, runs: int, threads: int, show_profile: bool) -> dict:
    import ember

    make, shape = MODELS[name]
    torch.manual_seed(0)
    model = make().eval()
    x = torch.randn(shape)
    with torch.no_grad():
        expected = model(x)
    cm = ember.compile(model, example_inputs=(x,))
    cm.num_threads = threads
    got = cm(x)
    err = float((got - expected).norm() / expected.norm())
    xn = x.numpy()
    times = {"ember": [], "eager": []}
    torch.set_num_threads(threads)
    for _ in range(rounds):
        times["ember"].append(ember.bench(lambda: cm(xn), warmup=3, repeat=runs).median)
        with torch.no_grad():
            times["eager"].append(ember.bench(lambda: model(x), warmup=3, repeat=runs).median)
    if show_profile:
        cm.profile(xn, repeat=runs)
        print(cm.summary())
    best = {k: min(v) for k, v in times.items()}
    return {"name": name, "rel_err": err, **best, "speedup": best["eager"] / best["ember"]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="*", default=list(MODELS))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--profile", action="store_true")
    args = p.parse_args()
    print(f"{'model':18} {'ember ms':>9} {'eager ms':>9} {'x eager':>8} {'rel err':>9}")
    for name in args.models:
        r = run(name, args.rounds, args.runs, args.threads, args.profile)
        print(f"{name:18} {r['ember'] * 1e3:9.2f} {r['eager'] * 1e3:9.2f} {r['speedup']:8.2f} {r['rel_err']:9.1e}",
              flush=True)


if __name__ == "__main__":
    main()
