"""Hashing a model's weights, as the model cache's key of a torch module does before tracing
(ember.frontend.module_key.hasher): BERT-base's parameters (transformers' BertModel, default
config, random weights: 440 MB) through hashlib's sha256, sha1, blake2b and md5, xxhash's xxh3
(when installed) and a NumPy mix (the words times position-dependent odd multipliers, summed: a
position-independent sum would not see permuted weights, this does, but it is no faster).

Each figure is the least CPU time over --runs runs (time.process_time: a machine shared with
other work slows the wall clock more), and GB/s of the weights' bytes.

    python benchmarks/weight_hash.py [--runs 3]
"""

from __future__ import annotations

import argparse
import hashlib
import time


def weights() -> list[memoryview]:
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).eval()
    return [memoryview(p.detach().contiguous().reshape(-1).view(torch.uint8).numpy()) for p in model.parameters()]


def numpy_mix(data: list[memoryview]) -> int:
    import numpy as np

    total = 0
    for d in data:
        words = np.frombuffer(d, np.uint64, len(d) // 8)
        odd = np.arange(1, 2 * words.size, 2, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        total = (total + int((words * odd).sum(dtype=np.uint64))) % (1 << 64)
    return total


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args(argv)
    data = weights()
    nbytes = sum(len(d) for d in data)
    hashes = {name: (lambda n=name: [h := hashlib.new(n), *(h.update(d) for d in data)][0].digest())
              for name in ("sha256", "sha1", "blake2b", "md5")}
    try:
        import xxhash
    except ImportError:
        print("xxhash is not installed: pip install xxhash")
    else:
        for name in ("xxh3_64", "xxh3_128"):
            hashes[name] = lambda n=name: [h := getattr(xxhash, n)(), *(h.update(d) for d in data)][0].digest()
    hashes["numpy mix"] = lambda: numpy_mix(data)
    print(f"BERT-base's {len(data)} parameters, {nbytes / 1e6:.0f} MB; least CPU seconds of {args.runs} runs")
    for name, run in hashes.items():
        best = float("inf")
        for _ in range(args.runs):
            t = time.process_time()
            run()
            best = min(best, time.process_time() - t)
        print(f"  {name:<10} {best:6.3f} s  {nbytes / best / 1e9:5.1f} GB/s")


if __name__ == "__main__":
    main()
