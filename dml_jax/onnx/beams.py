"""Beam search on the device (``GeneratorParams.num_beams`` > 1), as onnxruntime-genai's beam
search scorer runs it (after Hugging Face's): each prompt is ``num_beams`` rows of the step's
batch; a step's logits (after the repetition penalty, minimum length and repeated n-grams) go
through a log-softmax in float32, each row's beam score is added, and the ``2 * num_beams`` best
(score, beam, token) of each prompt's ``num_beams * vocabulary`` are taken in order. An end
token among the first ``num_beams`` of them makes the beam's sequence so far (without the end
token) a finished hypothesis, scored ``sum of log-probabilities / length ** length_penalty``
(the length: the row's real tokens, its prompt without padding and what it generated); the
others, in order, become the next beams until ``num_beams`` are chosen. A prompt keeps its
``num_beams`` best hypotheses; it is done once it holds that many and, unless
``early_stopping``, the best candidate's score over the current length cannot beat the worst
of them. At the end its open beams are hypotheses too (``finalize``), and its
``num_return_sequences`` best are the result. The first step's beams start from one: the
other beams' scores are -1e9, so the first choice comes from the first beam only.

The rows of the step's state (the cache, its pending keys and values, the attention mask, the
tokens) follow their beams: ``choose`` says for each new row the row it continues, and the
decode step gathers them (``gather_rows``).

The search state is a dict of device arrays: ``scores`` [rows] (each beam's sum of
log-probabilities), and each prompt's hypotheses, best first: ``tokens`` [prompts, beams,
width] (the row's tokens when it finished), ``end`` and ``length`` [prompts, beams] (the
hypothesis is ``tokens[end - length:end]``), ``score`` [prompts, beams], ``count`` [prompts].
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

# The other beams' first scores (onnxruntime-genai's and Hugging Face's value).
OTHER_BEAMS = -1e9


def initial(prompts: int, beams: int, width: int) -> dict:
    """The search state before the first choice (NumPy arrays)."""
    scores = np.zeros((prompts, beams), np.float32)
    scores[:, 1:] = OTHER_BEAMS
    return {
        "scores": scores.reshape(-1),
        "tokens": np.zeros((prompts, beams, width), np.int32),
        "end": np.zeros((prompts, beams), np.int32),
        "length": np.zeros((prompts, beams), np.int32),
        "score": np.full((prompts, beams), -np.inf, np.float32),
        "count": np.zeros((prompts,), np.int32),
    }


def _penalized_length(length: Any, penalty: float) -> Any:
    return jnp.power(length.astype(jnp.float32), jnp.float32(penalty))


def _insert(h: dict, add: Any, row: Any, end: Any, length: Any, score: Any) -> dict:
    """``h`` with each prompt's hypothesis (``row`` [prompts, width], ``end``, ``length``,
    ``score`` [prompts]) inserted where ``add`` holds: after those of a score at least as high,
    the worst dropped where the prompt holds ``beams`` already; not at all where it holds that
    many and the score is no better than the worst."""
    beams = h["score"].shape[1]
    slot = jnp.arange(beams, dtype=jnp.int32)[None]
    used = slot < h["count"][:, None]
    add = add & ((h["count"] < beams) | (score > h["score"][:, beams - 1]))
    at = jnp.sum(used & (h["score"] >= score[:, None]), axis=1, dtype=jnp.int32)[:, None]
    source = jnp.where(slot > at, slot - 1, slot)  # the hypotheses after it move down one
    here, keep = (slot == at) & add[:, None], ~add[:, None]

    def placed(old, new):
        moved = jnp.take_along_axis(old, source.reshape(source.shape + (1,) * (old.ndim - 2)), 1)
        new = jnp.expand_dims(new, 1)
        where = here.reshape(here.shape + (1,) * (old.ndim - 2))
        kept = keep.reshape(keep.shape + (1,) * (old.ndim - 2))
        return jnp.where(kept, old, jnp.where(where, new, moved))

    return {
        **h,
        "tokens": placed(h["tokens"], row),
        "end": placed(h["end"], end),
        "length": placed(h["length"], length),
        "score": placed(h["score"], score),
        "count": jnp.where(add, jnp.minimum(h["count"] + 1, beams), h["count"]),
    }


def choose(
    logits: Any, search: dict, done: Any, tokens: Any, at: Any, lengths: Any, config: tuple
) -> tuple:
    """A beam search step: from ``logits`` [rows, vocabulary] (already penalized), the beam
    scores and hypotheses in ``search``, ``done`` [rows] (every row of a prompt alike),
    ``tokens`` [rows, width] (the new tokens go to column ``at``) and each row's real tokens so
    far ``lengths`` [rows], with ``config`` (beams, length penalty, early stopping, end ids,
    pad id): (rows: the row each new row continues, the tokens with the rows gathered and the
    new tokens written, done, the new search state)."""
    beams, penalty, early, eos, pad = config
    rows, vocab = logits.shape
    prompts = rows // beams
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1) + search["scores"][:, None]
    values, flat = jax.lax.top_k(logp.reshape(prompts, beams * vocab), 2 * beams)
    source, token = flat // vocab, (flat % vocab).astype(jnp.int32)
    finished = done.reshape(prompts, beams)[:, 0]
    length = lengths.reshape(prompts, beams)[:, 0]
    mine = tokens.reshape(prompts, beams, -1)
    h = {k: search[k] for k in ("tokens", "end", "length", "score", "count")}
    slot = jnp.arange(beams, dtype=jnp.int32)[None]
    filled = jnp.zeros((prompts,), jnp.int32)
    next_score = jnp.zeros((prompts, beams), jnp.float32)
    next_token = jnp.full((prompts, beams), pad, jnp.int32)
    next_source = jnp.broadcast_to(slot, (prompts, beams))
    ends = jnp.asarray(eos, jnp.int32)
    for j in range(2 * beams):  # the candidates in order of their scores
        active = ~finished & (filled < beams)
        is_end = jnp.isin(token[:, j], ends) if eos else jnp.zeros((prompts,), bool)
        if eos and j < beams:  # an end token among the first beams: a hypothesis
            row = jnp.take_along_axis(mine, source[:, j, None, None], 1)[:, 0]
            score = values[:, j] / _penalized_length(length, penalty)
            h = _insert(h, active & is_end, row, jnp.broadcast_to(at, (prompts,)), length, score)
        put = (slot == filled[:, None]) & (active & ~is_end)[:, None]
        next_score = jnp.where(put, values[:, j, None], next_score)
        next_token = jnp.where(put, token[:, j, None], next_token)
        next_source = jnp.where(put, source[:, j, None].astype(jnp.int32), next_source)
        filled = filled + (active & ~is_end)
    worst = h["score"][:, beams - 1]
    best = values[:, 0] / _penalized_length(length, penalty)
    full = h["count"] == beams
    finished_now = ~finished & full & (True if early else ~(worst < best))
    # a prompt done before this step: its rows stay, padded, scores 0
    next_token = jnp.where(finished[:, None], jnp.int32(pad), next_token)
    next_score = jnp.where(finished[:, None], 0.0, next_score)
    next_source = jnp.where(finished[:, None], slot, next_source)
    picked = (jnp.arange(prompts, dtype=jnp.int32)[:, None] * beams + next_source).reshape(-1)
    tokens = jax.lax.dynamic_update_slice_in_dim(
        tokens[picked], next_token.reshape(-1, 1), at, axis=1
    )
    done = jnp.repeat(finished | finished_now, beams)
    return picked, tokens, done, {**h, "scores": next_score.reshape(-1)}


def finalize(search: dict, tokens: Any, done: Any, lengths: Any, end: Any, config: tuple) -> dict:
    """The hypotheses once the search stops: each open beam of a prompt not done, in order,
    offered as one (its tokens up to ``end``, ``lengths`` [rows] real tokens, its beam score
    over the penalized length)."""
    beams, penalty = config[0], config[1]
    rows = tokens.shape[0]
    prompts = rows // beams
    h = {k: search[k] for k in ("tokens", "end", "length", "score", "count")}
    open_ = ~done.reshape(prompts, beams)[:, 0]
    mine = tokens.reshape(prompts, beams, -1)
    length = lengths.reshape(prompts, beams)
    scores = search["scores"].reshape(prompts, beams)
    for k in range(beams):
        score = scores[:, k] / _penalized_length(length[:, k], penalty)
        h = _insert(h, open_, mine[:, k], jnp.broadcast_to(end, (prompts,)), length[:, k], score)
    return h


def gather_rows(picked: Any, *arrays: Any, axis: int = 0) -> list:
    """Each of ``arrays`` with its rows (on ``axis``) those ``picked``."""
    return [jnp.take(a, picked, axis=axis) for a in arrays]


__all__ = ["OTHER_BEAMS", "choose", "finalize", "gather_rows", "initial"]
