"""BERT-base: transformers' BertModel from its default config (12 layers, hidden 768), random
weights. small=True: 2 layers, hidden 64, 4 heads. Inputs: token ids (batch 1, 128 tokens)."""

import torch

from .hf import LastHiddenState


def bert_base(small: bool = False, batch: int = 1, seq: int = 128):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig() if not small else BertConfig(hidden_size=64, num_hidden_layers=2,
                                                        num_attention_heads=4, intermediate_size=128)
    config.attn_implementation = "eager"
    model = LastHiddenState(BertModel(config)).eval()
    seq = 16 if small else seq
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return model, (ids,)
