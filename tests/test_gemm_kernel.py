"""The GEMM kernel with its epilogue (dml_jax.kernels.gemm) and the graph epilogues that use it.

Any machine: which problems the kernel takes (``plan``, the C layouts, the jax releases),
which graph pairs ``compile_graph`` fuses (a GEMM node whose output one GELU, ADD or attention
node alone reads) and which it leaves (a second reader, a graph output, a fused activation,
float32, several devices). With the CUDA choice forced and the kernel replaced by ``model``, a
jnp statement of its contract: a GEMM with C compiled alone takes the kernel and equals the
lax lowering; a small GPT stack equals the unfused graph, its attention still sees the
constant mask, and its gradient (and vmap) is the unfused one. ``model`` itself is held to the
lax lowerings of the same nodes, every form, within one float16 unit (|got - want| <=
2^-10 |want| + 2^-10 max |want|). On a Hopper GPU: the kernel against ``model``'s GEMM node
and the lax GELU and ADD nodes within the same tolerance, Q, K and V written apart, and the
GPT stack's program holding the kernel and agreeing with the graph without fast paths.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _gemm_model import model  # this folder's

import dml_jax
import dml_jax as dml
import dml_jax.ops.attention
from dml_jax import compile as compile_module
from dml_jax import fastpath
from dml_jax.graph import fusing, validated_plan
from dml_jax.graph import tracing as graph_module
from dml_jax.kernels import attention as attention_kernel
from dml_jax.kernels import gemm as K

pytestmark = pytest.mark.kernel_matrix

T = dml.TensorDesc
In, Out, Mid = dml.InputGraphEdge, dml.OutputGraphEdge, dml.IntermediateGraphEdge
HOPPER = K.hopper()
needs_hopper = pytest.mark.skipif(not HOPPER, reason="needs a Hopper GPU (WGMMA, TMA)")
TOL = 2.0**-10  # |got - want| <= TOL |want| + TOL max |want|: one float16 unit


@pytest.fixture
def forced_cuda(monkeypatch):
    """CUDA's choice on this machine, with the kernel replaced by ``model``; records calls."""
    calls = []

    def fake(*args, **kw):
        calls.append((args[2], {k: v is not None if k in ("c", "residual") else v
                                for k, v in kw.items()}))  # fmt: skip
        return model(*args, **kw)

    def attention_lax(d, *arrays, qkv=None):  # the attention's lax lowering, fed the parts
        names = [name for name, _ in d.input_slots()]
        arrays = list(arrays)
        if qkv is not None:
            arrays[names.index("StackedQueryKeyValueTensor")] = jnp.stack(qkv, axis=3)
        # what the cuDNN path would see of the mask: the constant, by the attention's own slot
        calls.append(("mask", fastpath.known_input(names.index("MaskTensor"))))
        return tuple(dml_jax.ops.attention.lower_attention(d, *arrays))

    monkeypatch.setattr(fastpath, "cuda_present", lambda: True)
    monkeypatch.setattr(fastpath, "_platform_choice", lambda cuda, default: cuda)
    monkeypatch.setattr(K, "hopper", lambda: True)
    monkeypatch.setattr(K, "fused_gemm", fake)
    monkeypatch.setattr(attention_kernel, "applies", lambda d: True)
    monkeypatch.setattr(attention_kernel, "lower", attention_lax)
    graph_module._compile_graph_cached.cache_clear()
    compile_module._compile_cached.cache_clear()
    yield calls
    graph_module._compile_graph_cached.cache_clear()
    compile_module._compile_cached.cache_clear()


# ---------------------------------------------------------------------------------------------
# What the kernel takes


@pytest.mark.parametrize(
    "a, b, trans_b, dtype, want",
    [
        ((256, 64), (512, 64), True, "float16", K.View(256, 512, 64, True)),
        ((1, 1, 128, 128), (1, 1, 128, 256), False, "float16", K.View(128, 256, 128, False)),
        ((128, 64), (256, 64), True, jnp.bfloat16, None),  # not a DirectML type
        ((128, 64), (256, 64), True, "float32", None),  # float32: lax
        ((100, 64), (256, 64), True, "float16", None),  # M not a multiple of 128
        ((128, 64), (128, 64), True, "float16", None),  # N not a multiple of 256
        ((128, 48), (256, 48), True, "float16", None),  # K not a multiple of 64
        ((2, 128, 64), (2, 256, 64), True, "float16", None),  # a batch
        ((128, 64), (256, 128), True, "float16", None),  # K disagrees
    ],
)
def test_plan(a, b, trans_b, dtype, want):
    assert K.plan(a, b, False, trans_b, dtype) == want


def test_plan_leaves_a_transposed_to_lax():
    assert K.plan((64, 128), (256, 64), True, True, "float16") is None


def _gemm(c_strides="row", m=128, n=256, k=64, dtype="FLOAT16", **kw):
    a, b, out = T(dtype, (m, k)), T(dtype, (n, k)), T(dtype, (m, n))
    c = None
    if c_strides == "row":
        c = T(dtype, (m, n), strides=(0, 1))
    elif c_strides == "full":
        c = T(dtype, (m, n))
    elif c_strides == "column":
        c = T(dtype, (m, n), strides=(1, 0))
    return dml.GemmOperatorDesc(a, b, c, out, trans_b="TRANSPOSE", **kw)


@pytest.mark.parametrize(
    "c, want", [("row", "row"), ("full", "full"), (None, "none"), ("column", None)]
)
def test_c_forms(c, want):
    assert K._c_form(_gemm(c)) == want


def test_the_gemm_fast_path_takes_a_c_term_only(monkeypatch):
    monkeypatch.setattr(K, "hopper", lambda: True)
    assert K._applies_gemm(_gemm("row")) and K._applies_gemm(_gemm("full"))
    assert not K._applies_gemm(_gemm(None))  # XLA's GEMM is as fast without C
    assert not K._applies_gemm(_gemm("column"))
    relu = dml.ActivationReluOperatorDesc(T("FLOAT16", (128, 256)), T("FLOAT16", (128, 256)))
    assert not K._applies_gemm(_gemm("row", fused_activation=relu))
    monkeypatch.setattr(K, "hopper", lambda: False)
    assert not K._applies_gemm(_gemm("row"))


# ---------------------------------------------------------------------------------------------
# Which graph pairs are fused


def _pair_graph(consumer: str, *, also_output=False, second_reader=False, dtype="FLOAT16"):
    """x -> GEMM (W, bias row) -> consumer (GELU, or ADD with the graph input r)."""
    m, n, k = 128, 256, 64
    y = T(dtype, (m, n))
    gemm = _gemm("row", m, n, k, dtype)
    if consumer == "gelu":
        tail = dml.ActivationGeluOperatorDesc(y, y)
        inputs = [In(0, 0, 0), In(1, 0, 1), In(2, 0, 2)]
        mids = [Mid(0, 0, 1, 0)]
    else:
        fused = dml.ActivationReluOperatorDesc(y, y) if consumer == "add1 relu" else None
        tail = (
            dml.ElementWiseAdd1OperatorDesc(y, y, y, fused_activation=fused)
            if consumer.startswith("add1")
            else dml.ElementWiseAddOperatorDesc(y, y, y)
        )
        inputs = [In(0, 0, 0), In(1, 0, 1), In(2, 0, 2), In(3, 1, 0)]
        mids = [Mid(0, 0, 1, 1)]  # the GEMM feeds the ADD's second input
    nodes = [gemm, tail]
    outputs = [Out(1, 0, 0)]
    if also_output:
        outputs.append(Out(0, 0, 1))
    if second_reader:
        nodes.append(dml.ElementWiseIdentityOperatorDesc(y, y))
        mids.append(Mid(0, 0, 2, 0))
        outputs.append(Out(2, 0, len(outputs)))
    count = 3 if consumer == "gelu" else 4
    return dml.GraphDesc(count, len(outputs), tuple(nodes), tuple(inputs), tuple(outputs),
                         tuple(mids))  # fmt: skip


def _pairs(graph, monkeypatch):
    monkeypatch.setattr(K, "hopper", lambda: True)
    plan = validated_plan(graph, max(dml.FeatureLevel))
    return {q: (p, slot) for q, (p, slot, _) in fusing.epilogue_pairs(graph, plan).items()}


@pytest.mark.parametrize("consumer, want", [("gelu", {1: (0, 0)}), ("add", {1: (0, 1)}),
                                            ("add1", {1: (0, 1)})])  # fmt: skip
def test_a_gemm_and_its_only_reader_are_one_step(consumer, want, monkeypatch):
    assert _pairs(_pair_graph(consumer), monkeypatch) == want


@pytest.mark.parametrize(
    "kw",
    [
        {"also_output": True},  # the GEMM's output is also a graph output
        {"second_reader": True},  # and read by a second node
        {"consumer": "add1 relu"},  # the ADD has its own fused activation
        {"dtype": "FLOAT32"},  # not a type of the kernel
    ],
)
def test_pairs_left_apart(kw, monkeypatch):
    kw = {"consumer": "gelu", **kw}
    assert _pairs(_pair_graph(**kw), monkeypatch) == {}


def test_a_gemm_with_a_full_c_keeps_its_add_apart(monkeypatch):
    # C and R both read by pieces would overflow the kernel's shared memory
    monkeypatch.setattr(K, "hopper", lambda: True)
    y = T("FLOAT16", (128, 256))
    add = dml.ElementWiseAddOperatorDesc(y, y, y)
    assert K._applies_add(_gemm("row"), add, 1) and K._applies_add(_gemm(None), add, 1)
    assert not K._applies_add(_gemm("full"), add, 1)
    gelu = dml.ActivationGeluOperatorDesc(y, y)
    assert K._applies_gelu(_gemm("full"), gelu, 0)


def test_no_pairs_without_a_hopper_gpu(monkeypatch):
    monkeypatch.setattr(K, "hopper", lambda: False)
    graph = _pair_graph("gelu")
    plan = validated_plan(graph, max(dml.FeatureLevel))
    assert fusing.epilogue_pairs(graph, plan) == {}


# ---------------------------------------------------------------------------------------------
# What a fused step computes (the kernel's jnp model on this machine)


def _gpt():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))
    import networks

    net = networks.gpt_stack(1, 128, 256, 4, 2, "FLOAT16")
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float16)
    return net, net.arguments(x=x)


def test_gpt_stack_with_fused_steps_equals_the_unfused_graph(forced_cuda):
    net, args = _gpt()
    got = np.asarray(jax.jit(net.compile().fn)(*args), np.float32)
    # per layer: the QKV projection (bias; queries, keys and values apart for the attention),
    # the output projection (bias + residual), fc1 (bias + GELU) and fc2 (bias + residual)
    masks = [known for what, known in forced_cuda if isinstance(what, str)]
    assert len(masks) == 2  # one attention a layer, each seeing the constant causal mask
    for known in masks:
        causal = np.tril(np.ones((128, 128), known.dtype))
        np.testing.assert_array_equal(known, np.broadcast_to(causal, known.shape))
    forms = [
        (kw.get("c", False), kw.get("c_row", False), kw.get("gelu", False),
         kw.get("residual", False), kw.get("split", 0))
        for what, kw in forced_cuda
        if not isinstance(what, str)
    ]  # fmt: skip
    layer = [(True, True, False, False, 64), (True, True, False, True, 0),
             (True, True, True, False, 0), (True, True, False, True, 0)]  # fmt: skip
    assert forms == layer * 2
    want = np.asarray(jax.jit(net.compile(fast_paths=False).fn)(*args), np.float32)
    # one float16 unit of the output's scale: the model's GELU differs from XLA's erf
    np.testing.assert_allclose(got, want, rtol=2**-9, atol=2**-9 * np.abs(want).max())


@pytest.mark.parametrize(
    "trans_b, c, alpha, beta",
    [("TRANSPOSE", "row", 1.0, 1.0), ("NONE", "full", 0.5, -2.0), ("NONE", "row", 1.0, 0.25)],
)
def test_a_gemm_with_c_compiled_alone_takes_the_kernel(trans_b, c, alpha, beta, forced_cuda):
    # {1, 1, M, K} tensors as DirectML writes them; B either way; C a bias row or full
    m, n, k = 128, 256, 192
    b_sizes = (1, 1, n, k) if trans_b == "TRANSPOSE" else (1, 1, k, n)
    out = T("FLOAT16", (1, 1, m, n))
    c_desc = T("FLOAT16", (1, 1, m, n), strides=(0, 0, 0, 1)) if c == "row" else out
    desc = dml.GemmOperatorDesc(
        T("FLOAT16", (1, 1, m, k)), T("FLOAT16", b_sizes), c_desc, out, trans_b=trans_b,
        alpha=alpha, beta=beta,
    )  # fmt: skip
    rng = np.random.default_rng(5)
    a = jnp.asarray(rng.standard_normal((1, 1, m, k)), jnp.float16)
    b = jnp.asarray(rng.standard_normal(b_sizes) / np.sqrt(k), jnp.float16)
    cv = jnp.asarray(rng.standard_normal((1, 1, m, n)), jnp.float16)
    if c == "row":
        cv = jnp.broadcast_to(cv[:, :, :1], cv.shape)
    got = np.asarray(dml.compile_operator(desc)(a, b, cv), np.float32)
    assert [(v, kw["c_row"]) for v, kw in forced_cuda] == [
        (K.View(m, n, k, trans_b == "TRANSPOSE"), c == "row")
    ]
    want = np.asarray(dml.compile_operator(desc, fast_paths=False)(a, b, cv), np.float32)
    assert got.shape == want.shape == (1, 1, m, n)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * np.abs(want).max())


def test_the_gpt_stacks_gradient_with_fused_steps_is_the_unfused_one(forced_cuda):
    # derivatives come from the two lax lowerings in sequence, the QKV projection's output read
    # by the attention through its stacked {B, S, H, 3, D} desc (a reinterpreting edge)
    net, args = _gpt()

    def loss(fn):
        return lambda x: jnp.sum(fn(x, *args[1:]).astype(jnp.float32) ** 2)

    plan = validated_plan(net.graph, max(dml.FeatureLevel), reinterpret=True)
    pairs = fusing.epilogue_pairs(net.graph, plan)
    kinds = sorted(net.graph.nodes[q].operator_type for q in pairs)
    assert kinds.count("DML_OPERATOR_MULTIHEAD_ATTENTION") == 2 and len(kinds) == 8
    got = jax.jit(jax.grad(loss(net.compile().fn)))(jnp.asarray(args[0]))
    assert forced_cuda == []  # the gradient never traces the kernel
    want = jax.jit(jax.grad(loss(net.compile(fast_paths=False).fn)))(jnp.asarray(args[0]))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_fused_steps_differentiate_and_vmap_through_lax(forced_cuda):
    graph = _pair_graph("gelu")
    g = dml.compile_graph(graph)
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.standard_normal((128, 64)).astype(np.float16))
    w = jnp.asarray((rng.standard_normal((256, 64)) / 8).astype(np.float16))
    bias = jnp.asarray(rng.standard_normal((128, 256)).astype(np.float16))
    ref = dml.compile_graph(graph, fast_paths=False)

    def loss(fn):
        return lambda x: jnp.sum(fn(x, w, bias).astype(jnp.float32))

    calls_before = len(forced_cuda)
    got = jax.grad(loss(g.fn))(x)
    want = jax.grad(loss(ref.fn))(x)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    batched = jax.vmap(g.fn, in_axes=(0, None, None))(jnp.stack([x, -x]), w, bias)
    np.testing.assert_array_equal(
        np.asarray(batched), np.asarray(jax.vmap(ref.fn, in_axes=(0, None, None))(
            jnp.stack([x, -x]), w, bias))
    )  # fmt: skip
    assert len(forced_cuda) >= calls_before  # the forward pass may use the model; vmap does not


# ---------------------------------------------------------------------------------------------
# The kernel on a Hopper GPU


FORMS = {
    "bias": {"c": "row"},
    "full C, alpha, beta": {"c": "full", "alpha": 0.5, "beta": -2.0},
    "bias, GELU": {"c": "row", "gelu": True},
    "bias, residual": {"c": "row", "residual": True},
    "no C, GELU": {"gelu": True},
    "bias, GELU, residual": {"c": "row", "gelu": True, "residual": True},
    "full C, GELU": {"c": "full", "gelu": True},
    "residual": {"residual": True},
}


def _operands(form: str, m: int, n: int, k: int, b_nk: bool = True):
    """A, B and the kernel's keyword arguments (C, R and the form's flags) for ``FORMS[form]``."""
    kw = dict(FORMS[form])
    rng = np.random.default_rng(len(form) + m)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((n, k) if b_nk else (k, n)) / np.sqrt(k), jnp.float16)
    c = {"row": jnp.asarray(rng.standard_normal((1, n)), jnp.float16),
         "full": jnp.asarray(rng.standard_normal((m, n)), jnp.float16)}.get(kw.pop("c", None))  # fmt: skip
    r = jnp.asarray(rng.standard_normal((m, n)), jnp.float16) if kw.pop("residual", False) else None
    return a, b, dict(kw, c=c, c_row=c is not None and c.shape[0] == 1, residual=r)


def _lax_tail(y, gelu: bool, r):
    """The ACTIVATION_GELU node (where ``gelu``), then the ELEMENT_WISE_ADD node with ``r``
    (where given), through their lax lowerings."""
    d = T("FLOAT16", y.shape)
    if gelu:
        y = dml.compile_operator(dml.ActivationGeluOperatorDesc(d, d), fast_paths=False)(y)
    if r is not None:
        y = dml.compile_operator(dml.ElementWiseAddOperatorDesc(d, d, d), fast_paths=False)(y, r)
    return y


def _lax_nodes(a, b, c, r, *, alpha=1.0, beta=1.0, gelu=False):
    """The same work as DML nodes through their lax lowerings: GEMM (B as {N, K}), then
    ``_lax_tail``."""
    m, k = a.shape
    n = b.shape[0]
    out = T("FLOAT16", (m, n))
    c_desc = None
    if c is not None:
        c_desc = T("FLOAT16", (m, n), strides=(0, 1)) if c.shape[0] == 1 else out
        c = jnp.broadcast_to(c, (m, n))
    gemm = dml.GemmOperatorDesc(
        T("FLOAT16", (m, k)), T("FLOAT16", (n, k)), c_desc, out, trans_b="TRANSPOSE",
        alpha=alpha, beta=beta,
    )  # fmt: skip
    y = dml.compile_operator(gemm, fast_paths=False)(a, b, *([] if c is None else [c]))
    return _lax_tail(y, gelu, r)


@pytest.mark.parametrize("form", FORMS)
def test_the_kernels_contract_is_the_lax_nodes_within_the_tolerance(form):
    # The kernel rounds the GEMM node once (product, Alpha, Beta and C in float32); the lax
    # lowering rounds the float16 product first, then applies them (docs/semantics.md). The
    # GPU tests hold the kernel to ``model``; this holds ``model`` to the lax nodes.
    m, n, k = 128, 256, 320
    a, b, kw = _operands(form, m, n, k)
    got = np.asarray(model(a, b, K.View(m, n, k, True), **kw), np.float32)
    lax_kw = {key: kw[key] for key in ("alpha", "beta", "gelu") if key in kw}
    want = np.asarray(_lax_nodes(a, b, kw["c"], kw["residual"], **lax_kw), np.float32)
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * np.abs(want).max())


@needs_hopper
@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
@pytest.mark.parametrize("b_nk", [True, False])
@pytest.mark.parametrize("form", FORMS)
def test_kernel_matches_its_contract(form, b_nk, schedule):
    # the kernel against ``model``'s GEMM node, then the GELU and ADD nodes' lax lowerings
    m, n, k = 256, 512, 320
    a, b, kw = _operands(form, m, n, k, b_nk)
    v = K.plan((m, k), b.shape, False, b_nk, jnp.float16)
    got = jax.jit(lambda a, b: K.fused_gemm(a, b, v, schedule=schedule, **kw))(a, b)
    gemm = jax.jit(lambda a, b: model(a, b, v, **dict(kw, gelu=False, residual=None)))(a, b)
    want = _lax_tail(gemm, kw.get("gelu", False), kw["residual"])
    got, want = np.asarray(got, np.float32), np.asarray(want, np.float32)
    assert got.shape == (m, n) and not np.isnan(got).any()
    np.testing.assert_allclose(got, want, rtol=TOL, atol=TOL * np.abs(want).max())


@needs_hopper
def test_the_kernel_is_one_xla_cannot_partition():
    """A split program must find the kernel (``fastpath.opaque``) to run it per shard rather
    than whole on gathered inputs, whatever primitive this jax traces a Mosaic GPU kernel to
    (``pallas_call`` in 0.10, ``mpmd_map`` in 0.11). The CPU tests stand a marker in for the
    kernel, so only a GPU sees the real one; its lax lowering is not found."""
    a, b, kw = _operands("bias", 256, 512, 320)
    v = K.plan((256, 320), b.shape, False, True, jnp.float16)
    assert fastpath.opaque(lambda a, b: K.fused_gemm(a, b, v, **kw), a, b)
    assert not fastpath.opaque(lambda a, b: model(a, b, v, **kw), a, b)


@needs_hopper
@pytest.mark.parametrize("b_nk", [True, False])
@pytest.mark.parametrize("form", FORMS)
def test_schedules_agree_bit_for_bit(form, b_nk):
    # 512 tiles of 128 x 128: every program deals several to each compute warpgroup (ping-pong),
    # and 12 steps of K go round the ring of stages twice a tile
    m, n, k = 4096, 2048, 768
    a, b, kw = _operands(form, m, n, k, b_nk)
    v = K.plan((m, k), b.shape, False, b_nk, jnp.float16)
    got = {
        s: np.asarray(jax.jit(lambda a, b, s=s: K.fused_gemm(a, b, v, schedule=s, **kw))(a, b))
        for s in ("pingpong", "cooperative")
    }
    assert not np.isnan(got["pingpong"].astype(np.float32)).any()
    np.testing.assert_array_equal(
        got["pingpong"].view(np.uint16), got["cooperative"].view(np.uint16)
    )


@needs_hopper
@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
@pytest.mark.parametrize("heads, head", [(4, 64), (2, 128)])
def test_kernel_writes_queries_keys_and_values_apart(heads, head, schedule):
    m, k, n = 256, 128, heads * 3 * head
    rng = np.random.default_rng(head)
    a = jnp.asarray(rng.standard_normal((m, k)), jnp.float16)
    b = jnp.asarray(rng.standard_normal((n, k)) / np.sqrt(k), jnp.float16)
    c = jnp.asarray(rng.standard_normal((1, n)), jnp.float16)
    v = K.plan((m, k), b.shape, False, True, jnp.float16)
    got = jax.jit(
        lambda a, b: K.fused_gemm(a, b, v, c=c, c_row=True, split=head, schedule=schedule)
    )(a, b)
    want = jax.jit(lambda a, b: model(a, b, v, c=c, c_row=True, split=head))(a, b)
    assert len(got) == 3
    for g, w in zip(got, want):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        assert g.shape == (m, heads * head)
        np.testing.assert_allclose(g, w, rtol=TOL, atol=TOL * np.abs(w).max())


@needs_hopper
def test_the_gpt_stack_runs_the_kernel_on_the_gpu():
    net, args = _gpt()
    g = net.compile()
    lowered = jax.jit(g.fn).lower(*args)
    assert lowered.as_text().count("mosaic_gpu") >= 1
    # the constant causal mask still reaches the attention: causal cuDNN, no conditional
    assert "conditional" not in lowered.compile().as_text()
    got = np.asarray(g(*args), np.float32)
    want = np.asarray(net.compile(fast_paths=False)(*args), np.float32)
    np.testing.assert_allclose(got, want, rtol=2**-8, atol=2**-8 * np.abs(want).max())
    grad = jax.grad(lambda x: jnp.sum(g.fn(x, *args[1:]).astype(jnp.float32)))(args[0])
    assert np.isfinite(np.asarray(grad, np.float32)).all()


class _TwoDevices:
    device_set = frozenset({"gpu:0", "gpu:1"})


def test_several_devices_reads_the_shardings():
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    assert not graph_module._several_devices(None)
    assert not graph_module._several_devices((one, one))
    assert graph_module._several_devices((one, _TwoDevices()))
    assert graph_module._several_devices(jax.sharding.PartitionSpec("x"))


def test_shardings_over_several_devices_keep_the_pair(forced_cuda, monkeypatch):
    """A graph compiled with shardings over several devices keeps its epilogues: the pair is
    one step (over several devices its kernel runs on each device's shards, or the two lax
    lowerings in sequence: tests/test_gemm_shards.py)."""
    monkeypatch.setattr(graph_module, "_several_devices", lambda s: s is not None)
    graph = _pair_graph("gelu")
    rng = np.random.default_rng(2)
    x = jnp.asarray(rng.standard_normal((128, 64)).astype(np.float16))
    w = jnp.asarray((rng.standard_normal((256, 64)) / 8).astype(np.float16))
    bias = jnp.asarray(rng.standard_normal((128, 256)).astype(np.float16))
    one = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    dml.compile_graph(graph, in_shardings=(one, one, one))(x, w, bias)
    assert len(forced_cuda) == 1 and forced_cuda[0][1]["gelu"]  # the fused step


def _float16_order(x):
    """Float16 values as integers in their order (adjacent values differ by one)."""
    i = np.asarray(x, np.float16).view(np.int16).astype(np.int64)
    return np.where(i < 0, -(i & 0x7FFF), i)


def test_gelu_formula_against_erf():
    # every finite float16 input, against 0.5 y erfc(-y / sqrt 2) in float64 (math.erfc): the
    # polynomial's absolute error on erfc (<= 3e-7) plus one rounding to float16; in float16
    # units that is one unit, except where GELU is tiny, y in (-5, -3.6) (docs/semantics.md)
    y = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    y = y[np.isfinite(y)]
    yd = y.astype(np.float64)
    want = 0.5 * yd * np.array([math.erfc(-t / math.sqrt(2)) for t in yd])
    got = np.asarray(jax.jit(lambda v: K._gelu(v.astype(jnp.float32)).astype(jnp.float16))(y))
    with np.errstate(over="ignore"):  # the spacing above 65504 is inf: no bound there
        spacing = np.spacing(np.abs(want.astype(np.float16))).astype(np.float64)
    err = np.abs(got.astype(np.float64) - want)
    assert (err <= 0.5 * np.abs(yd) * 3e-7 + spacing).all()
    units = np.abs(_float16_order(got) - _float16_order(want.astype(np.float16)))
    tail = (yd > -5) & (yd < -3.6)
    assert units[~tail].max() <= 1 and units[tail].max() <= 8


def test_gelu_formula_at_infinities_and_nan():
    # the limits at +-inf (+inf and 0, not inf * 0), NaN through, and the largest finite inputs
    y = jnp.asarray([np.inf, -np.inf, np.nan, 3.4e38, -3.4e38, 1e4, -1e4], jnp.float32)
    got = np.asarray(jax.jit(K._gelu)(y))
    np.testing.assert_array_equal(got[:2], [np.inf, 0.0])
    assert np.isnan(got[2])
    np.testing.assert_array_equal(got[3:], np.float32([3.4e38, 0.0, 1e4, 0.0]))


@needs_hopper
@pytest.mark.parametrize("schedule", ["pingpong", "cooperative"])
def test_kernel_gelu_at_infinities_and_nan(schedule):
    # node values beyond float16 round to +-inf before the GELU: +inf stays, -inf gives 0; a NaN
    # row of A stays NaN
    m, n, k = 256, 512, 64
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k))
    a[0], a[1] = 2000.0, np.nan
    sign = np.where(np.arange(n) % 2 == 0, 1.0, -1.0)
    b = np.ones((n, k)) * sign[:, None]
    a, b = jnp.asarray(a, jnp.float16), jnp.asarray(b, jnp.float16)
    v = K.plan((m, k), b.shape, False, True, jnp.float16)
    got = np.asarray(
        jax.jit(lambda a, b: K.fused_gemm(a, b, v, gelu=True, schedule=schedule))(a, b)
    )
    np.testing.assert_array_equal(got[0], np.where(sign > 0, np.inf, 0.0).astype(np.float16))
    assert np.isnan(got[1].astype(np.float32)).all()
    assert np.isfinite(got[2:].astype(np.float32)).all()


def test_pingpong_stages_fill_the_shared_memory():
    # 32 KiB stages beside the output's epilogue buffers (32 KiB) and 32 KiB a C or R read by
    # pieces, within 227 KiB: 5, 4 and 3 stages; never more than K has steps
    assert [K._pingpong_stages(16, pieces) for pieces in (0, 1, 2)] == [5, 4, 3]
    assert K._pingpong_stages(2, 0) == 2
    for pieces in (0, 1, 2):
        stages = K._pingpong_stages(64, pieces)
        assert 32768 * (stages + 1 + pieces) + 4096 <= K.SMEM_LIMIT


def test_other_jax_releases_keep_lax(monkeypatch):
    monkeypatch.setattr(jax, "__version__", "0.10.2")
    assert not K.hopper()
    monkeypatch.setattr(jax, "__version__", "0.12.0")
    assert not K.hopper()
