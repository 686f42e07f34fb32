"""DML_OPERATOR_RANDOM_GENERATOR: Philox 4x32-10 counter-based random bits.

What DirectML's page (DML_RANDOM_GENERATOR_OPERATOR_DESC, MicrosoftDocs/sdk-api) states:
- InputStateTensor is UINT32 {1, 1, 1, 6}: elements 0-3 a 128-bit counter, elements 4-5 the
  64-bit key; OutputStateTensor (optional) has the same sizes.
- OutputTensor has any sizes, and its data type is UINT32 only (the support table: one row, 4
  dimensions, UINT32 for all three tensors).
- One execution advances the counter by ceil(OutputTensor element count / 4): Philox 4x32
  yields four 32-bit words per counter value.
- The algorithm is Salmon et al.'s Philox 4x32 with 10 rounds (SC11, "Parallel random numbers:
  as easy as 1, 2, 3").

What the page leaves open, and where the choice comes from:
- Element 0 of the state is the counter's least significant word, and output element j is word
  ``j % 4`` of the Philox block at counter ``InputCounter + j // 4``. Microsoft's own caller,
  the tensorflow-directml-plugin (tfdml/kernels/dml_random_ops.cc), copies TensorFlow's
  PhiloxRandom counter words 0-3 and key words 0-1 into state elements 0-5 in that order and
  expects TensorFlow's CPU numbers back; TensorFlow (like Random123) numbers counter word 0 the
  least significant, increments it first, and emits each block's four words in order.
- Counters add as full 128-bit integers (carry through all four words) and wrap modulo 2**128,
  for every block and for the updated state (the page calls it a 128-bit counter).
- The page's worked example of the counter update states "before" and "after" the wrong way
  round (its "after" is 324,855 below its "before"); see docs/semantics.md.
- Floats in [0, 1) are not this operator's job: the plugin above builds them from these bits
  with other operators (low 23 bits under the exponent of 1.0, minus 1).

The lowering is uint32 jax.lax arithmetic only (no x64): the 32x32 -> 64-bit products of each
round are split into 16-bit limbs, every output element is computed at once in one fused pass,
and the result is bit-exact.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import jax.numpy as jnp
import numpy as np
from jax import lax

from ..enums import FeatureLevel as L
from ..enums import RandomGeneratorType
from ..errors import Validator
from ..fields import OperatorDesc, attribute, enum_type, input_field, output_field
from ..registry import Example, register
from ..support import DIMS4, U32, rows
from ..tensor import TensorDesc

PHILOX_STATE_SIZES = (1, 1, 1, 6)
# Philox 4x32's round multipliers and Weyl key increments (Salmon et al., SC11), 10 rounds.
PHILOX_M0, PHILOX_M1 = 0xD2511F53, 0xCD9E8D57
PHILOX_W0, PHILOX_W1 = 0x9E3779B9, 0xBB67AE85
PHILOX_ROUNDS = 10


@dataclass(frozen=True)
class RandomGeneratorOperatorDesc(OperatorDesc):
    """DML_RANDOM_GENERATOR_OPERATOR_DESC: fills OutputTensor with Philox 4x32-10 random bits
    (FL 3_0).

    Fields:
        input_state_tensor: UINT32 {1, 1, 1, 6}: a 128-bit counter in elements 0-3 (element 0
            the least significant word) and the 64-bit key in elements 4-5.
        output_tensor: UINT32, any sizes: element j (row-major) is word j % 4 of the Philox
            block at counter + j // 4.
        output_state_tensor: optional, the sizes of InputStateTensor: the input state with the
            counter advanced by ceil(element count / 4) (modulo 2**128), the key unchanged.
        type: DML_RANDOM_GENERATOR_TYPE; PHILOX_4X32_10 is its only value.
    """

    operator_type: ClassVar[str] = "DML_OPERATOR_RANDOM_GENERATOR"
    input_state_tensor: TensorDesc = input_field()
    output_tensor: TensorDesc = output_field()
    output_state_tensor: TensorDesc | None = output_field(optional=True)
    type: RandomGeneratorType = attribute(enum_type(RandomGeneratorType))


def blocks_of(d: RandomGeneratorOperatorDesc) -> int:
    """Philox blocks one execution consumes: ceil(OutputTensor element count / 4)."""
    return -(-d.output_tensor.element_count // 4)


def infer_random_generator(d: RandomGeneratorOperatorDesc) -> tuple[TensorDesc, ...]:
    state = (d.input_state_tensor.like(),) if d.output_state_tensor is not None else ()
    return (d.output_tensor.like(),) + state


def validate_random_generator(d: RandomGeneratorOperatorDesc, v: Validator) -> None:
    v.equal(
        "InputStateTensor.Sizes",
        d.input_state_tensor.sizes,
        PHILOX_STATE_SIZES,
        "the PHILOX_4X32_10 state",
    )
    if d.output_state_tensor is not None:
        v.same(
            "sizes",
            [("OutputStateTensor", d.output_state_tensor)],
            ("InputStateTensor", d.input_state_tensor),
        )


# --- Philox 4x32-10 in uint32 jax.lax ----------------------------------------------------------


def _u32(n: int):
    return np.uint32(n)


def _mulhilo(a, m: int):
    """(high, low) words of the 64-bit product of uint32 ``a`` and the constant ``m``.

    The high word comes from 16-bit limbs: each partial product fits 32 bits and the sums of
    their pieces never exceed the true high word, so nothing wraps and no 64-bit type is needed.
    """
    mask = _u32(0xFFFF)
    a0, a1 = a & mask, a >> _u32(16)
    m0, m1 = _u32(m & 0xFFFF), _u32(m >> 16)
    p00, p01, p10, p11 = a0 * m0, a0 * m1, a1 * m0, a1 * m1
    mid = (p00 >> _u32(16)) + (p01 & mask) + (p10 & mask)
    hi = p11 + (p01 >> _u32(16)) + (p10 >> _u32(16)) + (mid >> _u32(16))
    return hi, a * _u32(m)


def philox4x32_10(counter: tuple, key: tuple) -> tuple:
    """The four output words of Philox 4x32-10 for counter words (c0..c3) and key (k0, k1),
    uint32 arrays that broadcast together."""
    c0, c1, c2, c3 = counter
    k0, k1 = key
    for r in range(PHILOX_ROUNDS):
        if r:
            k0, k1 = k0 + _u32(PHILOX_W0), k1 + _u32(PHILOX_W1)
        hi0, lo0 = _mulhilo(c0, PHILOX_M0)
        hi1, lo1 = _mulhilo(c2, PHILOX_M1)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
    return c0, c1, c2, c3


def add_to_counter(counter: tuple, n) -> tuple:
    """The 128-bit counter (c0 least significant) plus ``n`` (uint32, < 2**32), modulo 2**128."""
    c0, c1, c2, c3 = counter
    w0 = c0 + n
    carry = (w0 < c0).astype(jnp.uint32)  # the low word wrapped
    w1 = c1 + carry
    carry = carry & (w1 == 0).astype(jnp.uint32)
    w2 = c2 + carry
    carry = carry & (w2 == 0).astype(jnp.uint32)
    return w0, w1, w2, c3 + carry


def lower_random_generator(d: RandomGeneratorOperatorDesc, state):
    assert d.type is RandomGeneratorType.PHILOX_4X32_10  # the enum's only member
    words = lax.reshape(state, (6,))
    counter = tuple(words[i] for i in range(4))
    key = (words[4], words[5])
    # Each output element runs its block's whole Philox chain and keeps its own word: four
    # times the arithmetic of one chain per block, but one fused pass that writes the output in
    # place. Computing each block once and interleaving its four words with a stack/concatenate
    # made XLA re-emit the chain per operand (about 25 times slower on CPU).
    j = lax.iota(jnp.uint32, d.output_tensor.element_count)  # < 2**32 elements
    w0, w1, w2, w3 = philox4x32_10(add_to_counter(counter, j >> _u32(2)), key)
    word = j & _u32(3)
    flat = lax.select(
        word < _u32(2),
        lax.select(word == _u32(0), w0, w1),
        lax.select(word == _u32(2), w2, w3),
    )
    results = (lax.reshape(flat, d.output_tensor.sizes),)
    if d.output_state_tensor is not None:
        advanced = add_to_counter(counter, _u32(blocks_of(d)))
        results += (lax.reshape(jnp.stack(advanced + key), d.output_state_tensor.sizes),)
    return results


register(
    RandomGeneratorOperatorDesc,
    infer=infer_random_generator,
    validate=validate_random_generator,
    lower=lower_random_generator,
    in_place=False,
    support=rows((L.FL_3_0, DIMS4, U32)),
    example=Example(
        {
            "type": "DML_OPERATOR_RANDOM_GENERATOR",
            "desc": {
                "InputStateTensor": {"DataType": "UINT32", "Sizes": [1, 1, 1, 6]},
                "OutputTensor": {"DataType": "UINT32", "Sizes": [1, 1, 2, 3]},
                "OutputStateTensor": {"DataType": "UINT32", "Sizes": [1, 1, 1, 6]},
                "Type": "DML_RANDOM_GENERATOR_TYPE_PHILOX_4X32_10",
            },
        },
        {"InputStateTensor": [0, 0, 0, 0, 0, 0]},
        "counter 0, key 0: Random123's first known answer, then 2 words of the next block; "
        "the counter advances by 2",
    ),
)
