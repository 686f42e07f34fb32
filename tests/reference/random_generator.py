"""NumPy reference of DML_OPERATOR_RANDOM_GENERATOR (Philox 4x32-10), written from the published
algorithm and DirectML's page for DML_RANDOM_GENERATOR_OPERATOR_DESC (paraphrased).

- Philox 4x32-10 (Salmon, Moraes, Dror, Shaw, "Parallel random numbers: as easy as 1, 2, 3",
  SC11): a 4-word counter and a 2-word key; each of 10 rounds multiplies counter words 0 and 2
  by 0xD2511F53 and 0xCD9E8D57 into 64-bit products, and the new words are
  (hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0); the key gains 0x9E3779B9 and 0xBB67AE85 (mod 2**32)
  between rounds. Products are taken in uint64 NumPy scalars here, one block at a time.
- The state: elements 0-3 a 128-bit counter (element 0 least significant), 4-5 the key. Output
  element j (row-major) is word j % 4 of the block at counter + j // 4 (a Python int modulo
  2**128). The updated state holds counter + ceil(count / 4), key unchanged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

M0, M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
W0, W1 = 0x9E3779B9, 0xBB67AE85
MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: list[int], key: list[int]) -> list[int]:
    """One Philox 4x32-10 block: four uint32 words (Python ints) from counter and key words."""
    c = [np.uint64(w) for w in counter]
    k0, k1 = int(key[0]), int(key[1])
    for r in range(10):
        if r:
            k0, k1 = (k0 + W0) % 2**32, (k1 + W1) % 2**32
        p0 = M0 * c[0]  # < 2**64: exact in uint64
        p1 = M1 * c[2]
        hi0, lo0 = p0 >> np.uint64(32), p0 & MASK32
        hi1, lo1 = p1 >> np.uint64(32), p1 & MASK32
        c = [hi1 ^ c[1] ^ np.uint64(k0), lo1, hi0 ^ c[3] ^ np.uint64(k1), lo0]
    return [int(w) for w in c]


def _counter(words) -> int:
    return sum(int(w) << (32 * i) for i, w in enumerate(words))


def _words(counter: int) -> list[int]:
    return [(counter >> (32 * i)) & 0xFFFFFFFF for i in range(4)]


def random_generator(desc: Any, state: np.ndarray) -> tuple[np.ndarray, ...]:
    s = [int(w) for w in state.ravel()]
    counter, key = _counter(s[:4]), s[4:6]
    n = math.prod(desc.output_tensor.sizes)
    blocks = -(-n // 4)
    flat = []
    for b in range(blocks):
        flat += philox4x32_10(_words((counter + b) % 2**128), key)
    out = np.array(flat[:n], np.uint32).reshape(desc.output_tensor.sizes)
    if desc.output_state_tensor is None:
        return (out,)
    new = _words((counter + blocks) % 2**128) + key
    return out, np.array(new, np.uint32).reshape(desc.output_state_tensor.sizes)


REFERENCES = {"DML_OPERATOR_RANDOM_GENERATOR": random_generator}
