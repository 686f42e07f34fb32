"""DML_OPERATOR_ACTIVATION_*: element-wise activation functions, one table row each.

Every activation maps InputTensor to OutputTensor element by element (same data type, rank and
sizes; the output may alias the input): a ``Row`` of ``_rows.py`` with its FLOAT members, its
function (jax.numpy on the input in its compute type) and its support table. The ones here are
``fusable`` into GEMM, CONVOLUTION, ADD1 and the normalizations; fused activations leave their
tensors ``None`` (see ``fused.py``).

Numerics: FLOAT16 inputs are computed in float32 and rounded once (DML's FLOAT coefficients are
float32). Functions that DirectML defines piecewise get the derivative of the branch in force,
and their unused branch is kept finite so gradients stay finite.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from ..enums import FeatureLevel as L
from ..fields import FLOAT
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, rows, types
from ._rows import Row, class_name, define

_F2_TABLE = rows((L.FL_1_0, DIMS4, F2), (L.FL_2_0, DIMS4_5, F2), (L.FL_3_0, DIMS1_8, F2))


def _relu(d: Any, x):
    @jax.custom_jvp
    def relu(x):
        # NaN propagates (x > 0 is false for NaN, so it is passed on explicitly); -0.0 gives +0.
        return jnp.where(x > 0, x, jnp.where(jnp.isnan(x), x, jnp.zeros_like(x)))

    @relu.defjvp
    def relu_jvp(primals, tangents):
        # ACTIVATION_RELU_GRAD's rule: the gradient passes where x > 0 only (0 at x == 0).
        (x,), (t,) = primals, tangents
        return relu(x), jnp.where(x > 0, t, jnp.zeros_like(t))

    return relu(x)


def _elu(d: Any, x):
    alpha = jnp.asarray(d.alpha, x.dtype)
    # expm1 of min(x, 0): the branch for x >= 0 never evaluates exp of a large x, whose inf
    # would turn the gradient into NaN through the unselected branch.
    return jnp.where(x >= 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _linear(d: Any, x):
    return jnp.asarray(d.alpha, x.dtype) * x + jnp.asarray(d.beta, x.dtype)


def _sigmoid(d: Any, x):
    return jax.nn.sigmoid(x)  # lax.logistic: stable for large |x|


_X = {"InputTensor": [-2.0, -1.0, -0.5, 0.0, 0.5, 2.0]}


def _activation(name, level, attrs, fn, support, summary, example, **kw) -> Row:
    """A row of an activation: InputTensor -> OutputTensor, FLOAT attributes, fusable."""
    return Row(
        f"ACTIVATION_{name}",
        level,
        summary,
        fn,
        support,
        (example, dict(_X)),
        attrs=attrs,
        fusable=True,
        **kw,
    )


ROWS = (
    _activation(
        "ELU",
        "1_0",
        (("alpha", FLOAT),),
        _elu,
        _F2_TABLE,
        "x for x >= 0, Alpha * (exp(x) - 1) below",
        {"Alpha": 0.5},
        jnp=lambda x: jax.nn.elu(x, 0.5),
        torch=lambda torch, x: torch.nn.functional.elu(x, 0.5),
    ),
    _activation(
        "LINEAR",
        "1_0",
        (("alpha", FLOAT), ("beta", FLOAT)),
        _linear,
        _F2_TABLE,
        "Alpha * x + Beta",
        {"Alpha": 2.0, "Beta": -1.0},
        jnp=lambda x: 2.0 * x - 1.0,
        torch=lambda torch, x: 2.0 * x - 1.0,
    ),
    _activation(
        "RELU",
        "1_0",
        (),
        _relu,
        _F2_TABLE + rows((L.FL_5_1, DIMS1_8, F2 | types("INT32", "INT16", "INT8"))),
        "max(0, x)",
        {},
        jnp=jax.nn.relu,
        torch=lambda torch, x: torch.relu(x),
    ),
    _activation(
        "SIGMOID",
        "1_0",
        (),
        _sigmoid,
        _F2_TABLE,
        "1 / (1 + exp(-x))",
        {},
        jnp=jax.nn.sigmoid,
        torch=lambda torch, x: torch.sigmoid(x),
    ),
)

for _row in ROWS:
    globals()[class_name(_row.name)] = define(_row, __name__)
del _row
