"""The inputs of one step of the decoders of tests/data/decoders (PyTorch's exports with their
cache): random token ids, an attention mask over the past and the new positions, their position
ids, and random past keys and values."""

from __future__ import annotations

import numpy as np


def step_feed(session, batch: int, seq: int, past: int, seed: int) -> dict:
    """A step of ``seq`` new positions after ``past`` cached ones, for each of ``batch``
    sequences."""
    rng = np.random.default_rng(seed)
    feed = {}
    for i in session.get_inputs():
        if i.name == "input_ids":
            feed[i.name] = rng.integers(1, 90, (batch, seq)).astype(np.int64)
        elif i.name == "attention_mask":
            feed[i.name] = np.ones((batch, past + seq), np.int64)
        elif i.name == "position_ids":
            feed[i.name] = np.tile(np.arange(past, past + seq, dtype=np.int64), (batch, 1))
        else:  # past keys and values {batch, heads, past, head size}
            shape = [batch, i.shape[1], past, i.shape[3]]
            feed[i.name] = rng.standard_normal(shape).astype(np.float32)
    return feed
