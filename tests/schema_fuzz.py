"""Schema-driven fuzzing of every registered operator through DxDispatch JSON.

No per-operator strategy: each operator's schema is its registry entry, the descriptor class's
field declarations (tensor, count and attribute members with their field types) and its
registered example, a valid DxDispatch dispatchable. A case starts from that example and applies
a few mutations chosen from the schema: tensors retyped, resized, re-ranked or re-strided (one
tensor, or all of them coherently, so that other valid shapes and types are reached too); tensor
members (flags, total size, dimension count, nested form) broken; attributes redrawn by field
type (edge integers, NaN/inf/huge floats, every enum name and junk strings, array lengths);
nested activation descs added, replaced or broken; optional members added, required members
removed, unknown members added, any value replaced by a JSON value of the wrong type, and the
dispatchable's own form varied.

Each case is parsed (``operator_desc_from_json``), validated at a random feature level, and,
when valid and small, sometimes compiled and executed in logical and buffer mode. The only
exception allowed is ``ValidationError`` whose message starts with the operator type and a
field path; executed results must have the output tensor descs' shapes and dtypes.

A case is reproducible from ``(seed, index)`` alone (``case_rng``); the operator of case ``i``
is ``SPECS[i % len(SPECS)]``, so counts per operator are even. Run as a script for long runs::

    nice python tests/schema_fuzz.py --count 100000 --seed 0 --report desc-schema.json
"""

from __future__ import annotations

import os
import sys

if __name__ == "__main__":  # run as a script: this checkout's dml_jax, not an installed one
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import contextlib
import copy
import json
import math
import random
import re
import traceback
from collections import Counter
from typing import Any

import jax
import numpy as np

import dml_jax as dml
from dml_jax import catalog, fields, registry
from dml_jax.fields import ATTRIBUTE, COUNT, INPUT, OUTPUT, REQUIRED, dml_member_name

SPECS = registry.operators()
FUSABLE = [s for s in SPECS if s.fusable]
ACTIVATIONS = [s for s in SPECS if s.desc_class.activation]
DATA_TYPES = [t.name for t in dml.DataType]
ENUMS = [
    ftype.enum_cls
    for spec in SPECS
    for f in spec.desc_class.declared(ATTRIBUTE)
    if isinstance(ftype := f.metadata["type"], fields._Enum)
]
LEVELS = list(dml.FeatureLevel)

# Cases whose tensors hold at most this many logical elements in all may be executed.
MAX_EXECUTED_ELEMENTS = 512

EDGE_INTS = [0, 1, 2, 3, 4, 7, 8, -1, -2, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32, 2**63, 10**30]
EDGE_FLOATS = [0.0, -0.0, 0.5, -1.0, 1.0, 2.0, 1e-30, 3.5e38, -3.5e38, 65504.0, 1e300]
EDGE_FLOATS += [math.inf, -math.inf, math.nan, "nan", "inf", "-inf", "NaN"]
JUNK = [None, True, False, "", "x", "FLOAT32", [], {}, [1, 2], {"a": 1}, -1, 1.5, 10**400]
JUNK += ["DML_OPERATOR_ACTIVATION_RELU", {"Type": "ACTIVATION_RELU"}, [[1]], "1"]

_PATH = r"[A-Z][A-Za-z0-9]*(?:\[\d+\])*(?:\.[A-Z][A-Za-z0-9]*(?:\[\d+\])*)*"


def case_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"{seed}:{index}")


# --- the schema --------------------------------------------------------------------------------


def _base(spec: registry.OperatorSpec) -> dict:
    """The example as canonical DxDispatch JSON (``{"type", "desc"}``)."""
    return dml.operator_desc_to_json(catalog.example_desc(spec))


_BASES: dict[str, dict] = {}
_ACTIVATION_JSON: dict[str, dict] = {}


def base(spec) -> dict:
    if spec.name not in _BASES:
        _BASES[spec.name] = _base(spec)
    return copy.deepcopy(_BASES[spec.name])


def activation_json(spec) -> dict:
    """A fusable/nested activation in the nested form, without tensors."""
    if spec.name not in _ACTIVATION_JSON:
        _ACTIVATION_JSON[spec.name] = dml.operator_desc_to_json(
            catalog.example_desc(spec), fused=True
        )
    return copy.deepcopy(_ACTIVATION_JSON[spec.name])


def tensor_fields(cls) -> list:
    return list(cls.declared(INPUT)) + list(cls.declared(OUTPUT))


def _tensors(desc: dict, cls) -> list[tuple[str, Any, dict]]:
    """(member, index or None, tensor JSON object) of every tensor object present."""
    out = []
    for f in tensor_fields(cls):
        name = dml_member_name(f.name)
        value = desc.get(name)
        if f.metadata["array"] and isinstance(value, list):
            out += [(name, i, t) for i, t in enumerate(value) if _is_tensor(t)]
        elif _is_tensor(value):
            out.append((name, None, value))
    return out


def _is_tensor(t: Any) -> bool:
    return isinstance(t, dict) and isinstance(t.get("Sizes"), list)


# --- value generators by field type ------------------------------------------------------------


def any_int(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.5:
        return rng.randint(0, 4)
    if r < 0.85:
        return rng.choice(EDGE_INTS)
    return rng.randint(-(2**40), 2**40)


def any_float(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.5:
        return round(rng.uniform(-4, 4), 3)
    return rng.choice(EDGE_FLOATS)


def junk(rng: random.Random) -> Any:
    r = rng.random()
    if r < 0.6:
        return copy.deepcopy(rng.choice(JUNK))
    if r < 0.8:
        return any_float(rng)
    return [any_int(rng) for _ in range(rng.randint(0, 4))]


def value_for(rng: random.Random, ftype: Any, spec) -> Any:
    """A JSON value for an attribute of field type ``ftype``: mostly plausible, some edges."""
    if rng.random() < 0.05:
        return junk(rng)
    if isinstance(ftype, fields._Enum):
        members = list(ftype.enum_cls)
        m = rng.choice(members)
        return rng.choice([m.name, m.dml_name, m.dml_name, m.dml_name, m.name.lower(), m.value])
    if isinstance(ftype, fields.ScalarUnion):
        r = rng.random()
        if r < 0.6:
            return any_float(rng) if rng.random() < 0.5 else any_int(rng)
        member = rng.choice(["Float32", "Float64", "UInt16", "Int8", "UInt8", "Int32", "Int64"])
        member = rng.choice([member, "Bytes", "Bogus"])
        return {member: any_float(rng) if "Float" in member else any_int(rng)}
    if isinstance(ftype, fields._Array):
        n = rng.choice([0, 1, 2, 3, 4, 5, 8])
        return [value_for(rng, ftype.item, spec) for _ in range(n)]
    if isinstance(ftype, fields._Float):
        return any_float(rng)
    if isinstance(ftype, fields._Bool):
        return rng.choice([True, False, 0, 1, 2, "true"])
    if isinstance(ftype, (fields._Int, fields._Uint)):
        return any_int(rng) if rng.random() < 0.85 else -any_int(rng)
    if ftype is fields.SCALE_BIAS:
        return {"Scale": any_float(rng), "Bias": any_float(rng)}
    if ftype is fields.SIZE_2D:
        return {"Width": any_int(rng), "Height": any_int(rng)}
    if ftype is fields.OPERATOR_DESC_ARRAY:
        return [nested_activation(rng) for _ in range(rng.choice([0, 1, 2, 3, 4, 6]))]
    if ftype is fields.OPERATOR_DESC:
        return nested_activation(rng)
    raise AssertionError(f"no generator for field type {ftype!r}")


def nudged(rng: random.Random, value: Any) -> Any:
    """A present value changed a little: an array element, a number, an enum or a bool."""
    if isinstance(value, list) and value:
        value = list(value)
        i = rng.randrange(len(value))
        value[i] = nudged(rng, value[i])
        return value
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return max(value + rng.choice([-2, -1, 1, 1, 2, 3]), rng.choice([0, 0, 0, -1]))
    if isinstance(value, float):
        return rng.choice([value * 2, value / 2, -value, 0.0, value + 1, 1e-3])
    if isinstance(value, dict) and value:
        value = dict(value)
        key = rng.choice(sorted(value))
        value[key] = nudged(rng, value[key])
        return value
    if isinstance(value, str):  # an enum name: another member of the same enum
        for enum_cls in ENUMS:
            names = [m.dml_name for m in enum_cls]
            if value in names:
                return rng.choice(names)
    return value


def nested_activation(rng: random.Random) -> Any:
    """A nested operator desc: a fusable or other activation, sometimes broken."""
    r = rng.random()
    if r < 0.06:
        return junk(rng)
    if r < 0.12:  # not an activation
        return {"Type": rng.choice(SPECS).name, "Desc": {}}
    obj = activation_json(rng.choice(FUSABLE if r < 0.8 else ACTIVATIONS))
    if rng.random() < 0.4:
        mutate_nested(rng, obj)
    if rng.random() < 0.2:  # the inline form
        obj = {"Type": obj["Type"].removeprefix("DML_OPERATOR_"), **obj["Desc"]}
    return obj


def mutate_nested(rng: random.Random, obj: dict) -> None:
    members = obj["Desc"]
    spec = registry.lookup(obj["Type"])
    attrs = spec.desc_class.declared(ATTRIBUTE)
    r = rng.random()
    if attrs and r < 0.6:
        f = rng.choice(attrs)
        members[dml_member_name(f.name)] = value_for(rng, f.metadata["type"], spec)
    elif members and r < 0.75:
        del members[rng.choice(sorted(members))]
    elif r < 0.85:
        members["Bogus"] = 1
    else:  # tensors in a nested desc are ignored by DirectML: give one anyway
        members["InputTensor"] = {"DataType": "FLOAT32", "Sizes": [1]}


# --- tensor mutations --------------------------------------------------------------------------


def _main_type(tensors) -> str | None:
    counts = Counter(repr(t.get("DataType")) for _, _, t in tensors)
    return counts.most_common(1)[0][0] if counts else None


def new_size(rng: random.Random, old: Any) -> Any:
    r = rng.random()
    if r < 0.65:
        return rng.choice([1, 2, 3, 4, 5, 6, 8])
    if r < 0.85 and isinstance(old, int):
        return max(old + rng.choice([-1, 1]), 0)
    return rng.choice([0, -1, 2**31, 2**32 - 1, 2**32, 2**40, 10**30, 1.5, "2", None])


def strides_for(rng: random.Random, sizes: list) -> Any:
    if not sizes:
        return rng.choice([[], [1]])
    if not all(isinstance(s, int) and 0 < s < 2**20 for s in sizes):
        return [any_int(rng) for _ in sizes]
    packed, step = [], 1
    for s in reversed(sizes):
        packed.append(step)
        step *= s
    packed.reverse()
    r = rng.random()
    if r < 0.25:  # padded rows
        padded, step = [], 1
        for i, s in enumerate(reversed(sizes)):
            padded.append(step)
            step *= s + (2 if i == 0 else 0)
        return list(reversed(padded))
    if r < 0.5:  # broadcast one dimension
        out = list(packed)
        out[rng.randrange(len(out))] = 0
        return out
    if r < 0.6:
        return packed
    if r < 0.7:  # transposed innermost pair
        out = list(packed)
        if len(out) >= 2:
            out[-1], out[-2] = sizes[-2] if sizes[-2] else 1, 1
        return out
    if r < 0.8:
        return packed[:-1] or [1, 1]
    out = list(packed)
    out[rng.randrange(len(out))] = rng.choice([-1, 2**32, 2**62, 7, 0])
    return out


def mutate_tensor(rng: random.Random, t: dict) -> None:
    sizes = t["Sizes"]
    r = rng.random()
    if r < 0.2:
        t["DataType"] = rng.choice(DATA_TYPES + ["BOGUS", "DML_TENSOR_DATA_TYPE_FLOAT32", 3])
    elif r < 0.4 and sizes:
        i = rng.randrange(len(sizes))
        sizes[i] = new_size(rng, sizes[i])
        t.pop("Strides", None)
    elif r < 0.5:
        if rng.random() < 0.5 and len(sizes) < 9:
            sizes.insert(0, 1)
        elif sizes:
            sizes.pop(rng.randrange(len(sizes)))
        t.pop("Strides", None)
    elif r < 0.65:
        t["Strides"] = strides_for(rng, sizes)
    elif r < 0.72:
        t["Flags"] = rng.choice(["OWNED_BY_DML", "DML_TENSOR_FLAG_OWNED_BY_DML", "NONE", "X", []])
    elif r < 0.8:
        t["TotalTensorSizeInBytes"] = rng.choice([0, 1, 3, 4, 2**40, 2**64, -4, "big"])
    elif r < 0.86:
        t["DimensionCount"] = len(sizes) + rng.choice([-1, 1, 0])
    elif r < 0.9:
        t["GuaranteedBaseOffsetAlignment"] = rng.choice([0, 1, 3, 4, 16, 2**40])
    elif r < 0.95:
        t["Sizes"] = [rng.choice([1, 2, 3]) for _ in range(rng.choice([0, 1, 2, 3, 4, 5, 8, 9]))]
        t.pop("Strides", None)
    else:
        t[rng.choice(["Bogus", "Type"])] = rng.choice(["BUFFER", "DML_TENSOR_TYPE_INVALID", 1])


def retype_all(rng: random.Random, desc: dict, cls) -> None:
    """Every tensor of the main type gets another type (keeps ties such as IF's condition)."""
    tensors = _tensors(desc, cls)
    main = _main_type(tensors)
    new = rng.choice(DATA_TYPES)
    for _, _, t in tensors:
        if repr(t.get("DataType")) == main:
            t["DataType"] = new


def rerank_all(rng: random.Random, desc: dict, cls) -> None:
    """Every tensor gets leading 1s (or loses a leading 1): another rank, same data."""
    add = rng.random() < 0.6
    k = rng.choice([1, 1, 2, 4])
    for _, _, t in _tensors(desc, cls):
        sizes = t["Sizes"]
        if add:
            t["Sizes"] = [1] * k + sizes
        elif sizes and sizes[0] == 1:
            t["Sizes"] = sizes[1:]
        t.pop("Strides", None)
        t.pop("DimensionCount", None)


def resize_all(rng: random.Random, desc: dict, cls) -> None:
    """Every tensor whose dimension d has size n gets size m there (same-shaped tensors stay
    alike, as element-wise and normalization operators need)."""
    tensors = _tensors(desc, cls)
    sizes = [t["Sizes"] for _, _, t in tensors if t["Sizes"]]
    if not sizes:
        return
    ref = rng.choice(sizes)
    d = rng.randrange(len(ref))
    old, new = ref[d], rng.choice([1, 2, 3, 4, 5])
    for _, _, t in tensors:
        s = t["Sizes"]
        if len(s) == len(ref) and s[d] == old:
            s[d] = new
            t.pop("Strides", None)


def restride_all(rng: random.Random, desc: dict, cls) -> None:
    for _, _, t in _tensors(desc, cls):
        if rng.random() < 0.7:
            t["Strides"] = strides_for(rng, t["Sizes"])


# --- the case generator ------------------------------------------------------------------------


def _all_paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(value, dict):
        for k, v in value.items():
            out += _all_paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _all_paths(v, prefix + (i,))
    return out


def mutate(rng: random.Random, spec, desc: dict) -> str:
    """One schema-driven mutation of ``desc`` in place; returns its name."""
    cls = spec.desc_class
    attrs = cls.declared(ATTRIBUTE)
    # Weights: mostly the plausible mutations that keep a description valid often enough to
    # reach validation's deep rules and the lowering; a few hostile ones at every step.
    kinds = ["retype_all"] * 3 + ["rerank_all"] * 2 + ["resize_all"] * 3 + ["restride_all"] * 2
    kinds += ["tensor"] * 3 + ["attribute"] * 3 + ["nudge"] * 4 + ["optional"] * 2
    kinds += ["delete", "extra", "junk", "array_length", "count"]
    if any(f.metadata["type"] in (fields.OPERATOR_DESC, fields.OPERATOR_DESC_ARRAY) for f in attrs):
        kinds += ["nested", "nested"]
    kind = rng.choice(kinds)
    tensors = _tensors(desc, cls)
    if kind == "retype_all":
        retype_all(rng, desc, cls)
    elif kind == "rerank_all":
        rerank_all(rng, desc, cls)
    elif kind == "resize_all":
        resize_all(rng, desc, cls)
    elif kind == "restride_all":
        restride_all(rng, desc, cls)
    elif kind == "tensor" and tensors:
        mutate_tensor(rng, rng.choice(tensors)[2])
    elif kind == "attribute" and attrs:
        f = rng.choice(attrs)
        desc[dml_member_name(f.name)] = value_for(rng, f.metadata["type"], spec)
    elif kind == "nudge" and attrs:  # one element or number of a present attribute, nearby
        present = [f for f in attrs if desc.get(dml_member_name(f.name)) is not None]
        if present:
            name = dml_member_name(rng.choice(present).name)
            desc[name] = nudged(rng, desc[name])
    elif kind == "optional":
        absent = [
            f
            for f in tensor_fields(cls) + list(attrs)
            if f.default is not REQUIRED and desc.get(dml_member_name(f.name)) is None
        ]
        if absent:
            f = rng.choice(absent)
            name = dml_member_name(f.name)
            if f.metadata["kind"] in (INPUT, OUTPUT):
                like = copy.deepcopy(rng.choice(tensors)[2]) if tensors else {"Sizes": [1]}
                like.setdefault("DataType", "FLOAT32")
                if rng.random() < 0.4:
                    like["Sizes"] = [1] * (len(like["Sizes"]) - 1) + [like["Sizes"][-1]]
                    like.pop("Strides", None)
                desc[name] = [like] if f.metadata["array"] else like
            else:
                desc[name] = value_for(rng, f.metadata["type"], spec)
    elif kind == "delete" and desc:
        del desc[rng.choice(sorted(desc))]
    elif kind == "extra":
        desc[rng.choice(["Bogus", "inputTensor", "Type", "Desc", "OutputCount"])] = junk(rng)
    elif kind == "junk":
        path = rng.choice(_all_paths(desc)[1:] or [()])
        if path:
            parent = desc
            for key in path[:-1]:
                parent = parent[key]
            parent[path[-1]] = junk(rng)
    elif kind == "array_length":
        arrays = [
            k for k, v in desc.items() if isinstance(v, list) and k not in ("ActivationDescs",)
        ]
        if arrays:
            items = desc[rng.choice(arrays)]
            r = rng.random()
            if items and r < 0.4:
                items.pop(rng.randrange(len(items)))
            elif items and r < 0.8:
                items.append(copy.deepcopy(rng.choice(items)))
            else:
                items.extend(copy.deepcopy(items))
    elif kind == "count":
        counts = cls.declared(COUNT)
        if counts:
            f = rng.choice(counts)
            of = desc.get(dml_member_name(f.metadata["of"]))
            n = len(of) if isinstance(of, list) else 1
            desc[dml_member_name(f.name)] = rng.choice([n, n + 1, n - 1, 0, 2**32, -1, "2"])
    elif kind == "nested":
        f = rng.choice(
            [
                f
                for f in attrs
                if f.metadata["type"] in (fields.OPERATOR_DESC, fields.OPERATOR_DESC_ARRAY)
            ]
        )
        name = dml_member_name(f.name)
        current = desc.get(name)
        if isinstance(current, dict) and "Desc" in current and rng.random() < 0.5:
            mutate_nested(rng, current)
        elif isinstance(current, list) and current and rng.random() < 0.5:
            i = rng.randrange(len(current))
            if isinstance(current[i], dict) and "Desc" in current[i] and rng.random() < 0.5:
                mutate_nested(rng, current[i])
            else:
                current[i] = nested_activation(rng)
        else:
            desc[name] = value_for(rng, f.metadata["type"], spec)
    return kind


def generate(rng: random.Random, spec) -> tuple[dict, Any, list[str]]:
    """(dispatchable JSON, feature level or None, mutation names) for one case."""
    obj = base(spec)
    desc = obj["desc"]
    applied = []
    for _ in range(rng.choice([0, 1, 1, 1, 2, 2, 3, 4])):
        applied.append(mutate(rng, spec, desc))
    r = rng.random()
    if r < 0.05:
        obj = {"type": spec.name.removeprefix("DML_OPERATOR_"), **desc}
    elif r < 0.08:
        obj = {"type": spec.name, "Desc": desc}
    elif r < 0.09:
        obj["executionFlags"] = rng.choice(["NONE", ["DISABLE_META_COMMANDS"], "BOGUS", 3])
    elif r < 0.095:
        obj["type"] = junk(rng)
        applied.append("type")
    elif r < 0.1:
        obj["bindings"] = {}
    level = rng.choice(LEVELS) if rng.random() < 0.15 else None
    if level is not None and rng.random() < 0.1:
        level = rng.choice(["5_0", "DML_FEATURE_LEVEL_3_0", "FL_9", 7, None])
    return obj, level, applied


# --- checking one case -------------------------------------------------------------------------


class Defect(AssertionError):
    """A case broke the contract: a raw exception, a malformed message, a wrong result."""


def check_message(error: BaseException, owner: str | None) -> None:
    message = str(error)
    if not isinstance(error, dml.ValidationError):
        raise Defect(f"{type(error).__name__}: {message[:500]}") from error
    if not message.strip():
        raise Defect("empty ValidationError message") from error
    if message.startswith("feature_level "):
        return
    if owner is None:  # the type itself was broken
        if re.match(r"^(type|dispatchable)\b", message):
            return
        raise Defect(f"message names no type or dispatchable: {message[:300]!r}") from error
    head = re.escape(owner)
    forms = (
        rf"^{head}(?: with Function \w+)?: (?:desc\.|Desc\.)?{_PATH}\b",
        rf"^{head}: (?:desc |Desc )?(?:has )?unknown (?:dispatchable )?member '",
        rf"^{head}: give the operator's members under 'desc' or 'Desc'",
        rf"^{head}: executionFlags\b",
        rf"^{head} requires feature level \w+",
        rf"^{head}: expected \d+ input arrays",
    )
    if not any(re.match(form, message) for form in forms):
        raise Defect(f"message does not start with {owner} and a field path: {message[:300]!r}")


def _owner(obj: Any) -> str | None:
    if not isinstance(obj, dict):
        return None
    try:
        return registry.parse_operator_type(obj.get("type")).name
    except Exception:  # noqa: BLE001 (any failure to name it: no owner)
        return None


def _values(rng: np.random.Generator, t: dml.TensorDesc, count: int, dtype) -> np.ndarray:
    dt = t.data_type
    if dt.is_float:
        return (rng.standard_normal(count) * 2).astype(dtype)
    lo, hi = dt.integer_range
    return rng.integers(max(lo, -4), min(hi, 5) + 1, count).astype(np.int64).astype(dtype)


def _outputs(desc) -> list[dml.TensorDesc]:
    return [t for _, t in desc.output_slots()]


def execute(desc, level, seed: int) -> None:
    """Compiles and runs ``desc`` in logical and buffer mode; checks output count, shapes and
    dtypes against the descriptor's output tensor descs."""
    rng = np.random.default_rng(seed)
    tensors = desc.input_slots() + desc.output_slots()
    wide = any(t.data_type.is_64bit for _, t in tensors)
    outs = _outputs(desc)
    with jax.enable_x64(True) if wide else contextlib.nullcontext():
        op = dml.compile_operator(desc, level)
        ins = [t for _, t in desc.input_slots()]
        if [(t.sizes, t.data_type) for t in op.input_descs] != [
            (t.sizes, t.data_type) for t in ins
        ]:
            raise Defect("compiled input descs differ from the descriptor's")
        arrays = [
            _values(rng, t, math.prod(t.sizes), t.dtype).reshape(t.sizes) for t in op.input_descs
        ]
        result = op(*arrays)
        results = result if isinstance(result, tuple) else (result,)
        if len(results) != len(outs):
            raise Defect(f"{len(results)} results for {len(outs)} output tensors")
        for i, (r, t) in enumerate(zip(results, outs)):
            if tuple(r.shape) != t.sizes or np.dtype(r.dtype) != np.dtype(t.dtype):
                raise Defect(
                    f"output {i}: got {r.dtype}{list(r.shape)}, desc says "
                    f"{t.data_type.name}{list(t.sizes)}"
                )
        bufs = [_values(rng, t, t.buffer_elements, t.buffer_dtype) for t in op.input_descs]
        out_bufs = [np.zeros(t.buffer_elements, t.buffer_dtype) for t in outs]
        new = op.run_buffers(bufs, out_bufs)
        if len(new) != len(outs):
            raise Defect(f"buffer mode: {len(new)} buffers for {len(outs)} output tensors")
        for i, (b, old) in enumerate(zip(new, out_bufs)):
            if tuple(b.shape) != old.shape or np.dtype(b.dtype) != old.dtype:
                raise Defect(f"buffer mode output {i}: got {b.dtype}{list(b.shape)}")


def run_case(obj: Any, level: Any, execute_it: bool, seed: int = 0) -> str:
    """One case; returns its outcome or raises ``Defect``.

    Outcomes: ``parse-rejected``, ``rejected`` (by validation), ``valid``, ``valid-large``,
    ``executed``.
    """
    owner = _owner(obj)
    try:
        desc = dml.operator_desc_from_json(obj)
    except Exception as e:  # noqa: BLE001 (every exception is checked)
        check_message(e, owner)
        return "parse-rejected"
    try:
        dml.validate(desc, level)
        hash(desc)
    except Exception as e:  # noqa: BLE001 (every exception is checked)
        check_message(e, owner)
        return "rejected"
    # What validates is written back as DxDispatch JSON that reads the same description.
    text = json.dumps(dml.operator_desc_to_json(desc), allow_nan=False)
    if dml.operator_desc_from_json(json.loads(text)) != desc:
        raise Defect(f"the description does not round-trip through JSON: {text[:300]}")
    tensors = [t for _, t in desc.input_slots() + desc.output_slots()]
    if sum(t.element_count for t in tensors) > MAX_EXECUTED_ELEMENTS or any(
        t.buffer_elements > 4 * MAX_EXECUTED_ELEMENTS for t in tensors
    ):
        return "valid-large"
    if not execute_it:
        return "valid"
    try:
        execute(desc, level, seed)
    except Defect:
        raise
    except Exception as e:  # noqa: BLE001 (every exception is checked)
        check_message(e, owner)
        return "execute-rejected"
    return "executed"


def fuzz(seed: int, indices, execute_one_in: int, stats: Counter, failures: list) -> None:
    """Runs cases ``indices`` of ``seed``; counts outcomes per operator in ``stats`` and appends
    (index, operator, mutations, message, traceback) of each defect to ``failures``."""
    for i in indices:
        spec = SPECS[i % len(SPECS)]
        rng = case_rng(seed, i)
        obj, level, applied = generate(rng, spec)
        run = rng.randrange(execute_one_in) == 0
        try:
            outcome = run_case(obj, level, run, seed=i)
        except Exception as e:  # noqa: BLE001 (a Defect, or the harness's own error)
            outcome = "DEFECT"
            failures.append((i, spec.name, applied, f"{type(e).__name__}: {e}"[:600],
                             traceback.format_exc()[-3000:]))  # fmt: skip
        stats[f"{spec.name} {outcome}"] += 1
        stats[outcome] += 1


def _main() -> None:
    import argparse
    import faulthandler
    import time

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--start", type=int, default=0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--execute-one-in", type=int, default=8)
    parser.add_argument("--report", default=None)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long")
    args = parser.parse_args()
    # As tests/conftest.py: CPU programs compiled without LLVM's expensive passes.
    if not os.path.exists("/dev/nvidiactl"):
        os.environ["XLA_FLAGS"] = (
            os.environ.get("XLA_FLAGS", "")
            + " --xla_llvm_disable_expensive_passes=true --xla_backend_optimization_level=0"
        ).strip()
    stats: Counter = Counter()
    failures: list = []
    t0 = time.time()
    done = args.start
    for block in range(args.start, args.start + args.count, 500):
        end = min(block + 500, args.start + args.count)
        # A case that takes ten minutes is a hang: dump every thread's stack and stop.
        faulthandler.dump_traceback_later(600, exit=True)
        fuzz(args.seed, range(block, end), args.execute_one_in, stats, failures)
        faulthandler.cancel_dump_traceback_later()
        done = end
        elapsed = time.time() - t0
        print(f"{done - args.start} cases in {elapsed:.0f} s, {len(failures)} defects",
              file=sys.stderr, flush=True)  # fmt: skip
        if args.report:
            report = {
                "seed": args.seed,
                "start": args.start,
                "cases": done - args.start,
                "seconds": round(elapsed),
                "stats": dict(sorted(stats.items())),
                "failures": failures,
            }
            tmp = args.report + ".tmp"
            with open(tmp, "w", encoding="utf-8") as f:
                json.dump(report, f, indent=1)
            os.replace(tmp, args.report)
        if args.minutes and elapsed > args.minutes * 60:
            break


if __name__ == "__main__":
    _main()
