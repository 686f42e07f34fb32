"""ONNX's own backend node tests of RNN, LSTM and GRU, mapped onto DirectML's descriptors as ONNX
Runtime's DirectML provider maps them (DmlOperatorRecurrentNeuralNetwork.cpp):

- Every tensor keeps its layout and gate order (ONNX's W[iofc] / W[zrh], B = [Wb, Rb], P[iof]
  are DirectML's too); each gets leading dimensions of 1 up to 4-D: X {1, seq, batch, input},
  W / R {1, D, G * hidden, ...}, B and P {1, 1, D, ...}, initial_h / initial_c {1, D, batch,
  hidden}, sequence_lens {1, 1, 1, batch}. Y {seq, D, batch, hidden} is already DirectML's
  OutputSequenceTensor; Y_h / Y_c are OutputSingleTensor / OutputCellSingleTensor without
  their leading 1.
- sequence_lens is INT32 in ONNX and read as UINT32 (the provider forces the unsigned type).
- DirectML's inputs are in another order (HiddenInit before SequenceLengths), by name here.
- ``activations`` (default sigmoid / tanh / tanh, per direction) become activation descs, with
  ``activation_alpha`` / ``activation_beta`` taken in order by the functions that have them
  (the provider's reading), missing ones at DirectML's defaults. ``clip`` sets UseClipThreshold
  and ClipThreshold, ``input_forget`` CoupleInputForget, ``linear_before_reset`` LinearBeforeReset.
- ``layout`` 1 (batch first) has no DirectML counterpart in logical mode: X, initial_h and
  initial_c are transposed to ONNX's layout 0 before, Y and Y_h after (NumPy, outside the
  operator).

Cases DirectML's tables reject are skipped with the validation message; every mapped ONNX
operator must pass at least one case.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from onnx_cases import (
    assert_every_op_type_passes,
    assert_outputs,
    attrs,
    case_ids,
    dml_type,
    node_cases,
    run_or_skip,
)

import dml_jax as dml
from dml_jax.fields import dml_member_name

onnx = pytest.importorskip("onnx")

MODULES = {"RNN": "rnn", "LSTM": "lstm", "GRU": "gru"}
MAPPED = set(MODULES)
CASES = node_cases(MODULES)

GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}
DEFAULT_ACTIVATIONS = {
    "RNN": ["Tanh"],
    "LSTM": ["Sigmoid", "Tanh", "Tanh"],
    "GRU": ["Sigmoid", "Tanh"],
}
DIRECTIONS = {"forward": "FORWARD", "reverse": "BACKWARD", "bidirectional": "BIDIRECTIONAL"}
CLASSES = {"RNN": dml.RnnOperatorDesc, "LSTM": dml.LstmOperatorDesc, "GRU": dml.GruOperatorDesc}
# ONNX input name -> DirectML member, per operator (ONNX order; DirectML's is the dataclass's).
INPUTS = {
    "RNN": ["input", "weight", "recurrence", "bias", "sequence_lengths", "hidden_init"],
    "GRU": ["input", "weight", "recurrence", "bias", "sequence_lengths", "hidden_init"],
    "LSTM": [
        "input", "weight", "recurrence", "bias", "sequence_lengths", "hidden_init",
        "cell_mem_init", "peephole",
    ],
}  # fmt: skip
OUTPUTS = {
    "RNN": ["output_sequence", "output_single"],
    "GRU": ["output_sequence", "output_single"],
    "LSTM": ["output_sequence", "output_single", "output_cell_single"],
}


def _activation(name: str, alphas: list[float], betas: list[float]):
    """One ONNX activation name as a DirectML activation desc (the provider's table), taking
    its alpha / beta from the front of the lists; DirectML's defaults when they run out."""

    def alpha(default: float) -> float:
        return alphas.pop(0) if alphas else default

    def beta(default: float) -> float:
        return betas.pop(0) if betas else default

    key = name.lower()
    if key == "relu":
        return dml.ActivationReluOperatorDesc()
    if key == "leakyrelu":
        return dml.ActivationLeakyReluOperatorDesc(alpha=alpha(0.01))
    if key == "thresholdedrelu":
        return dml.ActivationThresholdedReluOperatorDesc(alpha=alpha(1.0))
    if key == "tanh":
        return dml.ActivationTanhOperatorDesc()
    if key == "scaledtanh":
        return dml.ActivationScaledTanhOperatorDesc(alpha=alpha(1.0), beta=beta(1.0))
    if key == "sigmoid":
        return dml.ActivationSigmoidOperatorDesc()
    if key == "hardsigmoid":
        return dml.ActivationHardSigmoidOperatorDesc(alpha=alpha(0.2), beta=beta(0.5))
    if key == "elu":
        return dml.ActivationEluOperatorDesc(alpha=alpha(1.0))
    if key == "softsign":
        return dml.ActivationSoftsignOperatorDesc()
    if key == "softplus":
        return dml.ActivationSoftplusOperatorDesc(steepness=1.0)
    pytest.skip(f"ONNX Runtime's DirectML provider has no activation {name}")


def _to_4d(array: np.ndarray) -> np.ndarray:
    return array.reshape((1,) * (4 - array.ndim) + array.shape)


def _run(node, inputs) -> tuple[np.ndarray, ...]:
    op = node.op_type
    a = attrs(node)
    layout = a.get("layout", 0)
    direction = DIRECTIONS[a.get("direction", b"forward").decode()]
    dirs = 2 if direction == "BIDIRECTIONAL" else 1
    given = {}
    arrays = iter(inputs)
    for name, member in zip(node.input, INPUTS[op]):
        if name:
            given[member] = next(arrays)
    if layout == 1:  # batch first: to ONNX's (and DirectML's) sequence-first layout
        given["input"] = given["input"].swapaxes(0, 1)
        for member in ("hidden_init", "cell_mem_init"):
            if member in given:
                given[member] = given[member].swapaxes(0, 1)
    data_type = dml_type(given["input"].dtype)
    arrays4 = {}
    for member, array in given.items():
        if member == "sequence_lengths":
            array = array.astype(np.uint32)  # INT32 read as UINT32, as the provider does
        arrays4[member] = _to_4d(array)
    seq, batch, hidden = given["input"].shape[0], given["input"].shape[1], a["hidden_size"]
    fields = {
        f"{m}_tensor": dml.TensorDesc(dml_type(v.dtype), list(v.shape)) for m, v in arrays4.items()
    }
    wanted = [m for name, m in zip(node.output, OUTPUTS[op]) if name]
    for member in wanted:
        sizes = (
            [seq, dirs, batch, hidden] if member == "output_sequence" else [1, dirs, batch, hidden]
        )
        fields[f"{member}_tensor"] = dml.TensorDesc(data_type, sizes)
    names = [n.decode() if isinstance(n, bytes) else n for n in a.get("activations", [])]
    names = names or DEFAULT_ACTIVATIONS[op] * dirs
    alphas, betas = list(a.get("activation_alpha", [])), list(a.get("activation_beta", []))
    extra = {}
    if op == "LSTM":
        extra["use_clip_threshold"] = "clip" in a
        extra["clip_threshold"] = a.get("clip", 0.0)
        extra["couple_input_forget"] = bool(a.get("input_forget", 0))
    if op == "GRU":
        extra["linear_before_reset"] = bool(a.get("linear_before_reset", 0))
    elif "clip" in a:
        pytest.skip(f"DirectML's {op} has no clip")
    desc = CLASSES[op](
        **fields,
        activation_descs=[_activation(n, alphas, betas) for n in names],
        direction=direction,
        **extra,
    )
    by_path = {dml_member_name(f"{m}_tensor"): v for m, v in arrays4.items()}
    result = run_or_skip(desc, *(by_path[path] for path, _ in desc.input_slots()))
    result = result if isinstance(result, tuple) else (result,)
    out = []
    for member, array in zip(wanted, result):
        if member == "output_sequence":
            out.append(array.transpose(2, 0, 1, 3) if layout == 1 else array)
        else:
            out.append(array[0].swapaxes(0, 1) if layout == 1 else array[0])
    return tuple(out)


@functools.cache
def _result(index: int) -> tuple:
    case = CASES[index]
    return _run(case.node, list(case.inputs))


def _check(index: int) -> None:
    assert_outputs(_result(index), CASES[index].outputs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)


def test_the_cases_cover_every_direction_and_the_options():
    names = {c.name for c in CASES}
    for name in (
        "test_simple_rnn_reverse",
        "test_simple_rnn_bidirectional",
        "test_lstm_with_peepholes",
        "test_lstm_bidirectional",
        "test_gru_reverse",
        "test_gru_batchwise",
    ):
        assert name in names
