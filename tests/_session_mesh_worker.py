"""Sharded ``InferenceSession`` checks on 4 simulated CPU devices, run in one subprocess by
tests/test_onnx_sharding.py (JAX fixes its device count at start; the suite keeps one device).

Every case runs the tiny transformer (examples/onnx_transformer.py) on a mesh and compares it with
the same model's one-device session; prints one JSON object on the last line of stdout:
``{"cases": {case_id: {"ok": bool, "detail": str}}, "seconds": float}``.
"""

from __future__ import annotations

import os

DEVICES = 4
CASES = (
    "data-parallel/run-fn-apply",
    "tensor-parallel/data2-model2",
    "tensor-parallel/model4-two-all-reduces-per-layer",
    "explicit/input-and-initializer-specs",
    "generation/sharded-cache-tokens-two-all-reduces-per-layer",
    "generation/int4-codes-split-two-all-reduces-per-layer",
    "tensor-parallel/dynamic-int8-weights-split",
    "tensor-parallel/static-qdq-int8-weights-split",
)

if __name__ == "__main__":
    flag = f"--xla_force_host_platform_device_count={DEVICES}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flag).strip()


def main() -> None:
    import json
    import time

    import jax
    import numpy as np
    from _worker_cases import recorder
    from _workers import collective_counts  # this folder's
    from jax.sharding import PartitionSpec as P
    from onnx_transformer import example_input, tiny_transformer

    from dml_jax import ValidationError, hlo
    from dml_jax.onnx import InferenceSession

    started = time.perf_counter()
    layers = 2
    model = tiny_transformer(layers=layers)
    one = InferenceSession(model)
    results: dict = {}
    record = recorder(results)

    def close(got, want):
        # Outputs are about 1 to 4 in size; the runs differ only by summation order.
        err = float(np.max(np.abs(np.asarray(got) - want)))
        return err <= 1e-5, f"max abs diff {err:.3g}"

    def program_of(s):
        (program,) = s._programs.values()
        return program

    def specs(program):
        """The parameters' specs by initializer name."""
        imp = program.imported
        return {p: s.spec for p, s in zip(imp.params, program.layout.constants) if p is not None}

    def data_parallel():
        x = example_input(8)
        (want,) = one.run(None, {"x": x})
        s = InferenceSession(model, mesh=jax.make_mesh((DEVICES,), ("data",)))
        (got,) = s.run(None, {"x": x})
        # Each device computes whole rows, but of fewer rows: XLA's CPU GEMM may block (and
        # round) them differently than for the whole batch.
        ok1, d1 = close(got, want)
        (y,) = s.fn(x)
        ok2, d2 = close(y, want)
        sharded = y.sharding.spec == P("data")
        compiled = jax.jit(s.fn).lower(x).compile()
        (z,) = compiled(x)
        ok3, d3 = close(z, want)
        # Inference on whole rows per device needs no communication at all.
        kinds = collective_counts(compiled.as_text())
        ok3 = ok3 and not kinds
        # apply with a changed parameter, against the one-device apply.
        params = {"l0.fc2.b": one.params["l0.fc2.b"] + 1.0}
        (a,) = s.apply(params, x)
        ok4, d4 = close(a, np.asarray(one.apply(params, x)[0]))
        replicated = all(spec == P() for spec in specs(program_of(s)).values())
        # fn_on: eager (the program's jit for the mesh's platform) and under jit
        program = program_of(s)
        asked = []
        original = program.jitted_for
        program.jitted_for = lambda platform: asked.append(platform) or original(platform)
        try:
            (e,) = s.fn_on()(x)
        finally:
            del program.jitted_for
        (j,) = jax.jit(s.fn_on())(x)
        ok5, d5 = close(e, want)
        ok6, d6 = close(j, want)
        ok5 = ok5 and asked == ["cpu"]
        ok = ok1 and ok2 and ok3 and ok4 and ok5 and ok6 and sharded and replicated
        return ok, (f"run {d1}; fn {d2} ({y.sharding.spec}); jit(fn) {d3} {kinds}; apply {d4}; "
                    f"fn_on {d5} {asked} / jit {d6}")  # fmt: skip

    def tensor_parallel():
        # From a file whose weights are external data: mapped, each device's block read when
        # it is placed.
        import tempfile

        import onnx

        folder = tempfile.mkdtemp()
        path = os.path.join(folder, "model.onnx")
        saved = onnx.ModelProto()
        saved.CopyFrom(model)  # saving as external data rewrites the proto it is given
        onnx.save_model(saved, path, save_as_external_data=True, location="weights.bin",
                        size_threshold=0)  # fmt: skip
        x = example_input(4)
        (want,) = one.run(None, {"x": x})
        s = InferenceSession(path, mesh=jax.make_mesh((2, 2), ("data", "model")))
        (got,) = s.run(None, {"x": x})
        ok, detail = close(got, want)
        program = program_of(s)
        q = s._mesh_params(program)["l0.q.w"]
        blocks = {tuple(b.data.shape) for b in q.addressable_shards}
        ok = ok and isinstance(s.params["l0.q.w"], np.memmap) and blocks == {(16, 8)}
        spec = specs(program)
        expected = {}
        for i in range(layers):
            for name in ("q", "k", "v", "fc1"):
                expected[f"l{i}.{name}.w"] = P(None, "model")  # columns
            for name in ("o", "fc2"):
                expected[f"l{i}.{name}.w"] = P("model")  # rows
        split = {k: v for k, v in spec.items() if v != P()}
        (y,) = s.fn(x)
        ok = ok and split == expected and y.sharding.spec == P("data")
        return ok, f"{detail}; l0.q.w blocks {blocks}; split weights {split}"

    def two_all_reduces():
        # The heads stay split through attention: the attention GEMMs keep batch and heads as
        # two dimensions (merged into one, XLA would gather Q, K and V on every layer).
        x = example_input(2)
        (want,) = one.run(None, {"x": x})
        s = InferenceSession(model, mesh=jax.make_mesh((DEVICES,), ("model",)))
        (got,) = s.run(None, {"x": x})
        ok, detail = close(got, want)
        program = program_of(s)
        args = s._placed(program, [x])
        text = program.jitted.lower(s._mesh_params(program), *args).compile().as_text()
        # Megatron's minimum: two all-reduces a layer, each of the layer's float32
        # activations (2 x 8 tokens of 16 features), and nothing else
        found = hlo.collectives(text)
        ok = ok and found == {
            "all-reduce": {"count": 2 * layers, "bytes": 2 * layers * 2 * 8 * 16 * 4}
        }
        return ok, f"{detail}; collectives {found}"

    def explicit():
        x = example_input(2)
        (want,) = one.run(None, {"x": x})
        shardings = {"x": P(None, "data"), "l0.fc1.w": P("data")}  # sequence; fc1 by rows
        s = InferenceSession(model, mesh=jax.make_mesh((DEVICES,), ("data",)), shardings=shardings)
        (got,) = s.run(None, {"x": x})
        ok, detail = close(got, want)
        program = program_of(s)
        ok = ok and program.layout.inputs[0].spec == P(None, "data")
        ok = ok and specs(program)["l0.fc1.w"] == P("data")
        # The batch (2) does not divide over 4 devices: the output stays replicated.
        ok = ok and program.layout.outputs[0].spec == P()
        # Data parallelism with a batch that does not divide: an error naming the input.
        dp = InferenceSession(model, mesh=jax.make_mesh((DEVICES,), ("data",)))
        try:
            dp.run(None, {"x": example_input(3)})
            return False, f"{detail}; batch 3 over 4 devices ran"
        except ValidationError as e:
            message = str(e)
        ok = ok and message.startswith("ONNX: input 'x': data parallelism splits dimension 0")
        ok = ok and message.endswith("shardings={'x': PartitionSpec()}")
        # An explicit spec that does not divide: the same error, naming the sharding.
        bad = InferenceSession(model, mesh=dp.mesh, shardings={"x": P("data")})
        try:
            bad.run(None, {"x": example_input(2)})
            return False, f"{detail}; batch 2 split 4 ways ran"
        except ValidationError as e:
            second = str(e)
        ok = ok and second.startswith("ONNX: input 'x': its sharding splits dimension 0 (size 2")
        return ok, f"{detail}; {message}; {second}"

    # the tiny LLaMA decoder's step (2 layers) at batch 2: Megatron's two all-reduces a layer,
    # each of the step's 2 x 1 tokens of 32 float32 features, and nothing else
    step_minimum = {"all-reduce": {"count": 2 * 2, "bytes": 2 * 2 * 2 * 32 * 4}}

    def generated_on(path, mesh, prompts, new):
        """``Generator`` over ``path`` on ``mesh``: (it, after ``new`` tokens of the prompts,
        the parameters of its decode step by name and that step's collectives, as compiled)."""
        import jax.numpy as jnp

        from dml_jax.onnx.generation import Generator, GeneratorParams

        s = InferenceSession(path, mesh=mesh)
        length = max(map(len, prompts)) + new
        g = Generator(s, GeneratorParams(s, max_length=length, batch_size=len(prompts)))
        g.append_tokens(prompts)
        g.generate_until_done()
        fn, program = g._fns.steps_fn(len(prompts), g._step_key(g._length - 1), 0, 1)
        state = g._state()
        lowered = fn.lower(g._fns.params_for(program), state, jnp.int32(g._length - 1))
        text = lowered.compile().as_text()
        return g, s._run_params(program), hlo.collectives(text)

    def generation():
        # The tiny LLaMA decoder step (2 layers, 4 heads, 2 key-value heads): greedy tokens on a
        # (data, model) mesh and on model axes of 2 and 4 equal the one-device ones for prompts
        # of two lengths; on 2 (which divides the key-value heads) the cache is split over the
        # heads; on 4 (which does not) the key and value projections stay whole (split, their
        # blocks would cut the heads and the attention's inputs would move between devices), the
        # query heads split; a decode step on either communicates only Megatron's minimum.
        # Beam search's sequences (data x model) and a chat's later turn (model 2) are the
        # one-device ones too, and on model 2 a second generation compiled ahead compiles nothing
        # more (each check on one mesh: the suite's time).
        from jax import monitoring

        from dml_jax.onnx.generation import Generator, GeneratorParams, generate

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(here, "data", "decoders", "tiny_llama_step.onnx")
        prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
        want = generate(InferenceSession(path), prompts, 24)
        beams = {"num_beams": 3, "num_return_sequences": 2, "eos_token_id": 52}
        want_beams = generate(InferenceSession(path), prompts, 12, **beams)
        details, ok = [], True
        for shape, names in (((2, 2), ("data", "model")), ((2,), ("model",)), ((4,), ("model",))):
            g, _, found = generated_on(path, jax.make_mesh(shape, names), prompts, 24)
            same = bool((g.generated == want).all())
            # the cache {positions, layers' keys and values, batch, heads, head size}
            spec = tuple(g._cache.sharding.spec) + (None,) * 5
            split = spec[3] == "model"
            ok = ok and same and split == (shape != (4,))
            if names == ("model",):
                ok = ok and found == step_minimum
            # a second generation's steps compiled ahead (on the model axis of 2): it then
            # compiles nothing (the length each dispatch hands the next stays on the mesh as
            # compile_ahead traced it)
            if shape != (2,):
                details.append(f"{shape}: tokens equal {same}, cache {spec}, step collectives "
                               f"{found}")  # fmt: skip
                if shape == (2, 2):  # beam search's rows gathered from the sharded cache
                    searched = generate(g.session, prompts, 12, **beams)
                    beams_same = searched.shape == want_beams.shape and bool(
                        (searched == want_beams).all()
                    )
                    ok = ok and beams_same
                    details.append(f"beam search's sequences equal {beams_same}")
                continue
            again, compiled = Generator(g.session, g.params), []

            def count(event, duration, compiled=compiled, **kw):
                if event == "/jax/core/compile/backend_compile_duration":
                    compiled.append(duration)

            monitoring.register_event_duration_secs_listener(count)
            try:
                again.append_tokens(prompts)
                compiled.clear()
                again.compile_ahead()
                compiled.clear()
                again.generate_until_done()
            finally:
                monitoring.unregister_event_duration_listener(count)
            ok = ok and not compiled and bool((again.generated == want).all())
            # a chat's later turn on a model axis (one sequence: no data axis divides it), the
            # turn through the sharded cache (on 2, the cache split over the heads)
            turned = []
            for session in (g.session, InferenceSession(path)):
                chat = Generator(session, GeneratorParams(session, max_length=32))
                for turn in ([5, 6, 7], [9, 9]):
                    chat.append_tokens([turn])
                    for _ in range(3):
                        chat.generate_next_token()
                turned.append(chat.get_sequence(0).tolist())
            ok = ok and turned[0] == turned[1]
            details.append(f"{shape}: tokens equal {same}, cache {spec}, step collectives {found}, "
                           f"compiles after compile_ahead {len(compiled)}, a later turn's "
                           f"{turned[0] == turned[1]}")  # fmt: skip
        return ok, "; ".join(details)

    def int4_held():
        # The tiny LLaMA decoder with its MatMul weights as 4-bit MatMulNBits, its codes held
        # (every constant of at least a byte, here): on a 2-device model axis the codes enter
        # the program as arguments, not compiled in, those of the column-parallel products (Q,
        # K, V, gate and up, apart: the session leaves ParallelQuantizedGemms out on a model
        # axis) split by N, each device holding its block; the greedy tokens equal the
        # one-device session's; a decode step communicates only Megatron's two all-reduces a
        # layer (the codes whole, or Q, K and V joined, it added collective-permutes).
        import tempfile

        import onnx

        from dml_jax.bench import decoders
        from dml_jax.onnx import program as program_module
        from dml_jax.onnx.generation import generate

        here = os.path.dirname(os.path.abspath(__file__))
        path = os.path.join(tempfile.mkdtemp(), "int4.onnx")
        replaced = decoders.quantize_int4(
            os.path.join(here, "data", "decoders", "tiny_llama_step.onnx"), path
        )
        saved = program_module.HELD_MIN_BYTES
        program_module.HELD_MIN_BYTES = 1
        try:
            prompts = [[5, 6, 7, 8, 9], [11, 12, 13]]
            want = generate(InferenceSession(path), prompts, 12)
            g, params, found = generated_on(path, jax.make_mesh((2,), ("model",)), prompts, 12)
        finally:
            program_module.HELD_MIN_BYTES = saved
        held = {k: v for k, v in params.items() if k.startswith(program_module.HELD)}
        same = bool((np.asarray(g.generated) == np.asarray(want)).all())
        split = [k for k, v in held.items() if any(v.sharding.spec)]
        blocks = all(
            {sh.data.shape for sh in held[k].addressable_shards} == {(held[k].shape[0] // 2,)}
            for k in split
        )
        # layout() names each split code by its MatMulNBits B initializer
        initializers = {i.name for i in onnx.load(path).graph.initializer}
        named = [n for n, spec in g.session.layout().items() if n in initializers and any(spec)]
        blocks = blocks and len(named) == len(split)
        ok = replaced > 0 and same and len(split) == 5 * 2 and blocks and found == step_minimum
        detail = f"{replaced} MatMulNBits; tokens equal {same}; held arguments {len(held)}, "
        return ok, detail + f"split {len(split)} (blocks {blocks}); step collectives {found}"

    def quantized_split(quantize, held: bool = False):
        """The tiny transformer written by ``quantize(float_path, path)`` run on a 4-device model
        axis: whether it equals the one-device run, (columns, rows): its constants split by
        columns and by rows, its collectives, and the detail. ``held``: every constant passed
        as an argument (``Program.held``), the detail saying whether each split one entered
        split (each device holding its block)."""
        import tempfile

        import onnx

        from dml_jax.onnx import program as program_module

        folder = tempfile.mkdtemp()
        f32, path = os.path.join(folder, "model.onnx"), os.path.join(folder, "int8.onnx")
        onnx.save(tiny_transformer(layers=layers), f32)
        quantize(f32, path)
        x = example_input(2)
        saved = program_module.HELD_MIN_BYTES
        program_module.HELD_MIN_BYTES = 1 if held else saved
        try:
            (want,) = InferenceSession(path).run(None, {"x": x})
            s = InferenceSession(path, mesh=jax.make_mesh((DEVICES,), ("model",)))
            (got,) = s.run(None, {"x": x})
            program = program_of(s)
            params = s._mesh_params(program)
        finally:
            program_module.HELD_MIN_BYTES = saved
        ok, detail = close(got, want)
        constants = program.layout.constants
        split = [str(c.spec) for c in constants if c is not None and any(c.spec)]
        shape = (split.count("P(None, 'model')"), split.count("P('model',)"))
        entered = [
            params[k].sharding.spec == constants[h.target].spec
            for k, h in program.held.items()
            if isinstance(h.target, int) and constants[h.target] is not None
        ]
        if held:
            ok = ok and len(entered) == len(split) and all(entered)
            detail += f"; held and split {sum(entered)} of {len(split)}"
        # layout() names each split constant by its initializer (integer weights included)
        initializers = {i.name for i in onnx.load(path).graph.initializer}
        named = [n for n, spec in s.layout().items() if n in initializers and any(spec)]
        ok = ok and len(named) == len(split)
        detail += f"; {len(named)} named split by layout()"
        args = s._placed(program, [x])
        text = program.jitted.lower(params, *args).compile().as_text()
        return ok, shape, hlo.collectives(text), f"{detail}; split (columns, rows) {shape}"

    activations = 2 * layers * (2 * 8 * 16 * 4)  # two all-reduces a layer of 2 x 8 x 16 floats

    def dynamic_int8():
        # quantize_dynamic: MatMulInteger on int8 weights, which are constants, not parameters.
        # The weights split as the float ones are (Q, K, V and fc1 by columns, o and fc2 by
        # rows), the integer sums exact; Megatron's two all-reduces a layer, and beside them only
        # single values (the dynamic quantization's range of a row-split input).
        from onnxruntime.quantization import QuantType, quantize_dynamic

        # (its constants held, as a GPU session holds weights of 16 KiB or more: the split
        # ones placed split)
        ok, shape, found, detail = quantized_split(
            lambda src, dst: quantize_dynamic(src, dst, weight_type=QuantType.QInt8), held=True
        )
        sums = found.pop("all-reduce", {"count": 0, "bytes": 0})
        small = sums["count"] - 2 * layers
        ok = ok and shape == (4 * layers, 2 * layers) and not found
        ok = ok and small >= 0 and 0 <= sums["bytes"] - activations <= 8 * small
        return ok, f"{detail}; all-reduces {sums}"

    def static_qdq():
        # quantize_static in the QDQ format: DequantizeLinear of int8 weights into the MatMuls,
        # activations quantized and dequantized around them (the optimizer fuses some pairs
        # into integer products, which it appends to the graph). The int8 weights split through
        # their dequantization, and exactly Megatron's two all-reduces a layer.
        from onnxruntime import quantization as q

        class Reader(q.CalibrationDataReader):
            def __init__(self):
                self._it = iter({"x": example_input(2, seed=k)} for k in range(4))

            def get_next(self):
                return next(self._it, None)

        def quantize(src, dst):
            q.quantize_static(src, dst, Reader(), quant_format=q.QuantFormat.QDQ,
                              activation_type=q.QuantType.QInt8, weight_type=q.QuantType.QInt8)  # fmt: skip

        ok, shape, found, detail = quantized_split(quantize)
        minimum = {"all-reduce": {"count": 2 * layers, "bytes": activations}}
        ok = ok and shape == (4 * layers, 2 * layers) and found == minimum
        return ok, f"{detail}; collectives {found}"

    record(CASES[0], data_parallel)
    record(CASES[1], tensor_parallel)
    record(CASES[2], two_all_reduces)
    record(CASES[3], explicit)
    record(CASES[4], generation)
    record(CASES[5], int4_held)
    record(CASES[6], dynamic_int8)
    record(CASES[7], static_qdq)
    seconds = round(time.perf_counter() - started, 2)
    print(json.dumps({"cases": results, "seconds": seconds, "devices": len(jax.devices())}))


if __name__ == "__main__":
    main()
