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

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import FLOAT
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, rows, types
from ._rows import Row, class_name, define
from .clip import convert_float_bound

_F2_TABLE = rows((L.FL_1_0, DIMS4, F2), (L.FL_2_0, DIMS4_5, F2), (L.FL_3_0, DIMS1_8, F2))
_INTS = types("INT32", "INT16", "INT8")
_TABLE_2_0 = rows((L.FL_2_0, DIMS4_5, F2), (L.FL_3_0, DIMS1_8, F2))
_TABLE_3_0 = rows((L.FL_3_0, DIMS1_8, F2))
_TABLE_5_1 = rows((L.FL_5_1, DIMS1_8, F2))
_TABLE_6_2 = rows((L.FL_6_2, DIMS1_8, F2))


def relu_grad(x, g):
    """ACTIVATION_RELU_GRAD's rule: ``g`` where ``x > 0``, else 0 (also at x == 0 and NaN)."""
    return jnp.where(x > 0, g, jnp.zeros_like(g))


def _relu_values(x):
    # NaN propagates (x > 0 is false for NaN, so it is passed on explicitly, without a
    # derivative); -0.0 gives +0. Differentiated as written, the derivative is relu_grad's rule:
    # the tangent where x > 0, else 0 (at 0 and NaN too). A custom_jvp gave the same derivative
    # at three times the cost to trace (each shape of a network's ReLUs is traced anew).
    nan = jnp.where(jnp.isnan(x), lax.stop_gradient(x), jnp.zeros_like(x))
    return jnp.where(x > 0, x, nan)


def _relu(d: Any, x):
    return _relu_values(x)


def _elu(d: Any, x):
    alpha = jnp.asarray(d.alpha, x.dtype)
    # expm1 of min(x, 0): the branch for x >= 0 never evaluates exp of a large x, whose inf
    # would turn the gradient into NaN through the unselected branch.
    return jnp.where(x >= 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _linear(d: Any, x):
    return jnp.asarray(d.alpha, x.dtype) * x + jnp.asarray(d.beta, x.dtype)


def _sigmoid(d: Any, x):
    return jax.nn.sigmoid(x)  # lax.logistic: stable for large |x|


def _f(d: Any, name: str, x):
    """A FLOAT attribute in the compute type (DML's FLOAT is float32)."""
    return jnp.asarray(np.float32(getattr(d, name)), x.dtype)


def _keep_nan(x, y):
    """``y``, with NaN wherever ``x`` is NaN: piecewise functions whose comparisons would map a
    NaN to a branch's constant propagate it instead (docs/semantics.md, as RELU does)."""
    return jnp.where(jnp.isnan(x), x, y)


def _celu(d: Any, x):
    # max(0, x) + min(0, Alpha * (exp(x / Alpha) - 1)): x for x > 0 and Alpha * expm1(x / Alpha)
    # otherwise, for either sign of Alpha (for x > 0 the second term is >= 0 and min() makes it
    # 0; for x <= 0 it is <= 0 and the first term is 0). Written with where, not max/min, so the
    # derivative at 0 is CELU's 1 (autodiff of max and min splits a tie: 0.75 at 0); exp is
    # taken of x <= 0 only (a finite gradient for large positive x).
    alpha = _f(d, "alpha", x)
    negative = jnp.where(x > 0, jnp.zeros_like(x), x)
    return jnp.where(x > 0, x, alpha * jnp.expm1(negative / alpha))


def _gated(x, gate, gate_nan_only_at_nan: bool = False):
    """x * gate, with the limit 0 where x is infinite and its gate 0 (not inf * 0 = NaN):
    GELU(-inf), SWISH(-inf) and HARD_SWISH(-inf) are 0 (docs/semantics.md).

    Where the gate is NaN only where x is (``gate_nan_only_at_nan``), the product is NaN where x
    is NaN or infinite with its gate 0, so the limit is taken after it: its NaNs that x has not
    become 0, as two nested selects. On an H100 XLA's kernels for EfficientNet-B0's 49 SWISHes
    then run as fast as ``x * sigmoid(x)`` written out (2.151 against 2.139 ms), where the select
    before the product took 2.308 ms, and one select on ``isnan(y) & ~isnan(x)`` 2.304
    (float16, batch 64, the four forms timed in one process)."""
    if gate_nan_only_at_nan:
        y = x * gate
        return jnp.where(jnp.isnan(y), jnp.where(jnp.isnan(x), y, jnp.zeros_like(y)), y)
    return jnp.where(jnp.isinf(x) & (gate == 0), jnp.zeros_like(x), x * gate)


def _finite(value: Any, dtype: Any, nonzero: bool = True) -> bool:
    """A float attribute is finite (and not 0) in the compute type: times it (plus it), only
    NaN is NaN."""
    v = np.asarray(np.float32(value)).astype(dtype)
    return bool(np.isfinite(v) and (v != 0 or not nonzero))


def _gelu(d: Any, x):
    # The exact form: x * Phi(x) = x * 0.5 * (1 + erf(x / sqrt(2))).
    return _gated(x, 0.5 * (1 + lax.erf(x * np.float32(1 / math.sqrt(2)))), True)


def _hard_sigmoid(d: Any, x):
    return jnp.clip(_f(d, "alpha", x) * x + _f(d, "beta", x), 0, 1)


def _hard_swish(d: Any, x):
    finite = _finite(d.alpha, x.dtype) and _finite(d.beta, x.dtype, nonzero=False)
    return _gated(x, _hard_sigmoid(d, x), finite)


def _leaky_relu(d: Any, x):
    return jnp.where(x >= 0, x, _f(d, "alpha", x) * x)  # NaN: Alpha * NaN


def _parameterized_relu(d: Any, x, slope):
    return jnp.where(x >= 0, x, slope * x)


def _softplus_of(z):
    return jnp.logaddexp(z, jnp.zeros_like(z))  # log(1 + exp(z)) without overflow


def _parametric_softplus(d: Any, x):
    return _f(d, "alpha", x) * _softplus_of(_f(d, "beta", x) * x)


def _scaled_elu(d: Any, x):
    alpha, gamma = _f(d, "alpha", x), _f(d, "gamma", x)
    return gamma * jnp.where(x > 0, x, alpha * jnp.expm1(jnp.minimum(x, 0)))


def _scaled_tanh(d: Any, x):
    return _f(d, "alpha", x) * jnp.tanh(_f(d, "beta", x) * x)


def _int_shrink(d: Any, x):
    # Integers (FL 5_1): x > Threshold is x > floor(Threshold), x < -Threshold is
    # x < ceil(-Threshold), decided in Python on the float32 attributes; Bias converts with
    # CLIP's rule (toward zero, saturated) and the arithmetic wraps (docs/semantics.md).
    info = jnp.iinfo(x.dtype)
    threshold = float(np.float32(d.threshold))
    bias = jnp.asarray(convert_float_bound(d.bias, d.output_tensor.data_type), x.dtype)

    def beyond(limit: float, above: bool):
        bound = math.floor(limit) if above else math.ceil(limit)
        if (bound >= info.max) if above else (bound <= info.min):
            return jnp.zeros(x.shape, bool)
        if (bound < info.min) if above else (bound > info.max):
            return jnp.ones(x.shape, bool)
        return x > bound if above else x < bound

    zero = jnp.zeros_like(x)
    return jnp.where(
        beyond(threshold, True), x - bias, jnp.where(beyond(-threshold, False), x + bias, zero)
    )


def _shrink(d: Any, x):
    if jnp.issubdtype(x.dtype, jnp.integer):
        return _int_shrink(d, x)
    bias, threshold = _f(d, "bias", x), _f(d, "threshold", x)
    y = jnp.where(x > threshold, x - bias, jnp.where(x < -threshold, x + bias, jnp.zeros_like(x)))
    return _keep_nan(x, y)


def _softplus(d: Any, x):
    steepness = _f(d, "steepness", x)
    return _softplus_of(steepness * x) / steepness


def _softsign(d: Any, x):
    # x / (1 + |x|); at +-inf the limit +-1 (inf / inf would be NaN).
    return jnp.where(jnp.isinf(x), jnp.sign(x), x / (1 + jnp.abs(x)))


def _swish(d: Any, x):
    scale = d.sigmoid_input_scale
    return _gated(x, jax.nn.sigmoid(_f(d, "sigmoid_input_scale", x) * x), _finite(scale, x.dtype))


def _softplus_rules(d: Any, v: Validator) -> None:
    if v.level is None or v.level >= L.FL_6_4:
        return  # feature level 6_4 allows any Steepness
    v.check(
        "Steepness",
        np.float32(d.steepness) >= 1,
        f"must be >= 1 below feature level 6_4, got {d.steepness} (at {v.level.label})",
    )


def _thresholded_relu(d: Any, x):
    return _keep_nan(x, jnp.where(x > _f(d, "alpha", x), x, jnp.zeros_like(x)))


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
        **{"fusable": True, **kw},
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
    ),
    _activation(
        "LINEAR",
        "1_0",
        (("alpha", FLOAT), ("beta", FLOAT)),
        _linear,
        _F2_TABLE,
        "Alpha * x + Beta",
        {"Alpha": 2.0, "Beta": -1.0},
    ),
    _activation(
        "RELU",
        "1_0",
        (),
        _relu,
        _F2_TABLE + rows((L.FL_5_1, DIMS1_8, F2 | _INTS)),
        "max(0, x)",
        {},
    ),
    _activation(
        "SIGMOID",
        "1_0",
        (),
        _sigmoid,
        _F2_TABLE,
        "1 / (1 + exp(-x))",
        {},
    ),
)

_ONE = (("alpha", FLOAT),)
_TWO = (("alpha", FLOAT), ("beta", FLOAT))
ROWS += (
    _activation(
        "CELU",
        "3_0",
        _ONE,
        _celu,
        _TABLE_3_0,
        "max(0, x) + min(0, Alpha * (exp(x / Alpha) - 1))",
        {"Alpha": 1.5},
    ),
    _activation(
        "GELU",
        "5_1",
        (),
        _gelu,
        _TABLE_5_1,
        "0.5 * x * (1 + erf(x / sqrt(2)))",
        {},
        fusable=False,
    ),
    _activation(
        "HARD_SIGMOID",
        "1_0",
        _TWO,
        _hard_sigmoid,
        _F2_TABLE,
        "max(0, min(Alpha * x + Beta, 1))",
        {"Alpha": 0.2, "Beta": 0.5},
    ),
    _activation(
        "HARD_SWISH",
        "6_2",
        _TWO,
        _hard_swish,
        _TABLE_6_2,
        "x * max(0, min(Alpha * x + Beta, 1))",
        {"Alpha": 1 / 6, "Beta": 0.5},
        in_place=False,  # the schema's flag (the page says in place is allowed)
        fusable=False,
    ),
    _activation("IDENTITY", "1_0", (), lambda d, x: x, _F2_TABLE, "x", {}),
    _activation(
        "LEAKY_RELU",
        "1_0",
        _ONE,
        _leaky_relu,
        _F2_TABLE,
        "x for x >= 0, Alpha * x below",
        {"Alpha": 0.1},
    ),
    _activation(
        "PARAMETRIC_SOFTPLUS",
        "1_0",
        _TWO,
        _parametric_softplus,
        _F2_TABLE,
        "Alpha * log(1 + exp(Beta * x))",
        {"Alpha": 2.0, "Beta": 0.5},
    ),
    _activation(
        "SCALED_ELU",
        "1_0",
        (("alpha", FLOAT), ("gamma", FLOAT)),
        _scaled_elu,
        _F2_TABLE,
        "Gamma * x for x > 0, Gamma * Alpha * (exp(x) - 1) below",
        {"Alpha": 1.6732632, "Gamma": 1.050701},
    ),
    _activation(
        "SCALED_TANH",
        "1_0",
        _TWO,
        _scaled_tanh,
        _F2_TABLE,
        "Alpha * tanh(Beta * x)",
        {"Alpha": 1.5, "Beta": 0.5},
    ),
    _activation(
        "SHRINK",
        "2_0",
        (("bias", FLOAT), ("threshold", FLOAT)),
        _shrink,
        _TABLE_2_0 + rows((L.FL_5_1, DIMS1_8, F2 | _INTS | types("UINT32", "UINT16", "UINT8"))),
        "x - Bias above Threshold, x + Bias below -Threshold, else 0",
        {"Bias": 0.25, "Threshold": 0.5},
    ),
    _activation(
        "SOFTPLUS",
        "1_0",
        (("steepness", FLOAT),),
        _softplus,
        _F2_TABLE,
        "log(1 + exp(Steepness * x)) / Steepness",
        {"Steepness": 1.0},
        rules=_softplus_rules,
    ),
    _activation(
        "SOFTSIGN",
        "1_0",
        (),
        _softsign,
        _F2_TABLE,
        "x / (1 + |x|)",
        {},
    ),
    _activation(
        "SWISH",
        "6_2",
        (("sigmoid_input_scale", FLOAT),),
        _swish,
        _TABLE_6_2,
        "x * sigmoid(SigmoidInputScale * x)",
        {"SigmoidInputScale": 1.0},
        in_place=False,  # the schema's flag (the page says in place is allowed)
        fusable=False,
    ),
    _activation(
        "TANH",
        "1_0",
        (),
        lambda d, x: jnp.tanh(x),
        _F2_TABLE,
        "tanh(x)",
        {},
    ),
    _activation(
        "THRESHOLDED_RELU",
        "1_0",
        _ONE,
        _thresholded_relu,
        _F2_TABLE,
        "x for x > Alpha, else 0",
        {"Alpha": 0.25},
    ),
    Row(
        "ACTIVATION_PARAMETERIZED_RELU",
        "1_0",
        "x for x >= 0, Slope * x below (SlopeTensor broadcast through strides)",
        _parameterized_relu,
        _F2_TABLE + rows((L.FL_5_1, DIMS1_8, F2 | _INTS)),
        ({}, {**_X, "SlopeTensor": [0.1, 0.2, 0.3, 0.4, 0.5, 0.6]}),
        inputs=("input_tensor", "slope_tensor"),
    ),
)

for _row in ROWS:
    globals()[class_name(_row.name)] = define(_row, __name__)
del _row
