"""NumPy references of RNN, LSTM and GRU, from the DML_*_OPERATOR_DESC pages (paraphrased).

Written from the documented equations with explicit Python loops over directions, batch entries
and time steps, one gate at a time (each gate's rows of W and R taken by index), in float64,
rounded once to the output type. Nothing here follows the lowering's batched products, its
single loop over all directions or its in-length reversal.

- Tensors: X {1, seq, batch, input}; W {1, D, G * hidden, input}; R {1, D, G * hidden, hidden};
  B {1, 1, D, 2 * G * hidden} (the W biases of all gates, then the R biases); initial hidden /
  cell {1, D, batch, hidden}; sequence lengths {1, 1, 1, batch}; peepholes {1, 1, D, 3 * hidden}
  (i, o, f). D = 2 for BIDIRECTIONAL (forward first); gates in ONNX's order: LSTM i, o, f, c;
  GRU z, r, h. Absent optional tensors are zeros (lengths: seq_length).
- RNN: H_t = f(W X_t + R H + Wb + Rb).
- LSTM: i = f(clip(Wi X + Ri H + Pi C + Wbi + Rbi)); f = f(clip(... Pf C ...)) or 1 - i when
  CoupleInputForget; c = g(clip(Wc X + Rc H + Wbc + Rbc)); C' = f C + i c;
  o = f(clip(Wo X + Ro H + Po C' + Wbo + Rbo)); H' = o h(C'). clip bounds to +-ClipThreshold
  when UseClipThreshold.
- GRU: z = f(Wz X + Rz H + Wbz + Rbz); r = f(Wr X + Rr H + Wbr + Rbr);
  h = g(Wh X + Rh (r H) + Rbh + Wbh), or g(Wh X + r (Rh H + Rbh) + Wbh) with LinearBeforeReset;
  H' = (1 - z) h + z H.
- ActivationDescs: each direction's (f), (f, g, h) or (f, g) in turn.
- Sequence lengths (dml_jax's documented reading): batch entry b runs steps 0 .. L-1 forward or
  L-1 .. 0 backward, L = min(length, seq_length); the sequence output is 0 at other steps, the
  single outputs hold the state after the last step run (the initial state when L = 0).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .activation import activation

_GATES = {"DML_OPERATOR_RNN": 1, "DML_OPERATOR_LSTM": 4, "DML_OPERATOR_GRU": 3}
_FUNCTIONS = {"DML_OPERATOR_RNN": 1, "DML_OPERATOR_LSTM": 3, "DML_OPERATOR_GRU": 2}


def _f(value: float) -> float:
    return float(np.float64(np.float32(value)))


def _present(desc: Any, kind: str) -> list[str]:
    return [
        f.name
        for f in dataclasses.fields(desc)
        if f.metadata.get("kind") == kind and getattr(desc, f.name) is not None
    ]


def recurrent(desc: Any, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    given = dict(zip(_present(desc, "input"), arrays))
    op = desc.operator_type
    gates, per = _GATES[op], _FUNCTIONS[op]
    x = given["input_tensor"].astype(np.float64)[0]
    w = given["weight_tensor"].astype(np.float64)[0]
    r = given["recurrence_tensor"].astype(np.float64)[0]
    seq, batch, _ = x.shape
    dirs = r.shape[0]
    hidden = r.shape[2]
    backward = {"FORWARD": [False], "BACKWARD": [True], "BIDIRECTIONAL": [False, True]}[
        desc.direction.name
    ]
    assert len(backward) == dirs

    def optional(name: str, shape: tuple[int, ...]) -> np.ndarray:
        if name in given:
            return given[name].astype(np.float64).reshape(shape)
        return np.zeros(shape)

    bias = optional("bias_tensor", (dirs, 2 * gates * hidden))
    h_init = optional("hidden_init_tensor", (dirs, batch, hidden))
    c_init = optional("cell_mem_init_tensor", (dirs, batch, hidden))
    peep = optional("peephole_tensor", (dirs, 3 * hidden))
    if "sequence_lengths_tensor" in given:
        lengths = [min(int(n), seq) for n in given["sequence_lengths_tensor"].reshape(batch)]
    else:
        lengths = [seq] * batch

    y = np.zeros((seq, dirs, batch, hidden))
    y_h = np.zeros((dirs, batch, hidden))
    y_c = np.zeros((dirs, batch, hidden))
    for d in range(dirs):
        acts = desc.activation_descs[d * per : (d + 1) * per]

        def gate(k: int, x_t, h, use_r: bool = True, d: int = d):
            """Gate k's W X + Wb (+ R H + Rb when ``use_r``): its rows k * hidden onwards."""
            rows = slice(k * hidden, (k + 1) * hidden)
            out = w[d, rows] @ x_t + bias[d, rows]
            if use_r:
                r_rows = slice(gates * hidden + k * hidden, gates * hidden + (k + 1) * hidden)
                out = out + r[d, rows] @ h + bias[d, r_rows]
            return out

        for b in range(batch):
            h, c = h_init[d, b].copy(), c_init[d, b].copy()
            steps = range(lengths[b] - 1, -1, -1) if backward[d] else range(lengths[b])
            for t in steps:
                x_t = x[t, b]
                if op == "DML_OPERATOR_RNN":
                    h = activation(acts[0], gate(0, x_t, h))
                elif op == "DML_OPERATOR_LSTM":
                    h, c = _lstm_step(desc, acts, gate, x_t, h, c, peep[d], hidden)
                else:
                    h = _gru_step(desc, acts, gate, x_t, h, r[d], bias[d], hidden)
                y[t, d, b] = h
            y_h[d, b], y_c[d, b] = h, c

    outputs = {
        "output_sequence_tensor": y,
        "output_single_tensor": y_h[None],
        "output_cell_single_tensor": y_c[None],
    }
    return tuple(
        outputs[name].astype(getattr(desc, name).dtype) for name in _present(desc, "output")
    )


def _lstm_step(desc, acts, gate, x_t, h, c, peep, hidden):
    f_act, g_act, h_act = acts
    p_i, p_o, p_f = peep[:hidden], peep[hidden : 2 * hidden], peep[2 * hidden :]

    def clip(v):
        if not desc.use_clip_threshold:
            return v
        bound = _f(desc.clip_threshold)
        return np.minimum(np.maximum(v, -bound), bound)

    i = activation(f_act, clip(gate(0, x_t, h) + p_i * c))
    if desc.couple_input_forget:
        f = 1.0 - i
    else:
        f = activation(f_act, clip(gate(2, x_t, h) + p_f * c))
    candidate = activation(g_act, clip(gate(3, x_t, h)))
    c_new = f * c + i * candidate
    o = activation(f_act, clip(gate(1, x_t, h) + p_o * c_new))
    return o * activation(h_act, c_new), c_new


def _gru_step(desc, acts, gate, x_t, h, r, bias, hidden):
    f_act, g_act = acts
    z = activation(f_act, gate(0, x_t, h))
    reset = activation(f_act, gate(1, x_t, h))
    r_h = r[2 * hidden : 3 * hidden]
    rb_h = bias[5 * hidden : 6 * hidden]
    x_part = gate(2, x_t, h, use_r=False)  # Wh X + Wbh
    if desc.linear_before_reset:
        candidate = x_part + reset * (r_h @ h + rb_h)
    else:
        candidate = x_part + r_h @ (reset * h) + rb_h
    candidate = activation(g_act, candidate)
    return (1.0 - z) * candidate + z * h


REFERENCES = {
    "DML_OPERATOR_RNN": recurrent,
    "DML_OPERATOR_LSTM": recurrent,
    "DML_OPERATOR_GRU": recurrent,
}
