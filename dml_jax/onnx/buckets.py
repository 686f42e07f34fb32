"""Shape buckets for decoder steps: a past length rounded up to a bucket, the padding masked.

A decoder step (``roles.find_roles``) whose graph shows the padding masked (it takes
``position_ids``, and each present is ``Concat(past, new)`` on the sequence axis) gives the same
outputs for a past padded with zeros from its length ``P`` to a bucket ``L`` when the attention
mask is zero over the padding: the padded keys only ever meet a zero in the mask. ``run`` then
pads a feed's pasts and mask to ``L`` (``pad_decoder_feed``) and cuts the padding out of the
presents (a Concat's present holds the padding between past and new; GroupQueryAttention's, whose
``seqlens_k`` comes from the mask, holds each entry's positions first, then zeros), so an
onnxruntime-style loop (``run`` once a token, the presents fed back as pasts) compiles one
program per bucket, not one per token; the ``Generator`` runs its cache at bucket
lengths the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

# The smallest bucket: shorter lengths share one program.
MIN_BUCKET = 16


def bucket_length(n: int, sizes: Sequence[int] | None) -> int:
    """``n`` rounded up to a bucket: with ``sizes`` empty, a power of two from ``MIN_BUCKET``;
    else the first of ``sizes`` (sorted) at least ``n``, or ``n`` past the largest; with
    ``sizes`` None, ``n``."""
    if sizes is None:
        return n
    if not sizes:
        return max(MIN_BUCKET, 1 << (max(n, 1) - 1).bit_length())
    for b in sizes:
        if b >= n:
            return b
    return n


def bucket_sizes(option: Any, bucketable: bool, where: str) -> tuple[int, ...] | None:
    """The sizes ``bucket_length`` takes for a ``buckets`` option: None (on where the padding
    is shown masked: powers of two), True (the same), False (off) or a list of lengths."""
    from ..errors import ValidationError

    if option is False or (option is None and not bucketable):
        return None
    if option in (None, True):
        return ()
    if (
        isinstance(option, str)
        or not isinstance(option, Sequence)
        or not option
        or any(not isinstance(x, int | np.integer) or x < 1 for x in option)
    ):
        raise ValidationError(
            f"{where}: buckets must be None, True, False or a list of positive ints, got {option!r}"
        )
    return tuple(sorted({int(b) for b in option}))


def run_buckets_line(roles: Any, found: tuple | None, option: Any) -> str:
    """``InferenceSession.explain``'s line on what ``run`` does with a decoder step's past
    length: ``found`` its ``_run_buckets()`` (roles, sizes, the probe's side), ``option`` its
    ``buckets``."""
    names = f"{roles.past[0][0]} ... dimension {roles.axis} and {roles.attention_mask}"
    if found is None:
        why = "buckets=False" if option is False else roles.why
        return f"buckets: none, every past length exact ({why})"
    sizes = list(found[1]) or f"powers of two from {MIN_BUCKET}"
    if not roles.bucketable:  # no position_ids: the probe decides each length
        return (
            f"buckets: {names} padded to {sizes} where the probe shows the step numbering "
            "its tokens from the mask (no position_ids input), else every length exact"
        )
    probe = (
        "; each bucket length first checked to move nothing the step computes from the "
        "past's size, with the padding after the past, else before it, else exact"
        if found[2] is not None
        else ""
    )
    return f"buckets: {names} padded to {sizes}, the padding masked ({roles.why}{probe})"


def pad_decoder_feed(
    roles: Any,
    names: Sequence[str],
    arrays: list,
    sizes: Sequence[int],
    side: Callable[[int], str | None] | None = None,
) -> tuple[list, Callable[[dict], dict] | None]:
    """``arrays`` (one per input of ``names``) with the pasts padded with zeros to a bucket
    length and the attention mask padded with zeros after the past (or, where ``side(length)``
    is "front", both padded before the past), and the function that cuts the padding out of
    the presents of a result ``{name: array}``; (arrays, None) where the feed is not a past of
    a length to pad (no past yet, or shapes the model would refuse), or where ``side(length)``
    is None (padding to that length would change the step's outputs:
    ``padding_probe.padded_side``)."""
    index = {n: k for k, n in enumerate(names)}
    axis = roles.axis
    pasts = [index[n] for pair in roles.past for n in pair]
    first = arrays[pasts[0]]
    mask = arrays[index[roles.attention_mask]]
    ids = arrays[index[roles.input_ids]]
    if first is None or np.ndim(first) != 4 or np.ndim(mask) != 2 or np.ndim(ids) != 2:
        return arrays, None
    past = first.shape[axis]
    if past == 0 or any(np.shape(arrays[k]) != first.shape for k in pasts):
        return arrays, None
    if roles.use_cache_branch is not None:  # a merged decoder: only its branch with the past
        use = arrays[index[roles.use_cache_branch]]
        if use is None or not np.all(use):
            return arrays, None
    if mask.shape[1] != past + ids.shape[1]:
        if roles.kind == "gqa" and ids.shape[1] < mask.shape[1]:
            return _pad_shared_buffer(roles, index, arrays, sizes, past)
        return arrays, None
    length = bucket_length(past, sizes)
    where = "end" if side is None or length <= past else side(length)
    if length <= past or where is None:
        return arrays, None
    front = where == "front"
    out = list(arrays)
    for k in pasts:
        x = arrays[k]
        pad = list(x.shape)
        pad[axis] = length - past
        parts = [np.zeros(pad, x.dtype), x]
        out[k] = np.concatenate(parts if front else parts[::-1], axis=axis)
    out[index[roles.attention_mask]] = padded_mask(mask, past, length, front)
    new = ids.shape[1]
    if roles.kind == "gqa":  # each entry's positions first: the first past + new ones
        return out, _cutter(roles, np.arange(past + new))
    if front:  # the padding, the past's positions, then the new ones
        return out, _cutter(roles, np.arange(length - past, length + new))
    # Concat(past, new): the past's positions, the padding, then the new ones.
    return out, _cutter(roles, np.r_[0:past, length : length + new])


def padded_mask(mask: np.ndarray, past: int, length: int, front: bool = False) -> np.ndarray:
    """An attention mask over ``past`` positions and new ones, with zeros after the past up to
    ``length`` (a Concat-form step's past padded to its bucket), or before it (``front``)."""
    zeros = np.zeros((mask.shape[0], length - past), mask.dtype)
    if front:
        return np.concatenate([zeros, mask], 1)
    return np.concatenate([mask[:, :past], zeros, mask[:, past:]], 1)


def _cutter(roles: Any, keep: np.ndarray) -> Callable[[dict], dict]:
    """The function that keeps the positions ``keep`` of each present of a result."""
    presents = [n for pair in roles.present for n in pair]

    def unpad(result: dict) -> dict:
        for n in presents:
            if n in result:
                result[n] = np.take(result[n], keep, roles.axis)
        return result

    return unpad


def _pad_shared_buffer(
    roles: Any, index: dict, arrays: list, sizes: Sequence[int], past: int
) -> tuple[list, Callable[[dict], dict] | None]:
    """A GroupQueryAttention step over a past buffer that is not past + new long (ONNX Runtime
    GenAI's past and present sharing one buffer of the maximum length): the mask alone padded
    with zeros to a bucket length (GroupQueryAttention reads only its sum, as ``seqlens_k``, and
    its length, as ``total_sequence_length``, which sets the presents' capacity to the larger
    of it and the buffer's), the presents cut back to that capacity for the mask's own
    length. Not for a first prompt (new tokens as many as the mask's), which the total
    length tells apart."""
    k = index[roles.attention_mask]
    mask = arrays[k]
    total = mask.shape[1]
    length = bucket_length(total, sizes)
    if length <= total:
        return arrays, None
    out = list(arrays)
    out[k] = np.concatenate([mask, np.zeros((mask.shape[0], length - total), mask.dtype)], 1)
    return out, _cutter(roles, np.arange(max(total, past)))
