"""Values known at import: Constant, and the shape queries Shape and Size (every shape is static
at import, so they never reach the DML graph)."""

from __future__ import annotations

import math

import numpy as np

from ..importer import array_of
from . import converter


@converter("Constant")
def _constant(ctx, node, inputs):
    if "value" in ctx.attrs:
        return [ctx.constant(array_of(ctx.attrs["value"]))]
    for name, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if name in ctx.attrs:
            return [ctx.constant(np.asarray(ctx.attrs[name], dtype))]
    for name, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if name in ctx.attrs:
            return [ctx.constant(np.asarray(list(ctx.attrs[name]), dtype))]
    raise ctx.fail(f"attributes {sorted(ctx.attrs)} are not supported")


@converter("Shape")
def _shape(ctx, node, inputs):
    (x,) = inputs
    dims = np.asarray(x.shape, np.int64)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return [ctx.constant(dims[slice(start, end)])]


@converter("Size")
def _size(ctx, node, inputs):
    return [ctx.constant(np.asarray(math.prod(inputs[0].shape), np.int64))]
