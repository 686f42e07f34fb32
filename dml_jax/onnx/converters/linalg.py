"""Linear algebra without a DirectML operator: Det, as a direct JAX lowering (ONNX Runtime runs
it on its CPU provider)."""

from __future__ import annotations

import jax.numpy as jnp

from . import converter


@converter("Det", kind="jax")
def _det(ctx, node, inputs):
    (x,) = inputs
    if x.rank < 2 or x.shape[-1] != x.shape[-2]:
        raise ctx.fail(f"input X must end in a square matrix, got shape {list(x.shape)}")
    if not x.data_type.is_float:
        raise ctx.fail(f"input X must be a float tensor, got {x.data_type.name}")
    return ctx.jax("Det", lambda a: (jnp.linalg.det(a),), [x], [(x.shape[:-2], x.data_type)])
