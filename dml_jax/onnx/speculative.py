"""Speculative decoding by n-grams (onnxruntime-genai's speculative options ``ngram_size`` and
``max_draft_tokens``; ``GeneratorParams``): the drafts' lookup (on the device) and the counts.

A decode step reads every weight of the model to add one token; at batch 1 it is bound by that
read (or by its launches), not by its arithmetic, so the model checks several tokens in one call
for about the cost of one. Where the sequence's last ``ngram_size`` tokens occurred before (its
prompt or what it generated), the tokens that followed that occurrence are the drafts
(``ngram_drafts``: the latest occurrence, up to ``max_draft_tokens`` of them). A round
(``DecodeSteps.rounds_fn``, each round's check ``_verify``) runs the last token chosen and the
drafts through the model in one call, then chooses the tokens position after position exactly as
the decode steps would (the penalties, then greedy or sampled, a random key a position), keeping
each draft while it is the token chosen at its position: the first token that differs is chosen
from the model's logits there, so a round adds one token and every draft accepted before it. The
tokens are those of generation without drafts, greedy or sampled with the same seed (up to the
rounding of a position's logits computed in a chunk rather than alone). Where no earlier
occurrence is found, the round runs the last token alone (the program for one token, chosen on
the device by a ``lax.cond``). The rounds run on the device, the drafts looked up there, as many
in one dispatch as its program's past bucket holds (a ``lax.while_loop``). One sequence (batch
1), no beams, as onnxruntime-genai's n-gram decoding.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def ngram_drafts(row: Any, start: Any, length: Any, n: int, count: int) -> tuple[Any, Any]:
    """The drafts after the sequence ``row[start:length]`` (a row of the tokens on the device,
    int32): the tokens that followed the latest earlier occurrence of its last ``n`` tokens,
    at most ``count`` of them and only tokens of the sequence: ([count] int32, the padding
    after them 0; how many). None (0) where there is no earlier occurrence."""
    width = row.shape[0]
    cols = jnp.arange(width, dtype=jnp.int32)
    suffix = jax.lax.dynamic_slice_in_dim(row, jnp.maximum(length - n, 0), n)
    # occurrence at j: row[j + t] == suffix[t] for every t, ending before the suffix's end
    same = jnp.stack([jnp.roll(row, -t) == suffix[t] for t in range(n)]).all(axis=0)
    found = same & (cols >= start) & (cols < length - n)
    at = jnp.max(jnp.where(found, cols, -1))
    first = at + n  # the occurrence's next token
    known = jnp.where(at >= 0, jnp.minimum(count, length - first), 0)
    padded = jnp.concatenate([row, jnp.zeros((count,), row.dtype)])
    drafts = jax.lax.dynamic_slice_in_dim(padded, jnp.clip(first, 0, width), count)
    return jnp.where(jnp.arange(count) < known, drafts, 0).astype(row.dtype), known


class SpeculativeStats:
    """onnxruntime-genai's ``get_speculative_stats`` counts (those that apply here), from the
    rounds' own counts: rounds with drafts, drafts proposed, drafts accepted, rounds without."""

    def __init__(self) -> None:
        self.counts = np.zeros(4, np.int64)

    def add(self, counts: Any) -> None:
        """A dispatch's rounds (``DecodeSteps.rounds_fn``'s counts)."""
        self.counts += np.asarray(counts, np.int64)

    def as_dict(self) -> dict:
        rounds, proposed, accepted, misses = (int(c) for c in self.counts)
        return {
            "rounds": rounds,
            "draft_tokens_proposed": proposed,
            "draft_tokens_accepted": accepted,
            "target_forward_passes": rounds + misses,
            "ngram_lookup_hits": rounds,
            "ngram_lookup_misses": misses,
            "standard_fallback_steps": misses,
            # a round takes its accepted drafts and one token more; a round without, one token
            "tokens_emitted": accepted + rounds + misses,
            "acceptance_rate": accepted / proposed if proposed else 0.0,
            "mean_emitted_tokens_per_round": (accepted + rounds) / rounds if rounds else 0.0,
        }


__all__ = ["SpeculativeStats", "ngram_drafts"]
