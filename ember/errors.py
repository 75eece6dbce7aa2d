"""ember's exceptions: each names what is wrong, where, and (when it can) what to do instead."""

from __future__ import annotations


class EmberError(Exception):
    """Base of every error ember raises on purpose."""


class ScheduleError(EmberError, ValueError):
    """An illegal schedule directive: what was asked, and why it cannot be done."""


class LowerError(EmberError, ValueError):
    """A function that cannot be lowered (for example, a region that cannot be bounded)."""


class BuildError(EmberError, RuntimeError):
    """The C compiler failed; carries its message and the generated source lines it points at."""

    def __init__(self, message: str, source: str = "", compiler_output: str = ""):
        super().__init__(message)
        self.source = source
        self.compiler_output = compiler_output


class ShapeError(EmberError, ValueError):
    """An argument whose shape does not match what the kernel or model expects."""


class ArgumentTypeError(EmberError, TypeError):
    """An argument of the wrong kind or dtype (not an array, float64 for float32, ...)."""


class ConfigError(EmberError, ValueError):
    """An option (an EMBER_* environment variable or a keyword) with a value ember cannot use:
    names the variable, the value and what is allowed."""


class ArtifactError(EmberError, ValueError):
    """A saved model, a build-cache entry or a tuning database that cannot be trusted: missing,
    truncated or edited files, another format, another machine or an incompatible ember version.
    Names the file and what is wrong."""


class TuneError(EmberError, RuntimeError):
    """A tuning run that produced nothing usable (every trial failed); carries the first failures."""


class CompileError(EmberError, ValueError):
    """A model that cannot be compiled as given (no outputs, a tensor larger than the machine's
    memory, declared shapes that contradict the inferred ones); names the value."""


class OutOfMemoryError(EmberError, MemoryError):
    """A call whose outputs or workspace, at the sizes its inputs bind, cannot be allocated; names
    the model, the tensor, its shape and size, and the sizes bound."""


class WorkerError(EmberError, RuntimeError):
    """An ember worker process (ember.workers) that could not start, died, or ran past its time
    limit while running a call; says what befell it."""


class TileError(EmberError, ValueError):
    """A tile-language kernel (ember.triton) the compiler cannot compile, or an access out of its
    arguments' bounds in the debug mode; names the kernel's file, line and source."""


class DeviceError(EmberError, RuntimeError):
    """No GPU, no driver or no NVRTC where a GPU target needs one (says which), or a failed
    launch (names the kernel and the CUDA error)."""


class RaceError(EmberError, RuntimeError):
    """A GPU kernel run on the interpreter with GPU semantics (ember.cuda.simt) whose threads race
    on shared memory (a missing barrier) or stop at different barriers; names the buffer, the
    element and the threads."""


class IndexOutOfRangeError(EmberError, IndexError):
    """An index read from a tensor (gather, embedding, a scatter's target) outside the axis it
    indexes: at run time, naming the model's kernel and nodes, the index and the axis size; among
    constants, when they are folded at compile time, naming the node. `index` and `size` hold the
    values."""

    def __init__(self, message: str, index: int | None = None, size: int | None = None):
        super().__init__(message)
        self.index, self.size = index, size


class WeightsFileError(EmberError, ValueError):
    """A weights file (GGUF) ember cannot map onto a model: a tensor of a quantization type it
    does not read, an architecture it cannot build, a tensor missing or of the wrong shape; names
    the tensor, its type and what is supported."""
