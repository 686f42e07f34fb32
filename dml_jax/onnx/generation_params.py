"""What a generation generates (``GeneratorParams``: onnxruntime-genai's ``GeneratorParams`` and
its search options), checked as it is made and as options are set; made from a model folder
(``ModelDefaults``: ``genai_model.Model``) it starts from the folder's configuration."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from ..errors import ValidationError
from .buckets import bucket_sizes
from .elements import ONNX


class ModelDefaults:
    """What ``GeneratorParams`` may be made from besides a session: a model with its
    ``session`` and the ``defaults`` (``GeneratorParams`` attributes by name) it gives
    (``genai_model.Model``)."""

    session: Any
    defaults: dict


@dataclass
class GeneratorParams:
    """What to generate (onnxruntime-genai's ``GeneratorParams`` and its search options). Made
    from an onnxruntime-genai model folder (``GeneratorParams(Model(folder))``), it starts from
    the folder's genai_config.json (``Model.defaults``: its search section, end and pad ids),
    the values given here over them.

    Attributes:
        max_length: the total length, prompt included, at which a sequence stops.
        batch_size: the number of prompts.
        do_sample: sample (else greedy: the most probable token).
        top_k: sample among the ``top_k`` most probable tokens (0: all).
        top_p: sample among the most probable tokens whose probabilities add up to ``top_p``.
        temperature: the logits are divided by it before sampling.
        eos_token_id: an int or a list of ints ending a sequence (None: none).
        pad_token_id: the id put before shorter prompts and after a finished sequence.
        repetition_penalty: every token id already in a row (its prompt and what it
            generated, not its left padding) has its logit divided by this where positive and
            multiplied by it where not, before the choice (1.0: none), as onnxruntime-genai
            and Hugging Face apply it.
        min_length: a row's end tokens are not chosen while it holds fewer tokens than this,
            its prompt included (0: no minimum).
        no_repeat_ngram_size: a token that would repeat an n-gram of this many tokens the
            row already holds is not chosen (0: none).
        num_beams: beam search's beams a prompt (1: none; ``beams.py`` says how it runs).
        num_return_sequences: the sequences a prompt returns, its best hypotheses (at most
            ``num_beams``).
        length_penalty: beam search scores a hypothesis by its sum of log-probabilities over
            its length to this power.
        early_stopping: beam search ends a prompt once it holds ``num_beams`` hypotheses (else
            once no beam can beat the worst of them).
        seed: the sampling's random seed (onnxruntime-genai's ``random_seed``).
        buckets: the past lengths programs are compiled for: None (powers of two from 16, where
            the step's graph shows the padding masked), False (every length exact), or a list of
            lengths.
        steps_per_dispatch: ``generate_until_done``'s decode steps a dispatch (not
            onnxruntime-genai's): n > 1 (16 by default), runs of n steps inside a bucket as
            one ``lax.fori_loop`` of a fixed count (no condition for the host to read between
            them, the arguments passed once), the rest a step each (a second program a
            bucket); 1, a step each. Where the host's work a dispatch bounds the steps (a small
            model) runs are several times faster (benchmarks/experiments/README.md,
            ``decode_step_gpu.py``).
        ngram_size: speculative decoding by n-grams (onnxruntime-genai's speculative option;
            0: none): where the sequence's last ``ngram_size`` tokens occurred before, the tokens
            that followed are proposed as drafts and the model checks them in one call
            (``speculative``; one sequence, no beams). The tokens are those generated without
            it.
        max_draft_tokens: the drafts a round proposes at most (1 to 16).
    """

    session: Any = None
    max_length: int = 256
    batch_size: int = 1
    do_sample: bool = False
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    eos_token_id: Any = None
    pad_token_id: int = 0
    repetition_penalty: float = 1.0
    min_length: int = 0
    no_repeat_ngram_size: int = 0
    num_beams: int = 1
    num_return_sequences: int = 1
    length_penalty: float = 1.0
    early_stopping: bool = True
    seed: int = 0
    buckets: Any = None
    steps_per_dispatch: int = 16
    ngram_size: int = 0
    max_draft_tokens: int = 4

    def __post_init__(self) -> None:
        check_params(self)

    def set_search_options(self, **options: Any) -> None:
        """onnxruntime-genai's ``set_search_options(max_length=..., top_k=..., ...)``: these
        attributes by name, ``random_seed`` for ``seed``, ``diversity_penalty`` at 0 (group
        beam search is not run), and ``past_present_share_buffer`` (the cache here is always
        one buffer written in place): a genai_config.json's ``search`` section as it is."""
        for k, v in options.items():
            if k == "diversity_penalty":
                if v != 0:
                    raise ValidationError(
                        f"{ONNX}: generation: diversity_penalty={v!r}: group beam search is "
                        "not supported (diversity_penalty 0)"
                    )
                continue
            if k in _UNREAD_OPTIONS:
                continue
            k = "seed" if k == "random_seed" else k
            if not hasattr(self, k) or k in ("session", *SPECULATIVE):
                raise ValidationError(f"{ONNX}: generation: unknown search option '{k}'")
            setattr(self, k, v)
        check_params(self)

    def get_search_options(self) -> dict:
        """onnxruntime-genai's ``get_search_options``: the search options by name (``seed`` as
        ``random_seed``; the session apart), which ``set_search_options`` takes back."""
        out = {f.name: getattr(self, f.name) for f in fields(self)
               if f.name not in ("session", *SPECULATIVE)}  # fmt: skip
        out["random_seed"] = out.pop("seed")
        return out

    def set_speculative_options(self, **options: Any) -> None:
        """onnxruntime-genai's ``set_speculative_options``: ``ngram_size`` (0, or 2 to 16) and
        ``max_draft_tokens`` (1 to 16); its other options (``ngram_chained_lookup``,
        ``min_adaptive_k``, ``cooldown``: how drafts are proposed, not which tokens come out)
        only at their defaults."""
        for k, v in options.items():
            if k in _SPECULATIVE_DEFAULTS:
                if v != _SPECULATIVE_DEFAULTS[k]:
                    raise ValidationError(
                        f"{ONNX}: generation: speculative option {k}={v!r} is not supported "
                        f"(only {_SPECULATIVE_DEFAULTS[k]!r})"
                    )
                continue
            if k not in SPECULATIVE:
                raise ValidationError(f"{ONNX}: generation: unknown speculative option '{k}'")
            setattr(self, k, v)
        check_params(self)

    def get_speculative_options(self) -> dict:
        """onnxruntime-genai's ``get_speculative_options``."""
        return {k: getattr(self, k) for k in SPECULATIVE} | _SPECULATIVE_DEFAULTS


def _from_model(init: Any) -> Any:
    """``GeneratorParams``' ``__init__``, which with a ``ModelDefaults`` for its session takes
    the model's defaults for every attribute not given."""

    @functools.wraps(init)
    def from_model(self: Any, session: Any = None, *args: Any, **kwargs: Any) -> None:
        if isinstance(session, ModelDefaults):
            given = {f.name for f in fields(GeneratorParams)[1 : 1 + len(args)]} | set(kwargs)
            kwargs = {**{k: v for k, v in session.defaults.items() if k not in given}, **kwargs}
        init(self, session, *args, **kwargs)

    return from_model


GeneratorParams.__init__ = _from_model(GeneratorParams.__init__)  # type: ignore[method-assign]

# onnxruntime-genai's search options that say what the cache here always is
_UNREAD_OPTIONS = ("past_present_share_buffer",)
# the speculative options (``set_speculative_options``); onnxruntime-genai's others, at the
# values taken here
SPECULATIVE = ("ngram_size", "max_draft_tokens")
_SPECULATIVE_DEFAULTS = {"ngram_chained_lookup": False, "min_adaptive_k": 0, "cooldown": False}


def _number(value: Any) -> float:
    """``value`` as a float where it is a real number (not a bool), else NaN (which every
    range check refuses)."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.number):
        return math.nan
    return float(value)


def check_params(p: GeneratorParams) -> None:
    where = f"{ONNX}: generation"
    if not isinstance(p.max_length, int | np.integer) or p.max_length < 2:
        raise ValidationError(
            f"{where}: max_length must be an int of at least 2, got {p.max_length!r}"
        )
    if not isinstance(p.batch_size, int | np.integer) or p.batch_size < 1:
        raise ValidationError(f"{where}: batch_size must be a positive int, got {p.batch_size!r}")
    if not isinstance(p.top_k, int | np.integer) or p.top_k < 0:
        raise ValidationError(f"{where}: top_k must be an int >= 0, got {p.top_k!r}")
    if not 0.0 < _number(p.top_p) <= 1.0:
        raise ValidationError(f"{where}: top_p must be in (0, 1], got {p.top_p!r}")
    if not _number(p.temperature) > 0.0 or not math.isfinite(_number(p.temperature)):
        raise ValidationError(f"{where}: temperature must be > 0, got {p.temperature!r}")
    penalty = p.repetition_penalty
    if (
        isinstance(penalty, bool)
        or not isinstance(penalty, int | float | np.number)
        or not (float(penalty) > 0.0 and math.isfinite(float(penalty)))
    ):
        raise ValidationError(
            f"{where}: repetition_penalty must be a finite number > 0, got {penalty!r}"
        )
    for name in ("min_length", "no_repeat_ngram_size"):
        m = getattr(p, name)
        if not isinstance(m, int | np.integer) or isinstance(m, bool) or m < 0:
            raise ValidationError(f"{where}: {name} must be an int >= 0, got {m!r}")
    beams, returned = p.num_beams, p.num_return_sequences
    if not isinstance(beams, int | np.integer) or isinstance(beams, bool) or beams < 1:
        raise ValidationError(f"{where}: num_beams must be an int >= 1, got {beams!r}")
    if (
        not isinstance(returned, int | np.integer)
        or isinstance(returned, bool)
        or not 1 <= returned <= beams
    ):
        raise ValidationError(
            f"{where}: num_return_sequences must be an int from 1 to num_beams ({beams}), "
            f"got {returned!r}"
        )
    if beams > 1 and p.do_sample:
        raise ValidationError(
            f"{where}: do_sample with num_beams {beams}: beam search here chooses by score "
            "(sampled beam search is not supported)"
        )
    lp = p.length_penalty
    if (
        isinstance(lp, bool)
        or not isinstance(lp, int | float | np.number)
        or not math.isfinite(float(lp))
    ):
        raise ValidationError(f"{where}: length_penalty must be a finite number, got {lp!r}")
    if not isinstance(p.early_stopping, bool | np.bool_):
        raise ValidationError(
            f"{where}: early_stopping must be True or False, got {p.early_stopping!r}"
        )
    bucket_sizes(p.buckets, True, where)
    n = p.steps_per_dispatch
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise ValidationError(f"{where}: steps_per_dispatch must be an int >= 1, got {n!r}")
    ngram, drafts = p.ngram_size, p.max_draft_tokens
    if (
        not isinstance(ngram, int | np.integer)
        or isinstance(ngram, bool)
        or not (ngram == 0 or 2 <= ngram <= 16)
    ):
        raise ValidationError(
            f"{where}: ngram_size must be 0 or an int from 2 to 16, got {ngram!r}"
        )
    if (
        not isinstance(drafts, int | np.integer)
        or isinstance(drafts, bool)
        or not (1 <= drafts <= 16)
    ):
        raise ValidationError(
            f"{where}: max_draft_tokens must be an int from 1 to 16, got {drafts!r}"
        )
    if ngram and (p.batch_size != 1 or beams != 1):
        raise ValidationError(
            f"{where}: speculative decoding (ngram_size {ngram}) takes one sequence: batch_size 1 "
            f"and num_beams 1, not {p.batch_size} and {beams}"
        )


__all__ = ["GeneratorParams", "ModelDefaults", "check_params"]
