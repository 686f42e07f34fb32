"""RNN, LSTM and GRU: hand-worked steps (identity-like activations keep every value exact),
properties against tests/reference/recurrent.py over directions, optional tensors, sequence
lengths, activations, FLOAT32 and FLOAT16, one row per rule, jit / vmap / gradients, the
lowering's single loop, and FLOAT16's recurrent product (float16 pieces of the float32 state)
against float64 products."""

from __future__ import annotations

import dataclasses
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
import strategies as S
from hypothesis import given, settings
from hypothesis import strategies as st

import dml_jax as dml
from dml_jax import catalog, fastpath, registry
from dml_jax.ops import recurrent as R
from dml_jax.ops.recurrent import element_wise_activations
from dml_jax.precision import with_half_precision

T = dml.TensorDesc
RNN, LSTM, GRU = dml.RnnOperatorDesc, dml.LstmOperatorDesc, dml.GruOperatorDesc
CLASSES = (RNN, LSTM, GRU)
GATES = {RNN: 1, LSTM: 4, GRU: 3}
PER_DIRECTION = {RNN: 1, LSTM: 3, GRU: 2}
FORWARD, BACKWARD, BIDIRECTIONAL = dml.RecurrentNetworkDirection

IDENTITY = dml.ActivationIdentityOperatorDesc()
RELU = dml.ActivationReluOperatorDesc()
SIGMOID = dml.ActivationSigmoidOperatorDesc()
TANH = dml.ActivationTanhOperatorDesc()
DOUBLE = dml.ActivationLinearOperatorDesc(alpha=2.0, beta=0.0)


def _act(name: str):
    """A registered activation's example desc with its tensors left None."""
    return dataclasses.replace(
        catalog.example_desc(registry.lookup(name)), input_tensor=None, output_tensor=None
    )


ACTIVATIONS = [_act(n) for n in element_wise_activations()]
SMOOTH = [SIGMOID, TANH, dml.ActivationSoftsignOperatorDesc(), DOUBLE]


def _f32(*values, shape):
    return np.array(values, np.float32).reshape(shape)


def _t(*sizes, type_name="FLOAT32"):
    return T(type_name, list(sizes))


def _lengths(*values):
    return np.array(values, np.uint32).reshape(1, 1, 1, -1)


# --- worked examples ------------------------------------------------------------------------
#
# hidden_size 1, input_size 1 unless said: W, R and the biases are scalars per gate, and the
# IDENTITY / RELU / LINEAR activations keep every value a short binary fraction (exact).

_X3 = _f32(1, 2, 3, shape=(1, 3, 1, 1))
_W1, _R1 = _f32(2, shape=(1, 1, 1, 1)), _f32(0.5, shape=(1, 1, 1, 1))
_B1 = _f32(1, 0, shape=(1, 1, 1, 2))  # Wb = 1, Rb = 0


def _rnn1(direction=FORWARD, acts=(IDENTITY,), seq=3, batch=1, **tensors):
    d = 2 if direction is BIDIRECTIONAL else 1
    fields = {
        "input_tensor": _t(1, seq, batch, 1),
        "weight_tensor": _t(1, d, 1, 1),
        "recurrence_tensor": _t(1, d, 1, 1),
        "bias_tensor": _t(1, 1, d, 2),
        "output_sequence_tensor": _t(seq, d, batch, 1),
        "output_single_tensor": _t(1, d, batch, 1),
    }
    fields.update(tensors)
    return RNN(**fields, activation_descs=list(acts), direction=direction)


# LSTM gates i, o, f, c with W = 0.5, 1, 0.25, 2 and R = 0: steps x = 1, 2.
_LSTM_X = _f32(1, 2, shape=(1, 2, 1, 1))
_LSTM_W = _f32(0.5, 1, 0.25, 2, shape=(1, 1, 4, 1))
_LSTM_R = np.zeros((1, 1, 4, 1), np.float32)


def _lstm1(peephole=False, **attrs):
    return LSTM(
        _t(1, 2, 1, 1), _t(1, 1, 4, 1), _t(1, 1, 4, 1),
        peephole_tensor=_t(1, 1, 1, 3) if peephole else None,
        output_sequence_tensor=_t(2, 1, 1, 1),
        output_single_tensor=_t(1, 1, 1, 1),
        output_cell_single_tensor=_t(1, 1, 1, 1),
        activation_descs=[IDENTITY] * 3, **attrs,
    )  # fmt: skip


# GRU gates z, r, h: W = 0.25, 1, 2; R = 0, 0, 1; Rbh = 1; H0 = 2; steps x = 1, 2.
_GRU_INPUTS = (
    _f32(1, 2, shape=(1, 2, 1, 1)),
    _f32(0.25, 1, 2, shape=(1, 1, 3, 1)),
    _f32(0, 0, 1, shape=(1, 1, 3, 1)),
    _f32(0, 0, 0, 0, 0, 1, shape=(1, 1, 1, 6)),
    _f32(2, shape=(1, 1, 1, 1)),
)


def _gru1(linear_before_reset: bool):
    return GRU(
        _t(1, 2, 1, 1), _t(1, 1, 3, 1), _t(1, 1, 3, 1), _t(1, 1, 1, 6), _t(1, 1, 1, 1),
        output_sequence_tensor=_t(2, 1, 1, 1), output_single_tensor=_t(1, 1, 1, 1),
        activation_descs=[IDENTITY, IDENTITY], linear_before_reset=linear_before_reset,
    )  # fmt: skip


SEEDS = [
    # RNN forward: h = 2x + h/2 + 1 -> 3, 6.5, 10.25.
    (
        _rnn1(),
        (_X3, _W1, _R1, _B1),
        (_f32(3, 6.5, 10.25, shape=(3, 1, 1, 1)), _f32(10.25, shape=(1, 1, 1, 1))),
    ),
    # ... backward from the last step: t = 2: 7; t = 1: 4 + 3.5 + 1 = 8.5; t = 0: 7.25. The
    # sequence output stays in time order; the single output is the state after t = 0.
    (
        _rnn1(BACKWARD),
        (_X3, _W1, _R1, _B1),
        (_f32(7.25, 8.5, 7, shape=(3, 1, 1, 1)), _f32(7.25, shape=(1, 1, 1, 1))),
    ),
    # Bidirectional, activations per direction in ActivationDescs order (IDENTITY forward,
    # LINEAR 2x backward), weights per direction: forward W = 2, R = 0.5 as above; backward
    # W = 1, R = 1, no bias: t = 2: 2 * 3 = 6; t = 1: 2 * (2 + 6) = 16; t = 0: 2 * 17 = 34.
    (
        _rnn1(BIDIRECTIONAL, acts=(IDENTITY, DOUBLE)),
        (
            _X3,
            _f32(2, 1, shape=(1, 2, 1, 1)),
            _f32(0.5, 1, shape=(1, 2, 1, 1)),
            _f32(1, 0, 0, 0, shape=(1, 1, 2, 2)),
        ),
        (
            _f32(3, 34, 6.5, 16, 10.25, 6, shape=(3, 2, 1, 1)),
            _f32(10.25, 34, shape=(1, 2, 1, 1)),
        ),
    ),
    # Sequence lengths 2 and 0 (batch 2, x = 1, 2, 3 and 4, 5, 6; HiddenInit 10 and 20).
    # Entry 0 runs t = 0, 1: 2 + 5 + 1 = 8, 4 + 4 + 1 = 9, then 0 at t = 2 and a final 9.
    # Entry 1 runs no step: zeros, and its initial state 20 as the single output.
    (
        _rnn1(
            batch=2,
            hidden_init_tensor=_t(1, 1, 2, 1),
            sequence_lengths_tensor=_t(1, 1, 1, 2, type_name="UINT32"),
        ),
        (
            _f32(1, 4, 2, 5, 3, 6, shape=(1, 3, 2, 1)),
            _W1,
            _R1,
            _B1,
            _f32(10, 20, shape=(1, 1, 2, 1)),
            _lengths(2, 0),
        ),
        (_f32(8, 0, 9, 0, 0, 0, shape=(3, 1, 2, 1)), _f32(9, 20, shape=(1, 1, 2, 1))),
    ),
    # ... backward with length 2 starts at t = 1 (not at the padded t = 2): 4 + 5 + 1 = 10,
    # then t = 0: 2 + 5 + 1 = 8; a length beyond seq_length (7) reads as 3: 6 + 1 = 7 from
    # t = 2 (HiddenInit 0), then 4 + 3.5 + 1 = 8.5, 2 + 4.25 + 1 = 7.25.
    (
        _rnn1(
            BACKWARD,
            batch=2,
            hidden_init_tensor=_t(1, 1, 2, 1),
            sequence_lengths_tensor=_t(1, 1, 1, 2, type_name="UINT32"),
        ),
        (
            _f32(1, 1, 2, 2, 3, 3, shape=(1, 3, 2, 1)),
            _W1,
            _R1,
            _B1,
            _f32(10, 0, shape=(1, 1, 2, 1)),
            _lengths(2, 7),
        ),
        (_f32(8, 7.25, 10, 8.5, 0, 7, shape=(3, 1, 2, 1)), _f32(8, 7.25, shape=(1, 1, 2, 1))),
    ),
    # LSTM, identity activations, no peepholes: t = 0: i, o, f, c = 0.5, 1, 0.25, 2 ->
    # C = 0.5 * 2 = 1, H = 1; t = 1: 1, 2, 0.5, 4 -> C = 0.5 + 4 = 4.5, H = 2 * 4.5 = 9.
    (
        _lstm1(),
        (_LSTM_X, _LSTM_W, _LSTM_R),
        (
            _f32(1, 9, shape=(2, 1, 1, 1)),
            _f32(9, shape=(1, 1, 1, 1)),
            _f32(4.5, shape=(1, 1, 1, 1)),
        ),
    ),
    # ... peepholes P[iof] = 1, 0.5, 2: i and f see the previous cell, o the new one (ONNX's
    # equation): t = 0: C = 1, o = 1 + 0.5 * 1 = 1.5, H = 1.5; t = 1: i = 1 + 1 = 2,
    # f = 0.5 + 2 = 2.5, C = 2.5 + 2 * 4 = 10.5, o = 2 + 0.5 * 10.5 = 7.25, H = 76.125.
    (
        _lstm1(peephole=True),
        (_LSTM_X, _LSTM_W, _LSTM_R, _f32(1, 0.5, 2, shape=(1, 1, 1, 3))),
        (
            _f32(1.5, 76.125, shape=(2, 1, 1, 1)),
            _f32(76.125, shape=(1, 1, 1, 1)),
            _f32(10.5, shape=(1, 1, 1, 1)),
        ),
    ),
    # ... clipped to [-1, 1] before each gate's activation (h(C) is not clipped): t = 0:
    # 0.5, 1, 0.25, 1 -> C = 0.5, H = 0.5; t = 1: 1, 1, 0.5, 1 -> C = 1.25, H = 1.25.
    (
        _lstm1(clip_threshold=1.0, use_clip_threshold=True),
        (_LSTM_X, _LSTM_W, _LSTM_R),
        (
            _f32(0.5, 1.25, shape=(2, 1, 1, 1)),
            _f32(1.25, shape=(1, 1, 1, 1)),
            _f32(1.25, shape=(1, 1, 1, 1)),
        ),
    ),
    # ... CoupleInputForget: f = 1 - i: t = 0: f = 0.5, C = 1, H = 1; t = 1: f = 0, C = 4,
    # H = 8.
    (
        _lstm1(couple_input_forget=True),
        (_LSTM_X, _LSTM_W, _LSTM_R),
        (
            _f32(1, 8, shape=(2, 1, 1, 1)),
            _f32(8, shape=(1, 1, 1, 1)),
            _f32(4, shape=(1, 1, 1, 1)),
        ),
    ),
    # GRU: t = 0: z = 0.25, r = 1, h = 2 + (1 * 2) + 1 = 5, H = 0.75 * 5 + 0.25 * 2 = 4.25;
    # t = 1: z = 0.5, r = 2, h = 4 + (2 * 4.25) + 1 = 13.5, H = 6.75 + 2.125 = 8.875.
    (
        _gru1(False),
        _GRU_INPUTS,
        (_f32(4.25, 8.875, shape=(2, 1, 1, 1)), _f32(8.875, shape=(1, 1, 1, 1))),
    ),
    # ... LinearBeforeReset: h = W x + r * (R H + Rbh): t = 0 the same (r = 1); t = 1:
    # h = 4 + 2 * (4.25 + 1) = 14.5, H = 7.25 + 2.125 = 9.375.
    (
        _gru1(True),
        _GRU_INPUTS,
        (_f32(4.25, 9.375, shape=(2, 1, 1, 1)), _f32(9.375, shape=(1, 1, 1, 1))),
    ),
    # hidden_size 2, input_size 2: W^T and R^T (rows are output units), RELU:
    # t = 0: W x = [1 - 2, 2 + 2] = [-1, 4] -> [0, 4]; t = 1: W x + R h = [0 + 4, 0 + 0] + ...
    (
        RNN(
            _t(1, 2, 1, 2),
            _t(1, 1, 2, 2),
            _t(1, 1, 2, 2),
            output_sequence_tensor=_t(2, 1, 1, 2),
            activation_descs=[RELU],
        ),
        (
            _f32(1, 2, 0, 0, shape=(1, 2, 1, 2)),
            _f32(1, -1, 2, 1, shape=(1, 1, 2, 2)),
            _f32(1, 0, 0, -1, shape=(1, 1, 2, 2)),
        ),
        # t = 1: x = 0, R h = [1 * 0 + 0 * 4, 0 * 0 - 1 * 4] = [0, -4] -> [0, 0].
        (_f32(0, 4, 0, 0, shape=(2, 1, 1, 2)),),
    ),
]


@pytest.mark.parametrize("desc, inputs, expected", SEEDS)
def test_worked_examples(desc, inputs, expected):
    S.assert_same(S.run(S.Case(desc, inputs)), expected)
    S.assert_same(reference.reference(desc, *inputs), expected)


def test_float16_carries_the_state_in_float32():
    """x = 2048, 1, 1 summed by an identity RNN: rounding the state to FLOAT16 at each step
    would lose both 1s (2049 is not a float16); in float32 the last state is 2050."""
    d = RNN(
        _t(1, 3, 1, 1, type_name="FLOAT16"), _t(1, 1, 1, 1, type_name="FLOAT16"),
        _t(1, 1, 1, 1, type_name="FLOAT16"),
        output_sequence_tensor=_t(3, 1, 1, 1, type_name="FLOAT16"),
        output_single_tensor=_t(1, 1, 1, 1, type_name="FLOAT16"), activation_descs=[IDENTITY],
    )  # fmt: skip
    one = np.ones((1, 1, 1, 1), np.float16)
    seq, single = S.run(
        S.Case(d, (np.array([2048, 1, 1], np.float16).reshape(1, 3, 1, 1), one, one))
    )
    np.testing.assert_array_equal(seq.ravel(), np.array([2048, 2049, 2050], np.float16))
    assert single.ravel()[0] == 2050


def test_lowering_is_one_loop():
    """One ``scan`` in the program whatever the sequence length (not a step per time index)."""

    def count(seq: int) -> tuple[int, int]:
        d = LSTM(
            _t(1, seq, 2, 3), _t(1, 2, 8, 3), _t(1, 2, 8, 2),
            sequence_lengths_tensor=_t(1, 1, 1, 2, type_name="UINT32"),
            output_sequence_tensor=_t(seq, 2, 2, 2),
            activation_descs=[SIGMOID, TANH, TANH] * 2, direction=BIDIRECTIONAL,
        )  # fmt: skip
        op = dml.compile_operator(d)
        args = [jnp.zeros(t.sizes, t.dtype) for t in op.input_descs]
        jaxpr = jax.make_jaxpr(op.fn)(*args).jaxpr
        scans = [e for e in jaxpr.eqns if e.primitive.name == "scan"]
        return len(scans), len(jaxpr.eqns)

    assert count(2)[0] == 1
    assert count(2) == count(9)


def test_recurrent_layers_fast_paths():
    """The scan is the lowering of RNN and GRU on every platform (a cuDNN LSTM path disagreed
    with it and ran slower: benchmarks/RESULTS.md#attention_lstm); LSTM has one fast path, the
    persistent
    kernel of ``kernels/lstm.py`` (tests/test_lstm_kernel.py)."""
    for cls in CLASSES:
        names = [p.name for p in fastpath.fast_paths(cls.operator_type)]
        assert names == (["persistent"] if cls is LSTM else []), cls


def test_json_round_trip_keeps_activation_attributes():
    d = GRU(
        _t(1, 2, 1, 1), _t(1, 2, 3, 1), _t(1, 2, 3, 1), output_single_tensor=_t(1, 2, 1, 1),
        activation_descs=[dml.ActivationLeakyReluOperatorDesc(alpha=0.25), TANH,
                          dml.ActivationHardSigmoidOperatorDesc(alpha=0.5, beta=0.25), TANH],
        direction="BIDIRECTIONAL", linear_before_reset=True,
    )  # fmt: skip
    obj = json.loads(json.dumps(dml.operator_desc_to_json(d)))
    assert obj["desc"]["ActivationDescs"][0] == {
        "Type": "DML_OPERATOR_ACTIVATION_LEAKY_RELU",
        "Desc": {"Alpha": 0.25},
    }
    assert dml.operator_desc_from_json(obj) == d


# --- properties against the reference --------------------------------------------------------


@st.composite
def rnn_cases(draw, cls=None, type_name=None, grads=False):
    cls = cls or draw(st.sampled_from(CLASSES))
    type_name = type_name or draw(st.sampled_from(["FLOAT32", "FLOAT16"]))
    direction = draw(st.sampled_from(list(dml.RecurrentNetworkDirection)))
    dirs = 2 if direction is BIDIRECTIONAL else 1
    seq, batch = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    n_in, hidden = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    g = GATES[cls]

    def t(*sizes):
        return T(type_name, list(sizes))

    fields = {
        "input_tensor": t(1, seq, batch, n_in),
        "weight_tensor": t(1, dirs, g * hidden, n_in),
        "recurrence_tensor": t(1, dirs, g * hidden, hidden),
    }
    optional = {
        "bias_tensor": t(1, 1, dirs, 2 * g * hidden),
        "hidden_init_tensor": t(1, dirs, batch, hidden),
        "sequence_lengths_tensor": T("UINT32", [1, 1, 1, batch]),
    }
    outputs = {
        "output_sequence_tensor": t(seq, dirs, batch, hidden),
        "output_single_tensor": t(1, dirs, batch, hidden),
    }
    extra = {}
    if cls is LSTM:
        optional["cell_mem_init_tensor"] = t(1, dirs, batch, hidden)
        optional["peephole_tensor"] = t(1, 1, dirs, 3 * hidden)
        outputs["output_cell_single_tensor"] = t(1, dirs, batch, hidden)
        if not grads:  # clipping's kinks stay out of the finite differences
            extra["use_clip_threshold"] = draw(st.booleans())
            extra["clip_threshold"] = draw(st.sampled_from([0.0, 0.5, 1.0, 3.0]))
        extra["couple_input_forget"] = draw(st.booleans())
    if cls is GRU:
        extra["linear_before_reset"] = draw(st.booleans())
    for name, desc in optional.items():
        if draw(st.booleans()):
            fields[name] = desc
    chosen = draw(st.lists(st.sampled_from(sorted(outputs)), min_size=1, unique=True))
    fields.update({name: outputs[name] for name in chosen})
    pool = SMOOTH if grads else ACTIVATIONS
    acts = [draw(st.sampled_from(pool)) for _ in range(PER_DIRECTION[cls] * dirs)]
    desc = cls(**fields, activation_descs=acts, direction=direction, **extra)
    rng = draw(S.seeds())
    inputs = []
    for path, tensor in desc.input_slots():
        if path == "SequenceLengthsTensor":  # 0 .. seq_length + 1: empty and too long ones too
            inputs.append(rng.integers(0, seq + 2, tensor.sizes).astype(np.uint32))
        else:
            scale = 2.0 if path in ("InputTensor", "HiddenInitTensor", "CellMemInitTensor") else 0.8
            inputs.append(rng.uniform(-scale, scale, tensor.sizes).astype(tensor.dtype))
    return S.Case(desc, tuple(inputs))


# docs/semantics.md, "Recurrent layers": FLOAT16 outputs within one float16 unit of the exact
# result (2**-10 relative, 2**-14 absolute near 0).
FLOAT16_TOLERANCE = {"rtol": 2.0**-10, "atol": 2.0**-14}


def _tolerance(case, want) -> dict:
    if case.inputs[0].dtype == np.float16:
        return FLOAT16_TOLERANCE
    # float32 rounding carried through the steps scales with the largest values that flow
    # through them (unbounded activations reach 1e6 in three steps), not with each element:
    # an element that cancels down to 1e4 beside 1e6 keeps the absolute error of the 1e6.
    peak = max(
        (float(np.max(np.abs(w))) for w in want if w is not None and np.size(w)), default=0.0
    )
    return {"rtol": 2e-5, "atol": 2e-6 + 2e-5 * peak}


@S.HALF
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.operator_type[13:])
@given(data=st.data())
def test_matches_reference(cls, data):
    case = data.draw(rnn_cases(cls))
    want = reference.reference(case.desc, *case.inputs)
    S.assert_same(S.run(case), want, exact=False, **_tolerance(case, want))


@S.FEW
@given(case=rnn_cases())
def test_jit_equals_eager(case):
    S.check_jit(case, exact=False, rtol=1e-6, atol=1e-6)


@S.FEW
@given(case=rnn_cases())
def test_vmap_equals_loop(case):
    S.check_vmap(case, exact=False, rtol=1e-5, atol=1e-6)


_GRAD_EXAMPLES = settings(max_examples=max(2, settings.default.max_examples // 8))


@_GRAD_EXAMPLES
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.operator_type[13:])
@given(data=st.data())
def test_gradients(cls, data):
    case = data.draw(rnn_cases(cls, type_name="FLOAT32", grads=True))
    floats = tuple(i for i, a in enumerate(case.inputs) if a.dtype == np.float32)
    S.check_grads(case, argnums=floats, atol=5e-2, rtol=5e-2)


def test_gradient_matches_the_reference_derivative():
    """d(last hidden state)/dW of a two-step tanh RNN: jax.grad against central differences
    of the NumPy reference run in float64."""
    d = RNN(_t(1, 2, 1, 1), _t(1, 1, 1, 1), _t(1, 1, 1, 1), output_single_tensor=_t(1, 1, 1, 1),
            activation_descs=[TANH])  # fmt: skip
    x = _f32(0.5, -1, shape=(1, 2, 1, 1))
    w = _f32(0.7, shape=(1, 1, 1, 1))
    r = _f32(0.3, shape=(1, 1, 1, 1))
    op = dml.compile_operator(d)
    got = jax.grad(lambda w_: op.fn(x, w_, r).sum())(jnp.asarray(w))
    wide = dataclasses.replace(
        d, output_single_tensor=d.output_single_tensor.like(data_type="FLOAT64")
    )

    def ref(w_):
        (h,) = reference.reference(wide, x.astype(np.float64), w_, r.astype(np.float64))
        return h.sum()

    eps, w64 = 1e-6, w.astype(np.float64)
    want = (ref(w64 + eps) - ref(w64 - eps)) / (2 * eps)
    np.testing.assert_allclose(np.asarray(got).ravel(), [want], rtol=1e-4)


# --- sequence lengths: dml_jax's documented choices ------------------------------------------


def _gru_with_lengths(direction):
    dirs = 2 if direction is BIDIRECTIONAL else 1
    return GRU(
        _t(1, 3, 2, 2), _t(1, dirs, 6, 2), _t(1, dirs, 6, 2),
        hidden_init_tensor=_t(1, dirs, 2, 2),
        sequence_lengths_tensor=_t(1, 1, 1, 2, type_name="UINT32"),
        output_sequence_tensor=_t(3, dirs, 2, 2), output_single_tensor=_t(1, dirs, 2, 2),
        activation_descs=[SIGMOID, TANH] * dirs, direction=direction,
    )  # fmt: skip


def _random_inputs(desc, lengths):
    rng = np.random.default_rng(3)
    out = []
    for path, t in desc.input_slots():
        if path == "SequenceLengthsTensor":
            out.append(_lengths(*lengths))
        else:
            out.append(rng.uniform(-1, 1, t.sizes).astype(np.float32))
    return out


@pytest.mark.parametrize("direction", list(dml.RecurrentNetworkDirection))
def test_length_zero_runs_no_step(direction):
    d = _gru_with_lengths(direction)
    inputs = _random_inputs(d, (0, 3))
    seq, single = S.run(S.Case(d, tuple(inputs)))
    assert np.all(seq[:, :, 0] == 0)
    np.testing.assert_array_equal(single[0, :, 0], inputs[3][0, :, 0])  # the initial state


@pytest.mark.parametrize("direction", list(dml.RecurrentNetworkDirection))
def test_lengths_beyond_seq_length_read_as_seq_length(direction):
    d = _gru_with_lengths(direction)
    long = S.run(S.Case(d, tuple(_random_inputs(d, (4, 2**32 - 1)))))
    full = S.run(S.Case(d, tuple(_random_inputs(d, (3, 3)))))
    S.assert_same(long, full)


@pytest.mark.parametrize("direction", list(dml.RecurrentNetworkDirection))
def test_full_lengths_equal_no_lengths(direction):
    d = _gru_with_lengths(direction)
    inputs = _random_inputs(d, (3, 3))
    without = dataclasses.replace(d, sequence_lengths_tensor=None)
    S.assert_same(
        S.run(S.Case(d, tuple(inputs))),
        S.run(S.Case(without, tuple(inputs[:-1]))),
        exact=False,
        rtol=1e-6,
        atol=1e-7,
    )


# --- rules ------------------------------------------------------------------------------------

_RNN_FIELDS = {
    "input_tensor": _t(1, 3, 2, 4),
    "weight_tensor": _t(1, 1, 5, 4),
    "recurrence_tensor": _t(1, 1, 5, 5),
    "output_single_tensor": _t(1, 1, 2, 5),
    "activation_descs": [TANH],
}


def _rnn(**change):
    fields = {**_RNN_FIELDS, **change}
    return lambda: RNN(**fields)


def _lstm(**change):
    fields = {
        "input_tensor": _t(1, 3, 2, 4),
        "weight_tensor": _t(1, 2, 20, 4),
        "recurrence_tensor": _t(1, 2, 20, 5),
        "bias_tensor": _t(1, 1, 2, 40),
        "hidden_init_tensor": _t(1, 2, 2, 5),
        "cell_mem_init_tensor": _t(1, 2, 2, 5),
        "sequence_lengths_tensor": _t(1, 1, 1, 2, type_name="UINT32"),
        "peephole_tensor": _t(1, 1, 2, 15),
        "output_sequence_tensor": _t(3, 2, 2, 5),
        "output_single_tensor": _t(1, 2, 2, 5),
        "output_cell_single_tensor": _t(1, 2, 2, 5),
        "activation_descs": [SIGMOID, TANH, TANH] * 2,
        "direction": BIDIRECTIONAL,
    }
    fields.update(change)
    return lambda: LSTM(**fields)


def _gru(**change):
    fields = {
        "input_tensor": _t(1, 3, 2, 4),
        "weight_tensor": _t(1, 1, 15, 4),
        "recurrence_tensor": _t(1, 1, 15, 5),
        "output_sequence_tensor": _t(3, 1, 2, 5),
        "activation_descs": [SIGMOID, TANH],
    }
    fields.update(change)
    return lambda: GRU(**fields)


_R = r"^DML_OPERATOR_RNN: "
_L = r"^DML_OPERATOR_LSTM: "
_G = r"^DML_OPERATOR_GRU: "
_OWNED = dml.TensorFlags.OWNED_BY_DML

INVALID_ROWS = [
    (_rnn(input_tensor=_t(3, 2, 4)), _R + r"InputTensor\.DimensionCount must be 4, got 3"),
    (
        _rnn(output_single_tensor=_t(2, 5)),
        _R + r"OutputSingleTensor\.DimensionCount must be 4, got 2",
    ),
    (
        _rnn(weight_tensor=_t(1, 1, 5, 4, type_name="FLOAT16")),
        _R + r"WeightTensor\.DataType must equal InputTensor\.DataType \(FLOAT32\), got FLOAT16",
    ),
    (
        _gru(sequence_lengths_tensor=_t(1, 1, 1, 2, type_name="INT32")),
        _G + r"SequenceLengthsTensor\.DataType must be UINT32, got INT32",
    ),
    (
        _rnn(weight_tensor=_t(1, 1, 5, 4).like(flags=_OWNED)),
        _R + r"WeightTensor\.Flags must be NONE: DML_OPERATOR_RNN does not support OWNED_BY_DML",
    ),
    (
        _rnn(output_single_tensor=None),
        _R + r"needs at least one output tensor; OutputSequenceTensor, OutputSingleTensor are "
        r"all null",
    ),
    (
        _lstm(
            output_sequence_tensor=None, output_single_tensor=None, output_cell_single_tensor=None
        ),
        _L + r"needs at least one output tensor; OutputSequenceTensor, OutputSingleTensor, "
        r"OutputCellSingleTensor are all null",
    ),
    (_rnn(input_tensor=_t(2, 3, 2, 4)), _R + r"InputTensor\.Sizes\[0\] must equal 1, got 2"),
    (
        _rnn(direction=BIDIRECTIONAL),
        _R + r"WeightTensor\.Sizes\[1\] must equal num_directions of BIDIRECTIONAL = 2, got 1",
    ),
    (
        _lstm(recurrence_tensor=_t(1, 2, 15, 5)),
        _L + r"RecurrenceTensor\.Sizes\[2\] must equal 4 \* hidden_size = 20, got 15",
    ),
    (
        _rnn(weight_tensor=_t(1, 1, 5, 3)),
        _R + r"WeightTensor\.Sizes\[3\] must equal input_size \(InputTensor\.Sizes\[3\]\) = 4, "
        r"got 3",
    ),
    (
        _gru(weight_tensor=_t(1, 1, 5, 4)),
        _G + r"WeightTensor\.Sizes\[2\] must equal 3 \* hidden_size = 15, got 5",
    ),
    (
        _gru(bias_tensor=_t(1, 1, 1, 15)),
        _G + r"BiasTensor\.Sizes\[3\] must equal 6 \* hidden_size = 30, got 15",
    ),
    (
        _rnn(hidden_init_tensor=_t(1, 1, 3, 5)),
        _R + r"HiddenInitTensor\.Sizes\[2\] must equal batch_size \(InputTensor\.Sizes\[2\]\) = "
        r"2, got 3",
    ),
    (
        _lstm(cell_mem_init_tensor=_t(1, 2, 2, 4)),
        _L
        + r"CellMemInitTensor\.Sizes\[3\] must equal hidden_size \(RecurrenceTensor\.Sizes\[3\]\)"
        r" = 5, got 4",
    ),
    (
        _lstm(sequence_lengths_tensor=_t(1, 1, 2, 1, type_name="UINT32")),
        _L + r"SequenceLengthsTensor\.Sizes\[2\] must equal 1, got 2",
    ),
    (
        _lstm(peephole_tensor=_t(1, 1, 2, 20)),
        _L + r"PeepholeTensor\.Sizes\[3\] must equal 3 \* hidden_size = 15, got 20",
    ),
    (
        _gru(output_sequence_tensor=_t(2, 1, 2, 5)),
        _G + r"OutputSequenceTensor\.Sizes\[0\] must equal seq_length \(InputTensor\.Sizes\[1\]\) "
        r"= 3, got 2",
    ),
    (
        _lstm(output_cell_single_tensor=_t(1, 1, 2, 5)),
        _L + r"OutputCellSingleTensor\.Sizes\[1\] must equal num_directions of BIDIRECTIONAL = 2",
    ),
    (
        _lstm(activation_descs=[SIGMOID, TANH, TANH]),
        _L + r"ActivationDescs must hold 6 activations \(f, g, h for each of the 2 direction\(s\) "
        r"of BIDIRECTIONAL\), got 3",
    ),
    (
        _gru(activation_descs=[SIGMOID, TANH, SIGMOID, TANH]),
        _G + r"ActivationDescs must hold 2 activations \(f, g for each of the 1 direction\(s\) of "
        r"FORWARD\), got 4",
    ),
    (
        _rnn(activation_descs=[TANH], activation_desc_count=2),
        _R + r"ActivationDescCount must equal the length of ActivationDescs \(1\), got 2",
    ),
    (
        _rnn(activation_descs=[dml.ActivationSoftmaxOperatorDesc()]),
        _R + r"ActivationDescs\[0\] must be an element-wise activation \(.*ACTIVATION_TANH.*\), "
        r"got DML_OPERATOR_ACTIVATION_SOFTMAX",
    ),
    (
        _gru(activation_descs=[SIGMOID, dml.ActivationSoftplusOperatorDesc(steepness=0.5)]),
        _G + r"ActivationDescs\[1\]\.Steepness must be >= 1 below feature level 6_4",
        "6_3",
    ),
    (
        _rnn(activation_descs=[dml.ActivationGeluOperatorDesc()]),
        _R + r"ActivationDescs\[0\]: DML_OPERATOR_ACTIVATION_GELU requires feature level 5_1 or "
        r"later; the target is 5_0",
        "5_0",
    ),
    (
        _lstm(use_clip_threshold=True, clip_threshold=-1.0),
        _L + r"ClipThreshold must be >= 0 when UseClipThreshold is TRUE, got -1\.0",
    ),
    (
        _rnn(
            **{
                k: v.like(data_type="INT32")
                for k, v in _RNN_FIELDS.items()
                if k != "activation_descs"
            }
        ),
        _R + r"InputTensor with data type INT32 and DimensionCount 4 is not supported at feature "
        r"level 6_4; no feature level supports it",
    ),
    (_rnn(direction="SIDEWAYS"), _R + r"Direction must be a RecurrentNetworkDirection"),
    (
        _rnn(activation_descs=TANH),
        _R + r"ActivationDescs must be a sequence of operator descriptions",
    ),
    (
        _rnn(activation_descs=["TANH"]),
        _R + r"ActivationDescs\[0\] must be an operator description",
    ),
]


@pytest.mark.parametrize("row", INVALID_ROWS, ids=range(len(INVALID_ROWS)))
def test_invalid_descriptions_are_rejected(row):
    factory, pattern, *level = row
    with pytest.raises(dml.ValidationError, match=pattern):
        dml.validate(factory(), level[0] if level else None)


@pytest.mark.parametrize("act", ACTIVATIONS, ids=lambda a: a.operator_type[24:])
def test_every_element_wise_activation_is_accepted(act):
    dml.validate(_gru(activation_descs=[act, act])())


def test_the_rows_are_valid_without_their_change():
    for factory in (_rnn(), _lstm(), _gru()):
        dml.validate(factory(), "1_0")


def test_in_a_graph_edges_count_absent_optional_tensors():
    """An LSTM node fed its PeepholeTensor (input index 7, with BiasTensor, the inits and
    SequenceLengthsTensor absent) and read at OutputCellSingleTensor (output index 2), then a
    TANH on it: the graph equals the operator run alone."""
    lstm = LSTM(
        _t(1, 2, 1, 1), _t(1, 1, 4, 1), _t(1, 1, 4, 1), peephole_tensor=_t(1, 1, 1, 3),
        output_cell_single_tensor=_t(1, 1, 1, 1), activation_descs=[SIGMOID, TANH, TANH],
    )  # fmt: skip
    cell = _t(1, 1, 1, 1)
    graph = dml.GraphDesc(
        4,
        1,
        (lstm, dml.ActivationTanhOperatorDesc(cell, cell)),
        tuple(dml.InputGraphEdge(i, 0, to) for i, to in enumerate((0, 1, 2, 7))),
        (dml.OutputGraphEdge(1, 0, 0),),
        (dml.IntermediateGraphEdge(0, 2, 1, 0),),
    )
    inputs = (_LSTM_X, _LSTM_W, _LSTM_W[:, :, ::-1].copy(), _f32(0.5, -0.5, 1, shape=(1, 1, 1, 3)))
    got = dml.compile_graph(graph)(*inputs)
    alone = S.run(S.Case(lstm, inputs))[0]
    np.testing.assert_allclose(np.asarray(got), np.tanh(alone), rtol=1e-6)


# --- FLOAT16: the recurrent product on float16 pieces of the state -----------------------------


def _states() -> np.ndarray:
    """{2, 8, 48} float32 states, one kind per row (a direction's batch entry): ordinary values,
    tiny ones, huge ones, magnitudes from 2**-60 to 2**20 within one row, one 2**100 among
    ordinary values, integers up to 3000, zeros, and a row whose largest value is a power of
    two. (No float32 subnormals: XLA reads them as 0 in every product.)"""
    rng = np.random.default_rng(21)
    k = 48

    def kinds():
        u = rng.uniform(-1, 1, k)
        mixed = rng.choice([-1.0, 1.0], k) * 2.0 ** rng.uniform(-60, 20, k)
        power = np.concatenate([[-4.0], rng.uniform(-4, 4, k - 1)])
        return [u, u * 1e-30, u * 3e37, mixed, np.concatenate([[2.0**100], u[1:]]),
                rng.integers(-3000, 3000, k), np.zeros(k), power]  # fmt: skip

    return np.stack([np.stack(kinds()), np.stack(kinds())]).astype(np.float32)


def _product(h, r):
    """The lowering's recurrent product of states ``h`` {D, batch, k} and weights ``r``."""
    return R._matmul(h, R._Recurrence(r, r.astype(jnp.float32)))


def _row_max(h: np.ndarray) -> np.ndarray:
    return np.abs(h.astype(np.float64)).max(axis=-1, keepdims=True)


def test_float16_recurrent_product_has_float32_accuracy():
    """FLOAT16: the state times float16 weights equals the float64 product of the same values
    within docs/semantics.md's bound: 2**-38 * max|row| * sum|R| for the values the pieces
    round, plus float32 accumulation of the three pieces' products, (k + 2) * 2**-24 *
    sum|h R| (whatever the row's magnitude)."""
    h = _states()
    rng = np.random.default_rng(22)
    r = (rng.standard_normal((2, 12, h.shape[-1])) * 0.25).astype(np.float16)
    got = np.asarray(jax.jit(_product)(h, r), np.float64)
    h64, r64 = h.astype(np.float64), r.astype(np.float64)
    exact = np.einsum("dbk,dnk->dbn", h64, r64)
    magnitude = np.einsum("dbk,dnk->dbn", np.abs(h64), np.abs(r64))
    bound = _row_max(h) * 2.0**-38 * np.abs(r64).sum(-1)[:, None, :]
    bound += 1.01 * (h.shape[-1] + 2) * 2.0**-24 * magnitude
    assert np.all(np.abs(got - exact) <= bound)
    assert np.abs(exact[:, 2]).min() > 1e35  # the huge rows' products stayed finite
    # the float32 product itself is no more accurate than the bound allows
    wide = np.asarray(jnp.einsum("dbk,dnk->dbn", h, r.astype(np.float32), precision="highest"))
    assert np.all(np.abs(wide - exact) <= bound)


def test_float16_state_enters_exactly_down_to_2_to_the_minus_14_of_its_row():
    """With identity weights the product returns the state itself: every value v of a row with
    largest magnitude m exactly when |v| >= 2**-14 * m, within 2**-38 * m below; with
    ALLOW_HALF_PRECISION_COMPUTATION, the state rounded to float16 after the row's scaling."""
    h = _states()
    k = h.shape[-1]
    eye = np.broadcast_to(np.eye(k, dtype=np.float16), (2, k, k))
    got = np.asarray(jax.jit(_product)(h, eye))
    m = _row_max(h)
    large = np.abs(h) >= 2.0**-14 * m
    np.testing.assert_array_equal(got[large], h[large])
    assert np.all(np.abs(got - h.astype(np.float64)) <= 2.0**-38 * m)
    assert not large.all()  # the mixed rows hold values below 2**-14 of their maximum
    # one piece: v * 2**-e rounded to float16 (max |row| < 2**e, e within float32's normal
    # range), in units of 2**-14
    e = np.clip(np.frexp(m)[1], -126, 126)
    scaled = (h.astype(np.float64) * 2.0 ** (14.0 - e)).astype(np.float16)
    half = np.asarray(jax.jit(with_half_precision(_product, True))(h, eye))
    np.testing.assert_array_equal(half, scaled.astype(np.float64) * 2.0 ** (e - 14.0))
    assert np.any(half != h)


def _walk(jaxpr):
    """Every equation of ``jaxpr`` and of the jaxprs inside its equations."""
    for eqn in jaxpr.eqns:
        yield eqn
        for param in eqn.params.values():
            inner = getattr(param, "jaxpr", param)
            if hasattr(inner, "eqns"):
                yield from _walk(inner)


def _layer(cls, type_name: str, seq: int = 3, lengths: bool = True, init: bool = True):
    """A bidirectional layer with 4 batch entries, input 3, hidden 5, every output."""
    g = GATES[cls]

    def t(*sizes):
        return T(type_name, list(sizes))

    fields = {
        "input_tensor": t(1, seq, 4, 3),
        "weight_tensor": t(1, 2, g * 5, 3),
        "recurrence_tensor": t(1, 2, g * 5, 5),
        "bias_tensor": t(1, 1, 2, 2 * g * 5),
        "hidden_init_tensor": t(1, 2, 4, 5) if init else None,
        "sequence_lengths_tensor": T("UINT32", [1, 1, 1, 4]) if lengths else None,
        "output_sequence_tensor": t(seq, 2, 4, 5),
        "output_single_tensor": t(1, 2, 4, 5),
        "activation_descs": [SIGMOID, TANH, TANH][: PER_DIRECTION[cls]] * 2,
        "direction": BIDIRECTIONAL,
    }
    if cls is LSTM:
        fields["cell_mem_init_tensor"] = t(1, 2, 4, 5) if init else None
        fields["output_cell_single_tensor"] = t(1, 2, 4, 5)
    return cls(**fields)


def _layer_inputs(desc, seed=0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for path, t in desc.input_slots():
        if path == "SequenceLengthsTensor":
            out.append(np.array([0, 1, t.sizes[-1], 99], np.uint32).reshape(t.sizes))
        else:
            out.append(rng.uniform(-1.5, 1.5, t.sizes).astype(t.dtype))
    return out


@pytest.mark.parametrize("half", [False, True], ids=["float32 products", "half precision"])
@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.operator_type[13:])
def test_float16_products_run_on_float16_operands(cls, half):
    """Every product of a FLOAT16 layer takes float16 operands: X W^T before the loop, and in
    the loop the state's three pieces (one with ALLOW_HALF_PRECISION_COMPUTATION) joined along
    the batch (2 directions, 4 entries); FLOAT32 products are float32 at HIGHEST precision."""
    for type_name in ("FLOAT16", "FLOAT32"):
        d = _layer(cls, type_name)
        op = dml.compile_operator(d, allow_half_precision=half)
        jaxpr = jax.make_jaxpr(op.fn)(*_layer_inputs(d)).jaxpr
        dots = [e for e in _walk(jaxpr) if e.primitive.name == "dot_general"]
        assert len(dots) >= 2
        for e in dots:
            lhs, rhs = (v.aval for v in e.invars)
            if type_name == "FLOAT16":
                assert lhs.dtype == rhs.dtype == np.float16
                assert e.params["preferred_element_type"] == np.float32
                if lhs.shape[-1] == 5:  # the state (hidden 5) times R^T
                    assert lhs.shape == (2, 4 if half else 12, 5)
            else:
                assert lhs.dtype == rhs.dtype == np.float32
                precision = jax.lax.Precision.DEFAULT if half else jax.lax.Precision.HIGHEST
                assert e.params["precision"] == (precision, precision)


def test_unrolling_changes_no_result(monkeypatch):
    """The loop's unrolling (11 steps: one unrolled iteration of 8 and 3 more) only schedules
    the same steps: the outputs equal those of one step per iteration, bit for bit."""
    d = _layer(LSTM, "FLOAT16", seq=11)
    inputs = _layer_inputs(d)
    lower = registry.lookup(d.operator_type).lower
    unrolled = jax.jit(lambda *a: lower(d, *a))(*inputs)
    monkeypatch.setattr(R, "_UNROLL", 1)
    rolled = jax.jit(lambda *a: lower(d, *a))(*inputs)
    assert R._UNROLL != 8  # the patched constant is the one the lowering read above
    S.assert_same(tuple(map(np.asarray, unrolled)), tuple(map(np.asarray, rolled)))


def test_float16_gradients_are_the_float32_gradients():
    """Derivatives of FLOAT16's products are those of the float32 product (the row scales are
    constants): gradients of a FLOAT16 GRU (both of its products: the state's and the reset
    state's) equal the FLOAT32 layer's on the same values, to float16 rounding."""
    d16, d32 = _layer(GRU, "FLOAT16", seq=2), _layer(GRU, "FLOAT32", seq=2)
    inputs = _layer_inputs(d16, seed=5)
    paths = [p for p, _ in d16.input_slots()]
    # X W^T's operands (InputTensor, WeightTensor) are outside the recurrence
    wrt = tuple(paths.index(p) for p in ("RecurrenceTensor", "BiasTensor", "HiddenInitTensor"))

    def grads(d, args):
        fn = dml.compile_operator(d).fn

        def total(*a):
            return sum(jnp.sum(o.astype(jnp.float32) * (i + 1)) for i, o in enumerate(fn(*a)))

        return jax.jit(jax.grad(total, argnums=wrt))(*args)

    got = grads(d16, [jnp.asarray(a) for a in inputs])
    want = grads(d32, [a.astype(np.float32) if a.dtype == np.float16 else a for a in inputs])
    for g, w in zip(got, want, strict=True):
        assert g.dtype == np.float16
        np.testing.assert_allclose(np.asarray(g, np.float32), w, **FLOAT16_TOLERANCE)
