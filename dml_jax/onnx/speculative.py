"""Speculative decoding by n-grams (onnxruntime-genai's speculative options ``ngram_size`` and
``max_draft_tokens``; ``GeneratorParams``), the host's side: the drafts and the counts.

A decode step reads every weight of the model to add one token; at batch 1 it is bound by that
read (or by its launches), not by its arithmetic, so the model checks several tokens in one call
for about the cost of one. Where the sequence's last ``ngram_size`` tokens occurred before (its
prompt or what it generated), the tokens that followed that occurrence are the drafts
(``ngram_draft``: the latest occurrence, up to ``max_draft_tokens`` of them). A round
(``DecodeSteps.verify_fn``) runs the last token chosen and the drafts through the model in one
call, then chooses the tokens position after position exactly as the decode steps would (the
penalties, then greedy or sampled, a random key a position), keeping each draft while it is the
token chosen at its position: the first token that differs is chosen from the model's logits
there, so a round adds one token and every draft accepted before it. The tokens are those of
generation without drafts, greedy or sampled with the same seed (up to the rounding of a
position's logits computed in a chunk rather than alone). Where no earlier occurrence is found,
a decode step runs. One sequence (batch 1), no beams, as onnxruntime-genai's n-gram decoding.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


def ngram_draft(sequence: list[int], n: int, count: int) -> list[int]:
    """The tokens that followed the latest earlier occurrence of ``sequence``'s last ``n``
    tokens, at most ``count`` of them (none where there is none)."""
    if len(sequence) <= n:
        return []
    seq = np.asarray(sequence, np.int64)
    windows = np.lib.stride_tricks.sliding_window_view(seq[:-1], n)  # the occurrences before
    hits = np.flatnonzero((windows == seq[-n:]).all(axis=1))
    if hits.size == 0:
        return []
    start = int(hits[-1]) + n
    return seq[start : start + count].tolist()


@dataclass
class SpeculativeStats:
    """onnxruntime-genai's ``get_speculative_stats`` counts (those that apply here)."""

    rounds: int = 0
    draft_tokens_proposed: int = 0
    draft_tokens_accepted: int = 0
    target_forward_passes: int = 0
    ngram_lookup_hits: int = 0
    ngram_lookup_misses: int = 0
    standard_fallback_steps: int = 0
    tokens_emitted: int = 0

    def round(self, proposed: int, accepted: int) -> None:
        """A round: ``proposed`` drafts, ``accepted`` of them kept (and one token chosen)."""
        self.rounds += 1
        self.ngram_lookup_hits += 1
        self.target_forward_passes += 1
        self.draft_tokens_proposed += proposed
        self.draft_tokens_accepted += accepted
        self.tokens_emitted += accepted + 1

    def step(self) -> None:
        """A decode step where no draft was found."""
        self.ngram_lookup_misses += 1
        self.standard_fallback_steps += 1
        self.target_forward_passes += 1
        self.tokens_emitted += 1

    def as_dict(self) -> dict:
        out: dict = {f.name: getattr(self, f.name) for f in fields(self)}
        proposed = self.draft_tokens_proposed
        out["acceptance_rate"] = self.draft_tokens_accepted / proposed if proposed else 0.0
        out["mean_emitted_tokens_per_round"] = (
            (self.draft_tokens_accepted + self.rounds) / self.rounds if self.rounds else 0.0
        )
        return out


__all__ = ["SpeculativeStats", "ngram_draft"]
