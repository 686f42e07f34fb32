"""Large constants that are no parameter enter ``run``'s programs as arguments
(``Program.held``), as the parameters do, rather than compiled in: a MatMulNBits model's 4-bit
codes (a constant data node, read as UINT4) and its 8-bit codes (unpacked at import, a constant
graph input). On this CPU ``run`` compiles small models' weights in, so the tests lift that
limit (``CPU_BAKED_WEIGHTS_MAX_BYTES``) to take the GPU's path: the program then takes every
constant of ``HELD_MIN_BYTES`` or more as an argument, gives the compiled-in program's values
exactly, and a program for other shapes reuses the arrays already on the device.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from dml_jax.onnx import InferenceSession
from dml_jax.onnx import program as program_module
from dml_jax.onnx import session as session_module

N = K = 2048
BLOCK = 32


def _nbits_model(bits: int, seed: int) -> bytes:
    """MatMulNBits, float16 A {rows, K} (rows free), B of ``bits`` codes packed as onnxruntime
    packs them, packed zero points, float16 scales."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    blocks, per = K // BLOCK, 8 // bits
    codes = rng.integers(0, 2**bits, (N, blocks, BLOCK)).astype(np.uint8)
    zeros = rng.integers(0, 2**bits, (N, blocks)).astype(np.uint8)

    def pack(v):  # the low bits first
        v = v.reshape(*v.shape[:-1], -1, per)
        return sum(v[..., i] << (bits * i) for i in range(per)).astype(np.uint8)

    inits = [
        numpy_helper.from_array(pack(codes), "B"),
        numpy_helper.from_array(rng.uniform(0.01, 0.05, (N, blocks)).astype(np.float16), "s"),
        numpy_helper.from_array(pack(zeros), "z"),
    ]
    node = helper.make_node(
        "MatMulNBits", ["A", "B", "s", "z"], ["y"], domain="com.microsoft", K=K, N=N,
        bits=bits, block_size=BLOCK,
    )  # fmt: skip
    graph = helper.make_graph(
        [node], "nbits",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT16, ["rows", K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT16, ["rows", N])], inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def _literal_bytes(text: str) -> int:
    """The largest dense literal of a lowered program, in hex digits over two."""
    return max((len(h) // 2 for h in re.findall(r'dense<"0x([0-9A-F]*)"', text)), default=0)


@pytest.mark.parametrize("bits, held", [(4, {"c": 0, "UINT4": 2}), (8, {"c": 2, "UINT4": 0})])
def test_run_takes_large_constants_as_arguments(bits, held, monkeypatch):
    pytest.importorskip("onnx")
    model = _nbits_model(bits, seed=bits)
    rng = np.random.default_rng(bits + 1)
    x = rng.standard_normal((1, K)).astype(np.float16)
    want = InferenceSession(model).run(None, {"A": x})[0]  # weights compiled in (CPU)

    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    s = InferenceSession(model)
    got = s.run(None, {"A": x})[0]
    (program,) = s._programs.values()
    keys = list(program.held)
    # codes and zero points: 4-bit ones as constant data nodes read as UINT4, 8-bit ones
    # (4 MiB and 128 KiB) unpacked at import into constant graph inputs
    assert {
        "c": sum(":c" in k for k in keys),
        "UINT4": sum(k.endswith(":UINT4") for k in keys),
    } == held, keys
    np.testing.assert_array_equal(got, want)

    params = s._run_params(program)
    assert all(k in params for k in keys)
    text = program.jitted_on(s._device).trace(params, x).lower().as_text()
    assert _literal_bytes(text) < program_module.HELD_MIN_BYTES
    # the same model compiled with its constants in holds them as literals
    baked = program.jitted_on(s._device).trace(s._device_params(), x).lower().as_text()
    assert _literal_bytes(baked) >= N * K * bits // 8

    # another program (two rows) holds the same values: nothing more on the device
    stored = dict(s._held)
    x2 = rng.standard_normal((2, K)).astype(np.float16)
    got2 = s.run(None, {"A": x2})[0]
    assert len(s._programs) == 2
    assert s._held.keys() == stored.keys()
    assert all(s._held[k] is stored[k] for k in stored)
    want2 = InferenceSession(model).run(None, {"A": x2})[0]
    np.testing.assert_array_equal(got2, want2)


def test_small_constants_stay_compiled_in(monkeypatch):
    """Below ``HELD_MIN_BYTES`` nothing is held: the program is compiled as before."""
    pytest.importorskip("onnx")
    monkeypatch.setattr(program_module, "HELD_MIN_BYTES", 2**30)
    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    model = _nbits_model(4, seed=3)
    s = InferenceSession(model)
    x = np.ones((1, K), np.float16)
    s.run(None, {"A": x})
    (program,) = s._programs.values()
    assert program.held == {}
    params, device = s._run_params(program), s._device_params()
    assert params.keys() == device.keys() and all(params[k] is device[k] for k in device)


def test_run_compiles_the_smallest_parameters_in(monkeypatch):
    """Off the CPU ``run`` passes the parameters but those of at most
    ``RUN_BAKED_PARAM_MAX_BYTES`` (a quantizer's scale), which it compiles in: the program holds
    the scalar as a literal; the values are those of the parameters, and ``apply`` still takes
    a replaced scalar."""
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", -1)
    rng = np.random.default_rng(7)
    b = rng.standard_normal(256).astype(np.float32)
    inits = [numpy_helper.from_array(np.array(np.float32(0.37)), "a"),
             numpy_helper.from_array(b, "b")]  # fmt: skip
    nodes = [helper.make_node("Mul", ["x", "a"], ["y"]), helper.make_node("Add", ["x", "b"], ["z"])]
    info = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [256]) for n in "xyz"]
    graph = helper.make_graph(nodes, "scalars", info[:1], info[1:], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    s = InferenceSession(model.SerializeToString())
    x = rng.standard_normal(256).astype(np.float32)
    y, z = s.run(None, {"x": x})
    np.testing.assert_array_equal(y, x * np.float32(0.37))
    np.testing.assert_array_equal(z, x + b)
    (program,) = s._programs.values()
    params = s._run_params(program)
    assert sorted(params) == ["b"]
    text = program.jitted_on(s._device).trace(params, x).lower().as_text()
    assert "3.700000e-01" in text
    other = s.apply({"a": np.float32(2.0)}, x)[0]
    np.testing.assert_array_equal(np.asarray(other), x * np.float32(2.0))
