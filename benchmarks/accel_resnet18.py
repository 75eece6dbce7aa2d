"""ResNet-18's convolutions (batch 1, 224 x 224) as int8 im2col GEMMs on the simulated VTA
(ember.accel.vta: a 16x16 int8 core, int32 accumulators, 8 bytes a cycle of DMA at 100 MHz):
per distinct layer, the simulator's cycles and GEMM-core utilization with the default schedule
(one 16x16x16 tile, single buffered) and with the best of --trials tuned candidates (tiles that
fit the memories, single or double buffering of the inputs or of whole tiles), each candidate
bit-exact against integer NumPy. The stem's 3 input channels are padded to 16 (the core's
multiple), and every layer's output rows to 16. Optionally writes the tuned layers' Chrome traces (--traces DIR).

--model: the whole network instead (the zoo's ResNet-18, random weights), quantized by
ember.quantize (static, calibrated on --calibration fresh batches) and run with its int8 products
offloaded to the simulator (`offload=vta`: the product on the device with one core tile, the
epilogue and everything else on the CPU) against the same model on the CPU's int8 path, on a fresh
input: bit-exact or not, then each offloaded product's GEMM, cycles, GEMM-core utilization and DMA
bytes (--small: the zoo's reduced ResNet-18, 64 x 64, width 16). With --trials N (N > 0), each
distinct GEMM is then tuned (ember.accel.tune.tune_gemm, N candidates) and the model quantized
again with those schedules (offload_tiles), checked bit-exact again, and its cycles shown too.

    python benchmarks/accel_resnet18.py [--trials 8] [--layers 0 1 2] [--traces DIR]
    python benchmarks/accel_resnet18.py --model [--small] [--calibration 2] [--trials 0]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import ember
from ember.accel import vta
from ember.accel.conv import Conv2d
from ember.accel.tune import tune_conv, tune_gemm
from ember.quantization.offload import DeviceProduct

# (name, conv, how many times the network runs it)
LAYERS = [
    ("conv1 7x7/2 16(3)->64", Conv2d(1, 16, 224, 224, 64, 7, 7, 2, 3), 1),
    ("layer1 3x3 64->64", Conv2d(1, 64, 56, 56, 64, 3, 3, 1, 1), 4),
    ("layer2 3x3/2 64->128", Conv2d(1, 64, 56, 56, 128, 3, 3, 2, 1), 1),
    ("layer2 3x3 128->128", Conv2d(1, 128, 28, 28, 128, 3, 3, 1, 1), 3),
    ("layer2 1x1/2 64->128", Conv2d(1, 64, 56, 56, 128, 1, 1, 2, 0), 1),
    ("layer3 3x3/2 128->256", Conv2d(1, 128, 28, 28, 256, 3, 3, 2, 1), 1),
    ("layer3 3x3 256->256", Conv2d(1, 256, 14, 14, 256, 3, 3, 1, 1), 3),
    ("layer3 1x1/2 128->256", Conv2d(1, 128, 28, 28, 256, 1, 1, 2, 0), 1),
    ("layer4 3x3/2 256->512", Conv2d(1, 256, 14, 14, 512, 3, 3, 2, 1), 1),
    ("layer4 3x3 512->512", Conv2d(1, 512, 7, 7, 512, 3, 3, 1, 1), 3),
    ("layer4 1x1/2 256->512", Conv2d(1, 256, 14, 14, 512, 1, 1, 2, 0), 1),
]


def products(model) -> list:
    """The model's steps that run a product on the device."""
    return [s for s in model.steps if isinstance(s.run, DeviceProduct)]


def gemm_of(product: DeviceProduct) -> tuple[int, int, int]:
    return product.mp, product.weights.shape[0], product.kp


def whole_model(small: bool, calibration: int, trials: int) -> None:
    from benchmarks.models import resnet18

    model, (example,) = resnet18(small=small)
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal(example.shape).astype(np.float32) for _ in range(calibration)]
    cpu = ember.quantize(model, (example,), batches, nhwc=False)  # (the CPU path whose float products offload's match)
    device = ember.quantize(model, (example,), batches, offload=vta)
    x = rng.standard_normal(example.shape).astype(np.float32)
    want = cpu(x)
    print(f"{vta!r}\nResNet-18{' (small)' if small else ''}, its int8 products offloaded, against the CPU int8 path:")
    runs = [("default", device)]
    if trials > 0:
        shapes = dict.fromkeys(gemm_of(s.run) for s in products(device))
        best = {shape: tune_gemm(vta, *shape, trials=trials).best for shape in shapes}
        tuned = ember.quantize(model, (example,), batches, offload=vta,
                               offload_tiles={shape: (t.tiles, t.buffering) for shape, t in best.items()})
        runs.append(("tuned", tuned))
    mhz = vta.costs.clock_mhz
    for label, m in runs:
        got = m(x)
        exact = "bit-exact" if np.array_equal(got, want) else f"max |diff| {np.abs(got - want).max():.3g}"
        print(f"\n{label} schedules: {exact}\n{'product':30} {'GEMM m x n x k':>16} {'cycles':>10} {'util':>6} "
              f"{'DMA bytes (inp/wgt/acc/out)':>30}")
        total = 0
        for step in products(m):
            r = step.run.report()
            total += r.cycles
            dma = "/".join(str(v) for v in r.dma_bytes.values())
            print(f"{step.what:30} {'x'.join(map(str, gemm_of(step.run))):>16} {r.cycles:>10} {r.utilization:>6.1%} "
                  f"{dma:>30}", flush=True)
        print(f"{'all products':30}: {total} cycles, {total / mhz / 1e3:.2f} ms at {mhz} MHz")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=None, help="tuned candidates (default 8; with --model: 0)")
    parser.add_argument("--layers", type=int, nargs="+", default=list(range(len(LAYERS))))
    parser.add_argument("--traces", type=Path, default=None)
    parser.add_argument("--model", action="store_true", help="the whole network, its products offloaded")
    parser.add_argument("--small", action="store_true", help="with --model: the reduced ResNet-18")
    parser.add_argument("--calibration", type=int, default=2, help="with --model: calibration batches")
    args = parser.parse_args()
    if args.model:
        whole_model(args.small, args.calibration, args.trials or 0)
        return
    print(f"{vta!r}\n{'layer':24} {'default cycles':>15} {'util':>6} {'tuned cycles':>13} {'util':>6} {'x':>6}  tiles")
    total = [0, 0]
    for index in args.layers:
        name, conv, times = LAYERS[index]
        result = tune_conv(vta, conv, shift=10, relu=True, trials=args.trials or 8)
        d, b = result.default, result.best
        total[0] += times * d.cycles
        total[1] += times * b.cycles
        t = b.tiles
        print(f"{name:24} {d.cycles:>15} {d.report.utilization:>6.1%} {b.cycles:>13} {b.report.utilization:>6.1%} "
              f"{d.cycles / b.cycles:>6.2f}  {t.ty}x{t.tx}x{t.tk}, {b.buffering} buffering",
              flush=True)
        if args.traces is not None:
            args.traces.mkdir(parents=True, exist_ok=True)
            b.report.chrome_trace(args.traces / f"layer{index}.json")
    mhz = vta.costs.clock_mhz
    print(f"{'these layers, as often as the network runs them':48}: default {total[0] / mhz / 1e3:.2f} ms, tuned "
          f"{total[1] / mhz / 1e3:.2f} ms at {mhz} MHz")


if __name__ == "__main__":
    main()
