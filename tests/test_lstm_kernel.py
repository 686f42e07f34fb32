"""The LSTM step kernel (dml_jax.kernels.lstm) against the lax lowering.

In Pallas interpret mode (any machine): one and two directions, batch entries masked past the
batch, several chunks of the state, hidden sizes of several programs, bias, initial states,
peepholes, sequence lengths (0, partial and full), the clip, input-forget coupling, only the
single outputs, and ALLOW_HALF_PRECISION_COMPUTATION; on a CUDA machine also the compiled
Triton kernel through the operator's fast path. The stated tolerance: every FLOAT16 output
within one float16 ulp of the lax lowering's (plus 2^-16 absolute near zero, where the values
are small against the state's scale of 1): the state is float32 in both, and what differs (the
order of the product's sums, the scaling of the state's pieces, the GPU's ``exp`` and ``tanh``
against XLA's) stays within a few float32 ulps of it at each step. With
ALLOW_HALF_PRECISION_COMPUTATION the state enters each product rounded to float16 in both, and a
float32 ulp of difference can move such a rounding: on the CPU within 2^-9 * (1 + |lax|); on the
GPU, over longer sequences, the kernel is as close to the float32-state result as the lax
lowering is (twice its largest error, plus one float16 ulp).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.extend as jex
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml
from dml_jax import fastpath
from dml_jax.kernels import lstm as K
from dml_jax.ops.recurrent import lower_lstm
from dml_jax.precision import with_half_precision

T = dml.TensorDesc
SIGMOID = dml.ActivationSigmoidOperatorDesc()
TANH = dml.ActivationTanhOperatorDesc()
DEFAULT = [SIGMOID, TANH, TANH]


def _desc(seq, batch, inputs, hidden, direction="FORWARD", optional=(), sequence=True, **fields):
    """An FLOAT16 LSTM; ``optional`` names the optional input tensors to bind."""
    nd = 2 if direction == "BIDIRECTIONAL" else 1

    def t(*sizes, type_name="FLOAT16"):
        return T(type_name, list(sizes))

    state = t(1, nd, batch, hidden)
    tensors = {
        "bias_tensor": t(1, 1, nd, 8 * hidden),
        "hidden_init_tensor": state,
        "cell_mem_init_tensor": state,
        "sequence_lengths_tensor": t(1, 1, 1, batch, type_name="UINT32"),
        "peephole_tensor": t(1, 1, nd, 3 * hidden),
    }
    return dml.LstmOperatorDesc(
        input_tensor=t(1, seq, batch, inputs),
        weight_tensor=t(1, nd, 4 * hidden, inputs),
        recurrence_tensor=t(1, nd, 4 * hidden, hidden),
        output_sequence_tensor=t(seq, nd, batch, hidden) if sequence else None,
        output_single_tensor=state,
        output_cell_single_tensor=state,
        activation_descs=DEFAULT * nd,
        direction=direction,
        **{name: tensors[name] for name in optional},
        **fields,
    )


def _arrays(d, lengths=None, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for slot, desc in d.input_slots():
        if slot == "SequenceLengthsTensor":
            out.append(np.array(lengths, np.uint32).reshape(desc.sizes))
            continue
        scale = {"InputTensor": 1.0, "HiddenInitTensor": 0.8, "CellMemInitTensor": 2.0}
        values = rng.standard_normal(desc.sizes) * scale.get(slot, 0.3)
        out.append(values.astype(np.float16))
    return out


def _close(got, want, half=False):
    """The module docstring's tolerance."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype == np.float16 and g.shape == w.shape
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        tol = np.spacing(np.abs(w).astype(np.float16)).astype(np.float64) + 2.0**-16
        if half:
            tol = 2.0**-9 * (1 + np.abs(w))
        assert np.all(np.abs(g - w) <= tol), np.max(np.abs(g - w) / tol)


def _both(d, arrays, half=False, interpret=True):
    def kernel(*a):
        return K.lower_lstm_kernel(d, *a, interpret=interpret)

    def lax_form(*a):
        return lower_lstm(d, *a)

    got = jax.jit(with_half_precision(kernel, half))(*arrays)
    want = jax.jit(with_half_precision(lax_form, half))(*arrays)
    return got, want


# (description, sequence lengths or None, tunables)
CASES = [
    # forward, 3 batch entries in a block of 16, one chunk, two programs across the units
    (_desc(3, 3, 8, 32), None, {}),
    # every optional tensor, both directions, lengths 0 to full, 4 chunks of 16
    (_desc(4, 5, 6, 32, "BIDIRECTIONAL", ("bias_tensor", "hidden_init_tensor",
                                           "cell_mem_init_tensor", "sequence_lengths_tensor",
                                           "peephole_tensor")),
     [4, 2, 0, 1, 3], {"CHUNK": 16}),
    # backward with lengths, clip and input-forget coupling, no sequence output
    (_desc(5, 4, 7, 16, "BACKWARD", ("sequence_lengths_tensor", "bias_tensor"), sequence=False,
           use_clip_threshold=True, clip_threshold=0.5, couple_input_forget=True),
     [5, 3, 1, 4], {}),
    # 20 batch entries in two blocks of 16, hidden 48 (3 programs of 16 units, 3 chunks of 16)
    (_desc(6, 20, 8, 48, optional=("hidden_init_tensor", "peephole_tensor")), None,
     {"ROWS": 16, "CHUNK": 16}),
    # a long sequence in the loop's unrolled iterations and a remainder (9 = 8 + 1)
    (_desc(9, 2, 4, 16, optional=("bias_tensor",)), None, {}),
]  # fmt: skip


@pytest.mark.parametrize("half", [False, True], ids=["float32_state", "half_precision"])
@pytest.mark.parametrize("d, lengths, tunables", CASES)
def test_kernel_interpret_matches_lax(monkeypatch, d, lengths, tunables, half):
    for name, value in tunables.items():
        monkeypatch.setattr(K, name, value)
    assert K.applies(d)
    got, want = _both(d, _arrays(d, lengths), half)
    _close(got, want, half)


def test_a_large_initial_state_enters_exactly():
    """Each chunk's rows are scaled by their own power of two: an initial state far from 1
    (whose tanh-bounded successors are not) gives the lax lowering's values."""
    d = _desc(2, 4, 4, 32, optional=("hidden_init_tensor", "cell_mem_init_tensor"))
    arrays = _arrays(d, seed=5)
    arrays[3] = (arrays[3].astype(np.float32) * 3000).astype(np.float16)  # HiddenInit
    got, want = _both(d, arrays)
    _close(got, want)


def test_one_kernel_call_a_step_in_one_loop():
    """The loop is one ``fori_loop`` (a while or scan of the program) of one kernel call,
    whatever the sequence length."""

    def calls(seq: int):
        d = _desc(seq, 4, 8, 32)
        specs = [jax.ShapeDtypeStruct(t.sizes, t.dtype) for _, t in d.input_slots()]
        jaxpr = jax.make_jaxpr(lambda *a: K.lower_lstm_kernel(d, *a, interpret=True))(*specs)
        names = []

        def walk(j):  # not into the kernel's own body
            for e in j.eqns:
                names.append(e.primitive.name)
                if e.primitive.name != "pallas_call":
                    for sub in jex.core.jaxprs_in_params(e.params):
                        walk(sub)

        walk(jaxpr.jaxpr)
        return names.count("pallas_call"), names.count("while") + names.count("scan")

    assert calls(3) == calls(40) == (1, 1)


def test_plan_and_applies_decline_what_lax_keeps():
    assert K.applies(_desc(4, 3, 8, 32))
    assert not K.applies(_desc(4, 3, 8, 24))  # hidden not a multiple of 16
    d = _desc(4, 3, 8, 32)
    assert not K.applies(dataclasses.replace(d, activation_descs=(SIGMOID, TANH, SIGMOID)))
    f32 = {
        f.name: getattr(d, f.name).like(data_type="FLOAT32")
        for f in dataclasses.fields(d)
        if isinstance(getattr(d, f.name), T)
    }
    assert not K.applies(dataclasses.replace(d, **f32))  # FLOAT32: lax
    for cls in (dml.RnnOperatorDesc, dml.GruOperatorDesc):
        assert not fastpath.fast_paths(cls.operator_type)
    v = K.plan(1, 64, 1024)  # the benchmark's layer
    assert v.grid == (1, 1024 // v.units, 1) and v.rows == 64
    assert K.plan(2, 3, 16).rows == 16 and K.plan(1, 1, 16).units == 16


# Built per sequence length: the GPU's compiled kernel through the operator.
GPU_CASES = [
    ("plain", _desc(33, 64, 64, 256), None),
    ("everything", _desc(17, 37, 24, 128, "BIDIRECTIONAL",
                         ("bias_tensor", "hidden_init_tensor", "cell_mem_init_tensor",
                          "sequence_lengths_tensor", "peephole_tensor")),
     [17, 3, 0, 16] + [9] * 33),
    ("clip_couple", _desc(12, 8, 16, 64, "BACKWARD", ("sequence_lengths_tensor",),
                          use_clip_threshold=True, clip_threshold=0.25, couple_input_forget=True),
     [12, 11, 1, 0, 5, 6, 7, 8]),
]  # fmt: skip


@pytest.mark.skipif(not fastpath.cuda_present(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("half", [False, True], ids=["float32_state", "half_precision"])
@pytest.mark.parametrize("name, d, lengths", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_gpu_fast_path_matches_lax(name, d, lengths, half):
    assert fastpath.select(d) is not None
    arrays = [jnp.asarray(a) for a in _arrays(d, lengths, seed=7)]
    op = dml.compile_operator(d, allow_half_precision=half)
    ref = dml.compile_operator(d, fast_paths=False, allow_half_precision=half)
    got, want = jax.jit(op.fn)(*arrays), jax.jit(ref.fn)(*arrays)
    if not half:
        _close(got, want)
        return
    exact = jax.jit(dml.compile_operator(d, fast_paths=False).fn)(*arrays)
    for g, w, e in zip(got, want, exact):
        g, w, e = (np.asarray(a, np.float64) for a in (g, w, e))
        ulp = np.spacing(np.abs(e).astype(np.float16)).astype(np.float64)
        assert np.max(np.abs(g - e) - ulp) <= 2 * np.max(np.abs(w - e))
