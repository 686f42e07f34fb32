"""Presents fed back as pasts to ``run``: an onnxruntime-style decode loop's cache kept on the
device between its runs.

The loop every onnxruntime user writes feeds the presents one ``run`` returned as the next run's
pasts. ``run`` returns them as NumPy arrays, read-only as all its outputs, so arrays given back
unchanged are the very objects it returned. A session on an accelerator (``applies``) keeps its
last run's presents on its device too (a Concat-form decoder step's, ``roles.find_roles``: the
cache of one sequence of runs), and a feed whose pasts are all those same objects takes the
device copies instead: each padded to its bucket there (``binding.pad_on_device``, one dispatch
for the lot), with no copy of the cache in through the host and no padding on it. The presents
still come back to the host, as ``run`` returns them. Any other feed (pasts of another run,
copies, a different session's) runs as before; only the objects' identity is compared, and the
last run's arrays are held until a later run replaces them, so no other array can take one's
place at its address.

Off by default (``KEEP_PRESENTS``): measured, it costs more than it saves. On an H200 host the
copy in of the 1B-class LLaMA's 32 pasts took some 0.9-1.2 ms a token and their padding on the
host 0.4-0.5 ms, but the device copies take two dispatches of 32 arrays each (the views of the
packed buffer, then the move to the bucket), some 0.4 ms of host time apiece, and the loop came
out slower: 7.5-8.4 ms a token against 6.5-7.0 without, in either order in one process
(``benchmarks/experiments/decode_loops_gpu.py --loops run-fresh run run-fresh run``). Reading
the packed buffer inside the next run's program would take both dispatches away, but at the
price of another compile of the whole step a bucket; ``Generator`` is the loop that keeps its
cache on the device.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

from .binding import OrtValue, pad_on_device
from .buckets import cutter

# Whether sessions on accelerators keep their presents for a feed that gives them back (off:
# slower on the H200 host measured, see above).
KEEP_PRESENTS = False


def applies(platform: str) -> bool:
    """Whether a session on ``platform`` keeps its presents: where ``KEEP_PRESENTS`` says so,
    on an accelerator, where a copy in costs more than its bytes; never on the CPU, where the
    host's arrays are the program's inputs as they are and the padding on the device cost more
    than it saved (the tiny LLaMA's loop 0.195 -> 0.217 ms a token on this project's 2-core
    CPU)."""
    return KEEP_PRESENTS and platform != "cpu"


class HeldPresents(NamedTuple):
    """A session's last run's presents: ``host``, each present's array as ``run`` returned it,
    by name; ``device``, a function giving them on the device as OrtValues (a present left in
    its bucket knowing which of its positions are its own)."""

    host: dict[str, np.ndarray]
    device: Callable[[], dict[str, OrtValue]]


def reuse(held: HeldPresents | None, buckets: Any, feed: Mapping[str, Any]) -> tuple | None:
    """For a feed whose pasts are ``held``'s presents, the feed with their device copies
    padded to the bucket, the presents' padding ``(axis, past, length)`` and the function that
    cuts it out of a result on the host; else None."""
    roles, sizes = buckets
    if held is None:
        return None
    pasts = [n for pair in roles.past for n in pair]
    presents = [n for pair in roles.present for n in pair]
    if any(feed.get(p) is not held.host.get(q) for p, q in zip(pasts, presents)):
        return None
    on_device = held.device()
    padded = pad_on_device(roles, {**feed, **{p: on_device[q] for p, q in zip(pasts, presents)}},
                           sizes)  # fmt: skip
    if padded is None:
        return None
    feed, (axis, past, length) = padded
    new = np.shape(feed[roles.input_ids])[1]
    return feed, (axis, past, length), cutter(roles, np.r_[0:past, length : length + new])


def remember(
    roles: Any, result: dict[str, Any], padding: tuple | None, device: Callable[[list], dict]
) -> HeldPresents | None:
    """The presents of ``result`` (a run's host outputs by name, their padding cut out) to
    keep: each made read-only, with ``device`` giving the device arrays of the names it is
    given (by name, still at their bucket's length where ``padding`` says so: ``(axis, past,
    length)``); None where the step is not one ``reuse`` takes (not a Concat-form step, or a
    present not returned)."""
    if roles.kind != "concat" or roles.use_cache_branch is not None:
        return None
    names = [n for pair in roles.present for n in pair]
    if any(not isinstance(result.get(n), np.ndarray) for n in names):
        return None
    for n in names:  # read-only, and a view of a read-only array: not made writable again
        result[n].flags.writeable = False
        result[n] = result[n].view()

    def values() -> dict[str, OrtValue]:
        arrays = device(names)
        return {n: OrtValue(arrays[n], result[n].dtype, "device", padding) for n in names}

    return HeldPresents({n: result[n] for n in names}, values)


__all__ = ["KEEP_PRESENTS", "HeldPresents", "applies", "remember", "reuse"]
