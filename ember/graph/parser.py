"""Reads the graph IR's text form (ember/graph/printer.py, which describes the grammar) back
into a Graph: `parse_graph(text, constants)`.

A recursive-descent parser over a regex tokenizer. Constants take their data from `constants`
(name -> array) when it has them, else from the data printed inline; a constant with neither,
data whose type differs from the declared one, or an entry of `constants` that the text does
not declare is an error. Every error is a GraphError that gives the line and column, and shows
the line with a caret under the place.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from .core import Dim, Graph, GraphError, TensorType, Value, region_key

_TOKEN = re.compile(r"""
    (?P<skip>\s+|\#[^\n]*)
  | (?P<value>%(?:[A-Za-z0-9_.]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<nodename>@(?:[A-Za-z0-9_.]+|"(?:[^"\\\n]|\\.)*"))
  | (?P<string>"(?:[^"\\\n]|\\.)*")
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|-inf\b)
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[()\[\]{},:=])
""", re.VERBOSE)

# the Python types of inline constant data, by NumPy dtype kind (bools are ints too: checked apart)
_KINDS = {"b": bool, "i": int, "u": int, "f": int | float}
_WORDS = {"True": True, "False": False, "None": None, "inf": float("inf"), "nan": float("nan")}


@dataclass(frozen=True)
class Token:
    kind: str  # value, nodename, string, number, ident, punct, end
    text: str
    pos: int


def parse_graph(text: str, constants: Mapping[str, np.ndarray] | None = None) -> Graph:
    return _Parser(text, dict(constants or {})).graph()


def _tokenize(text: str) -> list[Token]:
    tokens, pos = [], 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _error(text, pos, f"unexpected character {text[pos]!r}")
        if m.lastgroup != "skip":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("end", "", len(text)))
    return tokens


def _error(text: str, pos: int, message: str) -> GraphError:
    line = text.count("\n", 0, pos) + 1
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    source = text[start:end if end >= 0 else len(text)]
    col = pos - start + 1
    return GraphError(f"line {line}, column {col}: {message}\n  {source}\n  {' ' * (col - 1)}^")


class _Parser:
    def __init__(self, text: str, constants: dict[str, np.ndarray]):
        self.text, self.constants = text, constants
        self.tokens = _tokenize(text)
        self.k = 0
        self.g = Graph()
        self.prefix = ""  # the key prefix of the constants of the graph being read (Graph.all_constants)

    # -- tokens -----------------------------------------------------------------------------
    @property
    def tok(self) -> Token:
        return self.tokens[self.k]

    def error(self, message: str, tok: Token | None = None) -> GraphError:
        return _error(self.text, (tok or self.tok).pos, message)

    def at(self, text: str) -> bool:
        return self.tok.kind in ("punct", "ident") and self.tok.text == text

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.k += 1
            return True
        return False

    def expect(self, text: str) -> Token:
        if not self.at(text):
            raise self.error(f"expected '{text}', found {self.describe()}")
        self.k += 1
        return self.tokens[self.k - 1]

    def take(self, kind: str, what: str) -> Token:
        if self.tok.kind != kind:
            raise self.error(f"expected {what}, found {self.describe()}")
        self.k += 1
        return self.tokens[self.k - 1]

    def describe(self) -> str:
        return "the end of the text" if self.tok.kind == "end" else f"'{self.tok.text}'"

    def unquote(self, tok: Token, text: str) -> str:
        if not text.startswith('"'):
            return text
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise self.error(f"bad string {text}: {e.msg}", tok) from None

    def comma_list(self, close: str, item) -> list:
        """item (',' item)* up to `close` (consumed); a trailing comma is allowed."""
        items = []
        while not self.accept(close):
            items.append(item())
            if not self.accept(","):
                self.expect(close)
                break
        return items

    # -- grammar ----------------------------------------------------------------------------
    def graph(self) -> Graph:
        self.body()
        if self.tok.kind != "end":
            raise self.error(f"expected the end of the text after the graph, found {self.describe()}")
        if self.constants:
            raise GraphError(f"constants given that the text does not declare: {sorted(self.constants)}")
        return self.g

    def body(self) -> None:
        """One graph, into self.g."""
        self.expect("graph")
        self.g.name = self.word("the graph's name")
        self.expect("(")
        self.comma_list(")", self.param)
        self.expect("{")
        while not self.at("return"):
            self.statement()
        self.expect("return")
        if self.tok.kind == "value":
            self.g.set_outputs(self.comma_sep(self.use))
        self.expect("}")

    def regions(self, node: str) -> list[Graph]:
        """The regions of the node named `node`: '[' graph (',' graph)* ']', each read on its own."""
        outer, prefix = self.g, self.prefix
        out = []
        try:
            def region() -> Graph:
                self.g, self.prefix = Graph(), region_key(prefix, node, len(out))
                self.body()
                out.append(self.g)
                return self.g
            self.comma_list("]", region)
        finally:
            self.g, self.prefix = outer, prefix
        return out

    def param(self) -> None:
        _, name = self.new_name()
        self.expect(":")
        self.g.add_input(name, self.type())

    def statement(self) -> None:
        if self.accept("const"):
            self.constant()
            return
        outs: list[tuple[Token, str, TensorType]] = []
        if self.tok.kind == "value":
            outs = self.comma_sep(self.typed_output)
            self.expect("=")
        for k, (tok, name, _) in enumerate(outs):
            if any(name == other for _, other, _ in outs[:k]):
                raise self.error(f"%{name} is defined twice", tok)
        op_tok = self.take("ident", "an operator name")
        self.expect("(")
        inputs = self.comma_list(")", self.use)
        attrs = dict(self.comma_list("}", self.attribute)) if self.accept("{") else {}
        name = ""
        if self.tok.kind == "nodename":
            name = self.unquote(self.tok, self.tok.text[1:])
            self.k += 1
        elif not outs:
            raise self.error(f"a node without outputs needs a name (@name), found {self.describe()}")
        regions = self.regions(name or outs[0][1]) if self.accept("[") else []
        self.g.add_node(op_tok.text, inputs, attrs, [t for _, _, t in outs], name=name,
                        out_names=[n for _, n, _ in outs], regions=regions)

    def comma_sep(self, item) -> list:
        """item (',' item)*"""
        items = [item()]
        while self.accept(","):
            items.append(item())
        return items

    def typed_output(self) -> tuple[Token, str, TensorType]:
        tok, name = self.new_name()
        self.expect(":")
        return tok, name, self.type()

    def constant(self) -> None:
        tok, name = self.new_name()
        self.expect(":")
        type_tok = self.tok
        t = self.type()
        inline = self.data(t, type_tok) if self.accept("=") else None
        if self.prefix + name in self.constants:
            data = np.asarray(self.constants.pop(self.prefix + name))
            if (data.shape, data.dtype.name) != (t.shape, t.dtype):
                raise self.error(f"constant %{name} is declared {t} but its data is "
                                 f"{TensorType(data.shape, data.dtype.name)}", tok)
        elif inline is not None:
            data = inline
        else:
            raise self.error(f"constant %{name} has no data: print it inline or pass it in `constants`", tok)
        self.g.add_constant(data, name)

    def data(self, t: TensorType, type_tok: Token) -> np.ndarray:
        tok = self.tok
        if not t.is_static:
            raise self.error(f"constant data needs a static shape, not {t}", type_tok)
        try:
            kind = np.dtype(t.dtype).kind
        except TypeError:
            raise self.error(f"unknown dtype {t.dtype!r}", type_tok) from None
        if kind not in _KINDS:
            raise self.error(f"constants of dtype {t.dtype} cannot be printed inline", type_tok)
        items = self.comma_list("]", self.located_scalar) if self.accept("[") else [self.located_scalar()]
        if len(items) != t.numel:
            raise self.error(f"{len(items)} value(s) given for a constant of type {t} ({t.numel} elements)", tok)
        for v_tok, v in items:
            if not (isinstance(v, _KINDS[kind]) and (kind == "b") == isinstance(v, bool)):
                raise self.error(f"value {v!r} is not a {t.dtype}", v_tok)
            try:
                np.array(v, dtype=t.dtype)
            except OverflowError:
                raise self.error(f"value {v!r} is out of range for {t.dtype}", v_tok) from None
        return np.array([v for _, v in items], dtype=t.dtype).reshape(t.shape)

    def located_scalar(self) -> tuple[Token, bool | int | float | None]:
        tok = self.tok
        return tok, self.scalar()

    def attribute(self) -> tuple[str, object]:
        key = self.word("an attribute name")
        self.expect("=")
        return key, self.attr_value()

    def attr_value(self):
        tok = self.tok
        if self.accept("("):
            return tuple(self.comma_list(")", self.attr_value))
        if tok.kind == "string":
            self.k += 1
            return self.unquote(tok, tok.text)
        return self.scalar()

    def scalar(self) -> bool | int | float | None:
        tok = self.tok
        if tok.kind == "number":
            self.k += 1
            return int(tok.text) if re.fullmatch(r"-?\d+", tok.text) else float(tok.text)
        if tok.kind == "ident" and tok.text in _WORDS:
            self.k += 1
            return _WORDS[tok.text]
        raise self.error(f"expected a value (number, string, True, False, None or a tuple), found {self.describe()}")

    def type(self) -> TensorType:
        tok = self.take("ident", "a dtype")
        self.expect("[")
        shape = self.comma_list("]", self.dim)
        try:
            return TensorType(tuple(shape), tok.text)
        except GraphError as e:
            raise self.error(str(e), tok) from None

    def dim(self) -> Dim:
        tok = self.tok
        if tok.kind == "number" and re.fullmatch(r"\d+", tok.text):
            self.k += 1
            return int(tok.text)
        return self.word("a dimension (a non-negative int or a symbol)")

    def word(self, what: str) -> str:
        """An identifier or a quoted string."""
        tok = self.tok
        if tok.kind not in ("ident", "string"):
            raise self.error(f"expected {what}, found {self.describe()}")
        self.k += 1
        return self.unquote(tok, tok.text)

    # -- names ------------------------------------------------------------------------------
    def new_name(self) -> tuple[Token, str]:
        tok = self.take("value", "a value (%name)")
        name = self.unquote(tok, tok.text[1:])
        try:
            self.g.value(name)
        except KeyError:
            return tok, name
        raise self.error(f"%{name} is defined twice", tok)

    def use(self) -> Value:
        tok = self.take("value", "a value (%name)")
        name = self.unquote(tok, tok.text[1:])
        try:
            return self.g.value(name)
        except KeyError:
            raise self.error(f"%{name} is not defined (before this use)", tok) from None
