"""One LSTM step as one Pallas (Triton) kernel: the CUDA fast path of FLOAT16 DML_OPERATOR_LSTM
with its default activations (f = SIGMOID, g = TANH, h = TANH).

The lax lowering (``ops.recurrent``) runs each step as XLA kernels: the state's float16 pieces,
the recurrent product (cuBLAS), the gates; on an H200 it ran the issue's case (hidden 1024, 512
steps, batch 64) at 0.71 of PyTorch's cuDNN LSTM (benchmarks/RESULTS.md). Here a step is one
kernel, and the loop over the steps is one ``fori_loop`` of those calls. A program owns ``units``
hidden units of ``rows`` batch entries of one direction: it walks the state ``H`` {batch,
hidden} (float32) in chunks of ``chunk`` columns, splits each chunk into float16 pieces and
multiplies them with the four gates' rows of R (float16, on tensor cores, float32
accumulation), then adds X W^T + Wb of the step (computed before the loop, as in the lax
lowering) and Rb, applies the peepholes, the clip and the activations, and stores the new
hidden state, the new cell and the step's output. The step index is an argument, so a call
reads its step of X W^T and writes its step of the output sequence in place (the sequence
buffer is aliased from input to output): nothing is sliced or copied between the calls.

Values: the lax lowering's arithmetic, in the same order where it is element-wise. The
recurrent product is the float32 product of the state and R as in the lax lowering (three
float16 pieces, one rounded piece where half precision is allowed), but each chunk's rows are
scaled by their own power of two (the lax lowering scales whole rows), so a value enters
exactly down to 2^-14 of its chunk's largest value instead of its row's; the sums run in
another order. Triton's ``exp`` and ``tanh`` are not XLA's. Over a sequence these differences
stay within a few float32 ulps of the state's values at each step; tests/test_lstm_kernel.py
states the tolerance.

``plan`` takes FLOAT16 layers whose hidden size is a multiple of 16 and whose activations are
the default ones; anything else stays with lax.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..fastpath import register_fast_path
from ..ops.recurrent import LoopInputs, lower_lstm
from ..precision import float16_pieces, half_precision_allowed
from .reduce import load_pallas
from .reduce_plan import pow2_at_least

DEFAULT_ACTIVATIONS = (
    "DML_OPERATOR_ACTIVATION_SIGMOID",
    "DML_OPERATOR_ACTIVATION_TANH",
    "DML_OPERATOR_ACTIVATION_TANH",
)

# Tunables, chosen by benchmarks/attention_lstm.py on an H200 (benchmarks/RESULTS.md): hidden
# units a program (the N of each gate's product, a power of two >= 16), batch entries a program
# at most (the M, padded to at least 16), state columns a chunk (the K of a product), warps and
# Triton's pipelining depth; steps a loop iteration (the loop's own unrolling).
UNITS = 16
ROWS = 64
CHUNK = 128
WARPS = 4
STAGES = 2
UNROLL = 8
STAGGER = True


@dataclass(frozen=True)
class View:
    """An LSTM of ``directions`` x {``batch``, ``hidden``} states, a program owning ``units``
    hidden units of ``rows`` batch entries (``rows`` a power of two >= 16, masked past
    ``batch``), the product taken in chunks of ``chunk`` state columns, on ``warps`` warps."""

    directions: int
    batch: int
    hidden: int
    units: int
    rows: int
    chunk: int
    warps: int
    stages: int

    @property
    def padded(self) -> int:
        """The batch padded to whole blocks of rows."""
        return -(-self.batch // self.rows) * self.rows

    @property
    def blocks(self) -> int:
        """Programs across the hidden units."""
        return self.hidden // self.units

    @property
    def grid(self) -> tuple[int, int, int]:
        return (self.directions, self.blocks, self.padded // self.rows)


def plan(directions: int, batch: int, hidden: int) -> View | None:
    """The kernel's view of a layer's states, or None where lax stays."""
    if hidden % 16 or batch < 1:
        return None
    units = min(UNITS, hidden)
    while hidden % units:
        units //= 2
    chunk = min(CHUNK, hidden)
    while hidden % chunk:
        chunk //= 2
    rows = max(16, min(ROWS, pow2_at_least(batch)))
    return View(directions, batch, hidden, units, rows, chunk, WARPS, STAGES)


class _Form:
    """The step's options that change its code (fields of the descriptor)."""

    def __init__(self, d: Any, inputs: LoopInputs, pieces: int):
        with np.errstate(over="ignore"):  # a threshold beyond float32's range clips nothing
            bound = float(np.float32(d.clip_threshold)) if d.use_clip_threshold else None
        self.bound = bound
        self.couple = bool(d.couple_input_forget)
        self.peephole = inputs.peephole is not None
        self.lengths = inputs.lengths is not None
        self.sequence = inputs.want_sequence
        self.pieces = pieces


def _sigmoid(x):
    return 1 / (1 + jnp.exp(-x))


def _pieces(x, count: int) -> list:
    """``precision.float16_pieces`` inside a kernel: ``count`` float16 pieces of ``x *
    2**14`` for float32 ``x`` with |x| < 4."""
    rest = x * jnp.float32(2.0**14)
    pieces = []
    for _ in range(count - 1):
        bits = lax.bitcast_convert_type(rest, jnp.uint32) & np.uint32(0xFFFFE000)
        head = lax.bitcast_convert_type(bits, jnp.float32)
        pieces.append(head.astype(jnp.float16))
        rest = rest - head
    pieces.append(rest.astype(jnp.float16))
    return pieces


def lstm_step(t, xw, r, rb, peephole, lengths, h, c, hp, back, ys, v: View, form: _Form,
              interpret=False):  # fmt: skip
    """One step of every direction: ``(h', c', hp', back', ys')``. ``B`` is the batch padded
    to whole blocks of ``v.rows`` (``v.padded``), ``n`` the number of pieces.

    ``t`` {1} int32, the step; ``xw`` {seq * D * B, 4 * hidden} float32 (X W^T + Wb in step
    order); ``r`` {D * 4 * hidden, hidden} float16; ``rb`` {D * 4 * hidden} float32;
    ``peephole`` {D * 3 * hidden} float32 (P[i], P[o], P[f]) or None; ``lengths`` {B} int32 or
    None; ``h``, ``c`` {D * B, hidden} float32; ``hp`` {n * D * B, hidden} float16, the pieces
    of ``h * s`` (piece ``j`` in rows ``j * D * B ...``) and ``back`` {D * B} float32 the
    factor ``2**-14 / s`` of each row; ``ys`` {seq * D * B, hidden} (written at step ``t`` in
    place) or None. A row that the step updates gets ``s = 1``: its new state is o * tanh(C'),
    below 1 in magnitude; a row that it leaves as it is keeps its pieces and factor.
    """
    pl, pltriton = load_pallas()
    nd, nb, nh = v.directions, v.padded, v.hidden
    un, rw, kc = v.units, v.rows, v.chunk
    gates, states, count = 4 * nh, nd * v.padded, form.pieces

    def kernel(*refs):
        refs = list(refs)
        t_ref, xw_ref, r_ref, rb_ref = refs[:4]
        rest = refs[4:]
        p_ref = rest.pop(0) if form.peephole else None
        len_ref = rest.pop(0) if form.lengths else None
        h_ref, c_ref, hp_ref, back_ref = rest[:4]
        rest = rest[4:]
        if form.sequence:
            _ys_in, h_out, c_out, hp_out, back_out, ys_out = rest
        else:
            h_out, c_out, hp_out, back_out = rest
        d, ub, bb = pl.program_id(0), pl.program_id(1), pl.program_id(2)
        u0 = pl.multiple_of(ub * un, un)
        b0 = pl.multiple_of(bb * rw, rw)
        r0 = pl.multiple_of(d * nb + b0, rw)  # the program's first row of h and c
        rows, units = pl.ds(r0, rw), pl.ds(u0, un)
        piece_rows = [pl.ds(pl.multiple_of(j * states + r0, rw), rw) for j in range(count)]
        gate_rows = [pl.ds(pl.multiple_of(d * gates + g * nh + u0, un), un) for g in range(4)]

        def chunk(k, acc):
            if STAGGER:  # programs across the units start at different chunks of the state
                k = lax.rem(k + ub, nh // kc)
            cols = pl.ds(pl.multiple_of(k * kc, kc), kc)
            pieces = [hp_ref[piece_rows[j], cols] for j in range(count)]
            out = []
            for g in range(4):
                rk = r_ref[gate_rows[g], cols]
                part = acc[g]
                for piece in pieces:
                    part = part + jnp.dot(piece, rk.T, preferred_element_type=jnp.float32)
                out.append(part)
            return tuple(out)

        zero = jnp.zeros((rw, un), jnp.float32)
        acc = lax.fori_loop(0, nh // kc, chunk, (zero,) * 4)
        factor = back_ref[rows]
        t_now = t_ref[0]
        step_rows = pl.ds(pl.multiple_of((t_now * nd + d) * nb + b0, rw), rw)
        pre = []
        for g in range(4):
            cols = pl.ds(pl.multiple_of(g * nh + u0, un), un)
            bias = rb_ref[gate_rows[g]]
            pre.append((xw_ref[step_rows, cols] + acc[g] * factor[:, None]) + bias[None, :])
        gi, go, gf, gc = pre
        c_old = c_ref[rows, units]
        if form.peephole:
            p_i, p_o, p_f = (
                p_ref[pl.ds(pl.multiple_of((d * 3 + j) * nh + u0, un), un)] for j in range(3)
            )
            gi = gi + p_i[None, :] * c_old
            gf = gf + p_f[None, :] * c_old

        def clip(y):
            return y if form.bound is None else jnp.clip(y, -form.bound, form.bound)

        i = _sigmoid(clip(gi))
        forget = 1 - i if form.couple else _sigmoid(clip(gf))
        cell = forget * c_old + i * jnp.tanh(clip(gc))
        if form.peephole:
            go = go + p_o[None, :] * cell
        o = _sigmoid(clip(go))
        h_new = o * jnp.tanh(cell)
        new_pieces = _pieces(h_new, count)
        new_factor = jnp.full((rw,), 2.0**-14, jnp.float32)
        if form.lengths:
            ok = t_now < len_ref[pl.ds(b0, rw)]
            h_new = jnp.where(ok[:, None], h_new, h_ref[rows, units])
            cell = jnp.where(ok[:, None], cell, c_old)
            y = jnp.where(ok[:, None], h_new, jnp.zeros_like(h_new))
            new_pieces = [
                jnp.where(ok[:, None], p, hp_ref[piece_rows[j], units])
                for j, p in enumerate(new_pieces)
            ]
            new_factor = jnp.where(ok, new_factor, factor)
        else:
            y = h_new
        h_out[rows, units] = h_new
        c_out[rows, units] = cell
        for j, p in enumerate(new_pieces):
            hp_out[piece_rows[j], units] = p
        back_out[rows] = new_factor  # the same values from every program across the units
        if form.sequence:
            ys_out[step_rows, units] = y.astype(ys_out.dtype)

    args = [t, xw, r, rb]
    if form.peephole:
        args.append(peephole)
    if form.lengths:
        args.append(lengths)
    args += [h, c, hp, back]
    state = jax.ShapeDtypeStruct(h.shape, jnp.float32)
    out_shape = [
        state,
        state,
        jax.ShapeDtypeStruct(hp.shape, jnp.float16),
        jax.ShapeDtypeStruct(back.shape, jnp.float32),
    ]
    aliases = {}
    if form.sequence:
        aliases = {len(args): 4}
        args.append(ys)
        out_shape.append(jax.ShapeDtypeStruct(ys.shape, ys.dtype))
    return pl.pallas_call(
        kernel,
        out_shape=tuple(out_shape),
        grid=v.grid,
        input_output_aliases=aliases,
        interpret=interpret,
        compiler_params=pltriton.CompilerParams(num_warps=v.warps, num_stages=v.stages),
    )(*args)


def initial_pieces(h0, count: int):
    """The pieces and factors of the initial state {rows, hidden} float32, as the lax
    lowering scales them (``ops.recurrent._matmul``): each row by the power of two ``s`` with
    ``max |row| * s`` in [1, 2) (capped to stay normal), factor ``2**-14 / s``."""
    top = jnp.max(jnp.abs(h0), axis=1)
    b = jnp.minimum((lax.bitcast_convert_type(top, jnp.uint32) >> 23) & 0xFF, np.uint32(252))
    scale = lax.bitcast_convert_type((np.uint32(253) - b) << 23, jnp.float32)
    back = lax.bitcast_convert_type((b + 1) << 23, jnp.float32) * jnp.float32(2.0**-14)
    pieces = float16_pieces(h0 * scale[:, None], count)
    return jnp.concatenate(pieces, axis=0), back


def lstm_loop(d: Any, inputs: LoopInputs, interpret: bool = False):
    """``lower_recurrent``'s loop: every step one ``lstm_step`` call in a ``fori_loop``, the
    batch padded to whole blocks of rows (padded rows compute from zeros, never read back)."""
    xw = inputs.xw
    seq, nd, nb, width = xw.shape
    nh = width // 4
    v = plan(nd, nb, nh)
    form = _Form(d, inputs, 1 if half_precision_allowed() else 3)
    f32 = jnp.float32
    pad = v.padded - nb

    def padded(a, axis):  # the batch axis padded with zeros
        if not pad:
            return a
        return jnp.pad(a, [(0, pad if i == axis else 0) for i in range(a.ndim)])

    xw2 = padded(xw.astype(f32), 2).reshape(seq * nd * v.padded, width)
    r2 = inputs.recurrence.reshape(nd * width, nh)
    rb = inputs.rb.astype(f32).reshape(nd * width)
    peephole = None
    if form.peephole:
        peephole = jnp.stack([p.astype(f32).reshape(nd, nh) for p in inputs.peephole], axis=1)
        peephole = peephole.reshape(nd * 3 * nh)
    lengths = None if inputs.lengths is None else padded(inputs.lengths.astype(jnp.int32), 0)
    h0 = padded(inputs.h0.astype(f32), 1).reshape(nd * v.padded, nh)
    c0 = padded(inputs.c0.astype(f32), 1).reshape(nd * v.padded, nh)
    hp0, back0 = initial_pieces(h0, form.pieces)
    rows = seq * nd * v.padded
    ys0 = jnp.zeros((rows, nh), d.input_tensor.dtype) if form.sequence else None

    def body(k, carry):
        h, c, hp, back, ys = carry
        t = jnp.reshape(k, (1,)).astype(jnp.int32)
        out = lstm_step(t, xw2, r2, rb, peephole, lengths, h, c, hp, back, ys, v, form,
                        interpret)  # fmt: skip
        return out if form.sequence else (*out, None)

    carry = (h0, c0, hp0, back0, ys0)
    h, c, _, _, ys = lax.fori_loop(0, seq, body, carry, unroll=min(UNROLL, max(seq, 1)))
    if ys is not None:
        ys = ys.reshape(seq, nd, v.padded, nh)[:, :, :nb]
    h = h.reshape(nd, v.padded, nh)[:, :nb]
    c = c.reshape(nd, v.padded, nh)[:, :nb]
    return ys, h, c


def applies(d: Any) -> bool:
    if d.operator_type != "DML_OPERATOR_LSTM" or d.input_tensor.dtype != np.float16:
        return False
    names = tuple(a.operator_type for a in d.activation_descs)
    if names != DEFAULT_ACTIVATIONS * (len(names) // 3) or not names:
        return False
    _, _, batch, _ = d.input_tensor.sizes
    directions = d.weight_tensor.sizes[1]
    return plan(directions, batch, d.recurrence_tensor.sizes[3]) is not None


def lower_lstm_kernel(d: Any, *arrays, interpret: bool = False) -> tuple:
    return lower_lstm(d, *arrays, loop=lambda d, i: lstm_loop(d, i, interpret))


register_fast_path("DML_OPERATOR_LSTM", "kernel", applies, lower_lstm_kernel)
