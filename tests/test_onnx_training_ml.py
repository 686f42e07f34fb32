"""ai.onnx.preview.training (Adagrad, Adam, Momentum, Gradient), ai.onnx.ml (Binarizer,
ArrayFeatureExtractor, TreeEnsemble) and TfIdfVectorizer through ``InferenceSession``: what
ONNX's backend cases leave out (they run the optimizers at T = 0 only, TfIdfVectorizer in TF
mode only, TreeEnsemble with one tree summed). Expected values are NumPy written from the ops'
ONNX definitions."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto as TP
from onnx import helper, numpy_helper

import dml_jax as dml
from dml_jax.onnx import InferenceSession

TRAINING = "ai.onnx.preview.training"
ML = "ai.onnx.ml"
ELEM = {np.dtype("float32"): TP.FLOAT, np.dtype("float64"): TP.DOUBLE,
        np.dtype("int64"): TP.INT64, np.dtype("int32"): TP.INT32}  # fmt: skip


def _run(nodes, feeds, outputs, inits=(), out_type=0):
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(k, ELEM[v.dtype], v.shape) for k, v in feeds.items()],
        [helper.make_tensor_value_info(o, out_type, None) for o in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()],
    )
    opsets = [helper.make_opsetid(d, v) for d, v in (("", 21), (TRAINING, 1), (ML, 5))]
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 10
    return InferenceSession(model.SerializeToString()).run(None, feeds)


# -- optimizers at T > 0 ------------------------------------------------------------------------


def test_adam_two_tensors_after_the_first_step(rng):
    alpha, beta, eps, norm, post = 0.9, 0.99, 1e-3, 0.01, 0.05
    node = helper.make_node(
        "Adam", ["R", "T", "X1", "X2", "G1", "G2", "V1", "V2", "H1", "H2"],
        ["X1n", "X2n", "V1n", "V2n", "H1n", "H2n"], domain=TRAINING, alpha=alpha, beta=beta,
        epsilon=eps, norm_coefficient=norm, norm_coefficient_post=post,
    )  # fmt: skip
    shapes = [(3,), (2, 2)]
    feeds = {"R": np.array(0.1, np.float32), "T": np.array(3, np.int64)}
    for p in "XGVH":
        for i, s in enumerate(shapes, 1):
            a = rng.standard_normal(s).astype(np.float32)
            feeds[f"{p}{i}"] = np.abs(a) if p == "H" else a
    got = _run([node], feeds, ["X1n", "X2n", "V1n", "V2n", "H1n", "H2n"])
    for i in (1, 2):
        x, g, v, h = (feeds[f"{p}{i}"].astype(np.float64) for p in "XGVH")
        g = norm * x + g
        v2 = alpha * v + (1 - alpha) * g
        h2 = beta * h + (1 - beta) * g * g
        r = 0.1 * np.sqrt(1 - beta**3) / (1 - alpha**3)
        x2 = (1 - post) * (x - r * v2 / (np.sqrt(h2) + eps))
        for want, k in ((x2, i - 1), (v2, i + 1), (h2, i + 3)):
            np.testing.assert_allclose(got[k], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["standard", "nesterov"])
def test_momentum_after_the_first_step_scales_the_gradient_by_beta(mode, rng):
    alpha, beta, norm = 0.75, 0.5, 2**-6  # float32 attributes: exact in float64
    node = helper.make_node(
        "Momentum", ["R", "T", "X", "G", "V"], ["Xn", "Vn"], domain=TRAINING, alpha=alpha,
        beta=beta, norm_coefficient=norm, mode=mode,
    )  # fmt: skip
    x, g, v = (rng.standard_normal((2, 3)) for _ in range(3))
    feeds = {"R": np.array(0.125), "T": np.array(2, np.int64), "X": x, "G": g, "V": v}
    xn, vn = _run([node], feeds, ["Xn", "Vn"])
    gr = norm * x + g
    v2 = alpha * v + beta * gr
    x2 = x - 0.125 * (v2 if mode == "standard" else gr + alpha * v2)
    np.testing.assert_allclose(vn, v2, rtol=1e-12)
    np.testing.assert_allclose(xn, x2, rtol=1e-12)


def test_adagrad_decays_the_rate_with_the_step(rng):
    node = helper.make_node(
        "Adagrad", ["R", "T", "X", "G", "H"], ["Xn", "Hn"], domain=TRAINING, decay_factor=0.5,
        epsilon=1e-4, norm_coefficient=0.1,
    )  # fmt: skip
    x, g = rng.standard_normal((2, 5)).astype(np.float32)
    h = np.abs(rng.standard_normal(5)).astype(np.float32)
    feeds = {"R": np.array(0.2, np.float32), "T": np.array(4, np.int64), "X": x, "G": g, "H": h}
    xn, hn = _run([node], feeds, ["Xn", "Hn"])
    gr = 0.1 * x + g
    h2 = h + gr * gr
    np.testing.assert_allclose(hn, h2, rtol=1e-6)
    np.testing.assert_allclose(xn, x - 0.2 / 3 * gr / (np.sqrt(h2) + 1e-4), rtol=1e-5)


# -- Gradient -----------------------------------------------------------------------------------


def test_gradient_at_given_values_with_zs_and_a_view_between(rng):
    """y = sum(tanh(reshape(X @ W)) * Z): dy/dW at W2 (a value other than W's, as the spec
    allows), dy/dX; Z in zs is held fixed."""
    nodes = [
        helper.make_node("MatMul", ["X", "W"], ["H"]),
        helper.make_node("Reshape", ["H", "shape"], ["Hr"]),
        helper.make_node("Tanh", ["Hr"], ["T"]),
        helper.make_node("Mul", ["T", "Z"], ["P"]),
        helper.make_node("ReduceSum", ["P"], ["Y"], keepdims=0),
        helper.make_node(
            "Gradient",
            ["W2", "X", "Z"],
            ["dW", "dX"],
            domain=TRAINING,
            xs=["W", "X"],
            zs=["Z"],
            y="Y",
        ),
    ]
    x, w, z, w2 = (rng.standard_normal(s).astype(np.float32) for s in [(2, 3), (3, 4), 8, (3, 4)])
    feeds = {"X": x, "W": w, "Z": z, "W2": w2}
    y, dw, dx = _run(nodes, feeds, ["Y", "dW", "dX"], {"shape": np.array([8], np.int64)})
    np.testing.assert_allclose(y, (np.tanh(x @ w).reshape(8) * z).sum(), rtol=1e-5)
    # The reference in float64, and atol 5e-6: 1 - tanh(h)**2 cancels where tanh saturates
    # (1 - 0.995**2 = 0.01 at h = 3), so float32's rounding of tanh is 1e-5 of it, and a float32
    # gradient of these O(1) values can be 1e-6 off (one draw: dW 9.5e-7 from float64's value,
    # where a float32 NumPy reference was 4.5e-7 off the other way, 1.4e-6 apart in all).
    x, z, w2 = (a.astype(np.float64) for a in (x, z, w2))
    dh = (1 - np.tanh(x @ w2) ** 2) * z.reshape(2, 4)
    np.testing.assert_allclose(dw, x.T @ dh, rtol=1e-5, atol=5e-6)
    np.testing.assert_allclose(dx, dh @ w2.T, rtol=1e-5, atol=5e-6)


def test_gradient_of_a_tensor_y_is_that_of_its_sum_and_zero_where_y_does_not_read_x(rng):
    nodes = [
        helper.make_node("Mul", ["A", "A"], ["Y"]),
        helper.make_node(
            "Gradient", ["A", "B"], ["dA", "dB"], domain=TRAINING, xs=["A", "B"], y="Y"
        ),
    ]
    a, b = rng.standard_normal((2, 3)), rng.standard_normal(4)
    _, da, db = _run(nodes, {"A": a, "B": b}, ["Y", "dA", "dB"])
    np.testing.assert_allclose(da, 2 * a, rtol=1e-12)
    np.testing.assert_array_equal(db, np.zeros(4))


def test_gradient_rejects_a_y_never_computed():
    node = helper.make_node("Gradient", ["A"], ["dA"], domain=TRAINING, xs=["A"], y="nothing")
    with pytest.raises(dml.ValidationError, match="'nothing' is not a tensor computed before"):
        _run([node], {"A": np.ones(2)}, ["dA"])


# -- ai.onnx.ml ---------------------------------------------------------------------------------


def test_binarizer_on_int64_compares_with_the_threshold_itself():
    x = np.array([-3, 1, 2, 5, 0], np.int64)
    for t, want in ((1.5, [0, 0, 1, 1, 0]), (-0.5, [0, 1, 1, 1, 1]), (float("nan"), [0] * 5)):
        node = helper.make_node("Binarizer", ["X"], ["Y"], domain=ML, threshold=t)
        (y,) = _run([node], {"X": x}, ["Y"], out_type=TP.INT64)
        assert y.dtype == np.int64
        np.testing.assert_array_equal(y, want)


def test_array_feature_extractor_of_a_vector_is_a_row_and_takes_negative_indices():
    node = helper.make_node("ArrayFeatureExtractor", ["X", "I"], ["Z"], domain=ML)
    x = np.arange(5, dtype=np.float32) * 10
    (z,) = _run([node], {"X": x, "I": np.array([[4, -1], [0, 2]], np.int64)}, ["Z"])
    np.testing.assert_array_equal(z, [[40, 40, 0, 20]])


def _tree_reference(x, a):
    """The ensemble walked tree by tree, row by row, from the attribute definitions."""
    out = np.zeros((len(x), a["n_targets"]))
    hits = [[] for _ in range(len(x))]
    for i, row in enumerate(x):
        for root in a["tree_roots"]:
            n, leaf = root, False
            while not leaf:
                v, s, mode = row[a["nodes_featureids"][n]], a["nodes_splits"][n], a["modes"][n]
                test = [v <= s, v < s, v >= s, v > s, v == s, v != s][mode]
                test = test or (np.isnan(v) and a["nodes_missing_value_tracks_true"][n])
                side = "true" if test else "false"
                n, leaf = a[f"nodes_{side}nodeids"][n], a[f"nodes_{side}leafs"][n]
            hits[i].append((a["leaf_targetids"][n], a["leaf_weights"][n]))
    for i, found in enumerate(hits):
        for t in range(a["n_targets"]):
            ws = [w for tt, w in found if tt == t]
            agg = a["aggregate_function"]
            if agg == 1:
                out[i, t] = sum(ws)
            elif agg == 0:
                out[i, t] = sum(ws) / len(a["tree_roots"])
            elif agg == 2:
                out[i, t] = min(ws, default=np.finfo(np.float32).max)
            else:
                out[i, t] = max(ws, default=np.finfo(np.float32).min)
    if a["post_transform"] == 2:
        out = 1 / (1 + np.exp(-out))
    elif a["post_transform"] == 1:
        out = np.exp(out - out.max(1, keepdims=True))
        out /= out.sum(1, keepdims=True)
    return out


@pytest.mark.parametrize("aggregate,transform", [(0, 0), (1, 2), (2, 0), (3, 1)])
def test_tree_ensemble_two_trees_every_aggregate(aggregate, transform, rng):
    """Two trees of depth 2 and 1 over three targets; float32 X against float64 splits that
    lie between float32 values (compared exactly), NaN sent true by one node."""
    a = {
        "n_targets": 3, "tree_roots": [0, 3], "aggregate_function": aggregate,
        "post_transform": transform, "modes": [0, 3, 1, 2],
        "nodes_featureids": [0, 1, 1, 0], "nodes_splits": [0.1, -0.2, 0.5, 1.0 + 2**-30],
        "nodes_truenodeids": [1, 0, 2, 4], "nodes_trueleafs": [0, 1, 1, 1],
        "nodes_falsenodeids": [2, 1, 3, 5], "nodes_falseleafs": [0, 1, 1, 1],
        "nodes_missing_value_tracks_true": [0, 1, 0, 0],
        "leaf_targetids": [0, 1, 2, 0, 1, 2], "leaf_weights": [1.5, -2.0, 3.0, 0.25, 4.0, -1.0],
    }  # fmt: skip
    node = helper.make_node(
        "TreeEnsemble", ["X"], ["Y"], domain=ML, n_targets=3, tree_roots=a["tree_roots"],
        aggregate_function=aggregate, post_transform=transform,
        nodes_modes=numpy_helper.from_array(np.array(a["modes"], np.uint8)),
        nodes_splits=numpy_helper.from_array(np.array(a["nodes_splits"], np.float64)),
        leaf_weights=numpy_helper.from_array(np.array(a["leaf_weights"], np.float64)),
        **{k: a[k] for k in ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs",
                             "nodes_falsenodeids", "nodes_falseleafs", "leaf_targetids",
                             "nodes_missing_value_tracks_true")},
    )  # fmt: skip
    x = rng.standard_normal((7, 2)).astype(np.float32)
    x[0] = [np.nan, np.nan]
    x[1] = [1.0, 0.5]  # 1.0 < the split 1 + 2**-30, which rounds to 1.0 in float32
    x[2] = [np.float32(1 + 2**-23), -0.2]
    (y,) = _run([node], {"X": x}, ["Y"])
    np.testing.assert_allclose(y, _tree_reference(x.astype(np.float64), a), rtol=1e-6)


# -- TfIdfVectorizer ----------------------------------------------------------------------------


def _tfidf_reference(x, pool, lo, hi, skips, mode, weights):
    """Counts of each pool n-gram (coordinate = its place in ``pool``) from the definition."""
    out = np.zeros((len(x), len(pool)), np.float32)
    for r, row in enumerate(x):
        for j, gram in enumerate(pool):
            n = len(gram)
            if not lo <= n <= hi:
                continue
            for gap in range(1, (skips + 1 if n > 1 else 1) + 1):
                for s in range(len(row) - (n - 1) * gap):
                    out[r, j] += tuple(row[s : s + (n - 1) * gap + 1 : gap]) == gram
    if mode == "IDF":
        out = (out > 0).astype(np.float32)
    return out if mode == "TF" else out * weights


@pytest.mark.parametrize("mode", ["IDF", "TFIDF"])
def test_tfidf_weighted_modes_and_a_minimum_length_of_two(mode):
    unigrams, bigrams, trigrams = [2, 3, 5], [(5, 6), (7, 8), (6, 7)], [(1, 3, 7)]
    pool = [(u,) for u in unigrams] + bigrams + trigrams
    weights = np.linspace(0.5, 3.5, len(pool)).astype(np.float32)
    node = helper.make_node(
        "TfIdfVectorizer", ["X"], ["Y"], mode=mode, min_gram_length=2, max_gram_length=3,
        max_skip_count=2, ngram_counts=[0, 3, 9], ngram_indexes=list(range(len(pool))),
        pool_int64s=unigrams + [v for g in bigrams + trigrams for v in g],
        weights=weights.tolist(),
    )  # fmt: skip
    x = np.array([[1, 5, 6, 3, 7, 8, 6, 7, 2], [5, 2, 6, 6, 7, 1, 8, 3, 7]], np.int64)
    (y,) = _run([node], {"X": x}, ["Y"])
    np.testing.assert_allclose(y, _tfidf_reference(x, pool, 2, 3, 2, mode, weights))
