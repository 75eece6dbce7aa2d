"""Tutorial: compile ResNet-18 from PyTorch with ember, check it against torch eager, and time
both. (`make demo` runs this.)

    python examples/models/resnet18.py
"""

import sys
import time
from pathlib import Path

import numpy as np
import torch

import ember

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.models import resnet18  # noqa: E402


def main():
    torch.set_num_threads(2)
    model, (x,) = resnet18()  # random weights, 1x3x224x224
    t = time.perf_counter()
    cm = ember.compile(model, example_inputs=(x,))  # torch.export underneath
    print(f"compiled ResNet-18 in {time.perf_counter() - t:.1f} s: {len(cm.kernels)} kernels")
    with torch.no_grad():
        expected = model(x)
        y = cm(x)
        np.testing.assert_allclose(y.numpy(), expected.numpy(), rtol=1e-4, atol=1e-4)
        print(f"matches torch eager: max |difference| {float((y - expected).abs().max()):.2e}")
        t_ember = ember.bench(cm, x, repeat=20, number=1).median * 1e3
        t_eager = ember.bench(model, x, repeat=20, number=1).median * 1e3
    print(f"latency, batch 1, 2 threads: ember {t_ember:.1f} ms, torch eager {t_eager:.1f} ms "
          f"({t_eager / t_ember:.2f}x)")


if __name__ == "__main__":
    main()
