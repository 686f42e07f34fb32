"""The GEMM kernel's contract in jnp (``kernels/gemm.py``'s ``fused_gemm``), for the tests that
put it in the kernel's place: tests/test_gemm_kernel.py and tests/_gemm_shards_worker.py."""

from __future__ import annotations

import jax.numpy as jnp

from dml_jax.kernels import gemm as K


def model(a, b, v, *, alpha=1.0, beta=1.0, c=None, c_row=False, gelu=False, residual=None,
          split=0):  # fmt: skip
    """The kernel's contract in jnp: the GEMM node rounded, then GELU, then the residual; with
    ``split`` (a head size) the stacked {M, H, 3, D} columns as three {M, H * D} arrays."""
    y = alpha * jnp.dot(a, b.T if v.b_nk else b, preferred_element_type=jnp.float32)
    if c is not None:
        y = y + beta * (jnp.broadcast_to(c[:1], y.shape) if c_row else c).astype(jnp.float32)
    y = y.astype(a.dtype)
    if gelu:
        y = K._gelu(y.astype(jnp.float32)).astype(a.dtype)
    if residual is not None:
        y = (y.astype(jnp.float32) + residual.astype(jnp.float32)).astype(a.dtype)
    if split:
        heads = y.reshape(y.shape[0], -1, 3, split)
        return tuple(heads[:, :, t].reshape(y.shape[0], -1) for t in range(3))
    return y
