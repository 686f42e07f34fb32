"""``dml_jax.onnx.InferenceSession``: onnxruntime's session API, symbolic dimensions bound per
run (one program per input-shape set), specialisation on inputs whose values a node needs,
64-bit integers without ``jax_enable_x64``, ONNX's model conventions (IR < 4 initializers listed
as inputs, external data, unnamed nodes, empty optional inputs, unused inputs, several outputs),
the JAX function (jit, grad, vmap) and its parameters, and the errors a user gets.

Models are built with ``onnx.helper``; results are checked against NumPy written here or
against onnxruntime's CPU provider (skipped without it).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import dml_jax as dml

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper

from dml_jax.onnx import InferenceSession, SessionOptions

F, I64, B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _model(nodes, inputs, outputs, inits=(), opset=17, ir=8):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir
    return model


def _vi(name, t, shape):
    return helper.make_tensor_value_info(name, t, shape)


def _ort(model, feed):
    ort = pytest.importorskip("onnxruntime")
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def dynamic_mlp(rng):
    """y = relu(x @ w + b) reshaped by a shape chain: Shape -> Gather -> Unsqueeze -> Concat."""
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["hb"]),
        helper.make_node("Relu", ["hb"], ["r"]),
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero_1d"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one", "two"], ["target"], axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"]),
    ]
    inits = [
        numpy_helper.from_array(rng.normal(size=(6, 8)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(8,)).astype(np.float32), "b"),
        numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
        numpy_helper.from_array(np.asarray([0], np.int64), "zero_1d"),
        numpy_helper.from_array(np.asarray([-1], np.int64), "minus_one"),
        numpy_helper.from_array(np.asarray([2], np.int64), "two"),
    ]
    return _model(nodes, [_vi("x", F, ["batch", 6])], [_vi("y", F, ["batch", 4, 2])], inits)


def _mlp_reference(model, x):
    w, b = (numpy_helper.to_array(i) for i in model.graph.initializer[:2])
    return np.maximum(x @ w + b, 0).reshape(len(x), -1, 2)


def test_run_binds_symbolic_dims_per_shape_and_caches_programs(rng):
    model = dynamic_mlp(rng)
    s = InferenceSession(model.SerializeToString())
    assert [(i.name, i.type, i.shape) for i in s.get_inputs()] == [
        ("x", "tensor(float)", ["batch", 6])
    ]
    assert [(o.name, o.type, o.shape) for o in s.get_outputs()] == [
        ("y", "tensor(float)", ["batch", 4, 2])
    ]
    for n in (3, 5, 3):
        x = rng.normal(size=(n, 6)).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        np.testing.assert_allclose(y, _mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    assert len(s._programs) == 2


def test_compiler_options_reach_the_compiles_of_run_and_are_checked_first(tmp_path, rng):
    """XLA options given to the session (or to compile_onnx) are the options of the programs
    ``run`` compiles: an XLA dump option writes the session's program there; a name XLA does
    not know, or a value of the wrong kind, is a ValidationError before anything is traced."""
    from dml_jax.onnx import compile_onnx

    model = dynamic_mlp(rng)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    dump = tmp_path / "xla"
    options = {"xla_dump_to": str(dump), "xla_gpu_enable_triton_gemm": False}
    s = InferenceSession(model.SerializeToString(), compiler_options=options)
    (y,) = s.run(None, {"x": x})
    np.testing.assert_allclose(y, _mlp_reference(model, x), rtol=1e-5, atol=1e-5)
    assert any("jit_apply" in f.name for f in dump.iterdir())
    fixed_dump = tmp_path / "xla_fixed"
    options["xla_dump_to"] = str(fixed_dump)
    fixed = compile_onnx(model, free_dimensions={"batch": 3}, compiler_options=options)
    np.testing.assert_allclose(fixed(x), y, rtol=1e-6, atol=1e-6)
    assert any("jit_apply" in f.name for f in fixed_dump.iterdir())
    bad = [({"xla_no_such_option": True}, "xla_no_such_option"),
           ({"xla_gpu_autotune_level": "high"}, "xla_gpu_autotune_level"),
           ({"xla_gpu_autotune_level": [1]}, "xla_gpu_autotune_level"),
           ("xla_dump_to=/tmp", "must be a mapping")]  # fmt: skip
    for given, named in bad:
        with pytest.raises(dml.ValidationError, match=named):
            InferenceSession(model.SerializeToString(), compiler_options=given)
        with pytest.raises(dml.ValidationError, match=named):
            compile_onnx(model, free_dimensions={"batch": 3}, compiler_options=given)


def _ynn_bodies(hlo: str) -> tuple[list[str], str]:
    """The bodies of the computations a compiled CPU program hands to YNNPACK (the fusions
    named ynn_fusion), and the whole text."""
    bodies, name, lines = {}, None, []
    for line in hlo.splitlines():
        head = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if head:
            name, lines = head.group(1), []
        elif line.startswith("}") and name is not None:
            bodies[name], name = "\n".join(lines), None
        elif name is not None:
            lines.append(line)
    called = re.findall(r"%ynn_fusion[\w.]* = .*kind=kCustom, calls=%([\w.\-]+)", hlo)
    return [bodies[c] for c in called], hlo


def test_sessions_on_the_cpu_keep_convolutions_off_ynnpack(rng):
    """On the CPU a session's compiles take CPU_COMPILER_OPTIONS where XLA takes them: its
    convolutions run on XLA's own kernels, not in a YNNPACK fusion (which XLA's default would
    make them, as the caller's options can), while matrix products stay on YNNPACK."""
    from dml_jax.onnx.program import CPU_COMPILER_OPTIONS, cpu_compiler_defaults

    if not cpu_compiler_defaults():
        pytest.skip("this XLA does not take CPU_COMPILER_OPTIONS")
    assert cpu_compiler_defaults() == CPU_COMPILER_OPTIONS
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in [("w", (64, 64, 3, 3)), ("m", (64, 64))]]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"]),
             helper.make_node("MatMul", ["a", "m"], ["z"])]  # fmt: skip
    inputs = [_vi("x", f, [1, 64, 28, 28]), _vi("a", f, [64, 64])]
    model = _model(nodes, inputs, [_vi("y", f, [1, 64, 28, 28]), _vi("z", f, [64, 64])], inits)
    x = rng.normal(size=(1, 64, 28, 28)).astype(np.float32)
    a = rng.normal(size=(64, 64)).astype(np.float32)
    every = "LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION,LIBRARY_FUSION_TYPE_INDIVIDUAL_DOT"
    texts = {}
    for told in (None, {"xla_cpu_experimental_ynn_fusion_type": every}):
        s = InferenceSession(model, device="cpu", compiler_options=told)
        compiled = jax.jit(s.fn, compiler_options=s.compiler_options).lower(x, a).compile()
        texts[told is None] = _ynn_bodies(compiled.as_text())
        y, z = s.run(None, {"x": x, "a": a})
        want_y, want_z = _ort(model, {"x": x, "a": a})
        np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(z, want_z, rtol=1e-4, atol=1e-4)
    told_bodies, _ = texts[False]
    if not any("convolution(" in b for b in told_bodies):
        pytest.skip("this XLA hands no convolution to YNNPACK even when told to")
    bodies, hlo = texts[True]
    assert "convolution(" in hlo and not any("convolution(" in b for b in bodies), hlo
    if any(" dot(" in b for b in told_bodies):  # the products stay where XLA puts them
        assert any(" dot(" in b for b in bodies), hlo


def test_run_traces_its_device_platform_alone(rng):
    """``run`` traces its program for the session's device alone (``Program.jitted_on``): a
    depthwise convolution's platform choice (taps on the CPU, XLA's grouped convolution
    elsewhere) is traced as the CPU's branch only, where ``jitted`` and ``fn`` keep every
    branch; whichever is traced first, neither reuses the other's trace. Same outputs."""
    inits = [numpy_helper.from_array(rng.normal(size=(6, 1, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=6)]
    model = _model(nodes, [_vi("x", F, [2, 6, 9, 9])], [_vi("y", F, [2, 6, 9, 9])], inits)
    feed = {"x": rng.normal(size=(2, 6, 9, 9)).astype(np.float32)}
    (want,) = _ort(model, feed)
    cpu = jax.devices("cpu")[0]
    for targeted_first in (True, False):
        session = InferenceSession(model, device="cpu")
        program = session.program([(2, 6, 9, 9)])
        params = session._run_params(program)
        x = jnp.asarray(feed["x"])

        def text(fn, params=params, x=x):
            return str(fn.trace(params, x).jaxpr)

        order = [program.jitted_on(cpu), program.jitted]
        texts = [text(f) for f in (order if targeted_first else order[::-1])]
        on_cpu, every = texts if targeted_first else texts[::-1]
        assert "platform_index" not in on_cpu and "conv_general_dilated" not in on_cpu
        assert "platform_index" in every and "conv_general_dilated" in every
        (got,) = session.run(None, feed)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(jax.jit(session.fn)(x)[0], want, rtol=1e-5, atol=1e-5)
    assert program.jitted_on(object()) is program.jitted  # a platform not chosen by


def test_run_compile_onnx_and_fn_on_trace_for_their_device(monkeypatch, rng):
    """The platform each traced call is for, as the lowerings see it (``fastpath.target()``
    while the program is applied): ``run`` and ``fn_on`` of a CPU session trace for the CPU,
    ``compile_onnx``'s call for the default device's platform (the GPU's where there is one);
    ``fn`` for every platform."""
    import dml_jax.onnx.session as session_module
    from dml_jax import fastpath
    from dml_jax.onnx import compile_onnx

    seen = []
    original = session_module.Program.apply

    def recording(self, *args):
        seen.append(fastpath.target())
        return original(self, *args)

    monkeypatch.setattr(session_module.Program, "apply", recording)
    inits = [numpy_helper.from_array(rng.normal(size=(4, 1, 3, 3)).astype(np.float32), "w")]
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=4)]
    model = _model(nodes, [_vi("x", F, [1, 4, 5, 5])], [_vi("y", F, [1, 4, 5, 5])], inits)
    x = rng.normal(size=(1, 4, 5, 5)).astype(np.float32)
    (want,) = _ort(model, {"x": x})
    session = InferenceSession(model, device="cpu")
    results = {
        "run": lambda: session.run(None, {"x": x})[0],
        "compile_onnx": lambda: compile_onnx(model)(x),
        "fn_on": lambda: jax.jit(session.fn_on())(x)[0],
        "fn": lambda: jax.jit(session.fn)(x)[0],
    }
    expected = {"run": "cpu", "fn_on": "cpu", "fn": None}
    expected["compile_onnx"] = fastpath.platform_of(jax.devices()[0])
    for name, call in results.items():
        seen.clear()
        np.testing.assert_allclose(call(), want, rtol=1e-5, atol=1e-5, err_msg=name)
        assert seen == [expected[name]], (name, seen)


def test_cpu_sessions_compile_their_weights_in(monkeypatch, rng):
    """On the CPU ``run`` compiles the session's weights into its program as constants (XLA
    then lays the filters out once, not at every call), up to CPU_BAKED_WEIGHTS_MAX_BYTES of
    them, but for the matrices of at least CPU_MATRIX_ARGUMENT_MIN_BYTES, which the products
    read as they are; above that, and under ``fn`` / ``apply``, they are all arguments. Same
    outputs."""
    import dml_jax.onnx.session as session_module

    traced: list[int] = []  # the number of parameters each traced call of a program received
    original = session_module.Program.apply

    def spy(self, params, *inputs):
        traced.append(len(params))
        return original(self, params, *inputs)

    monkeypatch.setattr(session_module.Program, "apply", spy)
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(rng.normal(size=s).astype(np.float32), n)
             for n, s in [("w", (8, 4, 3, 3)), ("m", (8, 5))]]  # fmt: skip
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("MatMul", ["c", "m"], ["y"])]  # fmt: skip
    model = _model(nodes, [_vi("x", f, [1, 4, 6, 8])], [_vi("y", f, [1, 8, 6, 5])], inits)
    feed = {"x": rng.normal(size=(1, 4, 6, 8)).astype(np.float32)}
    (want,) = _ort(model, feed)
    session = InferenceSession(model, device="cpu")
    (baked,) = session.run(None, feed)
    assert traced == [0]
    np.testing.assert_allclose(baked, want, rtol=1e-4, atol=1e-4)
    (applied,) = session.apply(None, feed["x"])  # apply takes the session's parameters
    assert traced[1:] == [2]
    np.testing.assert_allclose(applied, baked, rtol=1e-5, atol=1e-6)
    # the matrix m (160 bytes) passed, the filter w (4-D) compiled in
    monkeypatch.setattr(session_module, "CPU_MATRIX_ARGUMENT_MIN_BYTES", 160)
    session = InferenceSession(model, device="cpu")
    (mixed,) = session.run(None, feed)
    assert traced[2:] == [1]
    assert list(session._run_params(session.program([(1, 4, 6, 8)]))) == ["m"]
    assert [list(on) for on in session.__dict__["_on_device"].values()] == [["m"]]  # w: host
    np.testing.assert_allclose(mixed, baked, rtol=1e-5, atol=1e-6)
    monkeypatch.setattr(session_module, "CPU_MATRIX_ARGUMENT_MIN_BYTES", 161)
    assert InferenceSession(model, device="cpu").run(None, feed) is not None
    assert traced[3:] == [0]  # a smaller matrix: compiled in
    monkeypatch.setattr(session_module, "CPU_BAKED_WEIGHTS_MAX_BYTES", 0)
    (passed,) = InferenceSession(model, device="cpu").run(None, feed)
    assert traced[4:] == [2]
    np.testing.assert_allclose(passed, baked, rtol=1e-5, atol=1e-6)


def test_sessions_on_gpus_run_matrix_products_on_cublas_unless_told(rng):
    """On a GPU the compiles of a session take GPU_COMPILER_OPTIONS (no Triton matrix product
    fusions: cuBLAS runs them), with the caller's compiler_options over them; on the CPU they
    take the CPU's defaults and the caller's."""
    from dml_jax.onnx.program import (
        GPU_COMPILER_OPTIONS,
        compiler_options_for,
        cpu_compiler_defaults,
    )

    model = dynamic_mlp(rng)
    told = {"xla_gpu_enable_triton_gemm": True}
    # cuBLAS products, and sibling products not merged over their weights concatenated (a
    # copy of the weights at every call where they are run's arguments)
    assert GPU_COMPILER_OPTIONS == {"xla_gpu_enable_triton_gemm": False,
                                    "xla_gpu_dot_merger_threshold_mb": 0}  # fmt: skip
    assert InferenceSession(model, device="cpu").compiler_options == cpu_compiler_defaults()
    on_cpu = InferenceSession(model, device="cpu", compiler_options=told).compiler_options
    assert on_cpu == {**cpu_compiler_defaults(), **told}
    assert compiler_options_for(None, "gpu") == GPU_COMPILER_OPTIONS
    assert compiler_options_for(told, "gpu") == {**GPU_COMPILER_OPTIONS, **told} != told
    assert compiler_options_for({"xla_gpu_autotune_level": 1}, "gpu") == {
        **GPU_COMPILER_OPTIONS, "xla_gpu_autotune_level": 1}  # fmt: skip
    if jax.default_backend() != "gpu":
        return
    h = TensorProto.FLOAT16
    w = numpy_helper.from_array(rng.normal(size=(1024, 1024)).astype(np.float16), "w")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    gemm = _model(nodes, [_vi("x", h, [1024, 1024])], [_vi("y", h, [1024, 1024])], [w])
    s = InferenceSession(gemm)
    assert s.compiler_options == GPU_COMPILER_OPTIONS
    x = rng.normal(size=(1024, 1024)).astype(np.float16)
    (y,) = s.run(None, {"x": x})
    want = np.maximum(x.astype(np.float32) @ numpy_helper.to_array(w).astype(np.float32), 0)
    np.testing.assert_allclose(y.astype(np.float32), want, rtol=2e-2, atol=0.5)
    (program,) = s._programs.values()
    text = program.jitted.lower(s._device_params(), x).compile().as_text()
    assert "__triton_gemm" not in text and "__cublas" in text
    # two products of one input: not merged into one over their weights concatenated
    v = numpy_helper.from_array(rng.normal(size=(1024, 1024)).astype(np.float16), "v")
    nodes = [helper.make_node("MatMul", ["x", "w"], ["a"]),
             helper.make_node("MatMul", ["x", "v"], ["b"])]  # fmt: skip
    pair = _model(nodes, [_vi("x", h, [16, 1024])],
                  [_vi("a", h, [16, 1024]), _vi("b", h, [16, 1024])], [w, v])  # fmt: skip
    s = InferenceSession(pair)
    x = rng.normal(size=(16, 1024)).astype(np.float16)
    a, b = s.run(None, {"x": x})
    for got, weight in [(a, w), (b, v)]:
        want = x.astype(np.float32) @ numpy_helper.to_array(weight).astype(np.float32)
        np.testing.assert_allclose(got.astype(np.float32), want, rtol=2e-2, atol=0.5)
    (program,) = s._programs.values()
    text = program.jitted.lower(s._device_params(), x).compile().as_text()
    assert "[1024,2048]" not in text  # neither the weights joined nor one product over them


def test_free_dimensions_by_name_and_denotation_fix_the_shape(rng):
    model = dynamic_mlp(rng)
    model.graph.input[0].type.tensor_type.shape.dim[0].denotation = "DATA_BATCH"
    by_name = InferenceSession(model, free_dimensions={"batch": 2})
    options = SessionOptions()
    options.add_free_dimension_override_by_denotation("DATA_BATCH", 2)
    by_denotation = InferenceSession(model, options)
    for s in (by_name, by_denotation):
        assert s.get_inputs()[0].shape == [2, 6]
        x = rng.normal(size=(2, 6)).astype(np.float32)
        np.testing.assert_allclose(
            s.run(None, {"x": x})[0], _mlp_reference(model, x), rtol=1e-5, atol=1e-6
        )
        with pytest.raises(dml.ValidationError, match=r"input 'x': dimension 0 must be 2, got 3"):
            s.run(None, {"x": np.zeros((3, 6), np.float32)})


def test_symbolic_dim_shared_by_two_inputs_must_agree():
    model = _model(
        [helper.make_node("Add", ["a", "b"], ["c"])],
        [_vi("a", F, ["n", 2]), _vi("b", F, ["n", 2])],
        [_vi("c", F, ["n", 2])],
    )
    s = InferenceSession(model)
    with pytest.raises(dml.ValidationError, match=r"input 'b': dimension 0 \('n'\) is 3"):
        s.run(None, {"a": np.zeros((2, 2), np.float32), "b": np.zeros((3, 2), np.float32)})


def test_shape_input_is_specialised_on_its_values():
    model = _model(
        [helper.make_node("Reshape", ["x", "shape"], ["y"])],
        [_vi("x", F, [2, 6]), _vi("shape", I64, [2])],
        [_vi("y", F, None)],
    )
    s = InferenceSession(model)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    for shape in ([3, 4], [4, 3], [3, 4]):
        (y,) = s.run(None, {"x": x, "shape": np.asarray(shape, np.int64)})
        np.testing.assert_array_equal(y, x.reshape(shape))
    assert s.static_inputs == ("shape",)
    assert len(s._programs) == 2


def test_a_plain_model_finds_its_program_by_shapes_alone(monkeypatch):
    # no specialised input and no run-time size: a second run of the same shapes goes
    # straight to its program (the shape-keyed lookup), a new shape imports one
    model = _model(
        [helper.make_node("Add", ["x", "x"], ["y"])], [_vi("x", F, ["n", 3])], [_vi("y", F, None)]
    )
    s = InferenceSession(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    s.run(None, {"x": x})

    def imported(*args, **kwargs):
        raise AssertionError("imported again")

    monkeypatch.setattr(s, "program", imported)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], 2 * x)
    with pytest.raises(AssertionError, match="imported again"):
        s.run(None, {"x": x[:1]})


def test_specialising_on_a_large_input_is_refused():
    model = _model(
        [
            helper.make_node("ReduceMax", ["f"], ["m"], keepdims=1),
            helper.make_node("Cast", ["m"], ["start"], to=I64),
            helper.make_node("Slice", ["x", "start", "end"], ["y"]),
        ],
        [_vi("x", F, [6]), _vi("f", F, [5000])],
        [_vi("y", F, None)],
        [numpy_helper.from_array(np.asarray([6], np.int64), "end")],
    )
    with pytest.raises(dml.ValidationError, match=r"node 2 .*Slice.*input 'f' \(float32, 5000"):
        InferenceSession(model).run(
            None, {"x": np.zeros(6, np.float32), "f": np.ones(5000, np.float32)}
        )


def test_small_float_input_is_specialised_on():
    model = _model(
        [
            helper.make_node("ReduceMax", ["f"], ["m"], keepdims=1),
            helper.make_node("Cast", ["m"], ["start"], to=I64),
            helper.make_node("Slice", ["x", "start", "end"], ["y"]),
        ],
        [_vi("x", F, [6]), _vi("f", F, [2])],
        [_vi("y", F, None)],
        [numpy_helper.from_array(np.asarray([6], np.int64), "end")],
    )
    s = InferenceSession(model)
    x = np.arange(6, dtype=np.float32)
    for start in (2.0, 4.0):
        (y,) = s.run(None, {"x": x, "f": np.asarray([0.0, start], np.float32)})
        np.testing.assert_array_equal(y, x[int(start) :])
    assert s.static_inputs == ("f",)


def test_int64_without_x64_and_out_of_range_values(rng):
    assert not jax.config.read("jax_enable_x64")
    model = _model(
        [
            helper.make_node("Add", ["ids", "offset"], ["shifted"]),
            helper.make_node("Gather", ["table", "shifted"], ["rows"], axis=0),
            helper.make_node("Identity", ["shifted"], ["best"]),
        ],
        [_vi("ids", I64, [4])],
        [_vi("rows", F, [4, 3]), _vi("best", I64, [4])],
        [
            numpy_helper.from_array(np.asarray(1, np.int64), "offset"),
            numpy_helper.from_array(rng.normal(size=(6, 3)).astype(np.float32), "table"),
        ],
    )
    s = InferenceSession(model)
    ids = np.asarray([0, 4, 2, 1], np.int64)
    rows, best = s.run(None, {"ids": ids})
    table = numpy_helper.to_array(model.graph.initializer[1])
    np.testing.assert_array_equal(rows, table[ids + 1])
    assert best.dtype == np.int64
    np.testing.assert_array_equal(best, ids + 1)
    with pytest.raises(dml.ValidationError, match=r"input 'ids'.*2147483648 does not fit"):
        s.run(None, {"ids": np.asarray([0, 1, 2, 2**31], np.int64)})


def test_int64_constant_that_does_not_fit_is_an_error_naming_the_node():
    model = _model(
        [helper.make_node("Add", ["ids", "big"], ["y"], name="add_big")],
        [_vi("ids", I64, [2])],
        [_vi("y", I64, [2])],
        [numpy_helper.from_array(np.asarray(2**40, np.int64), "big")],
    )
    with pytest.raises(dml.ValidationError, match=r"node 0 \('add_big', Add\).*does not fit"):
        InferenceSession(model).run(None, {"ids": np.zeros(2, np.int64)})


def test_int64_folding_is_exact():
    """Values known at import keep 64 bits: 2**40 // 2**20 folds to 2**20, which fits."""
    model = _model(
        [
            helper.make_node("Div", ["big", "div"], ["q"]),
            helper.make_node("Add", ["ids", "q"], ["y"]),
        ],
        [_vi("ids", I64, [2])],
        [_vi("y", I64, [2])],
        [
            numpy_helper.from_array(np.asarray(2**40, np.int64), "big"),
            numpy_helper.from_array(np.asarray(2**20, np.int64), "div"),
        ],
    )
    (y,) = InferenceSession(model).run(None, {"ids": np.asarray([1, 2], np.int64)})
    np.testing.assert_array_equal(y, [2**20 + 1, 2**20 + 2])


def test_bool_inputs_and_outputs(rng):
    model = _model(
        [
            helper.make_node("Greater", ["x", "zero"], ["pos"]),
            helper.make_node("Where", ["m", "x", "zero"], ["y"]),
        ],
        [_vi("x", F, [5]), _vi("m", B, [5])],
        [_vi("pos", B, [5]), _vi("y", F, [5])],
        [numpy_helper.from_array(np.asarray(0, np.float32), "zero")],
    )
    x = rng.normal(size=5).astype(np.float32)
    m = np.asarray([True, False, True, True, False])
    pos, y = InferenceSession(model).run(None, {"x": x, "m": m})
    assert pos.dtype == np.bool_
    np.testing.assert_array_equal(pos, x > 0)
    np.testing.assert_array_equal(y, np.where(m, x, 0))


def test_run_selects_and_orders_outputs_and_checks_feeds():
    model = _model(
        [helper.make_node("Neg", ["x"], ["a"]), helper.make_node("Abs", ["x"], ["b"])],
        [_vi("x", F, [3]), _vi("unused", F, [2])],
        [_vi("a", F, [3]), _vi("b", F, [3])],
    )
    s = InferenceSession(model)
    x = np.asarray([1, -2, 3], np.float32)
    feed = {"x": x, "unused": np.zeros(2, np.float32)}
    b, a = s.run(["b", "a"], feed)
    np.testing.assert_array_equal(a, -x)
    np.testing.assert_array_equal(b, np.abs(x))
    with pytest.raises(dml.ValidationError, match=r"required inputs \['unused'\] are missing"):
        s.run(None, {"x": x})
    with pytest.raises(dml.ValidationError, match=r"unknown input names \['z'\]"):
        s.run(None, {**feed, "z": x})
    with pytest.raises(
        dml.ValidationError, match=r"input 'x' must be tensor\(float\), got .*float64"
    ):
        s.run(None, {**feed, "x": x.astype(np.float64)})
    with pytest.raises(dml.ValidationError, match=r"'c' is not an output"):
        s.run(["c"], feed)
    with pytest.raises(dml.ValidationError, match=r"input 'x' must have rank 1"):
        s.run(None, {**feed, "x": x.reshape(1, 3)})


def test_ir3_initializers_listed_as_inputs_are_defaults_that_can_be_overridden():
    w = np.asarray([2.0, 3.0], np.float32)
    model = _model(
        [helper.make_node("Mul", ["x", "w"], ["y"])],
        [_vi("x", F, [2]), _vi("w", F, [2])],
        [_vi("y", F, [2])],
        [numpy_helper.from_array(w, "w")],
        opset=9,
        ir=3,
    )
    s = InferenceSession(model)
    assert [i.name for i in s.get_inputs()] == ["x"]
    assert [i.name for i in s.get_overridable_initializers()] == ["w"]
    x = np.asarray([1.0, 1.0], np.float32)
    np.testing.assert_array_equal(s.run(None, {"x": x})[0], w)
    np.testing.assert_array_equal(s.run(None, {"x": x, "w": np.ones(2, np.float32)})[0], x)


def test_external_data_is_read_from_beside_the_model(tmp_path, rng):
    w = rng.normal(size=(64, 32)).astype(np.float32)
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_vi("x", F, [2, 64])],
        [_vi("y", F, [2, 32])],
        [numpy_helper.from_array(w, "w")],
    )
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)  # fmt: skip
    assert (tmp_path / "weights.bin").exists()
    x = rng.normal(size=(2, 64)).astype(np.float32)
    (y,) = InferenceSession(str(path)).run(None, {"x": x})
    np.testing.assert_allclose(y, x @ w, rtol=1e-5, atol=1e-5)


def test_weights_are_read_once_for_every_program(tmp_path, monkeypatch):
    """A new input shape imports the model again but reads no initializer again: each is read
    once (external data too) and shared, read-only, by the session's programs and its
    parameters."""
    from dml_jax.onnx import walk

    w = np.random.default_rng(1).normal(size=(64, 32)).astype(np.float32)
    shift = np.arange(32, dtype=np.int64)
    model = _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]),
         helper.make_node("Cast", ["k"], ["kf"], to=F),
         helper.make_node("Add", ["h", "kf"], ["y"])],
        [_vi("x", F, ["b", 64])],
        [_vi("y", F, ["b", 32])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(shift, "k")],
    )  # fmt: skip
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="weights.bin",
                    size_threshold=0)  # fmt: skip
    reads = []
    real = walk.array_of
    monkeypatch.setattr(walk, "array_of", lambda t, d=None: reads.append(t.name) or real(t, d))
    s = InferenceSession(str(path))
    for b in (1, 2, 3):
        x = np.random.default_rng(b).normal(size=(b, 64)).astype(np.float32)
        (y,) = s.run(None, {"x": x})
        np.testing.assert_allclose(y, x @ w + shift, rtol=1e-5, atol=1e-5)
    assert len(s._programs) == 3
    assert sorted(reads) == ["k", "w"]
    assert not s.params["w"].flags.writeable
    np.testing.assert_array_equal(s.params["w"], w)


def test_unnamed_nodes_empty_optional_inputs_and_trailing_outputs():
    model = _model(
        [
            helper.make_node("Clip", ["x", "", "hi"], ["c"]),
            helper.make_node("Split", ["c"], ["p", "q"], axis=0),
            helper.make_node("Neg", ["q"], ["y"]),
        ],
        [_vi("x", F, [4])],
        [_vi("y", F, [2]), _vi("p", F, [2])],
        [numpy_helper.from_array(np.asarray(1.0, np.float32), "hi")],
        opset=13,
    )
    x = np.asarray([-3.0, 0.5, 2.0, -1.0], np.float32)
    y, p = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_array_equal(p, [-3.0, 0.5])
    np.testing.assert_array_equal(y, [-1.0, 1.0])


def test_output_known_at_import_is_returned_without_a_graph():
    model = _model(
        [helper.make_node("Shape", ["x"], ["s"])],
        [_vi("x", F, ["n", 3])],
        [_vi("s", I64, [2])],
    )
    (s,) = InferenceSession(model).run(None, {"x": np.zeros((5, 3), np.float32)})
    assert s.dtype == np.int64
    np.testing.assert_array_equal(s, [5, 3])


def test_fn_is_a_jax_function_jit_vmap_and_grad_through_params(rng):
    model = dynamic_mlp(rng)
    s = InferenceSession(model)
    x = rng.normal(size=(3, 6)).astype(np.float32)
    want = _mlp_reference(model, x)
    np.testing.assert_allclose(s.fn(x)[0], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(jax.jit(s.fn)(x)[0], want, rtol=1e-5, atol=1e-5)
    batched = jax.jit(jax.vmap(lambda xs: s.fn(xs)[0]))(np.stack([x, 2 * x]))
    np.testing.assert_allclose(batched[1], _mlp_reference(model, 2 * x), rtol=1e-5, atol=1e-5)
    assert set(s.params) == {"w", "b"}

    def loss(params):
        return jnp.sum(s.apply(params, x)[0] ** 2)

    grads = jax.jit(jax.grad(loss))({k: jnp.asarray(v) for k, v in s.params.items()})
    w, b = s.params["w"], s.params["b"]
    h = x @ w + b
    dh = 2 * np.maximum(h, 0) * (h > 0)
    np.testing.assert_allclose(grads["w"], x.T @ dh, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(grads["b"], dh.sum(0), rtol=1e-4, atol=1e-4)
    # A replaced parameter changes the result (fine-tuning sees its own weights).
    y2 = s.apply({**s.params, "b": np.zeros(8, np.float32)}, x)[0]
    np.testing.assert_allclose(y2, np.maximum(x @ w, 0).reshape(3, 4, 2), rtol=1e-5, atol=1e-5)


def test_model_metadata_providers_and_devices(rng):
    model = dynamic_mlp(rng)
    model.producer_name = "unit"
    model.model_version = 3
    helper.set_model_props(model, {"author": "me"})
    s = InferenceSession(model, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    meta = s.get_modelmeta()
    assert (meta.producer_name, meta.graph_name, meta.version) == ("unit", "g", 3)
    assert meta.custom_metadata_map == {"author": "me"}
    assert s.get_providers()[0] in ("DmlExecutionProvider", "CPUExecutionProvider")
    cpu = InferenceSession(model, device="cpu")
    assert cpu.get_providers() == ["CPUExecutionProvider"]
    x = rng.normal(size=(2, 6)).astype(np.float32)
    # atol: an output near 0 is a difference of terms near 1, each rounded in float32
    np.testing.assert_allclose(
        cpu.run(None, {"x": x})[0], _mlp_reference(model, x), rtol=1e-5, atol=1e-6
    )


def test_matches_onnxruntime_on_a_dynamic_model(rng):
    model = dynamic_mlp(rng)
    x = rng.normal(size=(4, 6)).astype(np.float32)
    (want,) = _ort(model, {"x": x})
    (got,) = InferenceSession(model).run(None, {"x": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_explain_says_how_each_node_was_imported(rng):
    s = InferenceSession(dynamic_mlp(rng))
    s.run(None, {"x": np.zeros((2, 6), np.float32)})
    lines = s.explain().splitlines()
    assert lines[0].startswith("node 0 (MatMul): dml:") and "GEMM" in lines[0]
    assert lines[3] == "node 3 (Shape): view"  # a static shape: a constant, no DML node
    assert lines[6] == "node 6 (Concat): folded"  # the shape chain, evaluated at import
    assert lines[7] == "node 7 (Reshape): view"


def test_explain_before_a_run_needs_shapes_and_takes_them(rng):
    s = InferenceSession(dynamic_mlp(rng))
    with pytest.raises(dml.ValidationError, match=r"^ONNX: explain needs input shapes"):
        s.explain()
    assert s.explain([(3, 6)]).startswith("node 0 (MatMul): dml:")


def test_layout_needs_a_mesh_then_shapes(rng):
    with pytest.raises(dml.ValidationError, match=r"^ONNX: layout: the session has no mesh"):
        InferenceSession(dynamic_mlp(rng)).layout()
    s = InferenceSession(dynamic_mlp(rng), mesh=jax.make_mesh((1,), ("data",)))
    with pytest.raises(dml.ValidationError, match=r"^ONNX: layout needs input shapes"):
        s.layout()
    assert s.layout([(2, 6)])["x"] == jax.sharding.PartitionSpec("data")


@pytest.mark.parametrize(
    "make, pattern",
    [
        (lambda: b"not a model", r"^ONNX: the bytes given are not an ONNX model"),
        (lambda: 42, r"^ONNX: expected a path, bytes or an onnx.ModelProto, got int"),
        (lambda: "/nonexistent/m.onnx", r"^ONNX: cannot read '/nonexistent/m.onnx'"),
    ],
)
def test_bad_sources_are_one_line_errors(make, pattern):
    with pytest.raises(dml.ValidationError, match=pattern):
        InferenceSession(make())


def _one_node(node, inputs, outputs, inits=(), opset=17):
    return _model([node], inputs, outputs, inits, opset)


@pytest.mark.parametrize(
    "model, pattern",
    [
        (
            _one_node(
                helper.make_node("Relu", ["x", "x"], ["y"], name="r"),
                [_vi("x", F, [2])],
                [_vi("y", F, [2])],
            ),
            r"node 0 \('r', Relu\): 2 inputs; Relu-14 takes at most 1",
        ),
        (
            _one_node(
                helper.make_node("Conv", ["x"], ["y"]),
                [_vi("x", F, [1, 1, 3, 3])],
                [_vi("y", F, None)],
            ),
            r"node 0 \(Conv\): input 1 \('W'\) is required",
        ),
        (
            _one_node(
                helper.make_node("Softmax", ["x"], ["y"], axis=1.5),
                [_vi("x", F, [2])],
                [_vi("y", F, [2])],
            ),
            r"node 0 \(Softmax\): attribute 'axis' must be int, got float",
        ),
        (
            _one_node(
                helper.make_node("Relu", ["x"], ["y"], bogus=1),
                [_vi("x", F, [2])],
                [_vi("y", F, [2])],
            ),
            r"attribute 'bogus' is not an attribute of Relu-14",
        ),
        (
            _one_node(
                helper.make_node("Relu", ["nope"], ["y"]), [_vi("x", F, [2])], [_vi("y", F, [2])]
            ),
            r"node 0 \(Relu\): input 'nope' is not produced before",
        ),
        (
            _one_node(
                helper.make_node("FooBar", ["x"], ["y"]), [_vi("x", F, [2])], [_vi("y", F, [2])]
            ),
            r"op type 'FooBar' is not an operator of opset 17",
        ),
        (
            _one_node(
                helper.make_node("Relu", ["x"], ["y"]),
                [_vi("x", TensorProto.STRING, [2])],
                [_vi("y", F, [2])],
            ),
            r"input 'x': element type string has no DML data type",
        ),
        (
            _one_node(
                helper.make_node("Relu", ["x"], ["y"]), [_vi("x", F, [2])], [_vi("z", F, [2])]
            ),
            r"output 'z' is not produced by any node",
        ),
    ],
)
def test_malformed_models_get_one_line_naming_node_and_field(model, pattern):
    with pytest.raises(dml.ValidationError, match=pattern) as info:
        s = InferenceSession(model)
        feed = {i.name: np.zeros([d or 1 for d in i.shape], np.float32) for i in s.get_inputs()}
        s.run(None, feed)
    assert "\n" not in str(info.value)


def test_sequence_inputs_are_lists_and_map_inputs_get_one_clear_error():
    seq = helper.make_tensor_sequence_value_info("s", F, [2])
    model = _model([helper.make_node("SequenceLength", ["s"], ["n"])], [seq], [_vi("n", I64, [])])
    (n,) = InferenceSession(model).run(None, {"s": [np.zeros(2, np.float32)] * 3})
    assert n == 3 and n.dtype == np.int64
    mapped = helper.make_value_info(
        "m", helper.make_map_type_proto(I64, helper.make_tensor_type_proto(F, [2]))
    )
    model = _model([helper.make_node("Identity", ["m"], ["n"])], [mapped], [_vi("n", F, [2])])
    with pytest.raises(dml.ValidationError, match=r"input 'm' is a map value"):
        InferenceSession(model)


def test_huge_generated_constants_are_not_folded_and_dml_refuses_them():
    model = _model(
        [
            helper.make_node("ConstantOfShape", ["shape"], ["big"]),
            helper.make_node("Add", ["x", "big"], ["y"]),
        ],
        [_vi("x", F, [1])],
        [_vi("y", F, None)],
        [numpy_helper.from_array(np.asarray([2**20, 2**20], np.int64), "shape")],
    )
    with pytest.raises(dml.ValidationError, match=r"node 0 \(ConstantOfShape\): .*at most"):
        InferenceSession(model).run(None, {"x": np.zeros(1, np.float32)})


def test_convert_writes_a_dxdispatch_graph_that_runs_to_the_same_values(tmp_path, capsys, rng):
    from dml_jax import cli

    model = dynamic_mlp(rng)
    onnx.save(model, str(tmp_path / "m.onnx"))
    x = rng.normal(size=(3, 6)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    out = str(tmp_path / "m.json")
    args = ["convert", str(tmp_path / "m.onnx"), out, "--input", f"x={tmp_path / 'x.npy'}"]
    assert cli.main(args) == 0
    capsys.readouterr()
    assert cli.main(["run", out]) == 0
    printed = capsys.readouterr().out
    line = next(t for t in printed.splitlines() if t.startswith("Resource 'output:y'"))
    values = np.asarray([float(v) for v in line.split(":", 2)[2].split(",")], np.float32)
    np.testing.assert_allclose(values, _mlp_reference(model, x).ravel(), rtol=1e-4, atol=1e-4)


def test_convert_reports_a_bad_model_in_one_line(tmp_path, capsys):
    from dml_jax import cli

    (tmp_path / "bad.onnx").write_bytes(b"garbage")
    assert cli.main(["convert", str(tmp_path / "bad.onnx"), str(tmp_path / "o.json")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "\n" not in err


def test_program_operators_leave_out_the_entry_identities(rng):
    options = SessionOptions()
    options.graph_optimization_level = "disable"  # the import's own operators
    program = InferenceSession(dynamic_mlp(rng), options).program([(2, 6)])
    assert program.operators() == ["GEMM", "ELEMENT_WISE_ADD", "ACTIVATION_RELU"]
    # at the default level the bias and the activation join the GEMM
    assert InferenceSession(dynamic_mlp(rng)).program([(2, 6)]).operators() == ["GEMM"]


def test_run_explain_marks_jax_lowerings_and_convert_refuses_them(tmp_path, capsys):
    """``dml-jax run --explain`` prints per ONNX node what it became: DML operators, or ``jax``
    for a JAX lowering (Det has no DirectML operator); such a model has no DML_GRAPH form."""
    from dml_jax import cli

    model = helper.make_model(
        helper.make_graph(
            [helper.make_node("Relu", ["a"], ["b"]), helper.make_node("Det", ["b"], ["c"])],
            "g",
            [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 3, 3])],
            [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["n"])],
        ),
        opset_imports=[helper.make_opsetid("", 13)],
    )
    path = str(tmp_path / "det.onnx")
    onnx.save(model, path)
    assert cli.main(["run", path, "--explain"]) == 0
    out = capsys.readouterr().out
    assert "node 0 (Relu): dml: ACTIVATION_RELU" in out
    assert "node 1 (Det): jax: JAX:Det" in out
    assert cli.main(["convert", path, str(tmp_path / "o.json")]) == 1
    assert "node 1 (Det): runs as a JAX lowering" in capsys.readouterr().err


_PLACEMENT = r"""
import json, os, sys, jax, numpy as np
from onnx import TensorProto, helper, numpy_helper
from dml_jax.onnx import InferenceSession

def model(weight):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 512])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 512])
    if weight:  # a 1 MiB matrix: an argument of the CPU program, on the session's device
        w = numpy_helper.from_array(np.eye(512, dtype=np.float32) * 2, "w")
        nodes, inits = [helper.make_node("MatMul", ["x", "w"], ["z"])], [w]
    else:
        nodes, inits = [helper.make_node("Add", ["x", "x"], ["z"])], []
    graph = helper.make_graph(nodes, "g", [x], [z], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()

d0, d1 = jax.devices()[:2]
x = np.arange(1024, dtype=np.float32).reshape(2, 512)
out = {}
for weight in (False, True):
    for name, device, default in (("second", d1, None), ("first, default second", d0, d1)):
        jax.config.update("jax_default_device", default)
        s = InferenceSession(model(weight), device=device)
        (z,) = s.run(None, {"x": x})
        (y,) = s._device_call({"x": x})()
        # a JAX array on the other device is moved to the session's
        other = d0 if device == d1 else d1
        (w,) = s.run(None, {"x": jax.device_put(x, other)})
        key = f"{'weight' if weight else 'none'} / {name}"
        same = bool(np.array_equal(z, 2 * x) and np.array_equal(w, z))
        out[key] = [int(y.devices().pop().id), same]
        jax.config.update("jax_default_device", None)
print(json.dumps(out))
# out without the interpreter's teardown: jaxlib 0.11's aborted there about one exit in six on
# the GPU machine ("terminate called without an active exception"), after the line above
sys.stdout.flush()
os._exit(0)
"""


def test_inputs_follow_the_session_device():
    # run passes host inputs to the call as they are only where the call runs on the
    # session's device anyway; on another device than JAX's default (or with a default device
    # set), with and without parameters there, the program still runs on the session's device
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2",
               JAX_PLATFORMS="cpu")  # fmt: skip
    root = Path(__file__).resolve().parents[1]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _PLACEMENT], capture_output=True, text=True,
                          env=env, timeout=240, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {
        "none / second": [1, True],
        "none / first, default second": [0, True],
        "weight / second": [1, True],
        "weight / first, default second": [0, True],
    }


def test_the_bench_call_holds_its_inputs_on_the_device(rng):
    """``_device_call`` (what the bench suites time) takes its inputs on the device once,
    where ``run`` would pass host arrays to the call: the timed calls copy nothing in."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 8])
    graph = helper.make_graph([helper.make_node("Add", ["x", "x"], ["z"])], "g", [x], [z])
    s = InferenceSession(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    )
    feed = {"x": rng.standard_normal((2, 8)).astype(np.float32)}
    call = s._device_call(feed)
    assert all(isinstance(a, jax.Array) for a in call.args[1:])
    np.testing.assert_array_equal(np.asarray(call()[0]), 2 * feed["x"])
