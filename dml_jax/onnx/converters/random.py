"""Random generators: RandomNormal, RandomUniform, their ``Like`` forms, Multinomial and
Bernoulli, as JAX nodes drawing with ``jax.random`` (training-mode Dropout draws its mask with
``key_of`` too).

ONNX leaves the generator to the implementation ("may not produce the same values in different
implementations, even with a seed"): no two runtimes agree bit for bit, so these ops are tested
by their shapes, ranges and statistics. The key is the node's ``seed`` attribute (its float32
bits; Dropout's integer seed as it is), or without one a fixed value derived from the node's
first output name, so that two unseeded nodes draw independent values. A compiled program holds its key as a constant: every
run of one session draws the same values, as a seeded generator restarted for each run would
(ONNX Runtime's kernels instead advance their generator from run to run).
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from ..elements import data_type_of
from . import converter

# The key of a node without a seed: this offset mixed with its output's name.
_UNSEEDED = 0x5EED


def key_of(ctx) -> int:
    """The 32-bit key of ``ctx``'s node (see the module docstring)."""
    seed = ctx.attr("seed")
    if isinstance(seed, int):  # Dropout's seed is an integer
        return seed & 0xFFFFFFFF
    if seed is not None:  # the random ops' seed is a float
        return int(np.asarray(seed, np.float32).view(np.uint32))
    name = next((o for o in ctx.onnx_node.output if o), ctx.where)
    return (zlib.crc32(name.encode()) ^ _UNSEEDED) & 0xFFFFFFFF


def _float_type(ctx, default):
    """The output's data type: the ``dtype`` attribute, else ``default`` (a float type)."""
    dtype = ctx.attr("dtype")
    t = default if dtype is None else data_type_of(int(dtype), f"{ctx.where}: attribute 'dtype'")
    if t is None or not t.is_float:
        name = "the input's type" if dtype is None else "attribute 'dtype'"
        raise ctx.fail(f"{name} must be a float type, got {getattr(t, 'name', None)}")
    return t


def _shape(ctx) -> tuple[int, ...]:
    shape = ctx.attr("shape")
    if shape is None:
        raise ctx.fail("attribute 'shape' is required")
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise ctx.fail(f"attribute 'shape' {list(shape)} has a negative dimension")
    return shape


def _draw(ctx, name: str, shape, t, normal: bool):
    key = key_of(ctx)
    dtype = t.numpy_dtype
    if normal:
        mean, scale = float(ctx.attr("mean", 0.0)), float(ctx.attr("scale", 1.0))

        def draw():
            z = jax.random.normal(jax.random.key(key), shape, dtype)
            return (z * jnp.asarray(scale, dtype) + jnp.asarray(mean, dtype),)
    else:
        low, high = float(ctx.attr("low", 0.0)), float(ctx.attr("high", 1.0))
        if not low <= high:
            raise ctx.fail(f"attribute 'low' ({low}) exceeds 'high' ({high})")

        def draw():
            return (jax.random.uniform(jax.random.key(key), shape, dtype, low, high),)

    if 0 in shape:
        return [ctx.constant(np.zeros(shape, dtype))]
    return ctx.jax(name, draw, [], [(shape, t)])


@converter("RandomNormal", kind="jax")
def _random_normal(ctx, node, inputs):
    """Normal values of ``mean`` and standard deviation ``scale`` in the ``shape`` attribute."""
    return _draw(ctx, "RandomNormal", _shape(ctx), _float_type(ctx, data_type_of(1, "")), True)


@converter("RandomUniform", kind="jax")
def _random_uniform(ctx, node, inputs):
    """Uniform values in [low, high) in the ``shape`` attribute."""
    return _draw(ctx, "RandomUniform", _shape(ctx), _float_type(ctx, data_type_of(1, "")), False)


@converter("RandomNormalLike", kind="jax")
def _random_normal_like(ctx, node, inputs):
    """RandomNormal in the input's shape (and type, unless ``dtype`` says otherwise); the
    input's values are not read."""
    (x,) = inputs
    t = _float_type(ctx, None if x.is_bool else x.data_type)
    return _draw(ctx, "RandomNormalLike", x.shape, t, True)


@converter("RandomUniformLike", kind="jax")
def _random_uniform_like(ctx, node, inputs):
    """RandomUniform in the input's shape (and type, unless ``dtype`` says otherwise)."""
    (x,) = inputs
    t = _float_type(ctx, None if x.is_bool else x.data_type)
    return _draw(ctx, "RandomUniformLike", x.shape, t, False)


@converter("Multinomial", kind="jax")
def _multinomial(ctx, node, inputs):
    """sample_size class indices per batch row, drawn with the probabilities softmax(row): the
    input holds unnormalized log-probabilities [batch, classes]; int32 (``dtype`` 6, the
    default) or int64 (7, int32 in the graph) indices."""
    (x,) = inputs
    if x.rank != 2 or not x.data_type.is_float:
        raise ctx.fail(
            f"input must be a 2-D float tensor [batch, classes], got {x.data_type.name} "
            f"{list(x.shape)}"
        )
    dtype = int(ctx.attr("dtype", 6))
    if dtype not in (6, 7):
        raise ctx.fail(f"attribute 'dtype' must be 6 (int32) or 7 (int64), got {dtype}")
    samples = int(ctx.attr("sample_size", 1))
    if samples < 1:
        raise ctx.fail(f"attribute 'sample_size' must be >= 1, got {samples}")
    batch = x.shape[0]
    key = key_of(ctx)
    t = data_type_of(dtype, ctx.where)

    def draw(logits):
        logits = logits.astype(jnp.promote_types(logits.dtype, jnp.float32))
        picks = jax.random.categorical(jax.random.key(key), logits, -1, (samples, batch))
        return (picks.T,)

    return ctx.jax("Multinomial", draw, [x], [((batch, samples), t)])


@converter("Bernoulli", kind="jax")
def _bernoulli(ctx, node, inputs):
    """1 with probability p (the input), 0 otherwise: a uniform draw in [0, 1) below p, in the
    ``dtype`` attribute's type (the input's by default). Not ONNX's function body, which
    compares the other way round (Greater(draw, p): 1 with probability 1 - p, against the op's
    definition and ONNX's reference)."""
    (p,) = inputs
    if not p.data_type.is_float:
        raise ctx.fail(f"input must be a float tensor, got {p.data_type.name}")
    dtype = ctx.attr("dtype")
    t = (
        p.data_type
        if dtype is None
        else data_type_of(int(dtype), f"{ctx.where}: attribute 'dtype'")
    )
    is_bool = dtype is not None and int(dtype) == 9
    key = key_of(ctx)
    shape = tuple(p.shape)
    if 0 in shape:
        return [ctx.constant(np.zeros(shape, np.bool_ if is_bool else t.numpy_dtype))]

    def draw(probs):
        u = jax.random.uniform(
            jax.random.key(key), shape, jnp.promote_types(probs.dtype, jnp.float32)
        )
        return ((u < probs).astype(t.numpy_dtype),)

    return ctx.jax("Bernoulli", draw, [p], [(shape, t, is_bool)])
