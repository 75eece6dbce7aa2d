"""The models users bring: torchvision's classification and segmentation networks, timm's common
families and transformers' architectures (encoder, decoder, encoder-decoder, vision, audio,
mixture-of-experts), built from their definitions with random weights, no downloads.

`HUB[name]` is a `HubModel`: its library, its kind and `build(small)` -> (model, inputs), the
model returning one tensor (logits, a segmentation map or the last hidden state), seeded so that
two processes build the same weights. Full size: the library's default configuration at batch 1
(images 224 x 224, 128 tokens, one second of 16 kHz audio), or for the decoders whose default has
billions of parameters a base-size one (hidden 768, 6 layers; 8 experts for mixture-of-experts);
small=True: the same architecture over small inputs (images 64 x 64) and, for transformers, a
reduced configuration (2 layers, hidden 64). torchvision and timm come from hub_libs (their own folder).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from . import hub_libs


@dataclass(frozen=True)
class HubModel:
    library: str  # torchvision, timm, transformers
    kind: str  # classification, segmentation, encoder, decoder, encoder-decoder, vision, audio, moe
    make: Callable[[bool], tuple[nn.Module, tuple]]

    def build(self, small: bool = False) -> tuple[nn.Module, tuple]:
        """The model in eval mode and its inputs; weight matrices a library initialises to zero
        (timm's classifier heads) made random, so that the output depends on the input."""
        torch.manual_seed(0)
        model, inputs = self.make(small)
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() >= 2 and not p.any():
                    p.normal_(0.0, 0.02)
        return model.eval(), inputs


class OneOutput(nn.Module):
    """The model's main tensor: a segmentation model's "out", a transformers model's logits or
    last hidden state (its cache off)."""

    def __init__(self, model: nn.Module, names: tuple[str, ...] = ()):
        super().__init__()
        self.model, self.names = model, names
        self.kwargs = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}

    def forward(self, *inputs):
        out = self.model(**dict(zip(self.names, inputs)), **self.kwargs) if self.names else self.model(*inputs)
        if isinstance(out, torch.Tensor):
            return out
        if isinstance(out, dict) and "out" in out:  # torchvision's segmentation models
            return out["out"]
        for key in ("logits", "last_hidden_state"):
            if getattr(out, key, None) is not None:
                return getattr(out, key)
        raise TypeError(f"{type(self.model).__name__} returns {type(out).__name__}: no logits or last hidden state")


def _image(small: bool, side: int = 224) -> tuple[torch.Tensor]:
    return (torch.randn(1, 3, 64 if small else side, 64 if small else side),)


# -- torchvision -------------------------------------------------------------------------------

TORCHVISION_CLASSIFICATION = (
    "alexnet", "convnext_tiny", "densenet121", "efficientnet_b0", "efficientnet_v2_s", "googlenet", "inception_v3",
    "maxvit_t", "mnasnet0_5", "mobilenet_v2", "mobilenet_v3_large", "mobilenet_v3_small", "regnet_x_400mf",
    "regnet_y_400mf", "resnet18", "resnet50", "resnext50_32x4d", "shufflenet_v2_x1_0", "squeezenet1_1", "swin_t",
    "swin_v2_t", "vgg11", "vit_b_16", "wide_resnet50_2",
)
TORCHVISION_SEGMENTATION = ("deeplabv3_mobilenet_v3_large", "deeplabv3_resnet50", "fcn_resnet50",
                            "lraspp_mobilenet_v3_large")
TORCHVISION_SIDE = {"inception_v3": 299}
TORCHVISION_SMALL_SIDE = {"inception_v3": 80, "maxvit_t": 224}  # their smallest (maxvit: 7 x 7 partitions of 4 stages)
TORCHVISION_SMALL = {"vit_b_16": {"image_size": 64}}  # an input size that is part of the definition, at small size


def _torchvision(name: str, segmentation: bool):
    def make(small: bool):
        torchvision, _ = hub_libs.load()
        kwargs = {"num_classes": 10, **(TORCHVISION_SMALL.get(name, {}) if small else {})}
        if name in ("googlenet", "inception_v3"):
            kwargs["aux_logits"], kwargs["init_weights"] = False, True
        if segmentation:
            kwargs.update(weights_backbone=None, aux_loss=False)
        model = torchvision.models.get_model(name, **kwargs)
        side = TORCHVISION_SMALL_SIDE.get(name, 64) if small else TORCHVISION_SIDE.get(name, 224)
        return OneOutput(model), (torch.randn(1, 3, side, side),)

    return HubModel("torchvision", "segmentation" if segmentation else "classification", make)


# -- timm ----------------------------------------------------------------------------------------

TIMM = (
    "resnet18", "resnet50d", "resnext50_32x4d", "seresnext26d_32x4d", "efficientnet_b0", "tf_efficientnet_lite0",
    "mobilenetv2_100", "mobilenetv3_large_100", "mobilenetv4_conv_small", "ghostnet_100", "rexnet_100", "regnety_002",
    "densenet121", "dla34", "convnext_atto", "convnextv2_atto", "vit_tiny_patch16_224", "deit_tiny_patch16_224",
    "swin_tiny_patch4_window7_224", "levit_128s", "mixer_s16_224", "poolformer_s12", "mobilevit_xxs",
    "efficientformer_l1", "fastvit_t8", "repvit_m0_9", "edgenext_xx_small", "coatnet_nano_rw_224",
)
TIMM_SIZED = ("vit_", "deit_", "swin_", "levit_", "mixer_", "coatnet_", "mobilevit_")  # input size in the definition
TIMM_FIXED = ("efficientformer_",)  # 224 x 224 only (its attention biases are sized for it)


def _timm(name: str):
    def make(small: bool):
        _, timm = hub_libs.load()
        sized = small and name.startswith(TIMM_SIZED)
        model = timm.create_model(name, pretrained=False, num_classes=10, **({"img_size": 64} if sized else {}))
        return OneOutput(model), _image(small and not name.startswith(TIMM_FIXED))

    return HubModel("timm", "classification", make)


# -- transformers --------------------------------------------------------------------------------

SMALL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
         "vocab_size": 1000}
TEXT = 128  # tokens at full size (16 small)


def _tokens(config, small: bool, *names: str) -> tuple:
    return tuple(torch.randint(0, min(config.vocab_size, 1000), (1, 16 if small else TEXT)) for _ in names)


def _hf(kind: str, config: str, model: str, small: dict, inputs: Callable | tuple[str, ...] = ("input_ids",),
        full: dict | None = None):
    """A transformers model built from its config class (small: the config with `small`'s
    values; full: the default config, or with `full`'s values where the default is billions of
    parameters); `inputs` the names of token-id inputs, or a function (config, small) -> {name: tensor}."""
    def make(is_small: bool):
        import transformers

        cfg = getattr(transformers, config)(**(small if is_small else full or {}))
        cfg._attn_implementation = "eager"
        net = getattr(transformers, model)(cfg)
        if callable(inputs):
            named = inputs(cfg, is_small)
        else:
            named = dict(zip(inputs, _tokens(cfg, is_small, *inputs)))
        return OneOutput(net, tuple(named)), tuple(named.values())

    return HubModel("transformers", kind, make)


def _pixels(cfg, small: bool) -> dict:
    side = cfg.image_size if isinstance(cfg.image_size, int) else cfg.image_size[0]
    return {"pixel_values": torch.randn(1, 3, side, side)}


def _convnext_pixels(cfg, small: bool) -> dict:
    return {"pixel_values": torch.randn(1, 3, 64 if small else 224, 64 if small else 224)}


def _audio(cfg, small: bool) -> dict:
    return {"input_values": torch.randn(1, 1600 if small else 16000)}


def _whisper(cfg, small: bool) -> dict:
    return {"input_features": torch.randn(1, cfg.num_mel_bins, 2 * cfg.max_source_positions),
            "decoder_input_ids": torch.randint(0, 1000, (1, 8 if small else 32))}


VISION_SMALL = {**SMALL, "image_size": 32, "patch_size": 8}
CONV_AUDIO = {"conv_dim": (32,) * 7, "num_conv_pos_embeddings": 16, "num_conv_pos_embedding_groups": 4}
MOE_SMALL = {**SMALL, "num_key_value_heads": 2}
# "full" size for the models whose default config has billions of parameters: a base-size one (~100M parameters
# in the blocks: hidden 768, 6 layers; mixture-of-experts: 8 experts of 1024, 2 per token)
LLM = {"hidden_size": 768, "num_hidden_layers": 6, "num_attention_heads": 12, "num_key_value_heads": 4,
       "intermediate_size": 2048, "vocab_size": 32000}
MOE = {**LLM, "intermediate_size": 1024}
SEQ2SEQ_SMALL = {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                 "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128, "vocab_size": 1000}

TRANSFORMERS = {
    "hf_bert": _hf("encoder", "BertConfig", "BertModel", SMALL),
    "hf_roberta": _hf("encoder", "RobertaConfig", "RobertaModel", SMALL),
    "hf_distilbert": _hf("encoder", "DistilBertConfig", "DistilBertModel",
                         {"dim": 64, "n_layers": 2, "n_heads": 4, "hidden_dim": 128, "vocab_size": 1000}),
    "hf_albert": _hf("encoder", "AlbertConfig", "AlbertModel", {**SMALL, "embedding_size": 32}),
    "hf_electra": _hf("encoder", "ElectraConfig", "ElectraModel", {**SMALL, "embedding_size": 32}),
    "hf_deberta_v2": _hf("encoder", "DebertaV2Config", "DebertaV2Model", SMALL),
    "hf_gpt2": _hf("decoder", "GPT2Config", "GPT2Model", {"n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 1000}),
    "hf_llama": _hf("decoder", "LlamaConfig", "LlamaModel", MOE_SMALL, full=LLM),
    "hf_mistral": _hf("decoder", "MistralConfig", "MistralModel", MOE_SMALL, full=LLM),
    "hf_qwen2": _hf("decoder", "Qwen2Config", "Qwen2Model", MOE_SMALL, full=LLM),
    "hf_gemma": _hf("decoder", "GemmaConfig", "GemmaModel", {**MOE_SMALL, "head_dim": 16},
                    full={**LLM, "head_dim": 64}),
    "hf_phi": _hf("decoder", "PhiConfig", "PhiModel", SMALL, full=LLM),
    "hf_opt": _hf("decoder", "OPTConfig", "OPTModel", {"hidden_size": 64, "num_hidden_layers": 2,
                                                       "num_attention_heads": 4, "ffn_dim": 128,
                                                       "word_embed_proj_dim": 64, "vocab_size": 1000}),
    "hf_t5": _hf("encoder-decoder", "T5Config", "T5Model",
                 {"d_model": 64, "d_ff": 128, "d_kv": 16, "num_layers": 2, "num_heads": 4, "vocab_size": 1000},
                 ("input_ids", "decoder_input_ids")),
    "hf_bart": _hf("encoder-decoder", "BartConfig", "BartModel", SEQ2SEQ_SMALL, ("input_ids", "decoder_input_ids")),
    "hf_marian": _hf("encoder-decoder", "MarianConfig", "MarianModel",
                     {**SEQ2SEQ_SMALL, "pad_token_id": 999, "decoder_start_token_id": 999},
                     ("input_ids", "decoder_input_ids")),
    "hf_vit": _hf("vision", "ViTConfig", "ViTModel", VISION_SMALL, _pixels),
    "hf_deit": _hf("vision", "DeiTConfig", "DeiTModel", VISION_SMALL, _pixels),
    "hf_dinov2": _hf("vision", "Dinov2Config", "Dinov2Model", VISION_SMALL, _pixels),
    "hf_swin": _hf("vision", "SwinConfig", "SwinModel", {"image_size": 64, "embed_dim": 32, "depths": [1, 1],
                                                         "num_heads": [2, 4], "window_size": 4}, _pixels),
    "hf_convnext": _hf("vision", "ConvNextConfig", "ConvNextModel", {"hidden_sizes": [16, 32], "depths": [1, 1],
                                                                     "num_stages": 2}, _convnext_pixels),
    "hf_wav2vec2": _hf("audio", "Wav2Vec2Config", "Wav2Vec2Model", {**SMALL, **CONV_AUDIO}, _audio),
    "hf_hubert": _hf("audio", "HubertConfig", "HubertModel", {**SMALL, **CONV_AUDIO}, _audio),
    "hf_whisper": _hf("audio", "WhisperConfig", "WhisperModel",
                      {"d_model": 64, "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
                       "decoder_attention_heads": 4, "encoder_ffn_dim": 128, "decoder_ffn_dim": 128,
                       "vocab_size": 1000, "num_mel_bins": 16, "max_source_positions": 32, "pad_token_id": 999,
                       "bos_token_id": 998, "eos_token_id": 998, "decoder_start_token_id": 998}, _whisper),
    "hf_mixtral": _hf("moe", "MixtralConfig", "MixtralModel", {**MOE_SMALL, "num_local_experts": 4},
                      full={**MOE, "num_local_experts": 8}),
    "hf_qwen2_moe": _hf("moe", "Qwen2MoeConfig", "Qwen2MoeModel",
                        {**MOE_SMALL, "num_experts": 4, "moe_intermediate_size": 32,
                         "shared_expert_intermediate_size": 64},
                        full={**MOE, "num_experts": 8, "moe_intermediate_size": 512,
                              "shared_expert_intermediate_size": 1024}),
    "hf_olmoe": _hf("moe", "OlmoeConfig", "OlmoeModel", {**MOE_SMALL, "num_experts": 4, "num_experts_per_tok": 2},
                    full={**MOE, "num_experts": 8, "num_experts_per_tok": 2}),
}

HUB: dict[str, HubModel] = {
    **{f"tv_{n}": _torchvision(n, False) for n in TORCHVISION_CLASSIFICATION},
    **{f"tv_{n}": _torchvision(n, True) for n in TORCHVISION_SEGMENTATION},
    **{f"timm_{n}": _timm(n) for n in TIMM},
    **TRANSFORMERS,
}
