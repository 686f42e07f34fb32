"""DML_OPERATOR_ACTIVATION_*: element-wise activation functions, one table row each.

Every activation maps InputTensor to OutputTensor element by element (same data type, rank and
sizes; the output may alias the input). A row gives the DML name, the feature level, the FLOAT
members, the function (written with jax.numpy on the input in its compute type), the support
table and, for activations that DirectML can fuse into GEMM, CONVOLUTION, ADD1 and the
normalizations, ``fusable``. Fused activations leave their tensors ``None``; see ``fused.py``.

Numerics: FLOAT16 inputs are computed in float32 and rounded once (DML's FLOAT coefficients are
float32). Functions that DirectML defines piecewise get the derivative of the branch in force,
and their unused branch is kept finite so gradients stay finite.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ..enums import FeatureLevel as L
from ..errors import Validator
from ..fields import FLOAT, FieldType, OperatorDesc, attribute, input_field, output_field
from ..registry import BenchCase, Example, register
from ..support import DIMS1_8, DIMS4, DIMS4_5, F2, rows, types
from ..tensor import TensorDesc
from ._common import in_float32, infer_same, same_tensors

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


@dataclasses.dataclass(frozen=True)
class _Row:
    name: str  # DML_OPERATOR_ACTIVATION_<name>
    level: str
    attrs: tuple[tuple[str, FieldType], ...]
    fn: Callable
    support: tuple
    summary: str
    example: dict
    fusable: bool = True
    jnp: Callable | None = None  # the hand-written equivalent, for the benchmarks
    torch: Callable | None = None


def _class_name(name: str) -> str:
    return "Activation" + "".join(p.capitalize() for p in name.split("_")) + "OperatorDesc"


def _define(row: _Row) -> type:
    """The descriptor class of one activation row, registered."""
    operator_type = f"DML_OPERATOR_ACTIVATION_{row.name}"
    members = "".join(f"\n        {a}: a DML FLOAT." for a, _ in row.attrs)
    doc = (
        f"DML_ACTIVATION_{row.name}_OPERATOR_DESC: {row.summary} (FL {row.level}).\n\n"
        "    Fields:\n"
        "        input_tensor, output_tensor: same data type, rank and sizes (the output may "
        "alias\n            the input). ``None`` only in a FusedActivation."
        f"{members}\n    "
    )
    cls = dataclasses.make_dataclass(
        _class_name(row.name),
        [("input_tensor", TensorDesc, input_field()), ("output_tensor", TensorDesc, output_field())]
        + [(a, float, attribute(t)) for a, t in row.attrs],
        bases=(OperatorDesc,),
        frozen=True,
        namespace={"operator_type": operator_type, "fusable": row.fusable, "__doc__": doc},
    )
    cls.__module__ = __name__
    fn = row.fn

    def lower(d: Any, x):
        return (in_float32(lambda y: fn(d, y), x),)

    register(
        cls,
        infer=infer_same,
        validate=_validate,
        lower=lower,
        support=row.support,
        in_place=True,
        fusable=row.fusable,
        example=_example(operator_type, row.example),
        bench=_bench(cls, row),
    )
    return cls


def _bench(cls: type, row: _Row):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        t = TensorDesc(dtype.upper(), shape)
        if not (full and t.data_type.is_float):
            return []
        attrs = {k.lower(): v for k, v in row.example.items()}
        return [BenchCase(row.name, cls(t, t, **attrs), jnp=row.jnp, torch=row.torch)]

    return cases


def _validate(d: Any, v: Validator) -> None:
    same_tensors(d, v)


_EXAMPLE_INPUT = [-2.0, -1.0, -0.5, 0.0, 0.5, 2.0]


def _example(operator_type: str, attrs: dict) -> Example:
    t = {"DataType": "FLOAT32", "Sizes": [2, 3]}
    return Example(
        {"type": operator_type, "desc": {"InputTensor": t, "OutputTensor": t, **attrs}},
        {"InputTensor": _EXAMPLE_INPUT},
        ", ".join(f"{k} {v}" for k, v in attrs.items()) or "no parameters",
    )


_ROWS = (
    _Row(
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
    _Row(
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
    _Row(
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
    _Row(
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

for _row in _ROWS:
    globals()[_class_name(_row.name)] = _define(_row)
