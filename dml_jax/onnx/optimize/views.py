"""Strided views over a packed buffer, as graph rewrites follow them through identity copies
and reshapes (``attention.py``'s AttentionFusion): a view is, per logical axis, a list of
(size, stride) pairs, row-major; a logical axis may hold several."""

from __future__ import annotations

from ...tensor import TensorDesc, packed_strides

# A strided view: (size, stride) per axis, row-major; a logical axis may hold several.
Axes = list[tuple[int, int]]


def view_axes(desc: TensorDesc) -> list[Axes]:
    """One single-axis list per dimension of ``desc``."""
    strides = desc.strides if desc.strides is not None else packed_strides(desc.sizes)
    return [[(n, t if n > 1 else 0)] for n, t in zip(desc.sizes, strides)]


def canonical(axes: Axes) -> Axes:
    """The same view with size-1 axes dropped and adjacent axes merged where the outer stride
    is the inner one times its size (so two views are equal exactly when these are)."""
    out: Axes = []
    for n, t in axes:
        if n == 1:
            continue
        if out and out[-1][1] == n * t:
            out[-1] = (out[-1][0] * n, t)
        else:
            out.append((n, t))
    return out


def reshaped_strides(axes: Axes, sizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """Strides reading ``axes`` (row-major, same element count) as ``sizes``, or None where that
    needs a copy (numpy's no-copy reshape)."""
    rest = canonical(axes)
    out = []
    for n in sizes:
        if n == 1:
            out.append(0)
            continue
        if not rest:
            return None
        m, t = rest[0]
        if m % n:
            return None
        out.append(t * (m // n))
        if m == n:
            rest.pop(0)
        else:
            rest[0] = (m // n, t)
    return None if rest else tuple(out)


def compose(view: list[Axes], y_sizes: tuple[int, ...], y_axes: list[Axes]) -> list[Axes] | None:
    """``view`` reads the packed buffer Y of ``y_sizes``, whose element at index (i_0, ...) is
    at offset sum(i_j * stride_j) of X (``y_axes``, one axis each): the same view over X, or
    None where it is not strided (an offset would carry from one axis of Y into the next)."""
    ys = [a[0][1] for a in y_axes]
    packed = packed_strides(y_sizes)
    real = [j for j, n in enumerate(y_sizes) if n > 1]
    used = dict.fromkeys(real, 0)

    def axis(n: int, t: int) -> Axes | None:
        if n == 1 or t == 0:
            return [(n, 0)]
        js = [j for j in real if packed[j] <= t < packed[j] * y_sizes[j]]
        if not js or t % packed[js[0]]:
            return None
        k = real.index(js[0])
        step, out = t // packed[js[0]], []
        while True:
            j = real[k]
            if step * (n - 1) < y_sizes[j]:
                used[j] += step * (n - 1)
                return [(n, step * ys[j])] + out
            if y_sizes[j] % step or n % (y_sizes[j] // step) or k == 0:
                return None
            inner = y_sizes[j] // step
            used[j] += step * (inner - 1)
            out.insert(0, (inner, step * ys[j]))
            n, step, k = n // inner, 1, k - 1

    result = []
    for logical in view:
        sub: Axes = []
        for n, t in logical:
            part = axis(n, t)
            if part is None:
                return None
            sub += part
        result.append(sub)
    if any(used[j] >= y_sizes[j] for j in real):
        return None
    return result
