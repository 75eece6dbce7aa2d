"""The key of a torch module before it is traced: what ember.compile's model cache finds a model
compiled by an earlier process with, without running torch.export (ember.compile_module).

    module_key(model, example_inputs, dynamic_shapes) -> (key, "") or (None, why)

A traced program (ember.frontend.torch.digest) is what a compiled model really depends on, but
torch.export takes one to two seconds to make it. This key stands in for it, as torch.compile's
guards stand in for a re-trace: it hashes what the trace reads, as far as it can be seen from
outside the forward pass:

- each submodule's place in the tree (shared submodules and tensors named once), its class
  (module and qualname) and, for each class of its MRO outside torch, the source file of the
  class's module, the code of every function in the class's namespace (so a class edited, or a
  forward monkeypatched on the class or the instance, changes the key) and its plain class
  attributes; for the submodule's own class, also what its functions name as globals: plain
  values, the code of the Python functions named (followed to their own globals, outside torch
  and the standard library), the source file of the Python modules named (`utils.helper(x)`);
- every other attribute of each submodule: plain values (None, bool, int, float, str, bytes,
  tuples, lists, sets, dicts, torch's dtype, device and Size, enums), tensors and NumPy arrays by
  their bytes, objects such as transformers' PretrainedConfig by their class and attributes,
  functions by their code;
- each parameter and buffer: name, type, dtype, shape, strides and the hash of its bytes
  (`hasher`: xxh3-128 where the xxhash package is installed, else sha256; the bytes in order, so
  permuted weights differ);
- the example inputs' structure, dtypes, shapes, strides and aliasing, and dynamic_shapes (each
  Dim's name and range, a derived Dim's function);
- torch's version and default dtype (ember's source, Python's version, the options and the
  target come with the model cache's key).

No key (the caller traces, as without one) where a module has a forward or backward hook (its
own or a global one), an attribute of a type it cannot read, or a tensor that is not a plain
dense CPU one. Training flags are not keyed: ember traces in eval mode.

The limit: what forward reads that is none of these is not seen. A module-level global that is
an object (a dict of functions, a logger, a flag object) counts by its type only; a function
reached through a Python module (`utils.helper`) by that module's source file, so a function
put there at run time is not seen; a value changed at run time inside a library
(torch.backends flags, a monkeypatched torch function) not at all. ember.compile(...,
cache="trace") keys such a model by its trace.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import os
import sys
import sysconfig
import types

import numpy as np
import torch
from torch.utils import _pytree as pytree

_STDLIB = os.path.realpath(sysconfig.get_paths()["stdlib"])
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
          torch.memory_format)


class Unkeyed(Exception):
    """What keeps a module from having a key (the message says where and why)."""


def hasher():
    """A hash of bytes as fast as the machine allows: xxh3-128 with the xxhash package, else
    sha256 (its type's name says which: a key made with it includes that)."""
    try:
        import xxhash
    except ImportError:
        return hashlib.sha256()
    return xxhash.xxh3_128()


def tensor_bytes(t: torch.Tensor) -> memoryview | None:
    """A tensor's bytes in row-major order, or None (not a plain dense CPU tensor: sparse,
    quantized, meta, another device, a subclass)."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter) or t.layout != torch.strided or t.is_quantized \
            or t.device.type != "cpu":
        return None
    flat = t.detach().resolve_conj().resolve_neg().contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()) if flat.numel() else memoryview(b"")


def module_key(model: torch.nn.Module, example_inputs: tuple, dynamic_shapes=None) -> tuple[str | None, str]:
    """The module's key (see the module doc) and "", or None and why it has none."""
    try:
        return _Key(model).of(example_inputs, dynamic_shapes), ""
    except Unkeyed as e:
        return None, str(e)
    except Exception as e:  # (a value that fails to be read, a structure too deep: the key is only a shortcut)
        return None, f"reading the module failed ({type(e).__name__}: {e})"


class _Key:
    """One key's walk: the hash, the parts of the structure (text), and what was seen already."""

    def __init__(self, model: torch.nn.Module):
        self.model = model
        self.h = hasher()
        self.parts: list[str] = [type(self.h).__name__, torch.__version__, str(torch.get_default_dtype())]
        self.names: dict[int, str] = {}  # id of a module or tensor -> its first name
        self.seen: dict[tuple, int] = {}  # (what, how, id) of an object, class or function encoded -> its order
        self.keep: list = []  # (what `seen` names stays alive while the walk runs)

    def of(self, example_inputs, dynamic_shapes) -> str:
        for hooks in (torch.nn.modules.module._global_forward_hooks, torch.nn.modules.module._global_forward_pre_hooks,
                      torch.nn.modules.module._global_backward_hooks,
                      torch.nn.modules.module._global_backward_pre_hooks):
            if hooks:
                raise Unkeyed("a global module hook is registered (torch.nn.modules.module.register_module_*_hook)")
        for name, m in self.model.named_modules(remove_duplicate=False):
            self.module(name or "<root>", m)
        self.inputs(example_inputs)
        self.parts.append(f"dynamic_shapes {self.value(dynamic_shapes, 'dynamic_shapes')}")
        self.h.update("\0".join(self.parts).encode())
        return self.h.hexdigest()

    def module(self, name: str, m: torch.nn.Module) -> None:
        if id(m) in self.names:
            self.parts.append(f"module {name} = {self.names[id(m)]}")
            return
        self.names[id(m)] = name
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            if getattr(m, kind, None):
                raise Unkeyed(f"module {name} ({type(m).__name__}) has {kind.strip('_').replace('_', ' ')}")
        self.parts.append(f"module {name} {self.module_class(type(m))}")
        for attr, v in m.__dict__.items():
            if attr in _MODULE_STATE:
                continue
            self.parts.append(f"{attr}={self.value(v, f'{name}.{attr}', strict=True)}")
        for kind in ("_parameters", "_buffers"):
            for attr, t in m.__dict__[kind].items():
                self.parts.append(f"{kind} {attr} {self.tensor(t, f'{name}.{attr}')}")
        self.parts.append(f"persistent {sorted(m._non_persistent_buffers_set)}")

    def tensor(self, t, where: str) -> str:
        """A tensor's description, its bytes hashed (once per tensor)."""
        if t is None:
            return "None"
        if id(t) in self.names:
            return f"= {self.names[id(t)]}"
        data = tensor_bytes(t)
        if data is None:
            raise Unkeyed(f"{where} is a {type(t).__name__} of layout {t.layout} on {t.device}"
                          f"{' (quantized)' if t.is_quantized else ''}: not a plain dense CPU tensor")
        self.names[id(t)] = where
        self.keep.append(t)
        self.h.update(data)
        return f"{type(t).__name__} {t.dtype} {tuple(t.shape)} {t.stride()} {t.requires_grad} #{len(data)}"

    def array(self, a: np.ndarray, where: str) -> str:
        """A NumPy array's description, its bytes hashed."""
        if a.dtype.hasobject:
            raise Unkeyed(f"{where} is a NumPy array of Python objects")
        data = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
        self.h.update(data)
        return f"ndarray {a.dtype} {a.shape} #{data.size}"

    def inputs(self, example_inputs) -> None:
        leaves, spec = pytree.tree_flatten(tuple(example_inputs))
        self.parts.append(f"inputs {spec}")
        storages: dict[int, int] = {}
        for k, x in enumerate(leaves):
            if isinstance(x, torch.Tensor):
                if x.layout != torch.strided:
                    raise Unkeyed(f"example input {k} has layout {x.layout}")
                shared = storages.setdefault(x.untyped_storage().data_ptr(), k) if x.numel() else k
                self.parts.append(f"input {k} {type(x).__name__} {x.dtype} {tuple(x.shape)} {x.stride()} {x.device} "
                                  f"{x.layout} {shared}")
            else:
                self.parts.append(f"input {k} {self.value(x, f'example input {k}', strict=True)}")

    # -- values ------------------------------------------------------------------------------
    def value(self, v, where: str, strict: bool = False, follow: bool = False) -> str:
        """A value as text. strict (a module's attributes): a value of a type it cannot read is
        Unkeyed, an object is read by its class and attributes; else (class attributes, globals)
        by its type only. follow: functions are read with the globals they name (`function`)."""
        if isinstance(v, _PLAIN) and type(v) in _PLAIN:
            return repr(v)
        if isinstance(v, tuple | list | torch.Size):
            return f"{type(v).__name__}({', '.join(self.value(x, where, strict, follow) for x in v)})"
        if isinstance(v, set | frozenset):
            return f"{type(v).__name__}({', '.join(sorted(self.value(x, where, strict, follow) for x in v))})"
        if isinstance(v, dict) and type(v).__module__ in ("builtins", "collections"):
            return f"{type(v).__name__}({self.items(v, where, strict, follow)})"
        if isinstance(v, enum.Enum):
            return f"{_class_name(type(v))}.{v.name}"
        if isinstance(v, torch.Tensor):
            return self.tensor(v, where)
        if isinstance(v, np.ndarray | np.generic):
            return self.array(np.asarray(v), where)
        if isinstance(v, type):
            return _class_name(v)
        if isinstance(v, _FUNCTIONS):
            return self.function(v, where, strict, follow)
        if _is_dim(v):
            return f"Dim({v.__name__}, {v.min}, {v.max}" + (
                f", {self.value(v.root, where)}, {self.function(v.fn, where, strict)})" if hasattr(v, "fn") else ")")
        if type(v).__module__ == "torch.export.dynamic_shapes" and type(v).__name__ == "_DimHint":
            return repr(v)
        if isinstance(v, torch.nn.Module) and id(v) in self.names:
            return f"module {self.names[id(v)]}"
        if not strict:
            return f"<{_class_name(type(v))}>"
        if hasattr(v, "__dict__") and not callable(v) and not isinstance(v, torch.nn.Module):
            # (a config object: its class and attributes)
            return self.once(("object", id(v)), v,
                             lambda: f"{_class_name(type(v))}({self.items(vars(v), where, strict)})")
        raise Unkeyed(f"{where} is a {type(v).__module__}.{type(v).__qualname__}, which the model cache cannot key "
                      f"before tracing")

    def items(self, d: dict, where: str, strict: bool, follow: bool = False) -> str:
        return ", ".join(f"{self.value(k, where, strict)}: {self.value(x, f'{where}[{k!r}]', strict, follow)}"
                         for k, x in d.items())

    def once(self, key: tuple, obj, encode) -> str:
        """`encode()` the first time `key` (what and how, the object's id) is met, a reference to
        that after (shared objects, cycles)."""
        if key in self.seen:
            return f"<ref {self.seen[key]}>"
        self.seen[key] = len(self.seen)
        self.keep.append(obj)
        return encode()

    def module_class(self, c: type) -> str:
        """A submodule's class: for each class of its MRO (object and torch.nn.Module aside, which
        torch's version keys), its module's source file, and outside torch its namespace: the
        code of its functions (those of `c` itself with the globals they name) and its plain
        attributes."""
        def encode():
            out = [_class_name(c)]
            for k in c.__mro__:
                if k in (object, torch.nn.Module) or _is_library(k.__module__):
                    continue
                for attr, v in k.__dict__.items():
                    if attr not in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
                        out.append(f"{attr}: {self.value(v, f'{k.__qualname__}.{attr}', follow=k is c)}")
            return "[" + "; ".join(out) + "]"

        return self.once(("class", id(c)), c, encode)

    def function(self, f, where: str, strict: bool, follow: bool = False) -> str:
        """A function or method as its code (`_code`), source file, defaults and closure, and with
        `follow` the globals it names (functions among them followed in turn); torch's and the
        standard library's by name (their versions key them)."""
        if isinstance(f, types.ModuleType):  # (what forward calls through it: by the module's source file)
            return f"module {f.__name__} {'' if _is_library(f.__name__) else _module_file_digest(f.__name__)}"
        if isinstance(f, staticmethod | classmethod):
            return f"{type(f).__name__}({self.function(f.__func__, where, strict, follow)})"
        if isinstance(f, property):
            return f"property({', '.join(self.value(g, where, strict, follow) for g in (f.fget, f.fset, f.fdel))})"
        if isinstance(f, functools.partial):
            return (f"partial({self.function(f.func, where, strict, follow)}, {self.value(f.args, where, strict)}, "
                    f"{self.value(f.keywords, where, strict)})")
        if isinstance(f, types.MethodType):
            return (f"method({self.value(f.__self__, where, strict)}, "
                    f"{self.function(f.__func__, where, strict, follow)})")
        name = f"{getattr(f, '__module__', None)}.{getattr(f, '__qualname__', repr(f))}"
        if not isinstance(f, types.FunctionType) or _is_library(f.__module__, f.__code__.co_filename):
            return name

        def encode():
            code = f.__code__
            cells = [self.value(c.cell_contents, f"{where}: closure", strict, follow) if c.cell_contents is not None
                     else "None" for c in (f.__closure__ or ())]
            glob = [f"{g}={self.value(f.__globals__[g], f'{where}: global {g}', follow=True)}"
                    for g in sorted(_names(code)) if g in f.__globals__] if follow else []
            return (f"{name} {_code(code)} {_file_digest(code.co_filename)} defaults "
                    f"{self.value(f.__defaults__, where, strict)} {self.value(f.__kwdefaults__, where, strict)} "
                    f"closure {cells} globals {glob}")

        return self.once(("function", follow, id(f)), f, encode)


# the state every nn.Module holds in its __dict__ (parameters, buffers and submodules are walked
# as such; hooks are refused; training is not keyed: ember traces in eval mode)
_MODULE_STATE = frozenset(torch.nn.Module().__dict__)


_FUNCTIONS = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, functools.partial, staticmethod,
              classmethod, property, types.ModuleType, torch._ops.OpOverload, torch._ops.OpOverloadPacket)


def _class_name(c: type) -> str:
    """A class by its name and its module's source file."""
    return f"{c.__module__}.{c.__qualname__} {_module_file_digest(c.__module__)}"


def _is_dim(v) -> bool:
    return type(v).__module__ == "torch.export.dynamic_shapes" and hasattr(v, "min") and hasattr(v, "max")


def _is_library(module: str | None, filename: str | None = None) -> bool:
    """Code whose version keys it: torch's, or the standard library's."""
    top = (module or "").partition(".")[0]
    if top == "torch" or top in sys.builtin_module_names:
        return True
    return filename is not None and os.path.realpath(filename).startswith(_STDLIB + os.sep) \
        and "site-packages" not in filename


def _names(code: types.CodeType) -> set[str]:
    """The names a code object and those nested in it load (globals and attributes alike)."""
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _names(c)
    return out


def _code(code: types.CodeType) -> str:
    """A code object as text, line numbers aside (marshal's bytes depend on reference counts)."""
    consts = ", ".join(_code(c) if isinstance(c, types.CodeType) else _constant(c) for c in code.co_consts)
    return (f"<{code.co_name} {code.co_code.hex()} {code.co_names} {code.co_varnames} {code.co_freevars} "
            f"{code.co_cellvars} {code.co_argcount} {code.co_posonlyargcount} {code.co_kwonlyargcount} "
            f"{code.co_flags} ({consts})>")


def _constant(c) -> str:
    """A code object's constant as text: a frozenset's elements sorted (their order follows the
    process's string hashes)."""
    if isinstance(c, frozenset):
        return f"frozenset({sorted(map(_constant, c))})"
    if isinstance(c, tuple):
        return f"({', '.join(map(_constant, c))},)"
    return repr(c)


def _module_file_digest(module: str) -> str:
    m = sys.modules.get(module)
    return _file_digest(getattr(m, "__file__", None) or "")


def _file_digest(path: str) -> str:
    """The sha256 of a source file, read once per process and version of the file ("" where
    there is none: a class made at run time, a notebook's cell)."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return ""
    return _digest_of(path, st.st_mtime_ns, st.st_size)


@functools.cache
def _digest_of(path: str, mtime_ns: int, size: int) -> str:
    try:
        with open(path, "rb") as f:
            return hashlib.sha256(f.read()).hexdigest()
    except OSError:
        return ""
