"""Generation (``dml_jax.onnx.generation``) and ``run``'s decode loops over the other exporters'
forms of a decoder step, against onnxruntime: ONNX Runtime GenAI's model-builder form
(GroupQueryAttention over a past buffer, its past and present shared, int4 MatMulNBits
projections) and Hugging Face Optimum's merged decoder (an If on ``use_cache_branch``). The
PyTorch exports' tests and the shared helpers are ``test_generation.py``'s."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from test_generation import GREEDY, _greedy_loop, _path  # this folder's

from dml_jax.bench import model_builder
from dml_jax.onnx import InferenceSession
from dml_jax.onnx.generation import Generator, GeneratorParams, find_roles, generate


def _gqa_decoder(vocab=50, d=32, heads=4, kv_heads=2, head=16, positions=64, nbits=False):
    """A one-layer decoder step in ONNX Runtime GenAI's model-builder form: GroupQueryAttention
    (com.microsoft) with rotary embeddings over its past, ``seqlens_k`` from the attention
    mask's sum and ``total_sequence_length`` from its length; with ``nbits`` its projections
    are int4 MatMulNBits (blocks of 32, symmetric: zero point 8)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    quantized = []

    def projection(x, name, k, n, y):
        if not nbits:
            return helper.make_node("MatMul", [x, name], [y])
        blocks = k // 32
        codes = rng.integers(0, 16, (n, blocks * 32)).astype(np.uint8)
        packed = (codes[:, 0::2] | (codes[:, 1::2] << 4)).astype(np.uint8)
        quantized.extend([
            numpy_helper.from_array(packed.reshape(n, blocks, 16), name + "_q"),
            numpy_helper.from_array(rng.uniform(0.1, 0.3, n * blocks).astype(np.float32),
                                    name + "_scales"),
        ])  # fmt: skip
        return helper.make_node("MatMulNBits", [x, name + "_q", name + "_scales"], [y],
                                domain="com.microsoft", K=k, N=n, bits=4, block_size=32)  # fmt: skip

    def w(name, *shape):
        return numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)

    freq = 1.0 / 100 ** (np.arange(head // 2) / (head // 2))
    angles = np.arange(positions)[:, None] * freq
    inits = [w("emb", vocab, d), w("wq", d, heads * head), w("wk", d, kv_heads * head),
             w("wv", d, kv_heads * head), w("wo", heads * head, vocab),
             numpy_helper.from_array(np.cos(angles).astype(np.float32), "cos"),
             numpy_helper.from_array(np.sin(angles).astype(np.float32), "sin")]  # fmt: skip
    lengths_inits, lengths_nodes = model_builder.sequence_lengths()
    inits += lengths_inits
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["x"]),
        projection("x", "wq", d, heads * head, "q"),
        projection("x", "wk", d, kv_heads * head, "k"),
        projection("x", "wv", d, kv_heads * head, "v"),
        *lengths_nodes,
        helper.make_node(
            "GroupQueryAttention",
            ["q", "k", "v", "past_key_values.0.key", "past_key_values.0.value", "seqlens_k",
             "total_sequence_length", "cos", "sin"],
            ["y", "present.0.key", "present.0.value"],
            domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, do_rotary=1,
        ),
        projection("y", "wo", heads * head, vocab, "logits"),
    ]  # fmt: skip
    if nbits:  # the float weights of the projections give way to their 4-bit codes
        inits = [i for i in inits if i.name not in ("wq", "wk", "wv", "wo")] + quantized
    cache = ["batch", kv_heads, "past", head]
    graph = helper.make_graph(
        nodes,
        "gqa_step",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "total"]),
         helper.make_tensor_value_info("past_key_values.0.key", TensorProto.FLOAT, cache),
         helper.make_tensor_value_info("past_key_values.0.value", TensorProto.FLOAT, cache)],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq", vocab]),
         helper.make_tensor_value_info("present.0.key", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("present.0.value", TensorProto.FLOAT, None)],
        inits,
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8)


def test_run_loop_buckets_a_group_query_attention_step():
    """A model-builder-style step (GroupQueryAttention over its past, seqlens_k from the mask):
    ``run`` pads the past and the mask to buckets, GroupQueryAttention writes each entry's new
    keys after its own length, and the presents are cut back to past + new positions; the
    tokens, logits and presents are onnxruntime's, with a program per bucket."""
    model = _gqa_decoder().SerializeToString()
    roles = find_roles(InferenceSession(model))
    assert roles.kind == "gqa" and roles.bucketable
    rows = [[5, 17, 42, 7], [3, 9, 11, 30]]
    want = _greedy_loop(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), rows,
                        30, positions=False)  # fmt: skip
    s = InferenceSession(model)
    np.testing.assert_array_equal(_greedy_loop(s, rows, 30, positions=False), want)
    assert len(s._programs) == 1 + 2  # the prompt, then pasts of 4 to 32 in buckets 16 and 32
    assert "buckets: past_key_values.0.key" in s.explain()
    feed = {"input_ids": np.array([[1], [2]]), "attention_mask": np.ones((2, 6), np.int64)}
    past = np.random.default_rng(0).standard_normal((2, 2, 5, 16)).astype(np.float32)
    feed["past_key_values.0.key"] = feed["past_key_values.0.value"] = past
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feed)
    for g, r in zip(s.run(None, feed), ref):
        assert g.shape == r.shape
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)


def _ort_gqa_loop(model: bytes, rows: list[list[int]], steps: int, process=None) -> np.ndarray:
    """onnxruntime's greedy loop over a GroupQueryAttention step as ONNX Runtime GenAI drives
    one: prompts right-padded (each entry's positions first), the mask's ones counting each
    entry's positions, the first token read at each prompt's end, the presents fed back
    (``process`` as ``_greedy_loop``'s)."""
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    batch, longest = len(rows), max(map(len, rows))
    lens = np.array([len(r) for r in rows])
    ids = np.zeros((batch, longest), np.int64)
    for b, row in enumerate(rows):
        ids[b, : len(row)] = row
    past = np.zeros((batch, 2, 0, 16), np.float32)
    feed_past = {"past_key_values.0.key": past, "past_key_values.0.value": past}
    out, history = [], [list(row) for row in rows]
    for t in range(steps):
        total = longest + t
        mask = (np.arange(total)[None] < (lens + t)[:, None]).astype(np.int64)
        logits, k, v = sess.run(None, {"input_ids": ids, "attention_mask": mask, **feed_past})
        last = logits[np.arange(batch), lens - 1] if t == 0 else logits[:, -1]
        last = last if process is None else process(last, history)
        ids = last.argmax(-1)[:, None]
        out.append(ids)
        for row, token in zip(history, ids[:, 0].tolist()):
            row.append(token)
        feed_past = {"past_key_values.0.key": k, "past_key_values.0.value": v}
    return np.concatenate(out, 1)


def test_generator_runs_a_group_query_attention_step():
    """The Generator over a model-builder-style step: its cache each entry's positions first
    (prompts right-padded for the model, the whole buffer in, the presents the next buffer),
    the mask in buckets; prompts of different lengths; onnxruntime's tokens."""
    model = _gqa_decoder().SerializeToString()
    s = InferenceSession(model)
    for rows in ([[5, 17, 42, 7], [3, 9, 11, 30]], [[5, 17, 42], [3, 9, 11, 30, 2, 8, 44]]):
        want = _ort_gqa_loop(model, rows, 24)
        assert len(set(want.ravel().tolist())) > 10  # a reference that can tell caches apart
        np.testing.assert_array_equal(generate(s, rows, 24), want)
    # int4 MatMulNBits projections (the model builder's quantized form) too.
    quantized = _gqa_decoder(nbits=True).SerializeToString()
    rows = [[5, 17, 42], [3, 9, 11, 30, 2, 8, 44]]
    want4 = _ort_gqa_loop(quantized, rows, 24)
    assert len(set(want4.ravel().tolist())) > 10
    np.testing.assert_array_equal(generate(InferenceSession(quantized), rows, 24), want4)
    np.testing.assert_array_equal(generate(s, rows, 24, steps_per_dispatch=5), want)
    g = Generator(s, GeneratorParams(s, max_length=7 + 24, batch_size=2))
    g.append_tokens([[5, 17, 42], [3, 9, 11, 30, 2, 8, 44]])
    while not g.is_done():
        g.generate_next_token()
    np.testing.assert_array_equal(g.generated, want)
    np.testing.assert_array_equal(g.get_sequence(0), [5, 17, 42, *want[0]])


def test_run_loop_buckets_a_shared_past_present_buffer():
    """ONNX Runtime GenAI's past-present sharing: the past is a buffer of the maximum length
    (48) fed back as it comes out, the mask grows a position a step. ``run`` pads the mask
    alone to buckets (GroupQueryAttention reads its sum and length); the tokens and the
    buffers are onnxruntime's, with a program per mask bucket, not per step."""
    model = _gqa_decoder().SerializeToString()
    ref = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    s = InferenceSession(model)

    def loop(sess, steps=30, capacity=48):
        ids = np.array([[5, 17, 42, 7], [3, 9, 11, 30]])
        mask = np.ones(ids.shape, np.int64)
        buf = np.zeros((2, 2, capacity, 16), np.float32)
        past = {"past_key_values.0.key": buf, "past_key_values.0.value": buf}
        out, buffers = [], []
        for _ in range(steps):
            logits, k, v = sess.run(None, {"input_ids": ids, "attention_mask": mask, **past})
            ids = logits[:, -1].argmax(-1)[:, None]
            out.append(ids)
            buffers.append(k)
            past = {"past_key_values.0.key": k, "past_key_values.0.value": v}
            mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
        return np.concatenate(out, 1), buffers

    want, want_k = loop(ref)
    got, got_k = loop(s)
    np.testing.assert_array_equal(got, want)
    for g, r in zip(got_k, want_k):
        assert g.shape == r.shape == (2, 2, 48, 16)
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-4)
    # The prompt (4 tokens, a mask of 4), then masks of 5 to 33 in buckets 16, 32 and 64.
    assert len(s._programs) == 1 + 3


def _merged(step: onnx.ModelProto) -> onnx.ModelProto:
    """Hugging Face Optimum's merged decoder made of a step export: an If on a
    ``use_cache_branch`` input whose then-branch is the step with its past and whose else-branch
    is the step over the pasts cut to no position (the decoder without a past; the first step
    feeds it dummy pasts)."""
    import copy

    from onnx import TensorProto, helper

    g = step.graph
    pasts = [i.name for i in g.input if i.name.startswith("past_key_values.")]
    outs = [o.name for o in g.output]

    def branch(name, prefix, empty):
        nodes, rename = [], {}
        if empty:
            for c, v in (("zero", 0), ("two", 2)):
                value = helper.make_tensor(c, TensorProto.INT64, [1], [v])
                nodes.append(helper.make_node("Constant", [], [prefix + c], value=value))
            for p in pasts:
                rename[p] = prefix + p
                nodes.append(helper.make_node("Slice", [p, prefix + "zero", prefix + "zero",
                                                        prefix + "two"], [prefix + p]))  # fmt: skip
        for n in g.node:
            m = copy.deepcopy(n)
            m.name = prefix + n.name
            del m.input[:], m.output[:]
            m.input.extend(rename.get(i, i) for i in n.input)
            for o in n.output:
                rename[o] = prefix + o
                m.output.append(rename[o])
            nodes.append(m)
        outputs = []
        for o in outs:
            nodes.append(helper.make_node("Identity", [rename[o]], [prefix + "out/" + o]))
            outputs.append(helper.make_empty_tensor_value_info(prefix + "out/" + o))
        return helper.make_graph(nodes, name, [], outputs)

    node = helper.make_node("If", ["use_cache_branch"], outs,
                            then_branch=branch("then", "t/", False),
                            else_branch=branch("else", "e/", True))  # fmt: skip
    use = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    graph = helper.make_graph([node], "merged", [*g.input, use], list(g.output), g.initializer)
    return helper.make_model(graph, opset_imports=step.opset_import, ir_version=step.ir_version)


def test_optimum_merged_decoder():
    """Optimum's merged decoder (an If on ``use_cache_branch``): the Generator takes the branch
    without the past for the prompt and the one with it after, bucketed (the Concat found in
    the then-branch), and gives PyTorch's tokens; ``run`` in Optimum's loop (dummy pasts of
    one position and use_cache_branch False first) pads the pasts of the cache branch alone
    and gives onnxruntime's tokens, a program per bucket."""
    model = _merged(onnx.load(_path("tiny_llama"))).SerializeToString()
    ref = GREEDY["tiny_llama"]
    s = InferenceSession(model)
    roles = find_roles(s)
    assert roles.use_cache_branch == "use_cache_branch" and roles.bucketable
    np.testing.assert_array_equal(generate(s, np.array(ref["prompt"]), 24), ref["greedy"])
    assert s.static_inputs == ("use_cache_branch",)
    assert len(s._programs) == 1 + 3  # the prompt (no past), then pasts in buckets 16 to 64

    def optimum_loop(sess, steps):
        prompt = np.array(ref["prompt"])
        ids, mask = prompt, np.ones(prompt.shape, np.int64)
        pos = np.broadcast_to(np.arange(5), (2, 5))
        names = [f"past_key_values.{i}.{k}" for i in range(2) for k in ("key", "value")]
        past = dict.fromkeys(names, np.zeros((2, 2, 1, 8), np.float32))  # dummies
        use, out = np.array([False]), []
        for _ in range(steps):
            logits, *presents = sess.run(None, {"input_ids": ids, "attention_mask": mask,
                                                "position_ids": pos, "use_cache_branch": use,
                                                **past})  # fmt: skip
            ids = logits[:, -1].argmax(-1)[:, None]
            out.append(ids)
            past, use = dict(zip(names, presents)), np.array([True])
            mask = np.concatenate([mask, np.ones((2, 1), np.int64)], 1)
            pos = pos[:, -1:] + 1
        return np.concatenate(out, 1)

    want = optimum_loop(ort.InferenceSession(model, providers=["CPUExecutionProvider"]), 24)
    np.testing.assert_array_equal(want, ref["greedy"])
    runs = InferenceSession(model)
    np.testing.assert_array_equal(optimum_loop(runs, 24), want)
    assert len(runs._programs) == 1 + 2  # the prompt, then pasts of 5 to 27 in 16 and 32
