"""The persistent LSTM kernel (dml_jax.kernels.lstm) against the lax lowering.

On any machine: which descriptions the fast path takes and which it leaves to lax, and the
lowering around the kernel (layouts, padding, directions, initial states, outputs) with the
kernel replaced by a NumPy-style statement of its contract, against the lax lowering. On a Hopper
GPU: the kernel through the operator's fast path against the lax lowering (``fast_paths=False``)
on forward, backward and bidirectional layers, with and without biases and initial states (an
initial state of magnitude far above 1 included), batches below 64, a grid of 16 and of 128
programs, and half precision; and under ``jax.vmap`` (each batch entry as computed alone).

Stated tolerance: float16 outputs within one float16 unit of the lax lowering's (2^-10 of the
magnitude) plus 2^-14. Both compute the state in float32 and round once; they differ in the
order of the products' sums and in float32 sigmoid / tanh by an ulp or two, which a float16
rounding turns into one unit now and then.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax.kernels import lstm as K
from dml_jax.kernels import mosaic
from dml_jax.precision import with_half_precision

pytestmark = pytest.mark.kernel_matrix

T = dml.TensorDesc
SIG, TANH = dml.ActivationSigmoidOperatorDesc(), dml.ActivationTanhOperatorDesc()


def _desc(seq=9, batch=5, inp=32, hidden=128, direction="FORWARD", bias=True, init=True,
          outputs=("seq", "h", "c"), acts=None, dtype="FLOAT16", **fields):  # fmt: skip
    d_ = 2 if direction == "BIDIRECTIONAL" else 1
    state = T(dtype, (1, d_, batch, hidden))
    return dml.LstmOperatorDesc(
        input_tensor=T(dtype, (1, seq, batch, inp)),
        weight_tensor=T(dtype, (1, d_, 4 * hidden, inp)),
        recurrence_tensor=T(dtype, (1, d_, 4 * hidden, hidden)),
        bias_tensor=T(dtype, (1, 1, d_, 8 * hidden)) if bias else None,
        hidden_init_tensor=state if init else None,
        cell_mem_init_tensor=state if init else None,
        output_sequence_tensor=T(dtype, (seq, d_, batch, hidden)) if "seq" in outputs else None,
        output_single_tensor=state if "h" in outputs else None,
        output_cell_single_tensor=state if "c" in outputs else None,
        activation_descs=acts or [SIG, TANH, TANH] * d_,
        direction=direction,
        **fields,
    )


def _arrays(d, seed=0, init_scale=1.0):
    rng = np.random.default_rng(seed)
    hidden = d.recurrence_tensor.sizes[-1]
    out = [rng.standard_normal(d.input_tensor.sizes).astype(np.float16)]
    for t in (d.weight_tensor, d.recurrence_tensor):
        out.append((rng.standard_normal(t.sizes) / np.sqrt(hidden)).astype(np.float16))
    if d.bias_tensor is not None:
        out.append((rng.standard_normal(d.bias_tensor.sizes) * 0.1).astype(np.float16))
    for t in (d.hidden_init_tensor, d.cell_mem_init_tensor):
        if t is not None:
            out.append((rng.standard_normal(t.sizes) * init_scale).astype(np.float16))
    return out


def _close(got, want):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    bound = 2.0**-10 * np.abs(want) + 2.0**-14
    err = np.abs(got - want)
    assert np.all(err <= bound), f"max error {err.max():.3g}, worst ratio {np.max(err / bound):.3g}"


def test_applies_declines_what_lax_keeps(monkeypatch):
    monkeypatch.setattr(K, "hopper", lambda: True)
    monkeypatch.setattr(K, "multiprocessors", lambda: 132)
    assert K.applies(_desc())
    assert K.applies(_desc(direction="BIDIRECTIONAL", bias=False, init=False))
    assert K.applies(_desc(batch=64, hidden=1024))
    lengths = T("UINT32", (1, 1, 1, 5))
    declined = [
        _desc(batch=65),  # more than one WGMMA's rows
        _desc(hidden=96),  # not whole chunks of 64
        _desc(hidden=1088),  # 136 programs: more than the multiprocessors
        _desc(sequence_lengths_tensor=lengths),
        _desc(peephole_tensor=T("FLOAT16", (1, 1, 1, 384))),
        _desc(use_clip_threshold=True, clip_threshold=1.0),
        _desc(couple_input_forget=True),
        _desc(acts=[SIG, TANH, SIG]),
        _desc(acts=[dml.ActivationHardSigmoidOperatorDesc(alpha=0.2, beta=0.5), TANH, TANH]),
    ]
    for d in declined:
        assert not K.applies(d), d
    assert not K.applies(_desc(dtype="FLOAT32"))
    monkeypatch.setattr(K, "hopper", lambda: False)
    assert not K.applies(_desc())


HOPPER = pytest.mark.skipif(not mosaic.hopper(), reason="needs a Hopper GPU (TMA) and jax 0.11")

CASES = {
    "forward": ({}, 1.0),
    "forward, large initial state": ({}, 40.0),
    "backward": ({"direction": "BACKWARD"}, 1.0),
    "bidirectional, no bias or initial state": (
        {"direction": "BIDIRECTIONAL", "bias": False, "init": False},
        1.0,
    ),
    "128 programs, batch 64, 33 steps": ({"seq": 33, "batch": 64, "hidden": 1024, "inp": 64}, 1.0),
    "sequence output only": ({"outputs": ("seq",)}, 1.0),
    "one step": ({"seq": 1}, 1.0),
    "hidden 64 (8 programs, one chunk a piece)": ({"hidden": 64}, 1.0),
    "hidden 384 (a ring filled again within a step in three pieces)": ({"hidden": 384}, 1.0),
}


@HOPPER
@pytest.mark.parametrize("half", [False, True], ids=["three pieces", "half precision"])
@pytest.mark.parametrize("name", list(CASES))
def test_kernel_matches_lax(name, half):
    """Half precision through the operator's fast path; three pieces (the float32 product,
    which the fast path leaves to lax) by the fast path's lowering called directly."""
    fields, init_scale = CASES[name]
    d = _desc(**fields)
    arrays = _arrays(d, init_scale=init_scale)
    assert K.applies(d)
    if half:
        got = dml.compile_operator(d, allow_half_precision=True)(*arrays)
    else:
        got = jax.jit(lambda *a: K.lower_lstm_persistent(d, *a, pieces=3))(*arrays)
    want = dml.compile_operator(d, allow_half_precision=half, fast_paths=False)(*arrays)
    got, want = (x if isinstance(x, tuple | list) else (x,) for x in (got, want))  # one output
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        _close(g, w)


def _kernel_contract(xw, first, r, c0, pieces):
    """What ``lstm_direction`` computes, written from ``_persistent``'s docstring: gate columns
    i, o, f, c of each program's units, R's rows in that order, h = 0 before step 0 (its
    product in ``first``), float32 products, float16 outputs."""
    del pieces  # float32 products here
    steps, batch, programs, cols = xw.shape
    units, hidden = cols // 4, r.shape[-1]

    def by_gate(a):  # {.., programs, 4 * units} -> {.., 4, hidden}
        a = a.reshape(*a.shape[:-2], programs, 4, units)
        return jnp.swapaxes(a, -3, -2).reshape(*a.shape[:-3], 4, hidden)

    gates_x = by_gate(xw)
    if first is not None:
        gates_x = gates_x.at[0].add(by_gate(first))
    r_by_gate = jnp.swapaxes(r.reshape(programs, 4, units, hidden), 0, 1)
    r_by_gate = r_by_gate.reshape(4, hidden, hidden).astype(jnp.float32)
    h, c, ys = jnp.zeros((batch, hidden), jnp.float32), c0, []
    for t in range(steps):
        g = gates_x[t] + jnp.einsum("bk,guk->bgu", h, r_by_gate, precision="highest")
        i, o, f, cell = (g[:, n] for n in range(4))
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(cell)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        ys.append(h)
    f16 = jnp.float16
    return jnp.stack(ys).astype(f16), h.astype(f16), c.astype(f16)


# Without CUDA: one direction, both directions without the optional inputs, and a ring refilled
# within a step.
@pytest.mark.kernel_matrix(
    cpu=[
        "forward",
        "bidirectional, no bias or initial state",
        "hidden 384 (a ring filled again within a step in three pieces)",
    ]
)
@pytest.mark.parametrize("name", list(CASES))
def test_lowering_around_the_kernel_matches_lax(monkeypatch, name):
    """On any machine: the fast path's lowering with the kernel replaced by its contract
    (``_kernel_contract``) against the lax lowering. This holds the work around the kernel to
    account: W's rows and the biases in the kernel's column order, the batch padded to 64,
    BACKWARD's steps reversed and put back, HiddenInit's product at step 0, CellMemInit, and
    which outputs come back."""
    monkeypatch.setattr(K, "lstm_direction", _kernel_contract)
    fields, init_scale = CASES[name]
    d = _desc(**fields)
    arrays = _arrays(d, init_scale=init_scale)
    got = K.lower_lstm_persistent(d, *map(jnp.asarray, arrays), pieces=3)
    want = dml.compile_operator(d, fast_paths=False)(*arrays)
    want = want if isinstance(want, tuple | list) else (want,)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        _close(g, w)


@HOPPER
def test_half_precision_programs_hold_the_kernel():
    """The operator's program holds the kernel with half precision, and not without."""
    d = _desc()
    arrays = _arrays(d)
    for half in (True, False):
        op = dml.compile_operator(d, allow_half_precision=half)
        text = jax.jit(op.fn).lower(*arrays).as_text()
        assert ("mosaic_gpu" in text) == half


@HOPPER
def test_kernel_under_vmap():
    d = _desc(seq=6, batch=3, hidden=128, direction="BIDIRECTIONAL")
    stacks = [np.stack(parts) for parts in zip(*(_arrays(d, seed=s) for s in range(3)))]
    lower = with_half_precision(K.lower_lstm_persistent, True)
    batched = jax.jit(jax.vmap(lambda *a: lower(d, *a)))(*stacks)
    for i in range(3):
        alone = jax.jit(lambda *a: lower(d, *a))(*(s[i] for s in stacks))
        for b, a in zip(batched, alone):
            np.testing.assert_array_equal(np.asarray(b[i]), np.asarray(a))


def test_kernel_state_product_matches_the_step():
    """``state_product`` (the first step's product of the fast path) is the lowering's."""
    from dml_jax.ops.recurrent import state_product

    rng = np.random.default_rng(3)
    h = jnp.asarray(rng.standard_normal((2, 4, 64)) * 100, jnp.float32)
    r = jnp.asarray(rng.standard_normal((2, 256, 64)) * 0.1, jnp.float16)
    want = np.einsum("dbk,dnk->dbn", np.float64(h), np.float64(r))
    got = np.asarray(state_product(h, r), np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-3)
