"""ai.onnx.ml's numeric ops (Binarizer, ArrayFeatureExtractor, TreeEnsemble) and ai.onnx's
TfIdfVectorizer on integer tokens.

Binarizer is a comparison and a cast (ELEMENT_WISE_LOGICAL_GREATER_THAN, CAST), and
ArrayFeatureExtractor a GATHER along the last axis. TreeEnsemble and TfIdfVectorizer have no
DirectML form (ONNX Runtime runs them on its CPU provider): each is one JAX node whose tables
(the trees; the n-gram pool) are constants of the import. String tensors have no DML data type,
so the string forms of ArrayFeatureExtractor and TfIdfVectorizer are not supported.
"""

from __future__ import annotations

import itertools
import math

import jax.numpy as jnp
import numpy as np
from jax import lax

from ...enums import DataType
from ..importer import packed
from . import converter
from ._common import binary_value, cast_value, op
from .movement import empty

ML = "ai.onnx.ml"
_INTS = (DataType.INT32, DataType.UINT32)


# ---------------------------------------------------------------------------------------------
# Binarizer


@converter("Binarizer", domain=ML)
def _binarizer(ctx, node, inputs):
    """Y = X > threshold ? 1 : 0 in X's type. An integer X is compared with floor(threshold),
    which is the same test (x > t exactly when x > floor(t) for an integer x); a bound beyond
    the graph type's range, or a NaN threshold, compares with the range's end instead (all 0 or
    all 1, as the exact comparison gives)."""
    (x,) = inputs
    threshold = float(ctx.attr("threshold", 0.0))
    t = x.data_type
    compare = "ELEMENT_WISE_LOGICAL_GREATER_THAN"
    if t.is_float:
        bound = threshold
    else:
        info = np.iinfo(t.numpy_dtype)
        if math.isnan(threshold) or math.floor(threshold) >= info.max:
            bound = info.max  # nothing is above it
        elif math.floor(threshold) < info.min:
            bound, compare = info.min, "ELEMENT_WISE_LOGICAL_GREATER_THAN_OR_EQUAL"  # everything
        else:
            bound = math.floor(threshold)
    bound = ctx.constant(np.asarray(bound, t.numpy_dtype))
    return [cast_value(ctx, binary_value(ctx, compare, x, bound, is_bool=True), t)]


# ---------------------------------------------------------------------------------------------
# ArrayFeatureExtractor


@converter("ArrayFeatureExtractor", domain=ML)
def _array_feature_extractor(ctx, node, inputs):
    """Z = X[..., indices] with the indices flattened: shape X.shape[:-1] + [count] ([1, count]
    for a 1-D X, as ONNX Runtime and ONNX's reference give it); GATHER along the last axis. A
    negative index counts from the end (as the reference's NumPy indexing does); indices known
    at import are checked to be in range."""
    x, indices = inputs
    if x.rank == 0:
        raise ctx.fail("input X must have at least one dimension")
    if indices.data_type not in _INTS:
        raise ctx.fail(f"input Y must be int64, got {indices.data_type.name}")
    count = int(np.prod(indices.shape))
    c = x.shape[-1]
    if indices.known is not None:
        bad = [int(i) for i in np.asarray(indices.known).reshape(-1) if not -c <= int(i) < c]
        if bad:
            raise ctx.fail(f"index {bad[0]} is out of range for a last dimension of {c}")
    out_shape = x.shape[:-1] + (count,)
    final = (1, count) if x.rank == 1 else out_shape
    if 0 in out_shape:
        return [empty(ctx, x, final)]
    r = x.rank
    flat = indices.view((count,))
    desc = op("GATHER")(
        packed(x.data_type, x.shape),
        packed(flat.data_type, (count,), r),
        packed(x.data_type, out_shape),
        axis=r - 1,
        index_dimensions=1,
    )
    return [ctx.out(ctx.node(desc, [x, flat]), out_shape, is_bool=x.is_bool).view(final)]


# ---------------------------------------------------------------------------------------------
# TreeEnsemble

_LEQ, _LT, _GTE, _GT, _EQ, _NEQ, _MEMBER = range(7)
_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _tensor_attr(ctx, name: str, required: bool = True) -> np.ndarray | None:
    value = ctx.tensor_attr(name)
    if value is None:
        if required:
            raise ctx.fail(f"attribute '{name}' is required")
        return None
    return value.reshape(-1)


def _bounds(split: np.ndarray, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """The largest value of ``dtype`` at most each split, and the smallest at least it: a
    comparison with a split of a wider type, made exactly in ``dtype`` (x <= s is x <= down,
    x < s is x < up, and so on). NaN stays NaN."""
    s = split.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        near = s.astype(dtype)
        wide = near.astype(np.float64)
        down = np.where(wide > s, np.nextafter(near, dtype.type(-np.inf)), near)
        up = np.where(wide < s, np.nextafter(near, dtype.type(np.inf)), near)
    return down.astype(dtype), up.astype(dtype)


@converter("TreeEnsemble", domain=ML, kind="jax")
def _tree_ensemble(ctx, node, inputs):
    """Every tree walked by every row at once: the row's position in each tree (a node or a
    leaf), advanced one level per step for as many steps as the deepest tree has levels. A
    node's test reads the row's feature, compares it with the node's split by its mode (set
    membership against its set, NaN taking the branch ``nodes_missing_value_tracks_true``
    names); the leaves' weights are then aggregated per target (a scatter of the rows' leaves)
    and the post transform applied. Computed in X's type (float16 in float32, rounded once at
    the end); splits of a wider type compare exactly (``_bounds``)."""
    (x,) = inputs
    if x.data_type not in (DataType.FLOAT16, DataType.FLOAT32, DataType.FLOAT64):
        raise ctx.fail(f"input X must be a float tensor, got {x.data_type.name}")
    if x.rank != 2:
        raise ctx.fail(f"input X must have shape [N, F], got {list(x.shape)}")
    rows, features = x.shape
    splits = _tensor_attr(ctx, "nodes_splits")
    modes = _tensor_attr(ctx, "nodes_modes").astype(np.int64)
    weights = _tensor_attr(ctx, "leaf_weights")
    members = _tensor_attr(ctx, "membership_values", required=False)
    ints = {
        k: np.asarray(ctx.attr(k, []), np.int64)
        for k in ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs",
                  "nodes_falsenodeids", "nodes_falseleafs", "leaf_targetids", "tree_roots")
    }  # fmt: skip
    tracks = ctx.attr("nodes_missing_value_tracks_true")
    count = len(modes)
    n_leaves = len(weights)
    for k in ("nodes_featureids", "nodes_truenodeids", "nodes_trueleafs", "nodes_falsenodeids",
              "nodes_falseleafs"):  # fmt: skip
        if len(ints[k]) != count:
            raise ctx.fail(f"attribute '{k}' has {len(ints[k])} values; nodes_modes {count}")
    if len(splits) != count:
        raise ctx.fail(f"attribute 'nodes_splits' has {len(splits)} values; nodes_modes {count}")
    tracks = np.zeros(count, bool) if tracks is None else np.asarray(tracks, bool)
    if len(tracks) != count:
        raise ctx.fail(
            f"attribute 'nodes_missing_value_tracks_true' has {len(tracks)} values; "
            f"nodes_modes {count}"
        )
    if len(ints["leaf_targetids"]) != n_leaves:
        raise ctx.fail(
            f"attribute 'leaf_targetids' has {len(ints['leaf_targetids'])} values; "
            f"leaf_weights {n_leaves}"
        )
    n_targets = ctx.attr("n_targets")
    if n_targets is None or int(n_targets) < 1:
        raise ctx.fail("attribute 'n_targets' must be a positive count")
    n_targets = int(n_targets)
    aggregate = int(ctx.attr("aggregate_function", 1))
    transform = int(ctx.attr("post_transform", 0))
    if aggregate not in range(4):
        raise ctx.fail(f"attribute 'aggregate_function' must be 0 to 3, got {aggregate}")
    if transform not in range(len(_TRANSFORMS)):
        raise ctx.fail(f"attribute 'post_transform' must be 0 to 4, got {transform}")
    if ((modes < 0) | (modes > _MEMBER)).any():
        raise ctx.fail(f"nodes_modes must be 0 to 6, got {sorted(set(modes.tolist()))}")
    feat = ints["nodes_featureids"]
    if ((feat < 0) | (feat >= features)).any():
        raise ctx.fail(f"nodes_featureids must be in [0, {features}) (X's features)")
    targets = ints["leaf_targetids"]
    if ((targets < 0) | (targets >= n_targets)).any():
        raise ctx.fail(f"leaf_targetids must be in [0, {n_targets}) (n_targets)")
    for side in ("true", "false"):
        ids, leaf = ints[f"nodes_{side}nodeids"], ints[f"nodes_{side}leafs"].astype(bool)
        limit = np.where(leaf, n_leaves, count)
        if ((ids < 0) | (ids >= limit)).any():
            raise ctx.fail(f"nodes_{side}nodeids must index leaves (a leaf) or nodes (a node)")
    roots = ints["tree_roots"]
    if not len(roots) or ((roots < 0) | (roots >= count)).any():
        raise ctx.fail(f"tree_roots must be indices of nodes_* in [0, {count})")
    steps = _depth(ctx, roots, ints)

    # The sets of the BRANCH_MEMBER nodes, in nodes_* order, NaN-delimited; a row of NaN
    # padding per node (NaN equals nothing).
    is_member = modes == _MEMBER
    sets: list[list[float]] = []
    if is_member.any():
        if members is None:
            raise ctx.fail("BRANCH_MEMBER nodes need the attribute 'membership_values'")
        current: list[float] = []
        for v in members.astype(np.float64):
            if np.isnan(v):
                sets.append(current)
                current = []
            else:
                current.append(float(v))
        if current:
            sets.append(current)
        if len(sets) < int(is_member.sum()):
            raise ctx.fail(
                f"membership_values holds {len(sets)} sets; there are {int(is_member.sum())} "
                "BRANCH_MEMBER nodes"
            )
    width = max([len(s) for s in sets] + [1])
    member_table = np.full((count, width), np.nan)
    for k, node_index in enumerate(np.flatnonzero(is_member)):
        member_table[node_index, : len(sets[k])] = sets[k]

    work = np.dtype(np.float64 if x.data_type is DataType.FLOAT64 else np.float32)
    down, up = _bounds(splits, work)
    # The value each mode compares with: x <= down, x < up, x >= up, x > down, x == s, x != s.
    exact = down == up
    nan = np.asarray(np.nan, work)
    bound = np.where(np.isin(modes, (_LEQ, _GT)), down, up)
    # EQ / NEQ with a split that is no value of the working type: never equal.
    bound = np.where(np.isin(modes, (_EQ, _NEQ)) & ~exact, nan, bound).astype(work)
    m_down, m_up = _bounds(member_table.reshape(-1), work)
    member_table = np.where(m_down == m_up, m_down, nan).reshape(count, width).astype(work)
    origin = np.dtype(x.data_type.numpy_dtype)

    true_ids, false_ids = ints["nodes_truenodeids"], ints["nodes_falsenodeids"]
    true_leaf = ints["nodes_trueleafs"].astype(bool)
    false_leaf = ints["nodes_falseleafs"].astype(bool)
    leaf_weights = weights.astype(work)
    trees = len(roots)

    def fn(a):
        a = a.astype(work)
        row = jnp.arange(rows)[:, None]
        index = jnp.broadcast_to(jnp.asarray(roots, jnp.int32), (rows, trees))
        at_leaf = jnp.zeros((rows, trees), bool)
        for _ in range(steps):
            value = a[row, jnp.asarray(feat, jnp.int32)[index]]
            b = jnp.asarray(bound)[index]
            mode = jnp.asarray(modes, jnp.int32)[index]
            member = (value[..., None] == jnp.asarray(member_table)[index]).any(-1)
            test = jnp.select(
                [mode == _LEQ, mode == _LT, mode == _GTE, mode == _GT, mode == _EQ,
                 mode == _NEQ],
                [value <= b, value < b, value >= b, value > b, value == b, value != b],
                member,
            )  # fmt: skip
            test = test | (jnp.isnan(value) & jnp.asarray(tracks)[index])
            nxt = jnp.where(test, jnp.asarray(true_ids)[index], jnp.asarray(false_ids)[index])
            leaf = jnp.where(test, jnp.asarray(true_leaf)[index], jnp.asarray(false_leaf)[index])
            index = jnp.where(at_leaf, index, nxt.astype(jnp.int32))
            at_leaf = at_leaf | leaf
        w = jnp.asarray(leaf_weights)[index]
        target = jnp.asarray(targets, jnp.int32)[index]
        rows_ = jnp.broadcast_to(row, (rows, trees))
        if aggregate in (0, 1):
            out = jnp.zeros((rows, n_targets), work).at[rows_, target].add(w)
            if aggregate == 0:
                out = out / trees
        elif aggregate == 2:
            out = jnp.full((rows, n_targets), np.finfo(origin).max, work)
            out = out.at[rows_, target].min(w)
        else:
            out = jnp.full((rows, n_targets), np.finfo(origin).min, work)
            out = out.at[rows_, target].max(w)
        return (_post_transform(out, transform),)

    return ctx.jax("TreeEnsemble", fn, [x], [((rows, n_targets), x.data_type)])


def _depth(ctx, roots, ints) -> int:
    """The most tests a row meets in one tree (the levels of interior nodes); a cycle in the
    node links is an error."""
    true_ids, false_ids = ints["nodes_truenodeids"], ints["nodes_falsenodeids"]
    true_leaf, false_leaf = ints["nodes_trueleafs"], ints["nodes_falseleafs"]
    depth: dict[int, int] = {}
    for root in roots:
        stack = [(int(root), 0)]
        on_path: set[int] = set()
        while stack:
            n, state = stack.pop()
            if state == 0:
                if n in depth:
                    continue
                if n in on_path:
                    raise ctx.fail(f"the nodes_* links form a cycle through node {n}")
                on_path.add(n)
                stack.append((n, 1))
                for child, leaf in ((true_ids[n], true_leaf[n]), (false_ids[n], false_leaf[n])):
                    if not leaf:
                        stack.append((int(child), 0))
            else:
                on_path.discard(n)
                below = [
                    depth[int(c)] for c, leaf in ((true_ids[n], true_leaf[n]),
                                                  (false_ids[n], false_leaf[n])) if not leaf
                ]  # fmt: skip
                depth[n] = 1 + max(below, default=0)
    return max(depth[int(r)] for r in roots)


def _post_transform(y, transform: int):
    """The transforms of ONNX's tree ensemble regressors and classifiers (its reference's
    ``_common_classifier``, as ONNX Runtime computes them), over the targets of each row."""
    name = _TRANSFORMS[transform]
    if name == "NONE":
        return y
    if name == "SOFTMAX":
        e = jnp.exp(y - y.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)
    if name == "LOGISTIC":
        v = 1 / (1 + jnp.exp(-jnp.abs(y)))
        return jnp.where(y < 0, 1 - v, v)
    if name == "SOFTMAX_ZERO":
        # Scores within 1e-7 of 0 stay (about) 0: scaled by exp(-max) instead of exponentiated;
        # a row summing to 0 is 0.5 everywhere.
        top = y.max(-1, keepdims=True)
        zero = (y <= 1e-7) & (y >= -1e-7)
        e = jnp.where(zero, y * jnp.exp(-top), jnp.exp(y - top))
        s = e.sum(-1, keepdims=True)
        return jnp.where(s == 0, jnp.full_like(e, 0.5), e / jnp.where(s == 0, 1, s))
    # PROBIT: sqrt(2) erfinv(2y - 1) with the reference's closed-form erfinv approximation.
    v = 2 * y - 1
    sign = jnp.where(v < 0, -1.0, 1.0)
    w = (1 - v) * (1 + v)
    log = jnp.log(jnp.where(w == 0, 1, w))
    a = 2 / (np.pi * 0.147) + 0.5 * log
    inv = sign * jnp.sqrt(-a + jnp.sqrt(a * a - log / 0.147))
    return 1.41421356 * jnp.where(w == 0, 0, inv)


# ---------------------------------------------------------------------------------------------
# TfIdfVectorizer


def _pool_grams(ctx) -> list[tuple[tuple[int, ...], int]]:
    """The pool's n-grams of the lengths counted (min_gram_length to max_gram_length), each
    with its output coordinate: ``pool_int64s`` split by ``ngram_counts`` into runs of 1-grams,
    2-grams, ...; the i-th n-gram of the whole pool (counting every length) is coordinate
    ``ngram_indexes[i]``. An n-gram listed twice counts at its last coordinate (the reference
    keeps the last one)."""
    pool = [int(v) for v in ctx.attr("pool_int64s", []) or []]
    counts = [int(v) for v in ctx.attr("ngram_counts", [])]
    indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    if any(b < a for a, b in itertools.pairwise(counts)) or any(
        not 0 <= c <= len(pool) for c in counts
    ):
        raise ctx.fail("ngram_counts must be non-decreasing start offsets into the pool")
    grams: dict[tuple[int, ...], int] = {}
    gram_id = 0
    for n, start in enumerate(counts, 1):
        end = counts[n] if n < len(counts) else len(pool)
        for k in range((end - start) // n):
            if gram_id >= len(indexes):
                raise ctx.fail(
                    f"ngram_indexes has {len(indexes)} values; the pool holds more n-grams"
                )
            if lo <= n <= hi:
                gram = tuple(pool[start + k * n : start + (k + 1) * n])
                grams[gram] = indexes[gram_id]
            gram_id += 1
    return list(grams.items())


@converter("TfIdfVectorizer", kind="jax")
def _tfidf(ctx, node, inputs):
    """Counts of the pool's n-grams in each row of X ([C] or [N, C] integer tokens): an n-gram
    of n >= 2 tokens is counted at every start and every gap d from 1 to max_skip_count + 1
    (tokens s, s + d, ..., s + (n - 1) d), a 1-gram once per position. TF gives the counts,
    IDF 1 (or the coordinate's weight) where a count is positive, TFIDF the counts times the
    weights. One comparison of the row's token windows with the static pool per n-gram
    length and gap, the matches summed into their output coordinates."""
    (x,) = inputs
    if ctx.attr("pool_strings"):
        raise ctx.fail("pool_strings: string tensors have no DML data type")
    if x.data_type not in (DataType.INT32, DataType.UINT32, DataType.INT16, DataType.INT8,
                           DataType.UINT8, DataType.UINT16):  # fmt: skip
        raise ctx.fail(f"input X must be an integer tensor, got {x.data_type.name}")
    if x.rank > 2:
        raise ctx.fail(f"input X must have shape [C] or [N, C], got {list(x.shape)}")
    mode = ctx.attr("mode")
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ctx.fail(f"attribute 'mode' must be TF, IDF or TFIDF, got '{mode}'")
    indexes = [int(v) for v in ctx.attr("ngram_indexes", [])]
    if not indexes or min(indexes) < 0:
        raise ctx.fail("ngram_indexes must be non-empty and non-negative")
    size = max(indexes) + 1
    weights = ctx.attr("weights")
    if weights is not None and len(weights) and len(weights) < size:
        raise ctx.fail(f"weights has {len(weights)} values; the output has {size} coordinates")
    w = None if not weights else np.asarray(weights[:size], np.float32)
    lo, hi = int(ctx.attr("min_gram_length")), int(ctx.attr("max_gram_length"))
    skips = int(ctx.attr("max_skip_count"))
    if lo < 1 or hi < lo or skips < 0:
        raise ctx.fail(
            "need 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got "
            f"{lo}, {hi}, {skips}"
        )
    # The tokens are 32-bit in the graph: an n-gram holding a value beyond the input type's
    # range matches nothing.
    info = np.iinfo(x.data_type.numpy_dtype)
    by_length: dict[int, list[tuple[tuple[int, ...], int]]] = {}
    for gram, coordinate in _pool_grams(ctx):
        if all(info.min <= v <= info.max for v in gram):
            by_length.setdefault(len(gram), []).append((gram, coordinate))
    out_shape = (size,) if x.rank < 2 else (x.shape[0], size)
    rows = 1 if x.rank < 2 else x.shape[0]
    width = int(np.prod(x.shape[-1:])) if x.rank else 1
    if not by_length or width == 0 or rows == 0:
        return [ctx.constant(np.zeros(out_shape, np.float32))]
    tables = {
        n: (np.asarray([g for g, _ in grams], x.data_type.numpy_dtype).reshape(-1, n),
            np.asarray([c for _, c in grams], np.int32))
        for n, grams in by_length.items()
    }  # fmt: skip

    def fn(a):
        a = a.reshape(rows, width)
        counts = jnp.zeros((rows, size), jnp.float32)
        for n, (pool, coordinate) in tables.items():
            for gap in range(1, (skips + 1 if n > 1 else 1) + 1):
                starts = width - (n - 1) * gap
                if starts <= 0:
                    break
                match = jnp.ones((rows, starts, len(pool)), bool)
                for k in range(n):
                    tokens = lax.slice_in_dim(a, k * gap, k * gap + starts, axis=1)
                    match = match & (tokens[:, :, None] == jnp.asarray(pool[:, k]))
                found = match.sum(1).astype(jnp.float32)  # [rows, grams]
                counts = counts.at[:, jnp.asarray(coordinate)].add(found)
        if mode == "IDF":
            counts = (counts > 0).astype(jnp.float32)
        if mode != "TF" and w is not None:
            counts = counts * jnp.asarray(w)
        return (counts,)

    return ctx.jax("TfIdfVectorizer", fn, [x], [(out_shape, DataType.FLOAT32)])
