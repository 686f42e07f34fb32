"""LSTM on cuDNN's RNN, through ``jax.experimental.rnn``.

The lax lowering runs one ``lax.scan`` step per time step (a product with the recurrence weights
and the gate arithmetic as separate XLA kernels); cuDNN runs the whole layer in one call.

``expressible`` says which descriptions cuDNN's LSTM cell (CUDNN_LSTM, double bias) computes with
DirectML's meaning:

- LSTM (jax's binding builds only cuDNN's LSTM; RNN and GRU stay on lax) with DirectML's default
  activations, f = SIGMOID, g = TANH, h = TANH in every direction, no peepholes, no clipping and
  no input-forget coupling: cuDNN's cell with gates (i, f, c, o) instead of (i, o, f, c), the
  weights and biases permuted into cuDNN's packed layout;
- FLOAT32, or FLOAT16 widened to float32 (jax's binding takes float32 only, and the lax lowering
  computes FLOAT16 in float32 too); the products are float32 (cuDNN's FMA math) unless half
  precision is allowed, which permits TF32 (cuDNN's default math), as for GEMM;
- any direction and sequence lengths: cuDNN's padded sequences give 0 after a sequence's end and
  its last state in the single outputs, and run BIDIRECTIONAL's backward direction over each
  sequence reversed within its length; a BACKWARD layer alone reads its input so reversed
  (``ops.recurrent.in_step_order``) and runs forward. A length of 0 is run as 1 and set apart:
  zeros in the sequence, the initial state in the single outputs.

What cuDNN computes differently is the order of float32 sums and its own exp / tanh: the GPU
tests hold it to the lax lowering within the tolerance of docs/semantics.md ("Recurrent layers").
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import RecurrentNetworkDirection as Direction
from ..fastpath import cuda_compiles, register_fast_path
from ..ops.recurrent import in_step_order
from ..precision import half_precision_allowed

DEFAULT_ACTIVATIONS = (
    "DML_OPERATOR_ACTIVATION_SIGMOID",
    "DML_OPERATOR_ACTIVATION_TANH",
    "DML_OPERATOR_ACTIVATION_TANH",
)
GATE_ORDER = (0, 2, 3, 1)  # cuDNN's gates (i, f, c, o) among DirectML's (i, o, f, c)


def expressible(d: Any) -> bool:
    """Whether cuDNN's LSTM computes ``d`` (the rules in the module docstring); the description
    alone decides, nothing is traced."""
    if d.operator_type != "DML_OPERATOR_LSTM":
        return False
    if d.input_tensor.data_type.name not in ("FLOAT32", "FLOAT16"):
        return False
    if d.peephole_tensor is not None or d.use_clip_threshold or d.couple_input_forget:
        return False
    types = tuple(a.operator_type for a in d.activation_descs)
    return types == DEFAULT_ACTIVATIONS * (len(types) // 3)


def _packed_weights(w, r, bias):
    """cuDNN's flat weight space for one layer: per direction W_ih, W_hh, then per direction
    b_ih, b_hh, each with its four gates in cuDNN's order."""

    def gates(a):  # {4 * hidden, ...} in DirectML's gate order -> cuDNN's, flattened
        return a.reshape(4, -1)[jnp.array(GATE_ORDER)].reshape(-1)

    directions = range(w.shape[0])
    matrices = [gates(m[i]) for i in directions for m in (w, r)]
    biases = [gates(bias[i, j]) for i in directions for j in (0, 1)]
    return jnp.concatenate(matrices + biases)


def _cudnn_lstm(hidden: int, bidirectional: bool, tf32: bool):
    """``run(x, h0, c0, weights, lengths) -> (y, h_n, c_n)`` on cuDNN (x {batch, seq, input},
    states {D, batch, hidden}, lengths int32 {batch} in [1, seq]), batched under vmap by folding
    the mapped axis into the batch (or one call per member when the weights are mapped)."""
    from jax.experimental import rnn

    precision = lax.Precision.HIGH if tf32 else lax.Precision.HIGHEST

    @jax.custom_batching.custom_vmap
    def run(x, h0, c0, weights, lengths):
        return rnn.lstm(
            x,
            h0,
            c0,
            weights,
            lengths,
            input_size=x.shape[-1],
            hidden_size=hidden,
            num_layers=1,
            dropout=0.0,
            bidirectional=bidirectional,
            precision=precision,
        )

    @run.def_vmap
    def _rule(size, in_batched, x, h0, c0, weights, lengths):
        args = [
            a if mapped else jnp.broadcast_to(a, (size, *a.shape))
            for a, mapped in zip((x, h0, c0, weights, lengths), in_batched)
        ]
        if in_batched[3]:
            return lax.map(lambda a: run(*a), tuple(args)), (True, True, True)
        x, h0, c0, _, lengths = args
        n, batch = x.shape[0], x.shape[1]

        def states(s):  # {n, D, batch, hidden} <-> {D, n * batch, hidden}
            return jnp.swapaxes(s, 0, 1).reshape(s.shape[1], n * batch, hidden)

        y, h, c = run(
            x.reshape(n * batch, *x.shape[2:]),
            states(h0),
            states(c0),
            weights,
            lengths.reshape(n * batch),
        )

        def unfold(s):
            return jnp.swapaxes(s.reshape(s.shape[0], n, batch, hidden), 0, 1)

        return (y.reshape(n, batch, *y.shape[1:]), unfold(h), unfold(c)), (True, True, True)

    return run


def lower(d: Any, *arrays) -> tuple:
    """The cuDNN lowering of an ``expressible`` description (same outputs as the lax one)."""
    given = dict(zip((p for p, _ in d.input_slots()), arrays))
    _, seq, batch, _ = d.input_tensor.sizes
    hidden = d.recurrence_tensor.sizes[3]
    directions = 2 if d.direction is Direction.BIDIRECTIONAL else 1
    state = (directions, batch, hidden)

    def wide(name, shape):
        a = given.get(name)
        return jnp.zeros(shape, jnp.float32) if a is None else a.astype(jnp.float32).reshape(shape)

    x = given["InputTensor"][0].astype(jnp.float32)  # {seq, batch, input}
    weights = _packed_weights(
        wide("WeightTensor", (directions, 4 * hidden, -1)),
        wide("RecurrenceTensor", (directions, 4 * hidden, hidden)),
        wide("BiasTensor", (directions, 2, 4 * hidden)),
    )
    h0, c0 = wide("HiddenInitTensor", state), wide("CellMemInitTensor", state)
    lengths = None
    if "SequenceLengthsTensor" in given:
        lengths = jnp.minimum(given["SequenceLengthsTensor"].reshape(batch), np.uint32(seq))
        lengths = lengths.astype(jnp.int32)
    backward = d.direction is Direction.BACKWARD
    if backward:
        x = in_step_order(x, lengths)
    run = _cudnn_lstm(hidden, directions == 2, half_precision_allowed())
    counts = jnp.full((batch,), seq, jnp.int32) if lengths is None else jnp.maximum(lengths, 1)
    y, h, c = run(jnp.swapaxes(x, 0, 1), h0, c0, weights, counts)
    y = jnp.swapaxes(y, 0, 1)  # {seq, batch, D * hidden}
    if backward:
        y = in_step_order(y, lengths)
    if lengths is not None:  # a length of 0 ran one step: zeros and the initial state instead
        none = (lengths == 0)[:, None]
        y = jnp.where(none[None], 0.0, y)
        h, c = jnp.where(none, h0, h), jnp.where(none, c0, c)
    results = {
        "OutputSequenceTensor": jnp.swapaxes(y.reshape(seq, batch, directions, hidden), 1, 2),
        "OutputSingleTensor": h[None],
        "OutputCellSingleTensor": c[None],
    }
    return tuple(results[p].astype(d.input_tensor.dtype) for p, _ in d.output_slots())


@functools.lru_cache(maxsize=256)
def _cudnn_compiles(d: Any) -> bool:
    return cuda_compiles(functools.partial(lower, d), tuple(t for _, t in d.input_slots()))


def applies(d: Any) -> bool:
    """``expressible`` and compiled by this process's jax, cuDNN and GPU."""
    return expressible(d) and _cudnn_compiles(d)


register_fast_path("DML_OPERATOR_LSTM", "cudnn", applies, lower)
