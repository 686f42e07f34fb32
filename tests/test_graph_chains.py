"""Graph chains (``fastpath.register_chain``): a run of nodes, each read by the next alone,
computed by one CUDA lowering. A test chain (ADD -> MULTIPLY [-> ACTIVATION_RELU], its lowering
the same arithmetic, recording its runs) is registered for these tests alone: which runs the
graph takes (the longest that applies; none through a value read twice or a graph output),
that the step's values are the nodes' lax lowerings', and that vmap, derivatives and other
platforms take the lax lowerings.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import forced_cuda_kernel

import dml_jax as dml
from dml_jax import fastpath

T = dml.TensorDesc("FLOAT32", (2, 3, 4))
In, Out, Mid = dml.InputGraphEdge, dml.OutputGraphEdge, dml.IntermediateGraphEdge


class _Kernel:
    """The test chain's CUDA lowering: ``relu((a + b) * c)`` (or without the ReLU), plus
    ``offset`` (0 but where a test tells the kernel's values from the lax lowerings')."""

    offset = 0.0

    @staticmethod
    def run(groups, relu):
        (a, b), (c,) = groups[0], groups[1]
        y = (a + b) * c
        return ((jnp.maximum(y, 0) if relu else y) + _Kernel.offset,)


def _applies(descs, slots):
    kinds = [d.operator_type.removeprefix("DML_OPERATOR_") for d in descs]
    return kinds in (["ELEMENT_WISE_ADD", "ELEMENT_WISE_MULTIPLY"],
                     ["ELEMENT_WISE_ADD", "ELEMENT_WISE_MULTIPLY", "ACTIVATION_RELU"]) and (
        slots[0] == 0
    )  # fmt: skip


def _lower(descs, slots, groups):
    return _Kernel.run(groups, len(descs) == 3)


@pytest.fixture
def chain(monkeypatch):
    """The test chain registered (and gone after); yields the record of its runs (the count of
    nodes each computed)."""
    monkeypatch.setitem(fastpath._CHAINS, "DML_OPERATOR_ELEMENT_WISE_ADD", {})
    fastpath.register_chain("DML_OPERATOR_ELEMENT_WISE_ADD", "test", _applies, _lower, 3)
    with forced_cuda_kernel(monkeypatch, _Kernel, "run", lambda g, relu: 3 if relu else 2,
                            interpret=False) as calls:  # fmt: skip
        yield calls


def _graph(relu_output=False, twice=False):
    """x + y -> * z -> ReLU -> out; ``relu_output``: the product is a graph output too;
    ``twice``: the sum is read by a second node (a NEGATE, a graph output)."""
    nodes = [dml.ElementWiseAddOperatorDesc(T, T, T), dml.ElementWiseMultiplyOperatorDesc(T, T, T),
             dml.ActivationReluOperatorDesc(T, T)]  # fmt: skip
    mids = [Mid(0, 0, 1, 0), Mid(1, 0, 2, 0)]
    outs = [Out(2, 0, 0)]
    if relu_output:
        outs.append(Out(1, 0, 1))
    if twice:
        nodes.append(dml.ElementWiseNegateOperatorDesc(T, T))
        mids.append(Mid(0, 0, 3, 0))
        outs.append(Out(3, 0, len(outs)))
    return dml.GraphDesc(
        input_count=3, output_count=len(outs), nodes=tuple(nodes),
        input_edges=(In(0, 0, 0), In(1, 0, 1), In(2, 1, 1)), output_edges=tuple(outs),
        intermediate_edges=tuple(mids),
    )  # fmt: skip


def _inputs(rng):
    return [rng.standard_normal(T.sizes).astype(np.float32) for _ in range(3)]


def _outputs(y):
    return tuple(y) if isinstance(y, (tuple, list)) else (y,)


def _want(x, y, z):
    return np.maximum((x + y) * z, 0)


@pytest.mark.parametrize(
    "relu_output, twice, taken",
    [(False, False, [3]), (True, False, [2]), (False, True, [])],
    ids=["whole run", "product read twice", "sum read twice"],
)
def test_the_longest_run_that_applies(rng, chain, relu_output, twice, taken):
    x, y, z = _inputs(rng)
    compiled = dml.compile_graph(_graph(relu_output, twice))
    with fastpath.target_platform("cuda"):
        got = _outputs(jax.jit(compiled.fn)(x, y, z))
    assert chain == taken
    np.testing.assert_allclose(np.asarray(got[0]), _want(x, y, z), rtol=1e-6)
    if relu_output:
        np.testing.assert_allclose(np.asarray(got[1]), (x + y) * z, rtol=1e-6)


def test_other_platforms_vmap_and_derivatives_take_the_lax_lowerings(rng, chain, monkeypatch):
    """The kernel's values here are off by 1000: only the lax lowerings give the right ones
    (under vmap and for derivatives a kernel is traced for its output shapes, not run)."""
    monkeypatch.setattr(_Kernel, "offset", 1000.0)
    x, y, z = _inputs(rng)
    compiled = dml.compile_graph(_graph())
    # each under its own function: jax caches a trace by function, not by target platform
    with fastpath.target_platform("cpu"):
        alone = _outputs(jax.jit(lambda *a: compiled.fn(*a))(x, y, z))
    assert chain == []
    with fastpath.target_platform("cuda"):
        batched = _outputs(
            jax.vmap(lambda *a: compiled.fn(*a))(*(np.stack([v] * 2) for v in (x, y, z)))
        )
        grad = jax.grad(lambda a: jnp.sum(_outputs(compiled.fn(a, y, z))[0]))(x)
        kernel = _outputs(jax.jit(lambda *a: compiled.fn(*a))(x, y, z))
    np.testing.assert_allclose(np.asarray(alone[0]), _want(x, y, z), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(batched[0][1]), _want(x, y, z), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(kernel[0]), _want(x, y, z) + 1000, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(grad), np.where((x + y) * z > 0, z, 0), rtol=1e-6)


def test_repeated_blocks_rolled_keep_their_chains(rng, chain):
    """Four blocks h = relu((h + y) * z), traced with ``roll_repeats``: the blocks after the
    first roll into one loop whose body is the chain's step; the values are the blocks'."""
    nodes, mids = [], []
    for i in range(4):
        nodes += [dml.ElementWiseAddOperatorDesc(T, T, T),
                  dml.ElementWiseMultiplyOperatorDesc(T, T, T),
                  dml.ActivationReluOperatorDesc(T, T)]  # fmt: skip
        mids += [Mid(3 * i, 0, 3 * i + 1, 0), Mid(3 * i + 1, 0, 3 * i + 2, 0)]
        if i:
            mids.append(Mid(3 * i - 1, 0, 3 * i, 0))
    ins = (
        [In(0, 0, 0)]
        + [In(1, 3 * i, 1) for i in range(4)]
        + [In(2, 3 * i + 1, 1) for i in range(4)]
    )
    graph = dml.GraphDesc(
        input_count=3, output_count=1, nodes=tuple(nodes), input_edges=tuple(ins),
        output_edges=(Out(11, 0, 0),), intermediate_edges=tuple(mids),
    )  # fmt: skip
    x, y, z = _inputs(rng)
    want = x
    for _ in range(4):
        want = _want(want, y, z)
    compiled = dml.compile_graph(graph, roll_repeats=True)
    with fastpath.target_platform("cuda"):
        got = _outputs(jax.jit(compiled.fn)(x, y, z))
    assert compiled.rolled and chain and set(chain) == {3}
    np.testing.assert_allclose(np.asarray(got[0]), want, rtol=1e-5)


def test_registering_a_chain_twice_or_of_one_node_is_refused(monkeypatch):
    monkeypatch.setitem(fastpath._CHAINS, "DML_OPERATOR_ELEMENT_WISE_ADD", {})
    fastpath.register_chain("DML_OPERATOR_ELEMENT_WISE_ADD", "once", _applies, _lower, 3)
    with pytest.raises(ValueError, match="already registered"):
        fastpath.register_chain("DML_OPERATOR_ELEMENT_WISE_ADD", "once", _applies, _lower, 3)
    with pytest.raises(ValueError, match="at least two nodes"):
        fastpath.register_chain("DML_OPERATOR_ELEMENT_WISE_ADD", "one", _applies, _lower, 1)
