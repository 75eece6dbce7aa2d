"""The key of a torch module before tracing (ember.frontend.module_key): equal for the same module
built again, different for anything the trace would read differently (a weight, permuted
weights, an attribute, a config field, an input's shape or dtype, a Dim's range, a class's or
an instance's forward, a global constant its forward reads), and none for a module with a hook,
a global hook, an attribute it cannot read or a tensor that is not dense on the CPU."""

from __future__ import annotations

import dataclasses
import sys

import pytest

torch = pytest.importorskip("torch")

from ember.frontend.module_key import module_key  # noqa: E402

SCALE = 2.0  # a module-level global that Block.forward reads


@dataclasses.dataclass
class Settings:
    act: str = "relu"
    depth: int = 2


class Block(torch.nn.Module):
    def __init__(self, settings: Settings):
        super().__init__()
        self.settings = settings
        self.fc = torch.nn.Linear(8, 8)
        self.norm = torch.nn.LayerNorm(8)
        self.drop = torch.nn.Dropout(0.1)
        self.register_buffer("offset", torch.randn(8))

    def forward(self, x):
        return self.drop(self.norm(self.fc(x) * SCALE + self.offset)).relu()


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList([Block(Settings()) for _ in range(2)])

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def net(seed: int = 0) -> Net:
    torch.manual_seed(seed)
    return Net().eval()


X = (torch.randn(2, 8),)


def key(model, inputs=X, dynamic_shapes=None) -> str:
    k, why = module_key(model, inputs, dynamic_shapes)
    assert k is not None, why
    return k


def test_same_module_same_key_and_weights_count():
    base = key(net())
    assert key(net()) == base  # built again with the same weights
    assert key(net(seed=1)) != base
    m = net()
    with torch.no_grad():
        m.blocks[1].fc.weight[3, 5] += 1e-6
    assert key(m) != base
    m = net()
    with torch.no_grad():  # the same values, permuted: not a sum of them
        w = m.blocks[0].fc.weight
        w.copy_(w.flip(0))
    assert key(m) != base
    m = net()
    with torch.no_grad():
        m.blocks[0].offset.add_(1.0)  # a buffer
    assert key(m) != base
    m = net()
    m.blocks[1].fc.weight = m.blocks[0].fc.weight  # tied: the same values, shared
    tied = key(m)
    with torch.no_grad():
        m.blocks[1].fc.weight = torch.nn.Parameter(m.blocks[0].fc.weight.clone())
    assert key(m) != tied
    m.train()
    assert key(m) == key(m.eval())  # (ember traces in eval mode)


@pytest.mark.parametrize("change", [
    lambda m: setattr(m.blocks[0].norm, "eps", 1e-3),
    lambda m: setattr(m.blocks[1].drop, "p", 0.2),
    lambda m: setattr(m.blocks[0].settings, "act", "gelu"),  # a config object's field
    lambda m: setattr(m.blocks[0], "extra", (1, "two", [3.0])),
    lambda m: setattr(m.blocks[0].fc, "forward", lambda x: x),  # an instance's forward
])
def test_an_attribute_changes_the_key(change):
    m = net()
    base = key(m)
    change(m)
    assert key(m) != base


def test_inputs_and_dynamic_shapes_count():
    m = net()
    base = key(m)
    assert key(m, (torch.randn(3, 8),)) != base
    assert key(m, (torch.randn(2, 8, dtype=torch.float64),)) != base
    assert key(m, (torch.randn(8, 2).t(),)) != base  # strides
    assert key(m, (torch.randn(2, 8),)) == base  # the values are not traced
    Dim = torch.export.Dim
    assert key(m, X, ({0: Dim("batch", min=1, max=64)},)) != key(m, X, ({0: Dim("batch", min=1, max=32)},))


def test_code_counts(monkeypatch):
    m = net()
    base = key(m)
    monkeypatch.setattr(Block, "forward", lambda self, x: self.fc(x))  # the class's forward
    assert key(m) != base
    monkeypatch.undo()
    assert key(m) == base
    monkeypatch.setitem(globals(), "SCALE", 3.0)  # a plain global its forward reads
    assert key(m) != base
    monkeypatch.undo()

    class Block2(Block):  # (another class: its own source)
        def forward(self, x):
            return super().forward(x) + 1

    other = net()
    other.blocks[0].__class__ = Block2
    assert key(other) != base


def test_no_key():
    m = net()
    handle = m.blocks[0].register_forward_hook(lambda mod, args, out: out)
    assert module_key(m, X) == (None, "module blocks.0 (Block) has forward hooks")
    handle.remove()
    handle = torch.nn.modules.module.register_module_forward_pre_hook(lambda mod, args: None)
    try:
        assert "global module hook" in module_key(m, X)[1]
    finally:
        handle.remove()
    m.blocks[0].lock = __import__("threading").Lock()  # an attribute of a type it cannot read
    assert "blocks.0.lock is a _thread.lock" in module_key(m, X)[1]
    del m.blocks[0].lock
    m.blocks[0].register_buffer("sparse", torch.eye(3).to_sparse())
    assert "not a plain dense CPU tensor" in module_key(m, X)[1]


def test_without_xxhash_sha256(monkeypatch):
    base = key(net())
    monkeypatch.setitem(sys.modules, "xxhash", None)  # (not installed: sha256, another key)
    assert key(net()) == key(net()) != base


def test_a_helper_module_counts_by_its_source(tmp_path, monkeypatch):
    """forward calling `helpers.scale(x)`: the helpers module's source file is keyed."""
    (tmp_path / "key_helpers.py").write_text("def scale(x):\n    return 2 * x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    import key_helpers

    class Scaled(torch.nn.Module):
        def forward(self, x):
            return key_helpers.scale(x)

    base = key(Scaled())
    (tmp_path / "key_helpers.py").write_text("def scale(x):\n    return 3 * x  # edited\n")
    assert key(Scaled()) != base
    monkeypatch.delitem(sys.modules, "key_helpers")
