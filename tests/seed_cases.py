"""Every worked example of the seed documents and NOTES.md, as (description, inputs, expected).

Expected arrays are copied from the spec's arrays (seeds 000-004 and NOTES.md sections 4 and 6.11),
never computed. ``cases(family)`` lists a family's cases; ``check(case)`` runs one through dml_jax
and through the NumPy reference and asserts exact equality for both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import reference

import dml_jax as dml


@dataclass(frozen=True)
class SeedCase:
    name: str
    family: str
    desc: Any
    inputs: tuple
    expected: tuple

    def __repr__(self) -> str:
        return self.name


def _t(data_type: str, sizes) -> dml.TensorDesc:
    return dml.TensorDesc(data_type, list(sizes))


def _a(values, dtype: str, shape=None) -> np.ndarray:
    arr = np.array(values, dtype=np.dtype(dtype.lower()))
    return arr.reshape(shape) if shape is not None else arr


_CASES: list[SeedCase] = []


def _add(name: str, family: str, desc: Any, inputs, expected) -> None:
    _CASES.append(SeedCase(name, family, desc, tuple(inputs), tuple(expected)))


# --- SPLIT (seed 000) -----------------------------------------------------------------------
_split_in = _a(range(1, 13), "FLOAT32", (1, 1, 6, 2))
_add(
    "split_seed_example1_axis2",
    "split_join",
    dml.SplitOperatorDesc(
        _t("FLOAT32", (1, 1, 6, 2)),
        [_t("FLOAT32", (1, 1, 2, 2)), _t("FLOAT32", (1, 1, 1, 2)), _t("FLOAT32", (1, 1, 3, 2))],
        axis=2,
        output_count=3,
    ),
    [_split_in],
    [
        _a([[[[1, 2], [3, 4]]]], "FLOAT32"),
        _a([[[[5, 6]]]], "FLOAT32"),
        _a([[[[7, 8], [9, 10], [11, 12]]]], "FLOAT32"),
    ],
)
_add(
    "split_seed_example2_axis3",
    "split_join",
    dml.SplitOperatorDesc(
        _t("FLOAT32", (1, 1, 6, 2)), [_t("FLOAT32", (1, 1, 6, 1))] * 2, axis=3, output_count=2
    ),
    [_split_in],
    [
        _a([[[[1], [3], [5], [7], [9], [11]]]], "FLOAT32"),
        _a([[[[2], [4], [6], [8], [10], [12]]]], "FLOAT32"),
    ],
)
# dml_split.json (NOTES 6.11): [1..6] into three [2] pieces on axis 0.
_add(
    "split_dxdispatch_model",
    "split_join",
    dml.SplitOperatorDesc(_t("FLOAT32", (6,)), [_t("FLOAT32", (2,))] * 3, axis=0),
    [_a([1, 2, 3, 4, 5, 6], "FLOAT32")],
    [_a([1, 2], "FLOAT32"), _a([3, 4], "FLOAT32"), _a([5, 6], "FLOAT32")],
)

# --- JOIN (NOTES 4.2) -----------------------------------------------------------------------
_add(
    "join_doc_axis3_two_inputs",
    "split_join",
    dml.JoinOperatorDesc(
        [_t("FLOAT32", (1, 1, 2, 3)), _t("FLOAT32", (1, 1, 2, 4))],
        _t("FLOAT32", (1, 1, 2, 7)),
        axis=3,
        input_count=2,
    ),
    [_a(range(1, 7), "FLOAT32", (1, 1, 2, 3)), _a(range(7, 15), "FLOAT32", (1, 1, 2, 4))],
    [_a([[[[1, 2, 3, 7, 8, 9, 10], [4, 5, 6, 11, 12, 13, 14]]]], "FLOAT32")],
)
_join3 = [
    _a([1, 2, 3, 4], "FLOAT32", (1, 1, 2, 2)),
    _a([5, 6, 7, 8], "FLOAT32", (1, 1, 2, 2)),
    _a([9, 10, 11, 12], "FLOAT32", (1, 1, 2, 2)),
]
for _axis, _sizes, _expected in (
    (1, (1, 3, 2, 2), [[[[1, 2], [3, 4]], [[5, 6], [7, 8]], [[9, 10], [11, 12]]]]),
    (2, (1, 1, 6, 2), [[[[1, 2], [3, 4], [5, 6], [7, 8], [9, 10], [11, 12]]]]),
    (3, (1, 1, 2, 6), [[[[1, 2, 5, 6, 9, 10], [3, 4, 7, 8, 11, 12]]]]),
):
    _add(
        f"join_doc_three_inputs_axis{_axis}",
        "split_join",
        dml.JoinOperatorDesc([_t("FLOAT32", (1, 1, 2, 2))] * 3, _t("FLOAT32", _sizes), axis=_axis),
        _join3,
        [_a(_expected, "FLOAT32")],
    )

# --- DEPTH_TO_SPACE1 / SPACE_TO_DEPTH1 (seed 001, NOTES 4.3-4.4) ------------------------------
_depth = _a(
    [
        [
            [[0, 1, 2], [3, 4, 5]],
            [[9, 10, 11], [12, 13, 14]],
            [[18, 19, 20], [21, 22, 23]],
            [[27, 28, 29], [30, 31, 32]],
            [[36, 37, 38], [39, 40, 41]],
            [[45, 46, 47], [48, 49, 50]],
            [[54, 55, 56], [57, 58, 59]],
            [[63, 64, 65], [66, 67, 68]],
        ]
    ],
    "UINT32",
)
_space_dcr = _a(
    [
        [
            [
                [0, 18, 1, 19, 2, 20],
                [36, 54, 37, 55, 38, 56],
                [3, 21, 4, 22, 5, 23],
                [39, 57, 40, 58, 41, 59],
            ],
            [
                [9, 27, 10, 28, 11, 29],
                [45, 63, 46, 64, 47, 65],
                [12, 30, 13, 31, 14, 32],
                [48, 66, 49, 67, 50, 68],
            ],
        ]
    ],
    "UINT32",
)
_space_crd = _a(
    [
        [
            [
                [0, 9, 1, 10, 2, 11],
                [18, 27, 19, 28, 20, 29],
                [3, 12, 4, 13, 5, 14],
                [21, 30, 22, 31, 23, 32],
            ],
            [
                [36, 45, 37, 46, 38, 47],
                [54, 63, 55, 64, 56, 65],
                [39, 48, 40, 49, 41, 50],
                [57, 66, 58, 67, 59, 68],
            ],
        ]
    ],
    "UINT32",
)
_D, _S = _t("UINT32", (1, 8, 2, 3)), _t("UINT32", (1, 2, 4, 6))
for _order, _space in (("DEPTH_COLUMN_ROW", _space_dcr), ("COLUMN_ROW_DEPTH", _space_crd)):
    _add(
        f"depth_to_space1_seed_{_order.lower()}",
        "depth_space",
        dml.DepthToSpace1OperatorDesc(_D, _S, block_size=2, order=_order),
        [_depth],
        [_space],
    )
    # SPACE_TO_DEPTH1 with the same order is the inverse: {1,2,4,6} -> {1,8,2,3}.
    _add(
        f"space_to_depth1_seed_{_order.lower()}",
        "depth_space",
        dml.SpaceToDepth1OperatorDesc(_S, _D, block_size=2, order=_order),
        [_space],
        [_depth],
    )
# Version 0 is version 1 with DEPTH_COLUMN_ROW.
_add(
    "depth_to_space_seed_v0",
    "depth_space",
    dml.DepthToSpaceOperatorDesc(_D, _S, block_size=2),
    [_depth],
    [_space_dcr],
)
_add(
    "space_to_depth_seed_v0",
    "depth_space",
    dml.SpaceToDepthOperatorDesc(_S, _D, block_size=2),
    [_space_dcr],
    [_depth],
)

# --- TILE (seed 003) ------------------------------------------------------------------------
_add(
    "tile_seed",
    "tile",
    dml.TileOperatorDesc(
        _t("FLOAT32", (1, 1, 2, 3)),
        _t("FLOAT32", (1, 1, 6, 9)),
        repeats=[1, 1, 3, 3],
        repeats_count=4,
    ),
    [_a([[[[1, 2, 3], [4, 5, 6]]]], "FLOAT32")],
    [
        _a(
            [
                [
                    [
                        [1, 2, 3, 1, 2, 3, 1, 2, 3],
                        [4, 5, 6, 4, 5, 6, 4, 5, 6],
                        [1, 2, 3, 1, 2, 3, 1, 2, 3],
                        [4, 5, 6, 4, 5, 6, 4, 5, 6],
                        [1, 2, 3, 1, 2, 3, 1, 2, 3],
                        [4, 5, 6, 4, 5, 6, 4, 5, 6],
                    ]
                ]
            ],
            "FLOAT32",
        )
    ],
)

# --- CLIP family (seed 002, NOTES 4.5-4.7 and 6.11) -----------------------------------------
_f9 = _t("FLOAT32", (9,))
_add(
    "clip_dxdispatch_model",
    "clip",
    dml.ElementWiseClipOperatorDesc(_f9, _f9, min=-2.5, max=2.5),
    [_a(range(-4, 5), "FLOAT32")],
    [_a([-2.5, -2.5, -2, -1, 0, 1, 2, 2.5, 2.5], "FLOAT32")],
)
# f(x) = max(Min, min(x, Max)): with Min > Max every element is Min.
_add(
    "clip_seed_formula_min_above_max",
    "clip",
    dml.ElementWiseClipOperatorDesc(_f9, _f9, min=3.0, max=1.0),
    [_a(range(-4, 5), "FLOAT32")],
    [_a([3] * 9, "FLOAT32")],
)
# Non-float tensors truncate Min/Max toward zero first: -2.5 -> -2, 2.7 -> 2.
_i9 = _t("INT32", (9,))
_add(
    "clip_int32_bounds_truncate",
    "clip",
    dml.ElementWiseClipOperatorDesc(_i9, _i9, min=-2.5, max=2.7),
    [_a(range(-4, 5), "INT32")],
    [_a([-2, -2, -2, -1, 0, 1, 2, 2, 2], "INT32")],
)
_h5 = _t("FLOAT16", (5,))
_add(
    "clip1_fp16_dxdispatch_model",
    "clip",
    dml.ElementWiseClip1OperatorDesc(_h5, _h5, min=2, max=4, min_max_data_type="FLOAT16"),
    [_a([1, 2, 3, 4, 5], "FLOAT16")],
    [_a([2, 2, 3, 4, 4], "FLOAT16")],
)
_f7 = _t("FLOAT32", (7,))
for _cls, _extra in (
    (dml.ElementWiseClipGradOperatorDesc, {}),
    (dml.ElementWiseClipGrad1OperatorDesc, {"min_max_data_type": "FLOAT32"}),
):
    # Gradient passes only strictly inside (Min, Max); exactly at a bound it is 0.
    _add(
        f"{_cls.operator_type[13:].lower()}_formula",
        "clip",
        _cls(_f7, _f7, _f7, min=-2, max=2, **_extra),
        [_a([-3, -2, -1, 0, 1, 2, 3], "FLOAT32"), _a([10, 11, 12, 13, 14, 15, 16], "FLOAT32")],
        [_a([0, 0, 12, 13, 14, 0, 0], "FLOAT32")],
    )

# --- REDUCE (seed 004, NOTES 6.11) -----------------------------------------------------------
_r = _a([[1, 2, 3], [3, 0, 4], [2, 4, 2]], "FLOAT32")
_f33 = _t("FLOAT32", (3, 3))
for _n, _axes, _sizes, _expected in (
    (1, [0], (1, 3), [[6, 6, 9]]),
    (2, [1], (3, 1), [[6], [7], [8]]),
    (3, [0, 1], (1, 1), [[21]]),
):
    _add(
        f"reduce_seed_example{_n}",
        "reduce",
        dml.ReduceOperatorDesc(
            "SUM", _f33, _t("FLOAT32", _sizes), axes=_axes, axis_count=len(_axes)
        ),
        [_r],
        [_a(_expected, "FLOAT32")],
    )
_add(
    "reduce_dxdispatch_model",
    "reduce",
    dml.ReduceOperatorDesc(
        "SUM", _t("FLOAT32", (1, 1, 3, 3)), _t("FLOAT32", (1, 1, 3, 1)), axes=[3]
    ),
    [_a(range(1, 10), "FLOAT32", (1, 1, 3, 3))],
    [_a([[[[6], [15], [24]]]], "FLOAT32")],
)

# --- ARGMIN / ARGMAX (NOTES 4.10) ------------------------------------------------------------
_g = _a([[1, 2, 3], [3, 0, 4], [2, 5, 2]], "FLOAT32")
for _cls, _axes, _sizes, _expected in (
    (dml.ArgMaxOperatorDesc, [0, 1], (1, 1), [[7]]),
    (dml.ArgMinOperatorDesc, [0, 1], (1, 1), [[4]]),
    (dml.ArgMaxOperatorDesc, [0], (1, 3), [[1, 2, 1]]),
    (dml.ArgMaxOperatorDesc, [1], (3, 1), [[2], [2], [1]]),
    (dml.ArgMinOperatorDesc, [0], (1, 3), [[0, 1, 2]]),
    (dml.ArgMinOperatorDesc, [1], (3, 1), [[0], [1], [0]]),
):
    _add(
        f"{_cls.operator_type[13:].lower()}_doc_axes{''.join(map(str, _axes))}",
        "reduce",
        _cls(_f33, _t("UINT32", _sizes), axes=_axes),
        [_g],
        [_a(_expected, "UINT32")],
    )
_f5 = _t("FLOAT32", (5,))
for _cls, _values in (
    (dml.ArgMaxOperatorDesc, [3, 2, 1, 2, 3]),
    (dml.ArgMinOperatorDesc, [1, 2, 3, 2, 1]),
):
    for _direction, _index, _out in (("INCREASING", 0, "UINT32"), ("DECREASING", 4, "INT32")):
        _add(
            f"{_cls.operator_type[13:].lower()}_doc_ties_{_direction.lower()}",
            "reduce",
            _cls(_f5, _t(_out, (1,)), axes=[0], axis_direction=_direction),
            [_a(_values, "FLOAT32")],
            [_a([_index], _out)],
        )
# REDUCE's ARGMAX/ARGMIN behave as AxisDirection INCREASING (NOTES 4.9).
for _function, _values in (("ARGMAX", [3, 2, 1, 2, 3]), ("ARGMIN", [1, 2, 3, 2, 1])):
    _add(
        f"reduce_{_function.lower()}_ties_first",
        "reduce",
        dml.ReduceOperatorDesc(_function, _f5, _t("UINT32", (1,)), axes=[0]),
        [_a(_values, "FLOAT32")],
        [_a([0], "UINT32")],
    )


def cases(family: str) -> list[SeedCase]:
    """The seed cases of one family: split_join, depth_space, tile, clip or reduce."""
    return [c for c in _CASES if c.family == family]


def check(case: SeedCase) -> None:
    """dml_jax and the reference both reproduce the spec's arrays exactly (values and dtype)."""
    op = dml.compile_operator(case.desc)
    got = op(*case.inputs)
    got = got if isinstance(got, tuple) else (got,)
    ref = reference.reference(case.desc, *case.inputs)
    assert len(got) == len(ref) == len(case.expected)
    for g, r, want in zip(got, ref, case.expected):
        g = np.asarray(g)
        assert g.dtype == want.dtype and r.dtype == want.dtype
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(r, want)
