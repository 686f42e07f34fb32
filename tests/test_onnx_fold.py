"""ONNX's own backend node tests of Col2Im, mapped onto DirectML's FOLD as ONNX-on-DirectML
does:

- Col2Im(input, image_shape, block_shape) -> FOLD with InputTensor the {N, C * prod(block),
  L} input, OutputTensor {N, C, image_shape...}, WindowSizes = block_shape, Strides and
  Dilations from the attributes (default 1), and ONNX's ``pads`` [begin..., end...] split into
  StartPadding and EndPadding (default 0).

The data comes from the ``onnx`` package's test-case generators (skipped without it). Cases
DirectML's tables reject are skipped with the reason; every mapped ONNX operator must pass at
least one case.
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

onnx = pytest.importorskip("onnx")

MAPPED = {"Col2Im"}
CASES = node_cases(MAPPED)


def _col2im(node, inputs):
    x, image_shape, block_shape = inputs
    name = dml_type(x.dtype)
    a = attrs(node)
    image, block = [int(s) for s in image_shape], [int(s) for s in block_shape]
    dims = len(block)
    pads = list(a.get("pads", [0] * 2 * dims))
    channels = x.shape[1] // int(np.prod(block))
    desc = dml.FoldOperatorDesc(
        dml.TensorDesc(name, list(x.shape)),
        dml.TensorDesc(name, [x.shape[0], channels, *image]),
        window_sizes=block,
        strides=list(a.get("strides", [1] * dims)),
        dilations=list(a.get("dilations", [1] * dims)),
        start_padding=pads[:dims],
        end_padding=pads[dims:],
    )
    return run_or_skip(desc, x)


@functools.cache
def _result(index: int) -> np.ndarray:
    case = CASES[index]
    return _col2im(case.node, list(case.inputs))


def _check(index: int) -> None:
    assert_outputs(_result(index), CASES[index].outputs[:1], rtol=1e-6)


@pytest.mark.parametrize("index", range(len(CASES)), ids=case_ids(CASES))
def test_onnx_node(index):
    _check(index)


def test_every_mapped_operator_has_a_passing_case():
    assert_every_op_type_passes(CASES, _check, MAPPED)
