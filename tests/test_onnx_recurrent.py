"""RNN, GRU and LSTM through ``InferenceSession`` where ONNX's node tests do not reach: the
options (clip, input_forget, linear_before_reset, activations with alpha / beta, sequence
lengths, peepholes, every output optional), layout 1 with initial states, opset 7, and what
DirectML cannot express. Results are compared with ``_reference``, ONNX's equations in NumPy
(ONNX's reference evaluator ignores sequence_lens, activations, clip and input_forget); ONNX's
own node tests run in ``test_onnx_backend.py``."""

from __future__ import annotations

import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper

from dml_jax.onnx import InferenceSession

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
SEQ, BATCH, INPUT, HIDDEN = 4, 3, 2, 3


def _model(op, *, opset=14, dirs=1, layout=0, outputs=("Y", "Y_h"), optional=(), **attrs):
    """A one-node model: X, W, R and the ``optional`` inputs (B, sequence_lens, initial_h,
    initial_c, P) as graph inputs; returns (model, feeds)."""
    rng = np.random.default_rng(len(optional) + dirs + layout)
    g = GATES[op]
    shapes = {
        "X": (BATCH, SEQ, INPUT) if layout else (SEQ, BATCH, INPUT),
        "W": (dirs, g * HIDDEN, INPUT),
        "R": (dirs, g * HIDDEN, HIDDEN),
        "B": (dirs, 2 * g * HIDDEN),
        "sequence_lens": (BATCH,),
        "initial_h": (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN),
        "initial_c": (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN),
        "P": (dirs, 3 * HIDDEN),
    }
    order = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"]
    used = ["X", "W", "R"] + [n for n in order[3:] if n in optional]
    names = [n if n in used else "" for n in order]
    while not names[-1]:
        names.pop()
    feeds = {}
    for n in used:
        if n == "sequence_lens":
            feeds[n] = np.array([SEQ, 2, 1][:BATCH], np.int32)
        else:
            feeds[n] = rng.uniform(-1, 1, shapes[n]).astype(np.float32)
    y_shapes = {
        "Y": (BATCH, SEQ, dirs, HIDDEN) if layout else (SEQ, dirs, BATCH, HIDDEN),
        "Y_h": (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN),
        "Y_c": (BATCH, dirs, HIDDEN) if layout else (dirs, BATCH, HIDDEN),
    }
    direction = {1: "forward", 2: "bidirectional"}[dirs]
    attrs.setdefault("direction", direction)
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, names, list(outputs), hidden_size=HIDDEN, **attrs)
    inputs = [
        helper.make_tensor_value_info(
            n, TensorProto.INT32 if n == "sequence_lens" else TensorProto.FLOAT, shapes[n]
        )
        for n in used
    ]
    outs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, y_shapes[n]) for n in outputs if n]
    graph = helper.make_graph([node], op.lower(), inputs, outs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model, feeds


_ACT = {
    "sigmoid": lambda x, a, b: 1 / (1 + np.exp(-x)),
    "tanh": lambda x, a, b: np.tanh(x),
    "relu": lambda x, a, b: np.maximum(x, 0),
    "hardsigmoid": lambda x, a, b: np.clip(a * x + b, 0, 1),
    "leakyrelu": lambda x, a, b: np.where(x >= 0, x, a * x),
    "scaledtanh": lambda x, a, b: a * np.tanh(b * x),
    "affine": lambda x, a, b: a * x + b,
}
_DEFAULTS = {"hardsigmoid": (0.2, 0.5), "leakyrelu": (0.01, 0), "scaledtanh": (1, 1)}
_DEFAULTS["affine"] = (1, 0)


def _functions(node, per, dirs):
    """Each direction's activations as NumPy functions, alpha / beta consumed in order."""
    a = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    names = [n.decode().lower() for n in a.get("activations", [])]
    names = (
        names or {1: ["tanh"], 2: ["sigmoid", "tanh"], 3: ["sigmoid", "tanh", "tanh"]}[per] * dirs
    )
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    out = []
    for n in names:
        da, db = _DEFAULTS.get(n, (0, 0))
        alpha = alphas.pop(0) if n in _DEFAULTS and alphas else da
        beta = betas.pop(0) if n in ("hardsigmoid", "scaledtanh", "affine") and betas else db
        out.append(lambda x, f=_ACT[n], al=alpha, be=beta: f(x, al, be))
    return [out[d * per : (d + 1) * per] for d in range(dirs)], a


def _reference(model, feeds):
    """ONNX's RNN / GRU / LSTM equations (sequence-first), with every option."""
    node = model.graph.node[0]
    op = node.op_type
    per = {"RNN": 1, "GRU": 2, "LSTM": 3}[op]
    names = list(node.input) + [""] * 8
    get = {k: feeds.get(names[i]) for i, k in enumerate(["X", "W", "R", "B", "L", "H", "C", "P"])}
    w, r = get["W"].astype(np.float64), get["R"].astype(np.float64)
    dirs, hidden = w.shape[0], r.shape[-1]
    funcs, a = _functions(node, per, dirs)
    layout = a.get("layout", 0)
    x = get["X"].astype(np.float64)
    if layout:
        x = x.swapaxes(0, 1)
    seq, batch = x.shape[:2]
    clip = a.get("clip")
    g = GATES[op]
    b = np.zeros((dirs, 2 * g * hidden)) if get["B"] is None else get["B"].astype(np.float64)
    p = np.zeros((dirs, 3 * hidden)) if get["P"] is None else get["P"].astype(np.float64)
    lens = np.full(batch, seq) if get["L"] is None else get["L"]
    states = {}
    for k in ("H", "C"):
        v = np.zeros((dirs, batch, hidden)) if get[k] is None else get[k].astype(np.float64)
        states[k] = v.swapaxes(0, 1) if layout and get[k] is not None else v
    y = np.zeros((seq, dirs, batch, hidden))
    y_h, y_c = states["H"].copy(), states["C"].copy()
    reverse = a.get("direction", b"forward") == b"reverse"

    def cl(v):
        return v if clip is None else np.clip(v, -clip, clip)

    for d in range(dirs):
        f = funcs[d]
        wb, rb = np.split(b[d], 2)
        for n in range(batch):
            h, c = states["H"][d, n], states["C"][d, n]
            steps = range(lens[n])
            for t in reversed(steps) if (d == 1 or reverse) else steps:
                xw = w[d] @ x[t, n] + wb
                hr = r[d] @ h + rb
                if op == "RNN":
                    h = f[0](cl(xw + hr))
                elif op == "GRU":
                    z = f[0](cl(xw[:hidden] + hr[:hidden]))
                    rr = f[0](cl(xw[hidden : 2 * hidden] + hr[hidden : 2 * hidden]))
                    rh, rbh = r[d][2 * hidden :], rb[2 * hidden :]
                    if a.get("linear_before_reset", 0):
                        cand = xw[2 * hidden :] + rr * (rh @ h + rbh)
                    else:
                        cand = xw[2 * hidden :] + rh @ (rr * h) + rbh
                    h = (1 - z) * f[1](cl(cand)) + z * h
                else:
                    s = xw + hr
                    pi, po, pf = np.split(p[d], 3)
                    i = f[0](cl(s[:hidden] + pi * c))
                    fg = (
                        1 - i
                        if a.get("input_forget", 0)
                        else f[0](cl(s[2 * hidden : 3 * hidden] + pf * c))
                    )
                    c = fg * c + i * f[1](cl(s[3 * hidden :]))
                    o = f[0](cl(s[hidden : 2 * hidden] + po * c))
                    h = o * f[2](c)
                y[t, d, n] = h
            y_h[d, n], y_c[d, n] = h, c
    if layout:
        y, y_h, y_c = y.transpose(2, 0, 1, 3), y_h.swapaxes(0, 1), y_c.swapaxes(0, 1)
    out = dict(zip(["Y", "Y_h", "Y_c"], [y, y_h, y_c]))
    return [out[o.name].astype(np.float32) for o in model.graph.output]


def _check(model, feeds, rtol=1e-5, atol=1e-6):
    want = _reference(model, feeds)
    got = InferenceSession(model).run(None, feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


def test_lstm_with_every_option_and_output():
    model, feeds = _model(
        "LSTM",
        dirs=2,
        outputs=("Y", "Y_h", "Y_c"),
        optional=("B", "sequence_lens", "initial_h", "initial_c", "P"),
        clip=0.7,
        input_forget=1,
    )
    _check(model, feeds)


def test_layout_one_reads_and_writes_batch_first():
    model, feeds = _model(
        "LSTM",
        dirs=2,
        layout=1,
        outputs=("Y", "Y_h", "Y_c"),
        optional=("B", "initial_h", "initial_c"),
    )
    _check(model, feeds)
    ops = [n.operator_type for n in dml.compile_onnx(model).imported.graph.nodes]
    assert ops.count("DML_OPERATOR_LSTM") == 1  # X and the states read through strides


@pytest.mark.parametrize("linear_before_reset", [0, 1])
def test_gru_linear_before_reset_and_sequence_lengths(linear_before_reset):
    model, feeds = _model(
        "GRU",
        dirs=2,
        optional=("B", "sequence_lens", "initial_h"),
        linear_before_reset=linear_before_reset,
    )
    _check(model, feeds)


def test_activations_take_alpha_and_beta_in_order():
    # Forward: f = HardSigmoid(0.3, 0.4), g = LeakyRelu(0.2); reverse: ScaledTanh(0.9, 1.1),
    # Affine (its alpha / beta at ONNX's defaults once the lists run out).
    model, feeds = _model(
        "GRU",
        dirs=2,
        optional=("B",),
        activations=["HardSigmoid", "LeakyRelu", "ScaledTanh", "Affine"],
        activation_alpha=[0.3, 0.2, 0.9],
        activation_beta=[0.4, 1.1],
    )
    _check(model, feeds)


def test_rnn_at_opset_7_with_only_the_last_state():
    model, feeds = _model("RNN", opset=7, outputs=("", "Y_h"), optional=("B", "initial_h"))
    _check(model, feeds)


def test_rnn_clip_is_refused():
    model, feeds = _model("RNN", clip=1.0)
    with pytest.raises(dml.ValidationError, match="DirectML's RNN has no clip"):
        InferenceSession(model).run(None, feeds)
