"""NumPy reference of MULTIHEAD_ATTENTION and MULTIHEAD_ATTENTION1, from
DML_MULTIHEAD_ATTENTION_OPERATOR_DESC, DML_MULTIHEAD_ATTENTION1_OPERATOR_DESC and
DML_MULTIHEAD_ATTENTION_MASK_TYPE (learn.microsoft.com), paraphrased here.

The page decomposes the operator as: add Bias to query / key / value, then Scale * (Query x
Key^T), add RelativePositionBias, apply the mask, softmax along the keys, then x Value. Every
tensor is read by its trailing dimensions (4- and 5-D tensors carry leading 1s):

- Query {B, S, Hq * D}, Key {B, Skv, Hkv * D}, Value {B, Skv, Hkv * Dv}, where head h of a
  hidden vector is its elements [h * size, (h + 1) * size). StackedQueryKey {B, S, H, 2, D}
  (index 0 the query, 1 the key), StackedKeyValue {B, Skv, Hkv, 2, D} (key, value),
  StackedQueryKeyValue {B, S, H, 3, D} (query, key, value).
- Bias {Hq*D + Hkv*D + Hkv*Dv}: the query's part, then the key's, then the value's, each in the
  hidden layout above; it is added to the new query / key / value, not to the past.
- PastKey {B, Hkv, P, D} / PastValue {B, Hkv, P, Dv} come before the new keys / values; the
  present outputs {B, Hkv, T, ..} hold the past followed by the new (biased) ones, T = P + Skv.
- Grouped heads (MULTIHEAD_ATTENTION1): query head n reads key/value head n // (Hq / Hkv).
- Masks (INT32 MaskTensor), over the key positions j of query i in batch b:
  BOOLEAN {B, Hq, S, T}: where the value is 0, MaskFilterValue is added to the logit.
  KEY_SEQUENCE_LENGTH {1, B}: positions j >= length[b] are set to MaskFilterValue.
  KEY_SEQUENCE_END_START {2, B} (ends, then starts): positions outside [start, end) are set.
  KEY_QUERY_SEQUENCE_LENGTH_START_END {3B + 2}: keyLength[B], queryStart[B], queryEnd,
  keyStart[B], keyEnd; dml_jax reads the starts as offsets into the tokens flattened over the
  batch (query token (b, i) is b * S + i, key position (b, j) is b * T + j): a pair is kept
  when one batch c's query range [queryStart[c], queryStart[c + 1]) (the last one ending at
  queryEnd) holds the query token and [keyStart[c], keyStart[c] + keyLength[c]) the key; the
  other positions are set to MaskFilterValue.
- PastSequenceLengths {B} (MULTIHEAD_ATTENTION1): the past is a cache of capacity C = P; the
  new keys / values of batch b go to positions L_b .. L_b + Skv - 1 of the present (those inside
  [0, C)), the rest of the present is the past; query i attends only positions
  j < L_b + Skv with j <= L_b + Skv - S + i; the others are not read (whatever they hold, a NaN
  or an infinity too, takes no part), and a query with no position left outputs 0.

Everything is computed in float64 from the inputs as given (Scale and MaskFilterValue read as
float32, DirectML's FLOAT) with explicit loops over batch, head, query and key; the outputs are
rounded once to the tensor type.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def _f(value: float) -> float:
    return float(np.float64(np.float32(value)))


def _last(a: np.ndarray, n: int) -> np.ndarray:
    """The array without its leading 1s, as an n-D array."""
    return a.reshape(a.shape[a.ndim - n :]) if a.ndim >= n else a


def _heads(desc: Any) -> tuple[int, int]:
    if desc.operator_type.endswith("1"):
        return desc.query_head_count, desc.key_value_head_count
    return desc.head_count, desc.head_count


def _split(vector: np.ndarray, heads: int) -> list[np.ndarray]:
    size = vector.shape[-1] // heads
    return [vector[..., h * size : (h + 1) * size] for h in range(heads)]


def multihead_attention(desc: Any, *arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    named = {path: a for (path, _), a in zip(desc.input_slots(), arrays)}
    hq, hkv = _heads(desc)
    out_type = desc.output_tensor.dtype
    wide = {k: a.astype(np.float64) for k, a in named.items() if a.dtype.kind == "f"}

    # Per batch: query[b][n] {S, D}; key[b][h], value[b][h] {Skv, size} (lists of heads).
    query = key = value = None
    if "QueryTensor" in wide:
        qt = _last(wide["QueryTensor"], 3)
        query = [_split(qt[b], hq) for b in range(qt.shape[0])]
    for path, roles in (
        ("StackedQueryKeyTensor", ("q", "k")),
        ("StackedKeyValueTensor", ("k", "v")),
        ("StackedQueryKeyValueTensor", ("q", "k", "v")),
    ):
        if path in wide:
            st = wide[path]  # {B, seq, H, count, D}
            per_role = {
                r: [[st[b, :, h, i, :] for h in range(st.shape[2])] for b in range(st.shape[0])]
                for i, r in enumerate(roles)
            }
            query = per_role.get("q", query)
            key = per_role.get("k", key)
            value = per_role.get("v", value)
    if "KeyTensor" in wide:
        kt = _last(wide["KeyTensor"], 3)
        key = [_split(kt[b], hkv) for b in range(kt.shape[0])]
    if "ValueTensor" in wide:
        vt = _last(wide["ValueTensor"], 3)
        value = [_split(vt[b], hkv) for b in range(vt.shape[0])]
    batch, seq, head = len(query), query[0][0].shape[0], query[0][0].shape[1]

    if "BiasTensor" in wide:
        bias = wide["BiasTensor"].reshape(-1)
        q_bias = _split(bias[: hq * head], hq)
        k_bias = _split(bias[hq * head : (hq + hkv) * head], hkv)
        v_bias = _split(bias[(hq + hkv) * head :], hkv)
        query = [[query[b][n] + q_bias[n] for n in range(hq)] for b in range(batch)]
        if key is not None:
            key = [[key[b][h] + k_bias[h] for h in range(hkv)] for b in range(batch)]
            value = [[value[b][h] + v_bias[h] for h in range(hkv)] for b in range(batch)]

    # Present keys / values {Hkv, T, size} per batch.
    lengths = named.get("PastSequenceLengthsTensor")
    lengths = None if lengths is None else [int(v) for v in lengths.reshape(-1)]
    kv_seq = 0 if key is None else key[0][0].shape[0]

    def present(new, past_name):
        past = wide.get(past_name)
        past = None if past is None else _last(past, 4)
        out = []
        for b in range(batch):
            heads = []
            for h in range(hkv):
                if past is None:
                    heads.append(new[b][h].copy())
                elif lengths is None:
                    parts = [past[b, h]] + ([] if new is None else [new[b][h]])
                    heads.append(np.concatenate(parts, axis=0))
                else:
                    cache = past[b, h].copy()
                    for s in range(kv_seq):
                        p = lengths[b] + s
                        if 0 <= p < cache.shape[0]:
                            cache[p] = new[b][h][s]
                    heads.append(cache)
            out.append(heads)
        return out

    keys = present(key, "PastKeyTensor")
    values = present(value, "PastValueTensor")
    total = keys[0][0].shape[0]
    v_head = values[0][0].shape[1]
    group = hq // hkv

    scale, filter_value = _f(desc.scale), _f(desc.mask_filter_value)
    mask_type = desc.mask_type.name
    mask = named.get("MaskTensor")
    rpb = wide.get("RelativePositionBiasTensor")
    rpb = None if rpb is None else _last(rpb, 4)
    if mask is not None:
        flat = [int(v) for v in mask.reshape(-1)]
        if mask_type == "BOOLEAN":
            mask = _last(mask, 4)

    def key_kept(b: int, i: int, j: int) -> bool:
        """The sequence-length mask types: is position j kept for query i of batch b?"""
        if mask_type == "KEY_SEQUENCE_LENGTH":
            return j < flat[b]
        if mask_type == "KEY_SEQUENCE_END_START":
            return flat[batch + b] <= j < flat[b]
        key_length = flat[:batch]
        q_start = flat[batch : 2 * batch + 1]
        k_start = flat[2 * batch + 1 :]
        t, u = b * seq + i, b * total + j
        return any(
            q_start[c] <= t < q_start[c + 1] and k_start[c] <= u < k_start[c] + key_length[c]
            for c in range(batch)
        )

    output = np.zeros((batch, seq, hq * v_head))
    for b in range(batch):
        for n in range(hq):
            h = n // group
            for i in range(seq):
                logits, allowed = [], []
                for j in range(total):
                    x = scale * float(np.dot(query[b][n][i], keys[b][h][j]))
                    if rpb is not None:
                        x += rpb[b, n, i, j]
                    if mask_type == "BOOLEAN":
                        if mask[b, n, i, j] == 0:
                            x += filter_value
                    elif mask_type != "NONE" and not key_kept(b, i, j):
                        x = filter_value
                    logits.append(x)
                    if lengths is None:
                        allowed.append(True)
                    else:
                        end = lengths[b] + kv_seq
                        allowed.append(j < end and j <= end - seq + i)
                if not any(allowed):
                    continue  # no position: the output stays 0
                kept = [x for x, ok in zip(logits, allowed) if ok]
                top = max(kept)
                if any(math.isnan(x) for x in kept) or top == -math.inf:
                    # No normalization exists (all -inf), or a NaN logit: NaN, as SOFTMAX gives.
                    output[b, i, n * v_head : (n + 1) * v_head] = math.nan
                    continue
                weights = [math.exp(x - top) if ok else 0.0 for x, ok in zip(logits, allowed)]
                norm = sum(weights)
                row = sum(
                    w / norm * values[b][h][j]
                    for j, (w, ok) in enumerate(zip(weights, allowed))
                    if ok
                )
                output[b, i, n * v_head : (n + 1) * v_head] = row

    results = [output.reshape(desc.output_tensor.sizes).astype(out_type)]
    for t, heads in (
        (desc.output_present_key_tensor, keys),
        (desc.output_present_value_tensor, values),
    ):
        if t is not None:
            results.append(np.array(heads).reshape(t.sizes).astype(out_type))
    return tuple(results)


REFERENCES = {
    "DML_OPERATOR_MULTIHEAD_ATTENTION": multihead_attention,
    "DML_OPERATOR_MULTIHEAD_ATTENTION1": multihead_attention,
}
