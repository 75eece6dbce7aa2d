"""GPT-2 small: transformers' GPT2Model from its default config (12 layers, hidden 768), random
weights. small=True: 2 layers, hidden 64, 4 heads. Inputs: token ids (batch 1, 128 tokens)."""

import torch

from .hf import LastHiddenState


def gpt2_small(small: bool = False, batch: int = 1, seq: int = 128):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config() if not small else GPT2Config(n_embd=64, n_layer=2, n_head=4)
    model = LastHiddenState(GPT2Model(config)).eval()
    seq = 16 if small else seq
    ids = torch.randint(0, config.vocab_size, (batch, seq))
    return model, (ids,)
