"""Import an ONNX model as an ember graph: `import_onnx(path or ModelProto) -> Graph`.

1. Load (onnx.load, external data included), inline local functions, check with onnx.checker,
   and read the default-domain opset: 7 (MIN_OPSET) up to the newest the installed onnx package
   knows (MAX_OPSET, onnx.defs.onnx_opset_version()); in an older model, the nodes whose operator
   is the same as in opset 7 (Relu, Conv, ...; not Add-6). A file that holds no valid model
   (missing, a folder, empty, truncated, another format, external data that is missing or
   truncated) is an OnnxImportError naming the file.
2. Initializers become constants (arrays until a node that is not folded uses them); the other
   graph inputs become graph inputs, dim_param as a symbolic dimension (an expression of
   symbols, "past_sequence_length + 1", as such: ember.dims), an unnamed dynamic dimension as a
   fresh symbol `<input>_<k>` (or as `input_shapes` says). A sequence or optional input is
   imported for the structure `input_shapes` gives it (a list of shapes; None for absent), each
   of its tensors a graph input (structured.py), else a StructureError names it.
3. Nodes are converted in order by the converters of converters/ (see node.py: what a converter
   sees, and how constants fold), each by the converter of its operator version (the since_version
   of its schema at the model's opset; registry.py). A node of a function op that no converter
   takes (or whose converter leaves this form to it: ExpandInstead) is replaced by its ONNX
   function body (functions.py). An op type without a converter, an operator version ember lacks
   (`Op-version`), or a form of one that ember lacks (a 3-D convolution, a cubic resize) is
   recorded, the nodes that depend on it (through their subgraphs too) are skipped, and at the end
   one UnsupportedOpError lists every one of them with its node name (convert.py). The subgraphs
   of If, Loop and Scan are converted the same way, each into a region (converters/control.py).
   Before that, QDQ products of the graph (DequantizeLinear operands of a Conv or MatMul whose
   output is quantized) become QLinearConv / QLinearMatMul nodes (qdq.py), which run on ember's
   int8 kernel.
4. Outputs: an output that no node computes (a graph input, a constant, a value given twice) is
   passed through `identity`, so that every graph output is a node's own. The types the model
   declares, for its outputs and for intermediate values (value_info), are checked against the
   ones ember infers: another element type, another rank, or another size where both are numbers
   is a CompileError naming the value (a mistake in the model, or in ember's import of it, that
   would otherwise give outputs of another shape than the model says); a declared symbol or
   unknown dimension agrees with any size. A sequence output is its elements, an absent optional
   nothing: `import_graph` returns the layout that regroups them, `import_onnx` refuses them.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence

import numpy as np
import onnx
from google.protobuf.message import DecodeError

from ... import dims
from ...errors import ArgumentTypeError, CompileError
from ...graph.core import Dim, Graph, TensorType, Value
from . import converters, qdq, structured  # noqa: F401  (registers the converters)
from .convert import MAX_OPSET, MIN_OPSET, convert_nodes
from .functions import DEFAULT_DOMAINS
from .node import (
    ConstantInputError,
    Importer,
    OnnxImportError,
    Tensor,
    sanitize,
    tensor_type,
    to_dtype,
)
from .structured import Layout

__all__ = ["MAX_OPSET", "MIN_OPSET", "import_graph", "import_onnx", "load_model", "read_model"]



def import_onnx(model: str | os.PathLike | onnx.ModelProto,
                input_shapes: Mapping[str, Sequence[Dim]] | None = None,
                input_values: Mapping[str, np.ndarray] | None = None) -> Graph:
    """The ember graph of an ONNX model (a file path or a loaded ModelProto). `input_shapes`
    gives graph inputs (by ONNX name) other shapes than the model declares, typically static
    sizes for its dynamic dimensions: {"input": (1, 3, 224, 224)}. `input_values` gives graph
    inputs (by ONNX name) values, with which they import as constants and are no longer inputs
    of the graph: the specialization of a model for the values of its runtime-valued inputs
    (a ConstantInputError names them in its `inputs`; ember.compile does this by itself,
    docs/onnx.md). A sequence or optional input takes its structure from `input_shapes` (a list
    of shapes, None for an absent optional); a model with sequence or optional outputs is
    imported with `import_graph`, which gives their layout too (a StructureError here)."""
    graph, layout = import_graph(model, input_shapes, input_values)
    if any(entry != "tensor" for entry in layout):
        raise structured.StructureError(
            f"the model's outputs include sequences or optionals ({layout}: per output a tensor, n elements, or "
            "None for absent); import_graph returns the graph with their layout, ember.compile regroups them")
    return graph


def import_graph(model: str | os.PathLike | onnx.ModelProto, input_shapes: Mapping | None = None,
                 input_values: Mapping[str, np.ndarray] | None = None) -> tuple[Graph, Layout]:
    """`import_onnx`'s graph, and the layout of its outputs (structured.py): how the graph's
    outputs regroup into the model's, where some are sequences or optionals."""
    proto = load_model(model)
    importer = Importer(Graph(name=sanitize(proto.graph.name or "main")), default_opset(proto) or MAX_OPSET)
    env = _graph_inputs(importer, proto.graph, dict(input_shapes or {}), dict(input_values or {}))
    inputs = {id(v): name for name, v in env.items() if isinstance(v, Value)}
    try:
        constants = {name: t for name, t in env.items() if isinstance(t, np.ndarray)}
        convert_nodes(importer, qdq.fuse(proto.graph.node, constants), importer.opset, env)
    except ConstantInputError as e:
        e.inputs = _input_sources(e.value, inputs)
        e.add_note(f"it is computed from the graph input(s) {list(e.inputs)}: ember.compile specializes the model "
                   "for their values at run time, import_onnx(..., input_values={...}) imports it for given values")
        raise
    _check_value_info(importer, proto.graph, env)
    outputs, layout = _graph_outputs(importer, proto.graph, env)
    importer.graph.set_outputs(outputs)
    return importer.graph, layout


def load_model(model: str | os.PathLike | onnx.ModelProto) -> onnx.ModelProto:
    """The checked ModelProto, local functions inlined."""
    if isinstance(model, onnx.ModelProto):
        proto, where = model, "the model"
    elif isinstance(model, str | os.PathLike):
        proto, where = read_model(os.fspath(model)), os.fspath(model)
    else:
        raise ArgumentTypeError(f"import_onnx takes a path or an onnx.ModelProto, not {type(model).__name__}")
    default_opset(proto)  # (an opset ember cannot read: before the checker's less direct message)
    if proto.functions:
        proto = onnx.inliner.inline_local_functions(proto)
    try:  # a path is checked from the file: a ModelProto over 2 GB cannot be serialized to check
        onnx.checker.check_model(proto if isinstance(model, onnx.ModelProto) else os.fspath(model))
    except (onnx.checker.ValidationError, UnicodeDecodeError) as e:  # a string field that is not UTF-8
        if "is deprecated" not in str(e):  # e.g. GroupNormalization-18, which onnxruntime still runs
            raise OnnxImportError(f"{where} is not valid ONNX: {e}") from None
        warnings.warn(f"importing an ONNX model that uses a deprecated operator: {e}", stacklevel=2)
    return proto


def read_model(path: str) -> onnx.ModelProto:
    """The ModelProto in the file `path`, its external data read from beside it; OnnxImportError,
    naming the file, when there is none (no such file, a folder, an empty or corrupt file, an
    external data file that is missing or too short)."""
    if not os.path.exists(path):
        raise OnnxImportError(f"{path}: no such file")
    if os.path.isdir(path):
        raise OnnxImportError(f"{path} is a folder, not an ONNX model file")
    if os.path.getsize(path) == 0:
        raise OnnxImportError(f"{path} is empty (0 bytes), not a valid ONNX model")
    try:
        proto = onnx.load(path, load_external_data=False)
    except DecodeError as e:
        raise OnnxImportError(f"{path} is not a valid ONNX model: it does not parse as one ({e}); a truncated "
                              "download or another format?") from None
    try:
        onnx.external_data_helper.load_external_data_for_model(proto, os.path.dirname(path))
    except (OSError, ValueError, onnx.checker.ValidationError) as e:  # ValueError: a file too short
        raise OnnxImportError(f"{path}: cannot read the model's external data: {e}") from None
    return proto


def default_opset(proto: onnx.ModelProto) -> int | None:
    """The model's opset of the default domain; None when it imports none (its nodes are all of
    other domains)."""
    versions = [o.version for o in proto.opset_import if o.domain in DEFAULT_DOMAINS]
    if not versions:
        return None
    version = versions[0]
    if version > MAX_OPSET:
        raise OnnxImportError(f"ONNX opset {version} is newer than the installed onnx package knows "
                              f"({onnx.__version__}: opsets up to {MAX_OPSET}); upgrade onnx")
    return version


def value_type(vi: onnx.ValueInfoProto, what: str) -> TensorType:
    """The TensorType of a graph input or output (unnamed dynamic dimensions get fresh symbols)."""
    if not vi.type.HasField("tensor_type"):
        raise OnnxImportError(f"{what} {vi.name!r} is not a tensor but {structured.kind(vi.type, what)}")
    tt = vi.type.tensor_type
    dtype = to_dtype(tt.elem_type, f"{what} {vi.name!r}")
    if not tt.HasField("shape"):
        raise OnnxImportError(f"{what} {vi.name!r} has no shape; ember needs the rank of every input")
    shape = [d.dim_value if d.HasField("dim_value") else _dim_param(d.dim_param or f"{vi.name}_{k}")
             for k, d in enumerate(tt.shape.dim)]
    return TensorType(tuple(shape), dtype)


def _dim_param(text: str) -> Dim:
    """A dim_param as an ember dimension: an expression of symbols ("past_sequence_length + 1")
    as such (ember.dims), anything else one symbol with its name sanitized."""
    return sanitize(text) if dims.is_symbol(text) else dims.canonical(text)


def _graph_inputs(importer: Importer, g: onnx.GraphProto, shapes: dict[str, Sequence[Dim]],
                  values: dict[str, np.ndarray]) -> dict[str, Tensor]:
    """Initializers as arrays, then the inputs that no initializer gives a value as graph inputs
    (or, those that `values` gives one, as arrays)."""
    if g.sparse_initializer:
        raise OnnxImportError("sparse initializers are not supported")
    graph = importer.graph
    env: dict[str, Tensor] = {}
    for init in g.initializer:
        to_dtype(init.data_type, f"initializer {init.name!r}")
        env[init.name] = onnx.numpy_helper.to_array(init)
        importer.name_array(env[init.name], init.name)
    inputs = [vi for vi in g.input if vi.name not in env]
    for what, given in (("input_shapes", shapes), ("input_values", values)):
        unknown = set(given) - {vi.name for vi in inputs}
        if unknown:
            raise OnnxImportError(f"{what} names {sorted(unknown)}, which are not inputs of the model; its "
                                  f"inputs are {[vi.name for vi in inputs]}")
    unstructured = []
    for vi in inputs:
        if structured.kind(vi.type, f"graph input {vi.name!r}") != "tensor":
            if vi.name in values:
                raise OnnxImportError(f"input_values gives the {structured.kind(vi.type, '')} input {vi.name!r}; "
                                      "ember takes the structure of sequences and optionals (input_shapes), their "
                                      "tensors as inputs")
            if vi.name not in shapes:
                unstructured.append(vi.name)
            else:
                env[vi.name] = _structured_input(graph, vi, shapes[vi.name])
            continue
        t = value_type(vi, "graph input")
        if vi.name in values:
            env[vi.name] = _input_value(vi.name, t, values[vi.name])
            importer.name_array(env[vi.name], vi.name)
            continue
        if vi.name in shapes:
            t = _override(vi.name, t, tuple(shapes[vi.name]))
        env[vi.name] = graph.add_input(graph.fresh_name(sanitize(vi.name)), t)
    if unstructured:
        raise structured.StructureError.of_inputs(unstructured)
    return env


def _structured_input(graph: Graph, vi: onnx.ValueInfoProto, given) -> Tensor | structured.Structured:
    """A sequence or optional graph input for the structure `given` (input_shapes): a list of
    shapes for a sequence, one graph input per element; None for an absent optional."""
    what = f"graph input {vi.name!r}"
    kind = structured.kind(vi.type, what)
    dtype, declared = structured.element_type(vi.type, what)
    if given is None:
        if not kind.startswith("optional"):
            raise OnnxImportError(f"input_shapes gives the {kind} input {vi.name!r} None; only an optional can be "
                                  "absent")
        return structured.ABSENT

    def tensor(shape, name):
        t = structured.element(vi.name, declared, dtype, shape, name)
        return graph.add_input(graph.fresh_name(sanitize(name)), t)

    if kind.endswith("sequence"):
        if not isinstance(given, list | tuple) or not all(isinstance(s, list | tuple) for s in given):
            raise OnnxImportError(f"input_shapes gives the {kind} input {vi.name!r} {given!r}; it takes a list of "
                                  "shapes, one per element")
        return structured.TensorSequence(tuple(tensor(s, f"{vi.name}_{k}") for k, s in enumerate(given)))
    return tensor(given, vi.name)


def _input_value(name: str, declared: TensorType, value) -> np.ndarray:
    """The value given for graph input `name`, if it has the declared dtype, rank and static sizes."""
    a = np.asarray(value)
    if a.dtype.name != declared.dtype or a.ndim != declared.rank or \
            any(isinstance(d, int) and d != n for d, n in zip(declared.shape, a.shape)):
        raise OnnxImportError(f"input_values gives input {name!r} a {a.dtype.name} array of shape {a.shape}, but "
                              f"the model declares {declared}")
    return a


def _input_sources(value: Value, inputs: dict[int, str]) -> tuple[str, ...]:
    """The (ONNX names of the) graph inputs among `inputs` that `value` is computed from, in the
    order of `inputs`."""
    seen, stack, found = set(), [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if id(v) in inputs:
            found.add(id(v))
        elif v.node is not None:
            stack.extend(v.node.inputs)
    return tuple(name for k, name in inputs.items() if k in found)


def _override(name: str, declared: TensorType, shape: tuple[Dim, ...]) -> TensorType:
    """`shape` for graph input `name`, if it agrees with the declared rank and static sizes."""
    if len(shape) != declared.rank or any(isinstance(d, int) and d != s for d, s in zip(declared.shape, shape)):
        raise OnnxImportError(f"input_shapes gives input {name!r} the shape {shape}, but the model declares "
                              f"{declared.shape}")
    return TensorType(shape, declared.dtype)


def _graph_outputs(importer: Importer, g: onnx.GraphProto, env: dict[str, Tensor]) -> tuple[list[Value], Layout]:
    """The graph's outputs (a sequence's elements each, an absent optional none) and their layout."""
    outputs: list[Value] = []
    layout: list[str | int | None] = []
    for vi in g.output:
        what = f"graph {importer.graph.name}: output {vi.name!r}"
        t = env[vi.name]
        if isinstance(t, structured.Absent):
            layout.append(None)
            continue
        items = t.items if isinstance(t, structured.TensorSequence) else (t,)
        layout.append(len(items) if isinstance(t, structured.TensorSequence) else "tensor")
        for k, item in enumerate(items):
            hint = sanitize(vi.name if layout[-1] == "tensor" else f"{vi.name}_{k}")
            v = importer.value(item, hint)
            if v.node is None or v in outputs:
                (v,) = importer.add_node("identity", [v], None, [hint])
            if vi.type.HasField("tensor_type"):
                check_declared(vi, v.type, what)
            outputs.append(v)
    return outputs, tuple(layout)


def _check_value_info(importer: Importer, g: onnx.GraphProto, env: dict[str, Tensor]) -> None:
    """The types the model declares for intermediate values (value_info) agree with ember's."""
    for vi in g.value_info:
        if vi.name in env and vi.type.HasField("tensor_type"):
            check_declared(vi, tensor_type(env[vi.name]), f"graph {importer.graph.name}: value {vi.name!r}")


def check_declared(vi: onnx.ValueInfoProto, inferred: TensorType, what: str) -> None:
    """A declared type contradicts the inferred one (CompileError): another element type, another
    rank, or another size where both are numbers. A declared symbol, or a dimension left unknown,
    agrees with any size."""
    tt = vi.type.tensor_type
    if tt.elem_type and to_dtype(tt.elem_type, what) != inferred.dtype:
        raise CompileError(f"{what}: the model declares the element type "
                           f"{onnx.TensorProto.DataType.Name(tt.elem_type).lower()}, ember infers {inferred}")
    if not tt.HasField("shape"):
        return
    declared = tuple(d.dim_value if d.HasField("dim_value") else d.dim_param or "?" for d in tt.shape.dim)
    if len(declared) != inferred.rank or any(isinstance(d, int) and isinstance(i, int) and d != i
                                             for d, i in zip(declared, inferred.shape)):
        raise CompileError(f"{what}: the model declares the shape {_shape_str(declared)}, ember infers "
                           f"{_shape_str(inferred.shape)}")


def _shape_str(shape: tuple) -> str:
    return f"({', '.join(str(d) for d in shape)}{',' if len(shape) == 1 else ''})"
