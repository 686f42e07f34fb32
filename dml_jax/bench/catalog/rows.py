"""Bench cases of the operators defined from rows (``dml_jax.ops._rows``: the element-wise math,
logical and activation tables): each is its registered example retyped to the run's shape and
data type, with the hand-written equivalents below where there are obvious ones."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.catalog import example_desc, retyped
from dml_jax.ops._rows import DEFINED
from dml_jax.registry import lookup
from dml_jax.tensor import TensorDesc


@dataclasses.dataclass(frozen=True)
class Equivalents:
    """The hand-written forms of one row operator.

    Attributes:
        jnp / torch: ``fn(*arrays)`` and ``fn(torch, *tensors)``.
        broadcast: also time B read per channel (buffer mode).
        more: ``more(desc) -> [(note, desc)]``, further cases from the example's desc.
    """

    jnp: Callable | None = None
    torch: Callable | None = None
    broadcast: bool = False
    more: Callable = lambda desc: ()


EQUIVALENTS = {
    "DML_OPERATOR_ACTIVATION_ELU": Equivalents(
        jnp=lambda x: jax.nn.elu(x, 0.5), torch=lambda torch, x: torch.nn.functional.elu(x, 0.5)
    ),
    "DML_OPERATOR_ACTIVATION_LINEAR": Equivalents(
        jnp=lambda x: 2.0 * x - 1.0, torch=lambda torch, x: 2.0 * x - 1.0
    ),
    "DML_OPERATOR_ACTIVATION_RELU": Equivalents(
        jnp=jax.nn.relu, torch=lambda torch, x: torch.relu(x)
    ),
    "DML_OPERATOR_ACTIVATION_SIGMOID": Equivalents(
        jnp=jax.nn.sigmoid, torch=lambda torch, x: torch.sigmoid(x)
    ),
    "DML_OPERATOR_ACTIVATION_CELU": Equivalents(
        jnp=lambda x: jax.nn.celu(x, 1.5), torch=lambda torch, x: torch.nn.functional.celu(x, 1.5)
    ),
    "DML_OPERATOR_ACTIVATION_GELU": Equivalents(
        jnp=lambda x: jax.nn.gelu(x, approximate=False),
        torch=lambda torch, x: torch.nn.functional.gelu(x),
    ),
    "DML_OPERATOR_ACTIVATION_HARD_SIGMOID": Equivalents(
        jnp=lambda x: jnp.clip(0.2 * x + 0.5, 0, 1),
        torch=lambda torch, x: torch.clamp(0.2 * x + 0.5, 0, 1),
    ),
    "DML_OPERATOR_ACTIVATION_HARD_SWISH": Equivalents(
        jnp=jax.nn.hard_swish, torch=lambda torch, x: torch.nn.functional.hardswish(x)
    ),
    "DML_OPERATOR_ACTIVATION_IDENTITY": Equivalents(jnp=lambda x: x + 0),
    "DML_OPERATOR_ACTIVATION_LEAKY_RELU": Equivalents(
        jnp=lambda x: jax.nn.leaky_relu(x, 0.1),
        torch=lambda torch, x: torch.nn.functional.leaky_relu(x, 0.1),
    ),
    "DML_OPERATOR_ACTIVATION_SCALED_ELU": Equivalents(
        jnp=jax.nn.selu, torch=lambda torch, x: torch.selu(x)
    ),
    "DML_OPERATOR_ACTIVATION_SOFTPLUS": Equivalents(
        jnp=jax.nn.softplus, torch=lambda torch, x: torch.nn.functional.softplus(x)
    ),
    "DML_OPERATOR_ACTIVATION_SOFTSIGN": Equivalents(
        jnp=jax.nn.soft_sign, torch=lambda torch, x: torch.nn.functional.softsign(x)
    ),
    "DML_OPERATOR_ACTIVATION_SWISH": Equivalents(
        jnp=jax.nn.silu, torch=lambda torch, x: torch.nn.functional.silu(x)
    ),
    "DML_OPERATOR_ACTIVATION_TANH": Equivalents(jnp=jnp.tanh, torch=lambda torch, x: torch.tanh(x)),
    "DML_OPERATOR_ELEMENT_WISE_ABS": Equivalents(jnp=jnp.abs, torch=lambda torch, x: torch.abs(x)),
    "DML_OPERATOR_ELEMENT_WISE_ERF": Equivalents(
        jnp=jax.scipy.special.erf, torch=lambda torch, x: torch.erf(x)
    ),
    "DML_OPERATOR_ELEMENT_WISE_EXP": Equivalents(jnp=jnp.exp, torch=lambda torch, x: torch.exp(x)),
    "DML_OPERATOR_ELEMENT_WISE_SQRT": Equivalents(
        jnp=jnp.sqrt, torch=lambda torch, x: torch.sqrt(x)
    ),
    "DML_OPERATOR_ELEMENT_WISE_TANH": Equivalents(
        jnp=jnp.tanh, torch=lambda torch, x: torch.tanh(x)
    ),
    "DML_OPERATOR_ELEMENT_WISE_CONSTANT_POW": Equivalents(
        more=lambda d: [("Exponent 1.5", dataclasses.replace(d, exponent=1.5))]
    ),
    "DML_OPERATOR_ELEMENT_WISE_NEGATE": Equivalents(jnp=jnp.negative, torch=lambda torch, x: -x),
    "DML_OPERATOR_ELEMENT_WISE_SUBTRACT": Equivalents(
        jnp=jnp.subtract, torch=lambda torch, a, b: a - b, broadcast=True
    ),
    "DML_OPERATOR_ELEMENT_WISE_MULTIPLY": Equivalents(
        jnp=jnp.multiply, torch=lambda torch, a, b: a * b, broadcast=True
    ),
    "DML_OPERATOR_ELEMENT_WISE_DIVIDE": Equivalents(
        jnp=jnp.divide, torch=lambda torch, a, b: a / b
    ),
    "DML_OPERATOR_ELEMENT_WISE_MAX": Equivalents(
        jnp=jnp.maximum, torch=lambda torch, a, b: torch.maximum(a, b), broadcast=True
    ),
    "DML_OPERATOR_ELEMENT_WISE_LOGICAL_EQUALS": Equivalents(
        jnp=lambda a, b: (a == b).astype(jnp.uint8),
        torch=lambda torch, a, b: (a == b).to(torch.uint8),
    ),
    "DML_OPERATOR_ELEMENT_WISE_LOGICAL_LESS_THAN": Equivalents(
        jnp=lambda a, b: (a < b).astype(jnp.uint8),
        torch=lambda torch, a, b: (a < b).to(torch.uint8),
    ),
    "DML_OPERATOR_ELEMENT_WISE_IF": Equivalents(jnp=lambda c, a, b: jnp.where(c != 0, a, b)),
}


def row_cases(operator_type: str) -> Callable:
    """The cases of a row operator: its example at the run's shape and type (when its support
    table takes the type), per-channel B and in place where they apply."""

    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        spec = lookup(operator_type)
        eq = EQUIVALENTS.get(operator_type, Equivalents())
        t = TensorDesc(dtype.upper(), shape)
        if t.data_type not in spec.support[-1].inputs:
            return []
        desc = retyped(example_desc(spec), t.data_type, shape)
        label = operator_type.removeprefix("DML_OPERATOR_")
        label = label.removeprefix("ELEMENT_WISE_").removeprefix("ACTIVATION_")
        out = [BenchCase(label, desc, jnp=eq.jnp, torch=eq.torch)]
        if eq.broadcast:
            out.append(broadcast_case(f"{label} per-channel B", desc, eq.jnp, eq.torch))
        if eq.jnp is not None and spec.in_place and label != "IDENTITY":  # in place: no work
            out.append(in_place_case(label, desc))
        out += [BenchCase(f"{label} {note}", d) for note, d in eq.more(desc)]
        return out

    return cases


def in_place_case(label: str, desc: Any) -> BenchCase:
    """``desc`` with its output over its first input's buffer (donated), as DirectML binds it."""
    return BenchCase(f"{label} in place", desc, in_place=True)


def broadcast_case(label: str, desc: Any, jnp_fn: Callable | None, torch_fn: Callable | None):
    """``desc`` with BTensor read per channel (NCHW strides {0, 1, 0, 0}), timed in buffer mode:
    A is a full buffer, B holds C elements. The hand-written equivalents broadcast explicitly."""
    shape = desc.a_tensor.sizes
    channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    strides = (0, 1) + (0,) * (len(shape) - 2)
    b = desc.b_tensor.like(sizes=shape, strides=strides)

    def jnp_b(a, bb):
        return jnp_fn(a.reshape(shape), bb.reshape(channel)).reshape(-1)

    def torch_b(torch, a, bb):
        return torch_fn(torch, a.view(shape), bb.view(channel)).reshape(-1)

    return BenchCase(
        label,
        dataclasses.replace(desc, b_tensor=b),
        jnp=jnp_b if jnp_fn else None,
        torch=torch_b if torch_fn else None,
        buffers=True,
    )


assert set(EQUIVALENTS) <= set(DEFINED), set(EQUIVALENTS) - set(DEFINED)
for _type in DEFINED:
    register_cases(_type, row_cases(_type))
