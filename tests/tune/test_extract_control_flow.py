"""Tuning tasks of a model with control flow: the kernels of its branches and loop bodies are
tasks like any other (a tuned record applies to them at compile time)."""

import numpy as np

from ember.graph import Graph, TensorType
from ember.ops.nodes import add_op
from ember.testing import random_array
from ember.tune.extract import extract_tasks


def test_kernels_inside_regions_are_tasks():
    t = TensorType((16, 32))
    g = Graph()
    x = g.add_input("x", t)
    c = g.add_input("c", TensorType((), "bool"))
    then, other = Graph("then"), Graph("else")
    a = then.add_input("x", t)
    (y,) = add_op(then, "matmul", [a, then.add_constant(random_array((32, 32)), "w")])
    then.set_outputs(add_op(then, "relu", [y]))
    b = other.add_input("x", t)
    other.set_outputs(add_op(other, "tanh", [b]))
    (out,) = add_op(g, "if", [c, x], regions=[then, other])
    g.set_outputs(add_op(g, "mul", [out, g.add_constant(np.float32(2), "two")]))
    names = sorted(task.name for task in extract_tasks(g))
    assert names == ["gemm_relu", "mul", "tanh"]
