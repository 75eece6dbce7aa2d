"""The model zoo: networks written in this project (random weights), each with a full-size and
a reduced-size variant; `ZOO[name](small=False)` returns (model, example_inputs)."""

from .bert import bert_base
from .gpt2 import gpt2_small
from .lstm import lstm
from .mlp import mlp
from .mobilenet_v2 import mobilenet_v2
from .resnet import resnet18

ZOO = {
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "bert_base": bert_base,
    "gpt2_small": gpt2_small,
    "mlp": mlp,
    "lstm": lstm,
}

__all__ = ["ZOO", "bert_base", "gpt2_small", "lstm", "mlp", "mobilenet_v2", "resnet18"]
