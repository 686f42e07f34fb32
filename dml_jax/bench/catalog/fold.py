"""Bench cases of the operators of ``dml_jax.ops.fold``."""

from __future__ import annotations

import jax
from jax import lax

from dml_jax.bench.catalog import BenchCase, register_cases
from dml_jax.ops.fold import FoldOperatorDesc, UnfoldOperatorDesc
from dml_jax.tensor import TensorDesc


def _patches(x, window: int, padding: int, stride: int):
    """jax.numpy's im2col: the identity-filter convolution, at full float32 precision."""
    y = lax.conv_general_dilated_patches(
        x,
        (window, window),
        (stride, stride),
        [(padding, padding)] * 2,
        precision=lax.Precision.HIGHEST,
    )
    return y.reshape(y.shape[0], y.shape[1], -1)


def _bench(cls: type):
    def cases(shape: tuple, dtype: str, full: bool) -> list[BenchCase]:
        n, c, h, w = shape
        is_float = dtype.startswith("float")
        out = []
        # 2x2 windows at stride 2 (ViT-style patches; a permutation, as many bytes out as in)
        # on the whole shape; 3x3 windows at stride 1 with padding 1 (a convolution's im2col,
        # nine times the bytes) on a quarter of it.
        for window, stride, pad, (hh, ww) in ((2, 2, 0, (h, w)), (3, 1, 1, (h // 2, w // 2))):
            image = TensorDesc(dtype.upper(), (n, c, hh, ww))
            blocks = ((hh + 2 * pad - window) // stride + 1) * (
                (ww + 2 * pad - window) // stride + 1
            )
            columns = image.like(sizes=(n, c * window * window, blocks))
            arrays = {
                "window_sizes": [window] * 2,
                "strides": [stride] * 2,
                "dilations": [1, 1],
                "start_padding": [pad] * 2,
                "end_padding": [pad] * 2,
            }
            label = f"{cls.operator_type[13:]} {window}x{window} stride {stride} pad {pad}"

            def patches(x, window=window, pad=pad, stride=stride):
                return _patches(x, window, pad, stride)

            if cls is UnfoldOperatorDesc:
                desc = cls(image, columns, **arrays)
                jnp_fn = patches if is_float else None

                def torch_fn(torch, x, window=window, pad=pad, stride=stride):
                    return torch.nn.functional.unfold(x, window, padding=pad, stride=stride)
            else:
                desc = cls(columns, image, **arrays)
                zeros = jax.ShapeDtypeStruct(image.sizes, image.dtype)

                def jnp_fn(y, patches=patches, zeros=zeros):  # the transpose of the patches
                    return jax.linear_transpose(patches, zeros)(y)[0]

                jnp_fn = jnp_fn if is_float else None

                def torch_fn(torch, y, hw=(hh, ww), window=window, pad=pad, stride=stride):
                    return torch.nn.functional.fold(y, hw, window, padding=pad, stride=stride)

            out.append(BenchCase(label, desc, jnp=jnp_fn, torch=torch_fn if is_float else None))
        return out if full or dtype == "float32" else out[:1]

    return cases


register_cases(UnfoldOperatorDesc, _bench(UnfoldOperatorDesc))
register_cases(FoldOperatorDesc, _bench(FoldOperatorDesc))
