"""The decode of benchmarks/models/decode.py as ONNX, for ONNX Runtime and for ember's ONNX import:
RowStep's prefill (the prompt's length "seq") and step (the cache's length "past") exported by
torch.onnx (its dynamo exporter: the same torch.export trace ember compiles from), their MatMuls
optionally quantized by ONNX Runtime's MatMulNBitsQuantizer (com.microsoft MatMulNBits, bits 4 or
8, blocks of `block` rows, asymmetric: what its GenAI builder and Olive write), and run by an
ONNX Runtime session under generate_in_place: one preallocated buffer per key and value of each
layer, each step given its contiguous prefix (1, past, heads, head_dim) and its own rows written
after it, as ember's step is run. The exported graph concatenates the cache and the new row
itself (torch's cat in transformers' cache update: ONNX Runtime copies the cache there each
step; its fused GroupQueryAttention, which reads a shared buffer, is what onnxruntime-genai's
own builder writes, not an export of a torch model).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from torch import nn

from .decode import RowStep, heads


def names(model: nn.Module) -> list[str]:
    """The cache inputs' names, k0, v0, k1, v1, ..."""
    layers = heads(model)[0]
    return [f"{kind}{layer}" for layer in range(layers) for kind in ("k", "v")]


def export(model: nn.Module, folder: Path, prompt_len: int, max_len: int) -> tuple[Path, Path]:
    """(prefill.onnx, step.onnx) of RowStep in `folder`, float32, with "seq" in [2, max_len] and
    "past" in [1, max_len - 1] symbolic."""
    step = RowStep(model).eval()
    cache = names(model)
    ids = torch.zeros((1, prompt_len), dtype=torch.int64)
    seq = torch.export.Dim("seq", min=2, max=max_len)
    rows = [f"row_{n}" for n in cache]
    prefill = folder / "prefill.onnx"
    torch.onnx.export(step, (ids,), dynamo=True, input_names=["ids"], output_names=["logits", *rows],
                      dynamic_shapes=({1: seq},), verbose=False).save(str(prefill))
    _, n, dim = heads(model)
    kv = [torch.zeros((1, prompt_len, n, dim)) for _ in cache]
    past = torch.export.Dim("past", min=1, max=max_len - 1)
    decode = folder / "step.onnx"
    torch.onnx.export(step, (ids[:, :1], *kv), dynamo=True, input_names=["ids", *cache],
                      output_names=["logits", *rows], dynamic_shapes=(None, tuple({1: past} for _ in kv)),
                      verbose=False).save(str(decode))
    return prefill, decode


def quantize(src: Path, dst: Path, bits: int, block: int, accuracy_level: int = 4) -> Path:
    """`src` with its constant-weight MatMuls as MatMulNBits (ONNX Runtime's quantizer: `bits`,
    blocks of `block` rows, asymmetric, `accuracy_level`: 4 lets a prefill's rows be int8, 0
    keeps float32 ones), written to `dst`. The quantizer takes
    MatMuls whose B is an initializer: GPT-2's exported Gemms (its Conv1D layers) and its LM head
    (a MatMul by the transpose of the tied embedding) are made such MatMuls first."""
    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(_matmuls(onnx.load(str(src))), bits=bits, block_size=block, is_symmetric=False,
                                     accuracy_level=accuracy_level)
    quantizer.process()
    quantizer.model.save_model_to_file(str(dst), use_external_data_format=False)
    return dst


def session(path: Path, threads: int):
    """`run(*arrays) -> list of arrays`: an ONNX Runtime CPU session of the model at `path` on
    `threads` intra-op threads, its inputs in the model's order."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    inputs = [i.name for i in sess.get_inputs()]

    def run(*arrays):
        return sess.run(None, {name: np.ascontiguousarray(a) for name, a in zip(inputs, arrays)})

    return run


def _matmuls(model):
    """`model` with each Gemm of a constant B (alpha = beta = 1, A not transposed) as MatMul (and
    Add of its C), and each Transpose of an initializer as the transposed initializer."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    inits = {i.name: i for i in graph.initializer}
    nodes = []
    for node in graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type == "Transpose" and node.input[0] in inits:
            w = numpy_helper.to_array(inits[node.input[0]])
            graph.initializer.append(numpy_helper.from_array(np.ascontiguousarray(w.transpose(attrs.get("perm"))),
                                                             node.output[0]))
            continue
        gemm = node.op_type == "Gemm" and node.input[1] in inits and not attrs.get("transA", 0)
        if gemm and attrs.get("alpha", 1.0) == attrs.get("beta", 1.0) == 1:
            b = node.input[1]
            if attrs.get("transB", 0):
                b = f"{b}_t"
                graph.initializer.append(numpy_helper.from_array(
                    np.ascontiguousarray(numpy_helper.to_array(inits[node.input[1]]).T), b))
            product = node.output[0] if len(node.input) < 3 else f"{node.output[0]}_product"
            nodes.append(helper.make_node("MatMul", [node.input[0], b], [product], name=f"{node.name}_matmul"))
            if len(node.input) == 3:
                nodes.append(helper.make_node("Add", [product, node.input[2]], [node.output[0]],
                                              name=f"{node.name}_add"))
            continue
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model


def onnx_bytes(path: Path) -> int:
    """Bytes of weights a step of the model at `path` reads per token: its initializers, each
    once, but of a table that only Gathers read (an embedding) one row."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path))
    readers: dict[str, set[str]] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, set()).add(node.op_type)
    total = 0
    for init in model.graph.initializer:
        w = numpy_helper.to_array(init)
        if init.name not in readers:
            continue  # (a weight the quantizer replaced, left unread)
        total += w[0].nbytes if readers[init.name] == {"Gather"} and w.ndim > 1 else w.nbytes
    return total
