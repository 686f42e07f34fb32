"""The ONNX models suite's families: PyTorch models with random weights at their published sizes
(toy sizes under ``--quick``), their example inputs and their exported dynamic axes.

The vision models are torchvision's and timm's as they ship. The transformer families are built
from their published base configurations: BERT-base (128 tokens), GPT-2 small (1,024 tokens),
a LLaMA-style 1B-class model (Llama 3.2 1B's sizes: d_model 2048, 16 layers, 32 heads over 8
key-value heads, 512 tokens), the T5-base encoder (512 tokens), the Whisper-base encoder (30 s
of audio: 3,000 mel frames), CLIP ViT-B/32's vision tower (224 x 224) and its text tower (77
tokens), and a Stable-Diffusion-sized UNet block (320 channels on a 64 x 64 latent, cross-
attention to 77 tokens of 768). ``--quick`` builds the same graphs at hidden size 128, 2
layers, 32 tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Family:
    """One model of the suite.

    Attributes:
        build: ``build(quick) -> torch.nn.Module`` (random weights come later).
        inputs: ``inputs(batch, quick) -> tuple of tensors`` on the CPU.
        dynamic: the exported dynamic axes of the first input ({axis: name}); the other inputs
            share the batch axis only.
        batch: the timed batch (``--batch`` overrides it).
        image: a CNN-style model on NCHW images: PyTorch runs it channels-last.
    """

    build: Callable[[bool], Any]
    inputs: Callable[[int, bool], tuple]
    dynamic: dict
    batch: int
    image: bool = False


def _torchvision(name: str, **kw: Any) -> Callable[[bool], Any]:
    def build(quick: bool) -> Any:
        import torchvision

        return getattr(torchvision.models, name)(weights=None, **kw)

    return build


def _segmentation(name: str) -> Callable[[bool], Any]:
    def build(quick: bool) -> Any:
        from torchvision.models import segmentation

        model = getattr(segmentation, name)(weights=None, weights_backbone=None, aux_loss=False)
        return _Wrap.make(model, "out")

    return build


def _timm(name: str) -> Callable[[bool], Any]:
    def build(quick: bool) -> Any:
        import timm

        return timm.create_model(name, pretrained=False)

    return build


def _image(size: int = 224) -> Callable[[int, bool], tuple]:
    def inputs(batch: int, quick: bool) -> tuple:
        import torch

        return (torch.randn(batch, 3, size, size),)

    return inputs


def _tokens(seq: int, vocab: int) -> Callable[[int, bool], tuple]:
    def inputs(batch: int, quick: bool) -> tuple:
        import torch

        return (torch.randint(0, 1000 if quick else vocab, (batch, 32 if quick else seq)),)

    return inputs


class _Wrap:
    """A model as a module returning one tensor (its output ``key``, else its first)."""

    @staticmethod
    def make(model: Any, key: str = "last_hidden_state") -> Any:
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(*args)
                return out[key] if isinstance(out, dict) or hasattr(out, key) else out[0]

        return M()


# Toy sizes of the transformer families under --quick.
_TOY = dict(hidden=128, layers=2, heads=4, ffn=256, vocab=1000)


def _bert(quick: bool) -> Any:
    from transformers import BertConfig, BertModel

    t = _TOY
    cfg = (BertConfig(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                      num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                      vocab_size=t["vocab"])
           if quick else BertConfig())  # BertConfig's defaults are BERT-base's  # fmt: skip
    return _Wrap.make(BertModel(cfg))


def _gpt2(quick: bool) -> Any:
    from transformers import GPT2Config, GPT2Model

    t = _TOY
    cfg = (GPT2Config(n_embd=t["hidden"], n_layer=t["layers"], n_head=t["heads"],
                      vocab_size=t["vocab"], n_positions=128)
           if quick else GPT2Config())  # GPT-2 small: 768, 12 layers, 1,024 positions  # fmt: skip
    return _Wrap.make(GPT2Model(cfg))


def _llama(quick: bool) -> Any:
    from transformers import LlamaConfig, LlamaModel

    t = _TOY
    if quick:
        cfg = LlamaConfig(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                          num_attention_heads=t["heads"], num_key_value_heads=2,
                          intermediate_size=t["ffn"], vocab_size=t["vocab"],
                          max_position_embeddings=128)  # fmt: skip
    else:  # Llama 3.2 1B's sizes
        cfg = LlamaConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                          num_key_value_heads=8, intermediate_size=8192, vocab_size=128256,
                          max_position_embeddings=4096, rope_theta=500000.0)  # fmt: skip
    return _Wrap.make(LlamaModel(cfg))


def _t5_encoder(quick: bool) -> Any:
    from transformers import T5Config, T5EncoderModel

    t = _TOY
    cfg = (T5Config(d_model=t["hidden"], num_layers=t["layers"], num_heads=t["heads"],
                    d_ff=t["ffn"], d_kv=32, vocab_size=t["vocab"])
           if quick else T5Config())  # T5Config's defaults are t5-base's  # fmt: skip
    return _Wrap.make(T5EncoderModel(cfg))


def _whisper_encoder(quick: bool) -> Any:
    from transformers import WhisperConfig
    from transformers.models.whisper.modeling_whisper import WhisperEncoder

    t = _TOY
    if quick:
        cfg = WhisperConfig(d_model=t["hidden"], encoder_layers=t["layers"],
                            encoder_attention_heads=t["heads"], encoder_ffn_dim=t["ffn"],
                            num_mel_bins=80, max_source_positions=100)  # fmt: skip
    else:  # whisper-base
        cfg = WhisperConfig(d_model=512, encoder_layers=6, encoder_attention_heads=8,
                            encoder_ffn_dim=2048, num_mel_bins=80, max_source_positions=1500)  # fmt: skip
    return _Wrap.make(WhisperEncoder(cfg))


def _whisper_inputs(batch: int, quick: bool) -> tuple:
    import torch

    return (torch.randn(batch, 80, 200 if quick else 3000),)


def _clip_vision(quick: bool) -> Any:
    from transformers import CLIPVisionConfig, CLIPVisionModel

    t = _TOY
    cfg = (CLIPVisionConfig(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                            num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                            image_size=64, patch_size=16)
           if quick else CLIPVisionConfig())  # ViT-B/32: 768, 12 layers, 224 / 32  # fmt: skip
    return _Wrap.make(CLIPVisionModel(cfg), "pooler_output")


def _clip_image(batch: int, quick: bool) -> tuple:
    return _image(64 if quick else 224)(batch, quick)


def _clip_text(quick: bool) -> Any:
    from transformers import CLIPTextConfig, CLIPTextModel

    t = _TOY
    cfg = (CLIPTextConfig(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                          num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                          vocab_size=t["vocab"], max_position_embeddings=64)
           if quick else CLIPTextConfig())  # ViT-B/32's text tower: 512, 12 layers, 77  # fmt: skip
    return _Wrap.make(CLIPTextModel(cfg), "pooler_output")


# The UNet block's sizes: (channels, latent side, context tokens, context width, time width,
# heads); Stable Diffusion 1.x's first level, and a toy one.
_UNET = {False: (320, 64, 77, 768, 1280, 8), True: (64, 16, 12, 32, 128, 4)}


def _unet_block(quick: bool) -> Any:
    """A diffusers-style UNet block: ResNet block (GroupNorm, SiLU, time embedding), a
    transformer block (self- and cross-attention, GEGLU feed-forward) and 2x nearest upsampling
    with a convolution."""
    from torch import nn

    ch, _, _, ctx, temb, heads = _UNET[quick]

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.c1 = nn.GroupNorm(32, ch), nn.Conv2d(ch, ch, 3, padding=1)
            self.t = nn.Linear(temb, ch)
            self.n2, self.c2 = nn.GroupNorm(32, ch), nn.Conv2d(ch, ch, 3, padding=1)
            self.ln1, self.ln2, self.ln3 = nn.LayerNorm(ch), nn.LayerNorm(ch), nn.LayerNorm(ch)
            self.a1 = nn.MultiheadAttention(ch, heads, batch_first=True)
            self.a2 = nn.MultiheadAttention(ch, heads, kdim=ctx, vdim=ctx, batch_first=True)
            self.ff1, self.ff2 = nn.Linear(ch, 8 * ch), nn.Linear(4 * ch, ch)
            self.up = nn.Conv2d(ch, ch, 3, padding=1)

        def forward(self, x, t, context):
            h = self.c1(nn.functional.silu(self.n1(x)))
            h = h + self.t(nn.functional.silu(t))[:, :, None, None]
            x = x + self.c2(nn.functional.silu(self.n2(h)))
            b, c, hh, ww = x.shape
            s = x.flatten(2).transpose(1, 2)
            q = self.ln1(s)
            s = s + self.a1(q, q, q, need_weights=False)[0]
            q = self.ln2(s)
            s = s + self.a2(q, context, context, need_weights=False)[0]
            u, g = self.ff1(self.ln3(s)).chunk(2, dim=-1)
            s = s + self.ff2(u * nn.functional.gelu(g))
            x = s.transpose(1, 2).reshape(b, c, hh, ww)
            return self.up(nn.functional.interpolate(x, scale_factor=2.0, mode="nearest"))

    return Block()


def _unet_inputs(batch: int, quick: bool) -> tuple:
    import torch

    ch, side, tokens, ctx, temb, _ = _UNET[quick]
    return (
        torch.randn(batch, ch, side, side),
        torch.randn(batch, temb),
        torch.randn(batch, tokens, ctx),
    )


_B = {0: "batch"}
_BS = {0: "batch", 1: "sequence"}

FAMILIES: dict[str, Family] = {
    "resnet50": Family(_torchvision("resnet50"), _image(), _B, 64, image=True),
    "mobilenet_v2": Family(_torchvision("mobilenet_v2"), _image(), _B, 64, image=True),
    "mobilenet_v3_large": Family(_torchvision("mobilenet_v3_large"), _image(), _B, 64, True),
    "efficientnet_b0": Family(_torchvision("efficientnet_b0"), _image(), _B, 64, image=True),
    "convnext_tiny": Family(_torchvision("convnext_tiny"), _image(), _B, 64, image=True),
    "regnet_y_400mf": Family(_torchvision("regnet_y_400mf"), _image(), _B, 64, image=True),
    "swin_t": Family(_torchvision("swin_t"), _image(), _B, 64, image=True),
    "vit_b_16": Family(_torchvision("vit_b_16"), _image(), _B, 64, image=True),
    "deeplabv3_mobilenet": Family(
        _segmentation("deeplabv3_mobilenet_v3_large"), _image(256), _B, 16, image=True
    ),
    "fcn_resnet50": Family(_segmentation("fcn_resnet50"), _image(256), _B, 16, image=True),
    "timm_vit_tiny": Family(_timm("vit_tiny_patch16_224"), _image(), _B, 64, image=True),
    "timm_efficientnet_b0": Family(_timm("efficientnet_b0"), _image(), _B, 64, image=True),
    "bert": Family(_bert, _tokens(128, 30522), _BS, 32),
    "gpt2": Family(_gpt2, _tokens(1024, 50257), _BS, 8),
    "llama_gqa": Family(_llama, _tokens(512, 128256), _BS, 4),
    "t5_encoder": Family(_t5_encoder, _tokens(512, 32128), _BS, 8),
    "whisper_encoder": Family(_whisper_encoder, _whisper_inputs, _B, 8),
    "clip_vision": Family(_clip_vision, _clip_image, _B, 64, image=True),
    "clip_text": Family(_clip_text, _tokens(77, 49408), _BS, 64),
    "unet_block": Family(_unet_block, _unet_inputs, _B, 8, image=True),
}
