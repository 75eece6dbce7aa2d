"""The target: where a model's kernels run, and every fact about that machine that shapes their
code. Nothing else in ember holds a machine fact (a vector width, an alignment, a cache size):
operators' packed layouts, the layout and weight-packing passes, the schedules, the code generator
and the runtime read them from the Target they are given.

    ember.compile(model, target="c")        # C with OpenMP and SIMD, built by the configured compiler
    ember.compile(model, target="python")   # the loop-IR interpreter: slow, exact, no compiler
    ember.build(s, [A, B], target="cuda")   # one GPU kernel: CUDA C through NVRTC (ember.cuda)
    ember.compile(model, target="cuda")     # every kernel on the GPU, launched through the driver API
    ember.compile(model, target=Target("cuda", simulate=True))  # the same kernels built, run on the CPU's
                                                                 # interpreter with GPU semantics (no GPU)
    ember.compile(model, target=Target("c", cc="clang", cflags="-O2 -fopenmp -shared -fPIC"))
    ember.compile(model, target=Target.x86("avx2"))   # AVX2 + FMA only (8 float lanes), any x86-64 since 2013

A `Target` holds its kind (the name of its backend, `target.backend`: ember.backends; for "cuda",
`simulate`: run on the interpreter with GPU semantics, no GPU needed), the C compiler and flags,
and the machine facts:
- `features`: the instruction-set extensions the code may use (x86: avx2, fma, avx512f/bw/vl/dq,
  avx512vnni, avx512vbmi, avx512bf16, avx512fp16, amx-tile/int8/bf16; ARM: neon, sve, dotprod, bf16). Code
  generation follows the compiler and flags, so these are read from the compiler's own predefined
  macros under the flags (`cc -march=... -dM -E`), and `vector_bytes` (one SIMD register) with
  them. The machine's own extensions (`machine_features`, from /proc/cpuinfo) govern only whether
  the code can run here: `missing()` names the extensions the flags enable that this machine
  lacks, and compiling a model or kernel to run here with such a target raises ConfigError.
- `lanes(dtype)`: values of a dtype in one SIMD register (1 for the interpreter and CUDA, which
  have none);
- `vector_registers`: how many SIMD registers the code may hold values in, from the features
  (32 with AVX-512 and on ARM, NEON's or SVE's; 16 with AVX2 or SSE; 0 without vectors), which
  sizes register tiles (the tile compiler's `tl.dot`);
- `align`: the byte boundary every buffer starts at (one cache line, one AVX-512 register);
- `caches` (L1d, L2, L3 bytes, from /sys/devices/system/cpu/cpu0/cache/, else FALLBACK_CACHES)
  and `cores` (os.cpu_count()): this machine's, unless given;
- `schedules`: the family of default schedules (ember.schedules.<family>);
- `gpu` (the GPU family's targets: "cuda", and the interpreter with schedules="gpu"): the GPU's
  facts that shape its kernels and bound them (`GPU`: its architecture, and what it has of
  CAPABILITIES: the Tensor Core intrinsics and operand types, cp.async, that every choice of a
  kernel reads through `GPU.has` and `GPU.tensor_cores`; multiprocessors, which the products'
  tiles and split-K fill; static and opt-in shared memory, threads and registers a
  block), the device's driver attributes where the backend finds one (`Backend.gpu`), else
  `GPU.of(arch)`, its architecture's row of ARCHS (GPU() is DEFAULT_ARCH's: an H100's or
  H200's, what a build without a device assumes). Part of the target, so of every key built from
  it (a lowered kernel's on disk, the model cache's): a kernel tiled for one count is not reused
  for another. What every NVIDIA GPU shares (WARP, STATIC_SHARED, REGISTERS_PER_THREAD,
  REGISTER_FILE, LOCAL_PER_THREAD) are this module's constants;
- `key`: the name the tuning database files schedules under.

A target for another machine is named by its flags: `Target.x86(level)` is C for an x86-64
level (X86_LEVELS: "avx2" is -march=x86-64-v3, "avx512" is -march=x86-64-v4) with the configured
flags' -march replaced, so its vectors are that level's (8 float lanes for AVX2). `as_target`
turns "c", "python", "cuda" or a Target into a Target; the compiler, `ember.build`, the tuner and the
runtime take it from there.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import platform
import re
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import backends, config
from .errors import ConfigError
from .tir import dtype as dt

KINDS = ("c", "python", "cuda", "accel")
HOST_C = ("c", "accel")  # the kinds whose host code is C built by the configured compiler
X86_LEVELS = {"avx2": "x86-64-v3", "avx512": "x86-64-v4"}
FALLBACK_CACHES = (32 << 10, 1 << 20, 8 << 20)  # L1d, L2, L3 bytes where sysfs does not say

_WIDTHS = (("__AVX512F__", 64), ("__AVX__", 32), ("__SSE2__", 16), ("__ARM_NEON", 16))

# an extension's name: (the compiler's macro for it, /proc/cpuinfo's flag for it)
FEATURES = {
    "avx2": ("__AVX2__", "avx2"), "fma": ("__FMA__", "fma"),
    "avx512f": ("__AVX512F__", "avx512f"), "avx512bw": ("__AVX512BW__", "avx512bw"),
    "avx512vl": ("__AVX512VL__", "avx512vl"), "avx512dq": ("__AVX512DQ__", "avx512dq"),
    "avx512vnni": ("__AVX512VNNI__", "avx512_vnni"), "avx512bf16": ("__AVX512BF16__", "avx512_bf16"),
    "avx512vbmi": ("__AVX512VBMI__", "avx512vbmi"),
    "avx512fp16": ("__AVX512FP16__", "avx512_fp16"),
    "amx-tile": ("__AMX_TILE__", "amx_tile"), "amx-int8": ("__AMX_INT8__", "amx_int8"),
    "amx-bf16": ("__AMX_BF16__", "amx_bf16"),
    "neon": ("__ARM_NEON", "asimd"), "sve": ("__ARM_FEATURE_SVE", "sve"),
    "dotprod": ("__ARM_FEATURE_DOTPROD", "asimddp"), "bf16": ("__ARM_FEATURE_BF16", "bf16"),
}


@functools.cache
def _macros(cc: str, cflags: str) -> str:
    flags = [f for f in shlex.split(cflags) if f.startswith(("-m", "-march", "-mcpu"))]
    try:
        return subprocess.run([*shlex.split(cc), *flags, "-dM", "-E", "-x", "c", "/dev/null"],
                              capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return ""


@functools.cache  # (a tile launch asks at every call)
def _vector_bytes(cc: str, cflags: str) -> int:
    """Bytes in one SIMD register, as the compiler and flags target it."""
    macros = _macros(cc, cflags)
    return next((width for macro, width in _WIDTHS if f"#define {macro} " in macros), 16)


@functools.cache
def _features(cc: str, cflags: str) -> frozenset[str]:
    macros = _macros(cc, cflags)
    return frozenset(name for name, (macro, _) in FEATURES.items() if f"#define {macro} " in macros)


_SIMD_MACRO = re.compile(r"^#define __((?:SSE[2-4]\w*|SSSE3|AVX\w*|FMA4?|F16C|AMX\w*)__|ARM_NEON|"
                         r"ARM_FEATURE_(?:SVE\w*|FMA|DOTPROD|MATMUL_INT8|BF16\w*|FP16\w*)) ", re.M)


# What every NVIDIA GPU since sm_50 shares (the CUDA C++ Programming Guide, "Technical
# Specifications per Compute Capability"):
WARP = 32  # threads a warp
STATIC_SHARED = 48 * 1024  # bytes of __shared__ arrays a kernel may declare statically (more: dynamic, opted in)
REGISTERS_PER_THREAD = 255  # 32-bit registers a thread may take (past them, local memory)
REGISTER_FILE = 64 * 1024  # 32-bit registers a multiprocessor holds (its blocks' threads share them)
LOCAL_PER_THREAD = 512 * 1024  # bytes of a thread's own arrays (local memory)

DEFAULT_ARCH = "sm_90"  # what a build without a device compiles for and assumes: an H100's, an H200's

# An architecture's facts where no device says them (a build without a GPU, NVRTC alone):
# (KiB of shared memory a block may opt in to, multiprocessors). The first is the Programming
# Guide's "Maximum amount of shared memory per thread block" of its table "Technical
# Specifications per Compute Capability" (CUDA 12); the second is not the architecture's but
# its data-centre part's (or Jetson's), the count a build for it tiles to.
ARCHS = {
    "sm_70": (96, 80),  # V100
    "sm_72": (96, 8),  # Jetson AGX Xavier
    "sm_75": (64, 40),  # T4
    "sm_80": (163, 108),  # A100
    "sm_86": (99, 72),  # A10
    "sm_87": (163, 16),  # Jetson AGX Orin
    "sm_89": (99, 58),  # L4
    "sm_90": (227, 132),  # H100 SXM, H200
}


# The first compute capability with each feature a kernel may be built on (the PTX ISA's "Target
# ISA notes", the CUDA C++ Programming Guide's "Warp Matrix Functions" and "Asynchronous Data
# Copies"): what a kernel's choice of Tensor Core intrinsic, operand type and copies reads
# (`GPU.has`, `GPU.tensor_cores`), here alone.
CAPABILITIES = {
    "wmma": 70,  # wmma's 16x16x16 products of float16
    "ldmatrix": 75,  # ldmatrix.sync.aligned.m8n8
    "mma": 80,  # mma.sync.aligned.m16n8k16 of float16 and bfloat16 (sm_75 has m16n8k8 of float16 alone)
    "bfloat16": 80,  # bfloat16 operands on the Tensor Cores (wmma's __nv_bfloat16 fragments, mma's .bf16)
    "tf32": 80,  # wmma's float32 operands rounded to TF32
    "cp_async": 80,  # cp.async: global to shared memory copies that bypass the registers
}


def sm(arch: str) -> str:
    """The architecture an NVRTC name compiles for: "sm_90" for "compute_90" (PTX) and "sm_90a"."""
    return "sm_" + arch.removeprefix("compute_").removeprefix("sm_").rstrip("a")


@dataclass(frozen=True)
class GPU:
    """The facts of a GPU that its kernels' schedules and checks read (see the module doc): by
    default DEFAULT_ARCH's (`GPU.of`), 132 multiprocessors; the block limits past the opt-in
    shared memory (threads, registers) are every GPU's since sm_50."""

    multiprocessors: int = ARCHS[DEFAULT_ARCH][1]  # blocks that occupy every multiprocessor once
    shared_per_block: int = STATIC_SHARED  # bytes of static shared memory a block may declare
    threads_per_block: int = 1024
    shared_opt_in: int = ARCHS[DEFAULT_ARCH][0] * 1024  # bytes of dynamic shared memory a block may opt in to
    registers_per_block: int = 64 * 1024  # 32-bit registers a block's threads take together
    arch: str = DEFAULT_ARCH

    @property
    def capability(self) -> int:
        """The compute capability as a number: 90 for sm_90."""
        return int(sm(self.arch).removeprefix("sm_"))

    def has(self, feature: str) -> bool:
        """Whether kernels for this GPU may use `feature` (a name of CAPABILITIES)."""
        return self.capability >= CAPABILITIES[feature]

    def tensor_cores(self, dtype: str) -> tuple[str, ...]:
        """The Tensor Core intrinsics that multiply `dtype` operands here, best first: "mma"
        (mma.sync.m16n8k16 through ldmatrix, ember.intrinsics.mma), "wmma" (ember.intrinsics.wmma;
        float32 as TF32); none where the products run on CUDA cores."""
        if dtype == "float32":
            return ("wmma",) if self.has("tf32") else ()
        if dtype not in ("float16", "bfloat16") or dtype == "bfloat16" and not self.has("bfloat16"):
            return ()
        return tuple(x for x in ("mma", "wmma") if self.has(x))

    @classmethod
    def of(cls, arch: str, **facts) -> GPU:
        """The facts of architecture `arch` ("sm_80"; "compute_90", "sm_90a" name sm_90) from
        ARCHS, `facts` replacing any (ConfigError for an architecture it does not have)."""
        name = sm(arch)
        if name not in ARCHS:
            raise ConfigError(f"no facts of GPU architecture {arch!r} without its device (known: "
                              f"{', '.join(ARCHS)}); name them: Target('cuda', gpu=GPU(arch=..., ...))")
        opt_in, multiprocessors = ARCHS[name]
        return cls(**{"multiprocessors": multiprocessors, "shared_opt_in": opt_in * 1024, "arch": name, **facts})


@dataclass(frozen=True)
class Target:
    """Where kernels run (see the module doc). For kind "c", cc and cflags default to the options
    (EMBER_CC, EMBER_CFLAGS) and vector_bytes to what they target; "python" has no compiler and
    no vectors (vector_bytes None: loops stay scalar, the interpreter runs them as written).
    caches and cores default to this machine's."""

    kind: str = "c"
    cc: str | None = None
    cflags: str | None = None
    vector_bytes: int | None = None
    align: int = 64  # bytes every buffer starts at: one cache line, one AVX-512 register
    schedules: str | None = None  # the default schedules (ember.schedules.<family>): "gpu" for cuda, else "cpu"
    caches: tuple[int, int, int] | None = None  # L1d, L2, L3 bytes
    cores: int | None = None
    accel: object = None  # kind "accel": the accelerator's description (ember.accel.Accelerator)
    simulate: bool = False  # kind "cuda": every kernel built by NVRTC, the model run on the interpreter, GPU semantics
    gpu: GPU | None = None  # the GPU family's targets: the GPU's facts (default: the device's, else GPU())

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ConfigError(f"unknown target {self.kind!r}; targets are {KINDS} or an ember.target.Target")
        if (self.kind == "accel") != (self.accel is not None):
            raise ConfigError("a target of kind 'accel' and only it holds an accelerator's description (accel=)")
        if self.simulate and self.kind != "cuda":
            raise ConfigError(f"simulate=True is for target 'cuda' (its GPU simulated on the CPU), not {self.kind!r}")
        if self.schedules is None:
            object.__setattr__(self, "schedules", "gpu" if self.kind == "cuda" else "cpu")
        if self.gpu is None and self.schedules == "gpu":
            facts = getattr(self.backend, "gpu", None)
            object.__setattr__(self, "gpu", facts(self) if facts is not None else GPU())
        if self.gpu is not None and self.gpu.multiprocessors < 1:
            raise ConfigError(f"a GPU has at least one multiprocessor, got {self.gpu.multiprocessors}")
        if self.kind in HOST_C:
            cc, cflags = config.resolve("cc", self.cc), config.resolve("cflags", self.cflags)
            object.__setattr__(self, "cc", cc)
            object.__setattr__(self, "cflags", cflags)
            if self.vector_bytes is None:
                object.__setattr__(self, "vector_bytes", _vector_bytes(cc, cflags))
        if self.vector_bytes is not None and (self.vector_bytes < 4 or self.vector_bytes & (self.vector_bytes - 1)):
            raise ConfigError(f"vector_bytes must be a power of two of at least 4 bytes, got {self.vector_bytes}")
        if self.align < 1 or self.align & (self.align - 1):
            raise ConfigError(f"align must be a power of two, got {self.align}")
        if self.caches is None:
            object.__setattr__(self, "caches", machine_caches())
        if self.cores is None:
            object.__setattr__(self, "cores", os.cpu_count() or 1)

    @classmethod
    def x86(cls, level: str, **fields) -> Target:
        """C for an x86-64 level (X86_LEVELS): the configured flags (or `cflags`) with their
        -march/-mtune/-mcpu replaced by the level's -march."""
        if level not in X86_LEVELS:
            raise ConfigError(f"unknown x86 level {level!r}; levels are {sorted(X86_LEVELS)}")
        cflags = config.resolve("cflags", fields.pop("cflags", None))
        kept = [f for f in shlex.split(cflags) if not f.startswith(("-march=", "-mtune=", "-mcpu="))]
        return cls("c", cflags=shlex.join([f"-march={X86_LEVELS[level]}", *kept]), **fields)

    def lanes(self, dtype: str = "float32") -> int:
        """Values of `dtype` in one SIMD register (1 without vectors)."""
        return max(1, (self.vector_bytes or 0) * 8 // dt.bits(dtype))

    @property
    def vector_registers(self) -> int:
        """SIMD registers the code may hold values in: 32 with AVX-512 (zmm0-31) and on ARM (v0-31
        of NEON, z0-31 of SVE), 16 below (AVX2's ymm0-15, SSE's xmm0-15); 0 without vectors."""
        if self.vector_bytes is None:
            return 0
        return 32 if self.features & {"avx512f", "neon", "sve"} else 16

    @property
    def features(self) -> frozenset[str]:
        """The extensions (FEATURES' names) the code may use: those the compiler enables under the
        flags; none for the interpreter."""
        return _features(self.cc, self.cflags) if self.kind in HOST_C else frozenset()

    def missing(self) -> list[str]:
        """The extensions the target's code may use that this machine lacks (sorted; none when
        /proc/cpuinfo does not say what the machine has)."""
        have = machine_features()
        return [] if have is None else sorted(self.features - have)

    def check_runs_here(self) -> None:
        """Raise ConfigError when code for this target cannot run on this machine."""
        if missing := self.missing():
            raise ConfigError(f"target {self.key!r} uses {', '.join(missing)}, which this machine "
                              f"({_cpu_model()}) lacks; name a target it has, e.g. Target.x86('avx2')")

    @property
    def backend(self):
        """The backend that compiles for this target (ember.backends: registered by kind)."""
        return backends.get(self.kind)

    @property
    def key(self) -> str:
        """The name schedules are tuned under: "c | <CPU model> | <SIMD features, sorted>" (the
        features the compiler enables under its flags), or the backend's (Backend.machine: "python";
        "cuda | <GPU> | <arch>")."""
        if self.kind == "accel":
            return f"accel | {self.accel.name}"
        if self.kind != "c":
            return self.backend.machine(self)
        features = sorted({m.rstrip("_").lower() for m in _SIMD_MACRO.findall(_macros(self.cc, self.cflags))
                           if not m.endswith("_MATH__")})
        return f"c | {_cpu_model()} | {' '.join(features)}"

    def describe(self) -> dict:
        """What a compiled model's manifest records of its target (`features`: what a machine
        that loads it must have)."""
        return {"target": self.kind, **({"simulate": True} if self.simulate else {}), "machine": platform.machine(),
                "vector_bytes": self.vector_bytes, "align": self.align, "features": sorted(self.features),
                **({"cc": self.cc, "cflags": self.cflags} if self.kind in HOST_C else {}),
                **({"gpu": dataclasses.asdict(self.gpu)} if self.gpu is not None else {})}


def as_target(target: str | Target = "c", *, cc: str | None = None, cflags: str | None = None) -> Target:
    """The Target that `target` names ("c", "python"), is, or describes (an object with a `target`
    Target: an accelerator's description, ember.accel); cc and cflags (checked options) override
    a C target's."""
    if isinstance(getattr(target, "target", None), Target):
        target = target.target
    if isinstance(target, Target):
        if cc is None and cflags is None:
            return target
        if target.kind not in HOST_C:
            raise ConfigError(f"target {target.kind!r} has no C compiler: cc and cflags are for target 'c'")
        return dataclasses.replace(target, cc=cc if cc is not None else target.cc,
                                   cflags=cflags if cflags is not None else target.cflags, vector_bytes=None)
    if not isinstance(target, str):
        raise ConfigError(f"target must be one of {KINDS} or an ember.target.Target, got {type(target).__name__}")
    if target != "c" and (cc is not None or cflags is not None):
        raise ConfigError(f"target {target!r} has no C compiler: cc and cflags are for target 'c'")
    return Target(target, config.resolve("cc", cc) if target == "c" else None,
                  config.resolve("cflags", cflags) if target == "c" else None)


def aligned_empty(shape: tuple[int, ...], dtype, align: int) -> np.ndarray:
    """An uninitialized C-contiguous array whose data starts on an `align`-byte boundary (a
    Target's `align`): what a model's weights are held in, so that a weight the compile writes
    there (a packed one) is taken by the model as it is."""
    dtype = np.dtype(dtype)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    buf = np.empty(nbytes + align, np.uint8)
    return np.ndarray(shape, dtype, buffer=buf, offset=(-buf.ctypes.data) % align)


def aligned_copy(a: np.ndarray, align: int, own: bool = False) -> np.ndarray:
    """A read-only, C-contiguous copy of `a` whose data starts on an `align`-byte boundary; `a`
    itself when it is that already and `own` (the model's own: no one else holds its memory)."""
    a = np.asarray(a)
    if own and not a.flags.writeable and a.flags.c_contiguous and a.ctypes.data % align == 0:
        return a
    out = aligned_empty(a.shape, a.dtype, align)
    out[...] = a
    out.flags.writeable = False
    return out


@functools.cache
def machine_flags() -> frozenset[str] | None:
    """This machine's CPU flags by their Linux names, from /proc/cpuinfo's flags (x86) or
    Features (ARM): "avx512_vnni", "amx_int8", "asimddp", ...; None where it does not say."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return None
    return next((frozenset(line.split(":", 1)[1].split()) for line in lines
                 if line.startswith(("flags", "Features"))), None)


def machine_features() -> frozenset[str] | None:
    """The extensions (FEATURES' names) this machine's CPU has (`machine_flags`); None where
    /proc/cpuinfo does not say."""
    flags = machine_flags()
    return None if flags is None else frozenset(name for name, (_, flag) in FEATURES.items() if flag in flags)


@functools.cache
def machine_caches() -> tuple[int, int, int]:
    """(L1d, L2, L3) bytes of this machine's first CPU (sysfs), FALLBACK_CACHES' where unknown."""
    found: dict[int, int] = {}
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((index / f).read_text().strip() for f in ("level", "type", "size"))
        except OSError:
            continue
        if kind in ("Data", "Unified") and (m := re.fullmatch(r"(\d+)([KMG]?)", size)):
            found[int(level)] = int(m[1]) << {"": 0, "K": 10, "M": 20, "G": 30}[m[2]]
    return tuple(found.get(level, fallback) for level, fallback in zip((1, 2, 3), FALLBACK_CACHES))


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()
