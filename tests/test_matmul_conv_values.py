"""Worked values of GEMM and CONVOLUTION, computed by hand from the DirectML pages' formulas.

Every expected value below is small-integer arithmetic worked by hand (never with tests/reference):
GEMM is Output = FusedActivation(Alpha * TransA(A) x TransB(B) + Beta * C) over the last two
dimensions (DML_GEMM_OPERATOR_DESC); CONVOLUTION is the gather / scatter pair written out in
tests/reference/matmul_conv.py's docstring (DML_CONVOLUTION_OPERATOR_DESC and its "Mode
interactions" table). Neither page prints numeric examples: the GEMM page's only example is the
shape rule {M,K} x {K,N} = {M,N} for each of BatchCount * ChannelCount products (seed 05 is one
such batched case), and an older revision of the CONVOLUTION page gave the 1-D formula
out[j] = x[i]*w[0] + x[i+1]*w[1] + ... + x[i+k]*w[k] + bias (seeds 14 and 19 are instances of it).
Alpha and Beta are exactly representable in float32, so no hand value needs float32 rounding.

``SEEDS`` rows are (desc, inputs, expected outputs); test_registry.py collects them.
``INVALID_ROWS`` rows are (factory, regex); the lowering's author fills them.
"""

from __future__ import annotations

import numpy as np
import pytest
import reference

import dml_jax as dml


def _t(sizes, data_type: str = "FLOAT32") -> dml.TensorDesc:
    return dml.TensorDesc(data_type, list(sizes))


def _a(values, shape=None, dtype=np.float32) -> np.ndarray:
    a = np.array(values, dtype)
    return a if shape is None else a.reshape(shape)


def _gemm(a, b, c, out, **kw) -> dml.GemmOperatorDesc:
    return dml.GemmOperatorDesc(_t(a), _t(b), None if c is None else _t(c), _t(out), **kw)


def _conv(x, w, bias, out, data_type: str = "FLOAT32", **kw) -> dml.ConvolutionOperatorDesc:
    """A CONVOLUTION desc; the spatial arrays default to strides / dilations 1, paddings 0."""
    nd = len(x) - 2
    kw = {
        "dimension_count": nd,
        "strides": (1,) * nd,
        "dilations": (1,) * nd,
        "start_padding": (0,) * nd,
        "end_padding": (0,) * nd,
        "output_padding": (0,) * nd,
        **kw,
    }
    b = None if bias is None else _t(bias, data_type)
    return dml.ConvolutionOperatorDesc(
        _t(x, data_type), _t(w, data_type), b, _t(out, data_type), **kw
    )


# A = [[1, 2, 3], [4, 5, 6]], B = [[7, 8], [9, 10], [11, 12]]:
# A x B = [[1*7 + 2*9 + 3*11, 1*8 + 2*10 + 3*12], [4*7 + 5*9 + 6*11, 4*8 + 5*10 + 6*12]]
#       = [[58, 64], [139, 154]].
A = [[1, 2, 3], [4, 5, 6]]
B = [[7, 8], [9, 10], [11, 12]]
AT = [[1, 4], [2, 5], [3, 6]]  # A stored transposed
BT = [[7, 9, 11], [8, 10, 12]]  # B stored transposed

# The 4 x 4 input 1..16 of the 2-D convolution seeds.
X44 = _a(range(1, 17), (1, 1, 4, 4))
ONES33 = _a(np.ones(9), (1, 1, 3, 3))

SEEDS = [
    # 00 GEMM, 2-D tensors (feature level 4_0), Alpha = 2, Beta = 0.5, C = [[1, 2], [3, 4]]:
    # 2 * [[58, 64], [139, 154]] + 0.5 * C = [[116.5, 129], [279.5, 310]].
    (
        _gemm((2, 3), (3, 2), (2, 2), (2, 2), alpha=2.0, beta=0.5),
        (_a(A), _a(B), _a([[1, 2], [3, 4]])),
        (_a([[116.5, 129], [279.5, 310]]),),
    ),
    # 01 GEMM 4-D, TransA: A stored as { 1, 1, K, M } = A^T; no C: A x B.
    (
        _gemm((1, 1, 3, 2), (1, 1, 3, 2), None, (1, 1, 2, 2), trans_a="TRANSPOSE"),
        (_a(AT, (1, 1, 3, 2)), _a(B, (1, 1, 3, 2))),
        (_a([[58, 64], [139, 154]], (1, 1, 2, 2)),),
    ),
    # 02 GEMM 4-D, TransB: B stored as { 1, 1, N, K } = B^T; Beta = -1, C = [[8, 4], [39, 54]]:
    # [[58 - 8, 64 - 4], [139 - 39, 154 - 54]] = [[50, 60], [100, 100]].
    (
        _gemm(
            (1, 1, 2, 3), (1, 1, 2, 3), (1, 1, 2, 2), (1, 1, 2, 2), trans_b="TRANSPOSE", beta=-1.0
        ),
        (_a(A, (1, 1, 2, 3)), _a(BT, (1, 1, 2, 3)), _a([[8, 4], [39, 54]], (1, 1, 2, 2))),
        (_a([[50, 60], [100, 100]], (1, 1, 2, 2)),),
    ),
    # 03 GEMM 4-D, both transposed, Alpha = 0.5: 0.5 * [[58, 64], [139, 154]].
    (
        _gemm(
            (1, 1, 3, 2),
            (1, 1, 2, 3),
            None,
            (1, 1, 2, 2),
            trans_a="TRANSPOSE",
            trans_b="TRANSPOSE",
            alpha=0.5,
        ),
        (_a(AT, (1, 1, 3, 2)), _a(BT, (1, 1, 2, 3))),
        (_a([[29, 32], [69.5, 77]], (1, 1, 2, 2)),),
    ),
    # 04 GEMM without C: Beta (5) is ignored (the page: "If CTensor is not provided, then this
    # value is ignored"); Output = A x B.
    (
        _gemm((1, 1, 2, 3), (1, 1, 3, 2), None, (1, 1, 2, 2), beta=5.0),
        (_a(A, (1, 1, 2, 3)), _a(B, (1, 1, 3, 2))),
        (_a([[58, 64], [139, 154]], (1, 1, 2, 2)),),
    ),
    # 05 GEMM batched, { BatchCount 2, ChannelCount 2, 2, 2 }: four independent products.
    #   [0,0]: [[1, 2], [3, 4]] x I                  = [[1, 2], [3, 4]]
    #   [0,1]: [[1, 2], [3, 4]] x [[0, 1], [1, 0]]   = [[2, 1], [4, 3]]   (columns swapped)
    #   [1,0]: [[1, 0], [0, 2]] x [[5, 6], [7, 8]]   = [[5, 6], [14, 16]] (row 2 doubled)
    #   [1,1]: [[1, 1], [1, 1]] x [[1, 2], [3, 4]]   = [[4, 6], [4, 6]]   (column sums)
    (
        _gemm((2, 2, 2, 2), (2, 2, 2, 2), None, (2, 2, 2, 2)),
        (
            _a(
                [[[1, 2], [3, 4]], [[1, 2], [3, 4]], [[1, 0], [0, 2]], [[1, 1], [1, 1]]],
                (2, 2, 2, 2),
            ),
            _a(
                [[[1, 0], [0, 1]], [[0, 1], [1, 0]], [[5, 6], [7, 8]], [[1, 2], [3, 4]]],
                (2, 2, 2, 2),
            ),
        ),
        (
            _a(
                [[[1, 2], [3, 4]], [[2, 1], [4, 3]], [[5, 6], [14, 16]], [[4, 6], [4, 6]]],
                (2, 2, 2, 2),
            ),
        ),
    ),
    # 06 GEMM batched with C, { 2, 1, 1, 2 } x { 2, 1, 2, 1 }: [1, 2].[3, 4] = 11 and
    # [0, -1].[5, 6] = -6; C = [1, 100], Beta = 1: 12, 94.
    (
        _gemm((2, 1, 1, 2), (2, 1, 2, 1), (2, 1, 1, 1), (2, 1, 1, 1)),
        (
            _a([1, 2, 0, -1], (2, 1, 1, 2)),
            _a([3, 4, 5, 6], (2, 1, 2, 1)),
            _a([1, 100], (2, 1, 1, 1)),
        ),
        (_a([12, 94], (2, 1, 1, 1)),),
    ),
    # 07 GEMM with a fused RELU: [[1, -2], [3, -4]] x [[1, 1], [1, -1]] = [[-1, 3], [-1, 7]];
    # + C [[0, -5], [2, 0]] = [[-1, -2], [1, 7]]; RELU: [[0, 0], [1, 7]].
    (
        _gemm(
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            fused_activation=dml.ActivationReluOperatorDesc(),
        ),
        (
            _a([[1, -2], [3, -4]], (1, 1, 2, 2)),
            _a([[1, 1], [1, -1]], (1, 1, 2, 2)),
            _a([[0, -5], [2, 0]], (1, 1, 2, 2)),
        ),
        (_a([[0, 0], [1, 7]], (1, 1, 2, 2)),),
    ),
    # 08 GEMM in FLOAT16: seed 00's values (116.5, 129, 279.5, 310 are exact in float16).
    (
        dml.GemmOperatorDesc(
            _t((2, 3), "FLOAT16"),
            _t((3, 2), "FLOAT16"),
            _t((2, 2), "FLOAT16"),
            _t((2, 2), "FLOAT16"),
            alpha=2.0,
            beta=0.5,
        ),
        (_a(A, dtype=np.float16), _a(B, dtype=np.float16), _a([[1, 2], [3, 4]], dtype=np.float16)),
        (_a([[116.5, 129], [279.5, 310]], dtype=np.float16),),
    ),
    # 09 CONVOLUTION 2-D, 3 x 3 ones kernel on 1..16 (4 x 4), StartPadding = EndPadding = 1:
    # each output is the sum of the 3 x 3 window around it, zeros outside the input.
    # out[0,0] = 1+2+5+6 = 14, out[0,1] = 1+2+3+5+6+7 = 24, out[1,1] = 1+2+3+5+6+7+9+10+11 = 54, ..
    (
        _conv(
            (1, 1, 4, 4), (1, 1, 3, 3), None, (1, 1, 4, 4), start_padding=(1, 1), end_padding=(1, 1)
        ),
        (X44, ONES33),
        (
            _a(
                [[14, 24, 30, 22], [33, 54, 63, 45], [57, 90, 99, 69], [46, 72, 78, 54]],
                (1, 1, 4, 4),
            ),
        ),
    ),
    # 10 CONVOLUTION, seed 09 with Strides {2, 2}: 1 + (4 + 2 - 3) // 2 = 2 per dimension,
    # the windows centred on (0,0), (0,2), (2,0), (2,2): 14, 30, 57, 99.
    (
        _conv(
            (1, 1, 4, 4),
            (1, 1, 3, 3),
            None,
            (1, 1, 2, 2),
            strides=(2, 2),
            start_padding=(1, 1),
            end_padding=(1, 1),
        ),
        (X44, ONES33),
        (_a([[14, 30], [57, 99]], (1, 1, 2, 2)),),
    ),
    # 11 CONVOLUTION, Dilations {2, 2}: kernel [[1, 2], [3, 4]] on x[i,j] = 5i + j (5 x 5), the
    # taps 2 apart (window 3 x 3, output 3 x 3):
    # out[i,j] = x[i,j] + 2 x[i,j+2] + 3 x[i+2,j] + 4 x[i+2,j+2] = 10 (5i + j) + 4 + 30 + 48
    #          = 50 i + 10 j + 82.
    (
        _conv((1, 1, 5, 5), (1, 1, 2, 2), None, (1, 1, 3, 3), dilations=(2, 2)),
        (_a(range(25), (1, 1, 5, 5)), _a([[1, 2], [3, 4]], (1, 1, 2, 2))),
        (_a([[82, 92, 102], [132, 142, 152], [182, 192, 202]], (1, 1, 3, 3)),),
    ),
    # 12 CONVOLUTION, GroupCount 2: 4 input channels, 4 outputs, filter { 4, 2, 1, 1 }; outputs
    # 0, 1 read inputs 0, 1 and outputs 2, 3 read inputs 2, 3.
    #   x0 = [[1, 2], [3, 4]], x1 = ones, x2 = [[0, 1], [2, 3]], x3 = 5s
    #   out0 = 1 x0 + 2 x1 = [[3, 4], [5, 6]]     out1 = 0 x0 + 1 x1 = ones
    #   out2 = 3 x2 - 1 x3 = [[-5, -2], [1, 4]]   out3 = 1 x2 + 1 x3 = [[5, 6], [7, 8]]
    (
        _conv((1, 4, 2, 2), (4, 2, 1, 1), None, (1, 4, 2, 2), group_count=2),
        (
            _a(
                [[[1, 2], [3, 4]], [[1, 1], [1, 1]], [[0, 1], [2, 3]], [[5, 5], [5, 5]]],
                (1, 4, 2, 2),
            ),
            _a([[1, 2], [0, 1], [3, -1], [1, 1]], (4, 2, 1, 1)),
        ),
        (
            _a(
                [[[3, 4], [5, 6]], [[1, 1], [1, 1]], [[-5, -2], [1, 4]], [[5, 6], [7, 8]]],
                (1, 4, 2, 2),
            ),
        ),
    ),
    # 13 CONVOLUTION depth-wise (GroupCount = channels = 2), 2 x 2 kernels on 3 x 3, with bias
    # [10, 20]:
    #   channel 0: x = 1..9, w = [[1, 0], [0, -1]]: x[i,j] - x[i+1,j+1] = -4 everywhere; + 10 = 6
    #   channel 1: x = [[1, 0, 2], [0, 3, 0], [4, 0, 5]], w = [[0, 1], [1, 0]]:
    #              x[i,j+1] + x[i+1,j] = [[0, 2+3], [3+4, 0]]; + 20 = [[20, 25], [27, 20]]
    (
        _conv((1, 2, 3, 3), (2, 1, 2, 2), (1, 2, 1, 1), (1, 2, 2, 2), group_count=2),
        (
            _a([range(1, 10), [1, 0, 2, 0, 3, 0, 4, 0, 5]], (1, 2, 3, 3)),
            _a([[[1, 0], [0, -1]], [[0, 1], [1, 0]]], (2, 1, 2, 2)),
            _a([10, 20], (1, 2, 1, 1)),
        ),
        (_a([[[6, 6], [6, 6]], [[20, 25], [27, 20]]], (1, 2, 2, 2)),),
    ),
    # 14 CROSS_CORRELATION, 1-D as H = 1: x = [1, 2, 3, 4], w = [1, 10]:
    # out[j] = x[j] + 10 x[j+1] = [21, 32, 43].
    (
        _conv((1, 1, 1, 4), (1, 1, 1, 2), None, (1, 1, 1, 3)),
        (_a([1, 2, 3, 4], (1, 1, 1, 4)), _a([1, 10], (1, 1, 1, 2))),
        (_a([21, 32, 43], (1, 1, 1, 3)),),
    ),
    # 15 CONVOLUTION mode, the same: the kernel flipped to [10, 1]: 10 x[j] + x[j+1] = [12, 23, 34].
    (
        _conv((1, 1, 1, 4), (1, 1, 1, 2), None, (1, 1, 1, 3), mode="CONVOLUTION"),
        (_a([1, 2, 3, 4], (1, 1, 1, 4)), _a([1, 10], (1, 1, 1, 2))),
        (_a([12, 23, 34], (1, 1, 1, 3)),),
    ),
    # 16 CROSS_CORRELATION 2-D: x = 1..9 (3 x 3), w = [[1, 0], [0, 2]]:
    # x[i,j] + 2 x[i+1,j+1] = [[1 + 10, 2 + 12], [4 + 16, 5 + 18]].
    (
        _conv((1, 1, 3, 3), (1, 1, 2, 2), None, (1, 1, 2, 2)),
        (_a(range(1, 10), (1, 1, 3, 3)), _a([[1, 0], [0, 2]], (1, 1, 2, 2))),
        (_a([[11, 14], [20, 23]], (1, 1, 2, 2)),),
    ),
    # 17 CONVOLUTION mode 2-D: flipped along both axes, w = [[2, 0], [0, 1]]:
    # 2 x[i,j] + x[i+1,j+1] = [[2 + 5, 4 + 6], [8 + 8, 10 + 9]].
    (
        _conv((1, 1, 3, 3), (1, 1, 2, 2), None, (1, 1, 2, 2), mode="CONVOLUTION"),
        (_a(range(1, 10), (1, 1, 3, 3)), _a([[1, 0], [0, 2]], (1, 1, 2, 2))),
        (_a([[7, 10], [16, 19]], (1, 1, 2, 2)),),
    ),
    # 18 CONVOLUTION 3-D (5-D tensors, DimensionCount 3): x depth slices d0 = [[1, 2], [3, 4]],
    # d1 = [[5, 6], [7, 8]], d2 = [[9, 10], [11, 12]]; filter { 2, 1, 2, 1, 1 }: depth kernels
    # [1, 10] and [-1, 1]; StartPadding {1, 0, 0}: out[d] = w[0] x[d-1] + w[1] x[d], x[-1] = 0.
    #   ch0: d0 = 10 d0 = [[10, 20], [30, 40]]; d1 = x0 + 10 x1 = [[51, 62], [73, 84]];
    #        d2 = x1 + 10 x2 = [[95, 106], [117, 128]]
    #   ch1: d0 = x0 = [[1, 2], [3, 4]]; d1 = x1 - x0 = 4s; d2 = x2 - x1 = 4s
    (
        _conv(
            (1, 1, 3, 2, 2),
            (2, 1, 2, 1, 1),
            None,
            (1, 2, 3, 2, 2),
            dimension_count=3,
            start_padding=(1, 0, 0),
        ),
        (_a(range(1, 13), (1, 1, 3, 2, 2)), _a([1, 10, -1, 1], (2, 1, 2, 1, 1))),
        (
            _a(
                [
                    [[10, 20], [30, 40]],
                    [[51, 62], [73, 84]],
                    [[95, 106], [117, 128]],
                    [[1, 2], [3, 4]],
                    [[4, 4], [4, 4]],
                    [[4, 4], [4, 4]],
                ],
                (1, 2, 3, 2, 2),
            ),
        ),
    ),
    # 19 CONVOLUTION 1-D on 3-D tensors (feature level 4_0, DimensionCount 1), bias 100:
    # x = [1, 2, 3, 4], w = [1, 10]: [21, 32, 43] + 100.
    (
        _conv((1, 1, 4), (1, 1, 2), (1, 1, 1), (1, 1, 3), dimension_count=1),
        (_a([1, 2, 3, 4], (1, 1, 4)), _a([1, 10], (1, 1, 2)), _a([100], (1, 1, 1))),
        (_a([121, 132, 143], (1, 1, 3)),),
    ),
    # 20 BACKWARD (transposed), H = 1, Strides {1, 2}, OutputPadding {0, 1}: x = [1, 2, 3],
    # w = [1, 10, 100]; each x[i] adds x[i] * w to positions 2i, 2i+1, 2i+2:
    #   x0: +[1, 10, 100] at 0..2, x1: +[2, 20, 200] at 2..4, x2: +[3, 30, 300] at 4..6
    #   = [1, 10, 102, 20, 203, 30, 300] and the output padding's 0: width (3-1)*2 + 3 + 1 = 8.
    (
        _conv(
            (1, 1, 1, 3),
            (1, 1, 1, 3),
            None,
            (1, 1, 1, 8),
            direction="BACKWARD",
            strides=(1, 2),
            output_padding=(0, 1),
        ),
        (_a([1, 2, 3], (1, 1, 1, 3)), _a([1, 10, 100], (1, 1, 1, 3))),
        (_a([1, 10, 102, 20, 203, 30, 300, 0], (1, 1, 1, 8)),),
    ),
    # 21 BACKWARD in CONVOLUTION mode (the page's table: identity orientation as a window, i.e.
    # the scatter uses the flipped filter [100, 10, 1]):
    #   [100, 10, 1 + 200, 20, 2 + 300, 30, 3, 0]
    (
        _conv(
            (1, 1, 1, 3),
            (1, 1, 1, 3),
            None,
            (1, 1, 1, 8),
            mode="CONVOLUTION",
            direction="BACKWARD",
            strides=(1, 2),
            output_padding=(0, 1),
        ),
        (_a([1, 2, 3], (1, 1, 1, 3)), _a([1, 10, 100], (1, 1, 1, 3))),
        (_a([100, 10, 201, 20, 302, 30, 3, 0], (1, 1, 1, 8)),),
    ),
    # 22 BACKWARD with StartPadding = EndPadding = {0, 1}: seed 20's full scatter
    # [1, 10, 102, 20, 203, 30, 300] without its first and last position; width (3-1)*2 + 3 - 2.
    (
        _conv(
            (1, 1, 1, 3),
            (1, 1, 1, 3),
            None,
            (1, 1, 1, 5),
            direction="BACKWARD",
            strides=(1, 2),
            start_padding=(0, 1),
            end_padding=(0, 1),
        ),
        (_a([1, 2, 3], (1, 1, 1, 3)), _a([1, 10, 100], (1, 1, 1, 3))),
        (_a([10, 102, 20, 203, 30], (1, 1, 1, 5)),),
    ),
    # 23 BACKWARD, 2-D, Strides {2, 2}, OutputPadding {1, 1}, bias 1: x = [[1, 2], [3, 4]],
    # w = [[1, 2], [3, 4]]: each x[i,j] writes x[i,j] * w into the 2 x 2 block at (2i, 2j) (the
    # blocks do not overlap); the last row and column are the output padding (0, + bias).
    (
        _conv(
            (1, 1, 2, 2),
            (1, 1, 2, 2),
            (1, 1, 1, 1),
            (1, 1, 5, 5),
            direction="BACKWARD",
            strides=(2, 2),
            output_padding=(1, 1),
        ),
        (
            _a([[1, 2], [3, 4]], (1, 1, 2, 2)),
            _a([[1, 2], [3, 4]], (1, 1, 2, 2)),
            _a([1], (1, 1, 1, 1)),
        ),
        (
            _a(
                [
                    [1 + 1, 2 + 1, 2 + 1, 4 + 1, 1],
                    [3 + 1, 4 + 1, 6 + 1, 8 + 1, 1],
                    [3 + 1, 6 + 1, 4 + 1, 8 + 1, 1],
                    [9 + 1, 12 + 1, 12 + 1, 16 + 1, 1],
                    [1, 1, 1, 1, 1],
                ],
                (1, 1, 5, 5),
            ),
        ),
    ),
    # 24 BACKWARD, GroupCount 2, filter { C_in 2, C_out / 2 = 2, 1, 2 }: input channel g writes
    # output channels 2g, 2g + 1. x0 = [1, 2], x1 = [3, 4]; stride 1 (width 2 + 2 - 1 = 3):
    #   out0 = x0 * [1, 1] = [1, 1 + 2, 2]    out1 = x0 * [1, 0] = [1, 2, 0]
    #   out2 = x1 * [0, 1] = [0, 3, 4]        out3 = x1 * [2, 2] = [6, 6 + 8, 8]
    (
        _conv((1, 2, 1, 2), (2, 2, 1, 2), None, (1, 4, 1, 3), direction="BACKWARD", group_count=2),
        (_a([1, 2, 3, 4], (1, 2, 1, 2)), _a([1, 1, 1, 0, 0, 1, 2, 2], (2, 2, 1, 2))),
        (_a([1, 3, 2, 1, 2, 0, 0, 3, 4, 6, 14, 8], (1, 4, 1, 3)),),
    ),
    # 25 Bias and a fused RELU, 1 x 1 kernel, 2 -> 3 channels: x0 = [1, -1], x1 = [2, 0];
    # filter rows [1, 1], [1, -1], [-1, 0]: [3, -1], [-1, -1], [-1, 1]; bias [0, 2, -1]:
    # [3, -1], [1, 1], [-2, 0]; RELU: [3, 0], [1, 1], [0, 0].
    (
        _conv(
            (1, 2, 1, 2),
            (3, 2, 1, 1),
            (1, 3, 1, 1),
            (1, 3, 1, 2),
            fused_activation=dml.ActivationReluOperatorDesc(),
        ),
        (
            _a([1, -1, 2, 0], (1, 2, 1, 2)),
            _a([1, 1, 1, -1, -1, 0], (3, 2, 1, 1)),
            _a([0, 2, -1], (1, 3, 1, 1)),
        ),
        (_a([3, 0, 1, 1, 0, 0], (1, 3, 1, 2)),),
    ),
    # 26 FLOAT16: seed 16 in half precision.
    (
        _conv((1, 1, 3, 3), (1, 1, 2, 2), None, (1, 1, 2, 2), data_type="FLOAT16"),
        (
            _a(range(1, 10), (1, 1, 3, 3), np.float16),
            _a([[1, 0], [0, 2]], (1, 1, 2, 2), np.float16),
        ),
        (_a([[11, 14], [20, 23]], (1, 1, 2, 2), np.float16),),
    ),
]

IDS = [
    f"{i:02d}-{desc.operator_type[len('DML_OPERATOR_') :]}" for i, (desc, _, _) in enumerate(SEEDS)
]

# (factory, regex) rows for test_registry.py: filled by the lowering's author.
INVALID_ROWS: list = []


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=IDS)
def test_reference_matches_worked_values(desc, inputs, expected):
    got = reference.reference(desc, *inputs)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert g.dtype == e.dtype and g.shape == e.shape
        np.testing.assert_allclose(g, e, rtol=1e-6)


@pytest.mark.parametrize("desc, inputs, expected", SEEDS, ids=IDS)
def test_lowering_matches_worked_values(desc, inputs, expected):
    got = dml.compile_operator(desc)(*inputs)
    if isinstance(got, (tuple, list)):
        got = got[0]
    got = np.asarray(got)
    assert got.dtype == expected[0].dtype and got.shape == expected[0].shape
    np.testing.assert_allclose(got, expected[0], rtol=1e-6, atol=1e-7)
