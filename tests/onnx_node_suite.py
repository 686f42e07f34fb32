"""ONNX's backend node tests (the cases ``onnx.backend.test.case.node`` generates) run through
``dml_jax.onnx.InferenceSession``: the session's outputs against ONNX's expected outputs.

``selected()`` holds every case whose op types have a converter or an ONNX function body;
``exclusions()`` names the cases among them that cannot pass, each with its reason. Nothing here
imports ``onnx`` at module level: the test module skips itself without it.
"""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

EXCLUSIONS = os.path.join(os.path.dirname(__file__), "onnx_exclusions")


@functools.cache
def exclusions() -> dict[str, str]:
    """Case name -> why it cannot pass (a data type no DML tensor holds, a rule DirectML has),
    from the files of ``onnx_exclusions/`` (one per converter group): a line per case,
    ``name: reason``; ``#`` starts a comment."""
    out: dict[str, str] = {}
    for file in sorted(os.listdir(EXCLUSIONS)):
        with open(os.path.join(EXCLUSIONS, file)) as f:
            for line in f:
                line = line.split("#", 1)[0].strip()
                if line:
                    name, _, reason = line.partition(":")
                    out[name.strip()] = reason.strip()
    return out


@functools.cache
def all_cases() -> tuple[Any, ...]:
    from onnx.backend.test.case import node

    with np.errstate(all="ignore"):
        return tuple(c for c in node.collect_testcases(None) if c.data_sets)


def _mapped(model: Any) -> bool:
    from dml_jax.onnx import schema
    from dml_jax.onnx.converters import REGISTRY

    opsets = {("" if o.domain == "ai.onnx" else o.domain): o.version for o in model.opset_import}
    for n in model.graph.node:
        domain = "" if n.domain == "ai.onnx" else n.domain
        if REGISTRY.get(domain, n.op_type) is not None:
            continue
        s = schema.get(n.op_type, domain, opsets.get(domain, 1))
        if s is None or not (s.has_function or s.has_context_dependent_function):
            return False
    return True


@functools.cache
def selected() -> tuple[Any, ...]:
    """The mapped cases; an ``_expanded`` case (the op's function body written out) only when
    its op's own case is not mapped, since the body's ops have their own cases (the suite's
    time on two cores)."""
    mapped = [c for c in all_cases() if _mapped(c.model)]
    names = {c.name for c in mapped}
    return tuple(
        c for c in mapped if "_expanded" not in c.name or c.name.split("_expanded")[0] not in names
    )


def _array(v: Any) -> np.ndarray:
    """A data set entry as an array (some cases hold TensorProtos)."""
    from onnx import TensorProto, numpy_helper

    if isinstance(v, TensorProto):
        return numpy_helper.to_array(v)
    if v is None or isinstance(v, list):  # an empty optional; a sequence stays a list
        return v if v is None else [_array(x) for x in v]
    return np.asarray(v)


def run_case(case: Any) -> list[np.ndarray]:
    from dml_jax.onnx import InferenceSession

    inputs = [_array(v) for v in case.data_sets[0][0]]
    session = InferenceSession(case.model)
    names = [i.name for i in session.get_inputs()]
    feed = dict(zip(names, inputs))
    with np.errstate(all="ignore"):
        return session.run(None, feed)


def check_case(case: Any) -> None:
    wants = [_array(v) for v in case.data_sets[0][1]]
    got = run_case(case)
    assert len(got) == len(wants), (len(got), len(wants))
    _check_values(case, got, wants)


def _check_values(case: Any, got: list, wants: list) -> None:
    for g, w in zip(got, wants):
        if w is None or isinstance(w, list):  # an optional, a sequence
            assert type(g) is type(w), (type(g), type(w))
            if w is not None:
                assert len(g) == len(w), (len(g), len(w))
                _check_values(case, g, w)
            continue
        w = np.asarray(w)
        assert g.shape == w.shape, (g.shape, w.shape)
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        if w.dtype.kind in "fc":
            rtol = max(case.rtol, 1e-3 if w.dtype == np.float16 else 0)
            atol = max(case.atol, 1e-3 if w.dtype == np.float16 else 1e-6)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
        else:
            np.testing.assert_array_equal(g, w)
