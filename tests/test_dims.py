"""ember.dims: symbolic dimensions as canonical polynomial strings."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ember import dims
from ember.errors import ShapeError
from ember.graph.core import TensorType


@pytest.mark.parametrize("text, canonical", [
    ("past+1", "past + 1"), ("1 + past", "past + 1"), ("seq*2", "2*seq"), ("2 * seq", "2*seq"),
    ("seq*batch", "batch*seq"), ("(a + 1) * (a - 1)", "a*a - 1"), ("a - a + 3", 3), ("-past + 4", "-past + 4"),
    ("s0", "s0"), ("x.y + 1", "x.y + 1"),
    ("?", "?"), ("batch size", "batch size"), ("a/b", "a/b"),  # not expressions: one symbol each, as written
])
def test_canonical_forms(text, canonical):
    assert dims.canonical(text) == canonical
    if isinstance(canonical, str):
        assert dims.canonical(canonical) == canonical  # a fixed point


def test_types_hold_the_canonical_form():
    assert TensorType(("past+1", 4)) == TensorType(("1 + past", 4))
    assert TensorType(("seq - seq + 2",)).shape == (2,)


def test_symbols_and_values():
    assert dims.symbols_of("2*seq + past*batch") == ("batch", "past", "seq")
    assert dims.is_symbol("past") and not dims.is_symbol("past + 1") and not dims.is_symbol(3)
    assert dims.add("past", 1) == "past + 1" and dims.add("past + 1", -1) == "past"
    assert dims.mul("seq", 2, 3) == "6*seq" and dims.mul(4, 5) == 20
    assert dims.evaluate("2*seq + past*batch", {"seq": 3, "past": 4, "batch": 5}) == 26
    with pytest.raises(ShapeError, match="needs symbol 'past'"):
        dims.evaluate("past + 1", {"seq": 3}, "output y dimension 0")


_terms = st.lists(st.tuples(st.integers(-5, 5), st.lists(st.sampled_from(["a", "b", "c"]), max_size=2)), max_size=4)


@given(_terms, st.integers(0, 50), st.integers(0, 50), st.integers(0, 50))
def test_canonical_form_keeps_the_value(terms, a, b, c):
    text = " + ".join(f"({k})" + "".join(f"*{s}" for s in syms) for k, syms in terms) or "0"
    values = {"a": a, "b": b, "c": c}
    expected = eval(text, {}, dict(values))  # noqa: S307 (integers and three names)
    got = dims.canonical(text)
    assert (got if isinstance(got, int) else dims.evaluate(got, values)) == expected
    rendered = dims.render(text, values.__getitem__)
    assert rendered == expected
