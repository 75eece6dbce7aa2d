"""The digest of a traced module: what ember.compile's model cache keys a torch module by.

    program_digest(first_trace(model, inputs)[0], names) -> a sha256 hex string, or None

It covers what the compiled model depends on: the code of the traced program and of its
submodules (control flow's regions), its signature, the shapes and dtypes of its inputs (symbols
included, with their ranges and the names of their `torch.export.Dim`s), torch's version, and
every parameter, buffer and lifted constant: its name, dtype, shape and bytes. The bytes are
hashed once, as they are (ember.frontend.module_key.hasher: xxh3-128 where xxhash is installed,
BERT-base's 438 MB in 0.013 s of CPU; else sha256, about 2 GB/s on one core with
SHA-NI), so a changed weight changes the digest. The module's Python code counts only
through what it traced: a model whose forward changed traces another program.

None where a value has no bytes to hash as they are (a sparse, quantized, meta or subclassed
tensor, an opaque object): such a program is not cached.
"""

from __future__ import annotations

import torch
from torch.export import ExportedProgram

from ..module_key import hasher, tensor_bytes
from .record import Recorded


def program_digest(traced: ExportedProgram | Recorded, names: dict[str, str]) -> str | None:
    """The digest of a traced program (see the module doc), torch.export's or a recording's
    (ember.frontend.torch.record: its graph, inputs' strides and every constant);
    `names`: the Dim name of each symbol."""
    h = hasher()

    def add(*parts) -> None:
        for p in parts:
            h.update(str(p).encode() + b"\0")

    recorded = isinstance(traced, Recorded)
    gm = traced.gm if recorded else traced.graph_module
    add(type(h).__name__, torch.__version__, "recorded" if recorded else traced.graph_signature)
    for name, module in gm.named_modules():
        if isinstance(module, torch.fx.GraphModule):
            add(name, module.code)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            add(node.name, (tuple(map(str, val.shape)), val.dtype) if isinstance(val, torch.Tensor) else repr(val))
            if recorded:
                add(val.stride())
    if recorded:
        values = {**{p: t for p, (_, t) in traced.weights.items()}, **dict(gm.named_buffers())}
    else:
        add(sorted((str(s), str(r)) for s, r in traced.range_constraints.items()), sorted(names.items()))
        values = {**traced.state_dict, **traced.constants}
    for name in sorted(values):
        data = tensor_bytes(values[name])
        if data is None:
            return None
        add(name, values[name].dtype, tuple(values[name].shape))
        h.update(data)
    return h.hexdigest()
