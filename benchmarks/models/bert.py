"""BERT-base: transformers' BertModel from its default config (12 layers, hidden 768), random
weights; BERT-large: 24 layers, hidden 1024, 16 heads (1.34 GB of weights). small=True: 2 layers,
hidden 64, 4 heads. Inputs: token ids (batch 1, 128 tokens)."""

import torch

from .hf import LastHiddenState

SMALL = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128)
LARGE = dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, intermediate_size=4096)


def bert_base(small: bool = False, batch: int = 1, seq: int = 128):
    return _bert(SMALL if small else {}, batch, 16 if small else seq)


def bert_large(small: bool = False, batch: int = 1, seq: int = 128):
    return _bert(SMALL if small else LARGE, batch, 16 if small else seq)


def _bert(sizes: dict, batch: int, seq: int):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(**sizes)
    config.attn_implementation = "eager"
    model = LastHiddenState(BertModel(config)).eval()
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return model, (ids,)
