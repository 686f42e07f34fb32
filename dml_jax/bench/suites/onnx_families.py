"""The ONNX models suite's families: PyTorch models with random weights at their published sizes
(toy sizes under ``--quick``), their example inputs and their exported dynamic axes.

The vision models are torchvision's and timm's as they ship. The transformer families are built
from their published base configurations: BERT-base (128 tokens), GPT-2 small (1,024 tokens),
a LLaMA-style 1B-class model (Llama 3.2 1B's sizes: d_model 2048, 16 layers, 32 heads over 8
key-value heads, 512 tokens), the T5-base encoder (512 tokens), the Whisper-base encoder (30 s
of audio: 3,000 mel frames), CLIP ViT-B/32's vision tower (224 x 224) and its text tower (77
tokens), and a Stable-Diffusion-sized UNet block (320 channels on a 64 x 64 latent, cross-
attention to 77 tokens of 768). The categories users export beyond those: BART-base, Marian
(opus-mt's sizes), T5-base and Whisper-base whole, their decoders over 64 target tokens;
wav2vec2-base on 1 s of 16 kHz audio; DeBERTa-v3-base (relative-position attention);
BLOOM-560m (ALiBi); Mistral's sliding window (128 of 512 tokens) on the 1B family's sizes; and
torchvision's r3d_18 (3-D convolutions, 16 frames of 112 x 112). ``--quick`` builds the same
graphs at hidden size 128, 2 layers, 32 tokens.
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
    def make(model: Any, key: str = "last_hidden_state", names: tuple = ()) -> Any:
        """``names``: the model's keyword for each input, where they are not its first
        positional parameters (Whisper's ``decoder_input_ids``)."""
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.m = model

            def forward(self, *args):
                out = self.m(**dict(zip(names, args))) if names else self.m(*args)
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


# t5-base (T5Config's own defaults are t5-small's: d_model 512, 6 layers)
_T5_BASE = dict(d_model=768, d_kv=64, d_ff=3072, num_layers=12, num_decoder_layers=12, num_heads=12)


def _t5_encoder(quick: bool) -> Any:
    from transformers import T5Config, T5EncoderModel

    t = _TOY
    cfg = (T5Config(d_model=t["hidden"], num_layers=t["layers"], num_heads=t["heads"],
                    d_ff=t["ffn"], d_kv=32, vocab_size=t["vocab"])
           if quick else T5Config(**_T5_BASE))  # fmt: skip
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


# --- Families of the categories users export beyond the first 20 (issue 66, item 5) --------
# Encoder-decoder models whole (the decoder over 64 target tokens), a speech feature extractor,
# relative-position attention, ALiBi, sliding-window attention and 3-D convolutions.

_TARGET = 64  # decoder tokens of the encoder-decoder families (8 under --quick)


def _seq2seq(kind: str) -> Callable[[bool], Any]:
    """BART-base, Marian (opus-mt's sizes) or T5-base, encoder and decoder: logits."""

    def build(quick: bool) -> Any:
        import transformers as tf

        t = _TOY
        if kind == "t5":
            cfg = (tf.T5Config(d_model=t["hidden"], num_layers=t["layers"], num_heads=t["heads"],
                               d_ff=t["ffn"], d_kv=32, vocab_size=t["vocab"])
                   if quick else tf.T5Config(**_T5_BASE))  # fmt: skip
            return _Wrap.make(tf.T5ForConditionalGeneration(cfg), "logits")
        small = dict(d_model=t["hidden"], encoder_layers=t["layers"], decoder_layers=t["layers"],
                     encoder_attention_heads=t["heads"], decoder_attention_heads=t["heads"],
                     encoder_ffn_dim=t["ffn"], decoder_ffn_dim=t["ffn"], vocab_size=t["vocab"],
                     max_position_embeddings=128)  # fmt: skip
        if kind == "bart":  # bart-base
            base = dict(d_model=768, encoder_layers=6, decoder_layers=6,
                        encoder_attention_heads=12, decoder_attention_heads=12,
                        encoder_ffn_dim=3072, decoder_ffn_dim=3072)  # fmt: skip
            cfg = tf.BartConfig(**(small if quick else base))
            return _Wrap.make(tf.BartForConditionalGeneration(cfg), "logits")
        opus = dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                    decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048)  # fmt: skip
        cfg = tf.MarianConfig(**(small if quick else opus), pad_token_id=1,
                              decoder_start_token_id=1)  # opus-mt-en-de's sizes  # fmt: skip
        return _Wrap.make(tf.MarianMTModel(cfg), "logits")

    return build


def _seq2seq_inputs(seq: int, vocab: int) -> Callable[[int, bool], tuple]:
    def inputs(batch: int, quick: bool) -> tuple:
        import torch

        v = 1000 if quick else vocab
        ids = torch.randint(2, v, (batch, 32 if quick else seq))
        target = torch.randint(2, v, (batch, 8 if quick else _TARGET))
        return (ids, torch.ones_like(ids), target)

    return inputs


def _whisper(quick: bool) -> Any:
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    t = _TOY
    if quick:
        cfg = WhisperConfig(d_model=t["hidden"], encoder_layers=t["layers"],
                            decoder_layers=t["layers"], encoder_attention_heads=t["heads"],
                            decoder_attention_heads=t["heads"], encoder_ffn_dim=t["ffn"],
                            decoder_ffn_dim=t["ffn"], vocab_size=t["vocab"], num_mel_bins=80,
                            max_source_positions=100, max_target_positions=64,
                            pad_token_id=1, bos_token_id=1, eos_token_id=2,
                            decoder_start_token_id=1)  # fmt: skip
    else:  # whisper-base, encoder and decoder
        cfg = WhisperConfig(d_model=512, encoder_layers=6, decoder_layers=6,
                            encoder_attention_heads=8, decoder_attention_heads=8,
                            encoder_ffn_dim=2048, decoder_ffn_dim=2048, num_mel_bins=80,
                            max_source_positions=1500)  # fmt: skip
    model = WhisperForConditionalGeneration(cfg)
    return _Wrap.make(model, "logits", ("input_features", "decoder_input_ids"))


def _whisper_seq2seq_inputs(batch: int, quick: bool) -> tuple:
    import torch

    features = _whisper_inputs(batch, quick)[0]
    return (features, torch.randint(2, 1000 if quick else 51865, (batch, 8 if quick else _TARGET)))


def _wav2vec2(quick: bool) -> Any:
    from transformers import Wav2Vec2Config, Wav2Vec2Model

    t = _TOY
    cfg = (Wav2Vec2Config(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                          num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                          num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)
           if quick else Wav2Vec2Config())  # wav2vec2-base  # fmt: skip
    return _Wrap.make(Wav2Vec2Model(cfg))


def _audio(batch: int, quick: bool) -> tuple:
    import torch

    return (torch.randn(batch, 4000 if quick else 16000),)  # 1 s at 16 kHz


def _deberta(quick: bool) -> Any:
    from transformers import DebertaV2Config, DebertaV2Model

    t = _TOY
    rel = dict(relative_attention=True, position_buckets=256, pos_att_type=["p2c", "c2p"],
               max_relative_positions=-1, norm_rel_ebd="layer_norm", share_att_key=True)  # fmt: skip
    cfg = (DebertaV2Config(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                           num_attention_heads=t["heads"], intermediate_size=t["ffn"],
                           vocab_size=t["vocab"], **rel)
           if quick else DebertaV2Config(hidden_size=768, num_hidden_layers=12,
                                         num_attention_heads=12, intermediate_size=3072,
                                         vocab_size=128100, **rel))  # deberta-v3-base  # fmt: skip
    return _Wrap.make(DebertaV2Model(cfg))


def _bloom(quick: bool) -> Any:
    from transformers import BloomConfig, BloomModel

    t = _TOY
    cfg = (BloomConfig(hidden_size=t["hidden"], n_layer=t["layers"], n_head=t["heads"],
                       vocab_size=t["vocab"])
           if quick else BloomConfig(hidden_size=1024, n_layer=24, n_head=16))  # bloom-560m  # fmt: skip
    return _Wrap.make(BloomModel(cfg))


def _mistral(quick: bool) -> Any:
    """Mistral's sliding-window attention on the 1B LLaMA family's sizes, a window of a
    quarter of the tokens (so that it masks)."""
    from transformers import MistralConfig, MistralModel

    t = _TOY
    if quick:
        cfg = MistralConfig(hidden_size=t["hidden"], num_hidden_layers=t["layers"],
                            num_attention_heads=t["heads"], num_key_value_heads=2,
                            intermediate_size=t["ffn"], vocab_size=t["vocab"],
                            max_position_embeddings=128, sliding_window=8)  # fmt: skip
    else:
        cfg = MistralConfig(hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                            num_key_value_heads=8, intermediate_size=8192, vocab_size=32000,
                            max_position_embeddings=4096, sliding_window=128)  # fmt: skip
    return _Wrap.make(MistralModel(cfg))


def _video(batch: int, quick: bool) -> tuple:
    import torch

    return (torch.randn(batch, 3, 4 if quick else 16, 56 if quick else 112, 56 if quick else 112),)


def _r3d(quick: bool) -> Any:
    from torchvision.models.video import r3d_18

    return r3d_18(weights=None)


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
    "bart": Family(_seq2seq("bart"), _seq2seq_inputs(128, 50265), _BS, 16),
    "marian": Family(_seq2seq("marian"), _seq2seq_inputs(128, 58101), _BS, 16),
    "t5": Family(_seq2seq("t5"), _seq2seq_inputs(512, 32128), _BS, 8),
    "whisper": Family(_whisper, _whisper_seq2seq_inputs, _B, 8),
    "wav2vec2": Family(_wav2vec2, _audio, _B, 16),
    "deberta_v3": Family(_deberta, _tokens(128, 128100), _BS, 32),
    "bloom_alibi": Family(_bloom, _tokens(512, 250880), _BS, 8),
    "mistral_sliding": Family(_mistral, _tokens(512, 32000), _BS, 4),
    "r3d_18": Family(_r3d, _video, _B, 8),
}
