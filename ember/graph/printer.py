"""The graph IR as text: one line per constant and node, every value with its type.

    graph main(%x: float32[batch, 3, 224, 224]) {
      const %w: float32[64, 3, 7, 7]
      const %scale: float32[] = 0.5
      %conv: float32[batch, 64, 112, 112] = conv2d(%x, %w) {padding=(3, 3, 3, 3), strides=(2, 2)}
      %lo: float32[batch, 32, 112, 112], %hi: float32[batch, 32, 112, 112] = split(%conv) {axis=1, sizes=(32, 32)}
      %y: float32[batch, 32, 112, 112] = mul(%lo, %scale) @scaled
      return %y, %hi
    }

The parser (ember/graph/parser.py) reads it back exactly. The grammar, token by token:
- a value is `%name`, a node's name (printed as `@name` only when it is not its first output's
  name) likewise; names of other characters than [A-Za-z0-9_.] are quoted: `%"/layer1/Conv"`;
  the graph's name, symbolic dimensions and attribute keys are identifiers, else quoted;
- a type is `dtype[dim, ...]`, a dimension an int or a symbol;
- attributes are `{key=value, ...}` in sorted order: ints, floats as Python's repr (`1e-05`,
  `inf`, `nan`), strings in double quotes (JSON escapes), None, True, False, tuples `(1,)`;
- constants show their name and type; data of at most `max_inline` elements is printed too, as
  a scalar (rank 0) or a flat list in C order. Floats print as NumPy's shortest repr of their own
  dtype, which reads back to the same bits. Larger data lives only in `graph.constants`.
- a node with regions (control flow: ember/ops/control.py) lists them after its name, each a
  graph of the same form, indented: `%y: float32[4] = if(%c, %x) [graph then(...) {...}, graph
  else(...) {...}]`. A region's constant data in the `constants` mapping is keyed
  `<node>/<region index>/<name>` (Graph.all_constants), since names are unique per graph only.
`#` starts a comment (the printer writes none; hand-written tests may).

str() of a Graph is graph_to_text: this module attaches it (the package imports this module).
"""

from __future__ import annotations

import json
import re

import numpy as np

from .core import Graph, Node, TensorType, Value

MAX_INLINE = 8  # constants with at most this many elements print their data
_BARE_NAME = re.compile(r"[A-Za-z0-9_.]+")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def graph_to_text(graph: Graph, max_inline: int = MAX_INLINE) -> str:
    params = ", ".join(_typed(v) for v in graph.inputs)
    lines = [f"graph {_word(graph.name)}({params}) {{"]
    for name, data in graph.constants.items():
        data = np.asarray(data)
        inline = f" = {data_to_text(data)}" if data.size <= max_inline else ""
        t = TensorType(data.shape, data.dtype.name)
        lines.append(f"  const %{_name(name)}: {type_to_text(t)}{inline}")
    for n in graph.nodes:
        lines.append(f"  {node_to_text(n)}")
        if n.regions:
            lines[-1] += " ["
            for k, region in enumerate(n.regions):
                text = graph_to_text(region, max_inline).replace("\n", "\n    ")
                lines.append(f"    {text}{',' if k + 1 < len(n.regions) else ''}")
            lines.append("  ]")
    lines.append("  return" + ("" if not graph.outputs else " " + ", ".join(_ref(v) for v in graph.outputs)))
    lines.append("}")
    return "\n".join(lines)


def node_to_text(node: Node) -> str:
    """One node on one line (its regions, printed by graph_to_text, follow)."""
    outs = ", ".join(_typed(v) for v in node.outputs)
    ins = ", ".join(_ref(v) for v in node.inputs)
    text = f"{outs} = " if outs else ""
    text += f"{node.op}({ins})"
    if node.attrs:
        text += " {" + ", ".join(f"{_word(k)}={attr_to_text(v)}" for k, v in node.attrs.items()) + "}"
    if not node.outputs or node.name != node.outputs[0].name or node.regions:
        text += f" @{_name(node.name)}"
    return text


def type_to_text(t: TensorType) -> str:
    dims = ", ".join(_word(d) if isinstance(d, str) else str(d) for d in t.shape)
    return f"{t.dtype}[{dims}]"


def attr_to_text(v) -> str:
    match v:
        case tuple():
            return "(" + ", ".join(attr_to_text(x) for x in v) + ("," if len(v) == 1 else "") + ")"
        case str():
            return json.dumps(v)
        case _:  # None, bool, int, float: repr reads back exactly (inf and nan included)
            return repr(v)


def data_to_text(data: np.ndarray) -> str:
    if data.ndim == 0:
        return str(data[()])
    return "[" + ", ".join(str(x) for x in data.ravel()) + "]"


def _typed(v: Value) -> str:
    return f"{_ref(v)}: {type_to_text(v.type) if isinstance(v.type, TensorType) else repr(v.type)}"


def _ref(v: Value) -> str:
    return f"%{_name(v.name)}"


def _name(name: str) -> str:
    return name if _BARE_NAME.fullmatch(name) else json.dumps(name)


def _word(key: str) -> str:
    """Graph names, symbolic dimensions and attribute keys: identifiers, else quoted."""
    return key if _IDENT.fullmatch(key) else json.dumps(key)


Graph.__str__ = graph_to_text  # here, not in core.py: the printer sits above the graph's classes
