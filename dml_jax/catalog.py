"""What the registry says about the operators, for people: listings, support tables, examples.

Everything here derives from the registered entries (``registry.operators()``): the operator
list and ``--support`` view of ``dml-jax list-operators``, and each operator's example as a
descriptor, input arrays and a complete DxDispatch model (``dml-jax example NAME``).
"""

from __future__ import annotations

import copy
import dataclasses
import math
from typing import Any

import numpy as np

from .fields import INPUT, OUTPUT, dml_member_name
from .jsonmodel import operator_desc_from_json
from .registry import OperatorSpec, operators
from .support import SupportRow, introduced


def operator_lines(show_support: bool = False) -> list[str]:
    """The lines of ``dml-jax list-operators`` (``--support``: every table row too)."""
    rows: list[tuple[str, str, list[SupportRow], object, object]] = []
    for spec in operators():
        for key, table in spec.tables.items():
            label = key if isinstance(key, str) else f"{key[0]} (Function {key[1]})"
            rows.append((label, introduced(table).label, list(table), spec, key))
    width = max(len(r[0]) for r in rows)
    lines = [f"{'Operator':<{width}}  Feature level"]
    for label, level, table, spec, key in rows:
        lines.append(f"{label:<{width}}  {level}")
        if show_support:
            lines += [f"    {line}" for line in support_lines(table)]
            if spec.example.note and key == next(iter(spec.tables)):
                lines.append(f"    example: {spec.example.note} (dml-jax example {spec.name})")
    return lines


def support_lines(table: list[SupportRow] | tuple[SupportRow, ...]) -> list[str]:
    """One line per support row: level, dimension counts, input and output data types."""
    out = []
    for row in table:
        ranks = _ranks(row.ranks)
        ins = ", ".join(sorted(t.name for t in row.inputs))
        line = f"{row.level.label}+: dims {ranks}; {ins}"
        if row.outputs != row.inputs:
            line += f" -> {', '.join(sorted(t.name for t in row.outputs))}"
        for name, types_, ranks in row.tensors:
            own = f" dims {_ranks(ranks)}" if ranks else ""
            line += f"; {name}{own}: {', '.join(sorted(t.name for t in types_))}"
        out.append(line)
    return out


def _ranks(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 1 and ranks == tuple(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


def example_desc(spec: OperatorSpec) -> Any:
    """The example's operator description."""
    return operator_desc_from_json(copy.deepcopy(dict(spec.example.dispatchable)))


def retyped(desc: Any, data_type: Any, sizes: tuple[int, ...]) -> Any:
    """``desc`` (an element-wise operator) with every tensor of its main data type given
    ``data_type`` and every tensor ``sizes``.

    The main type is the one most of its tensors share (ties: the first input's); tensors of
    another type keep theirs: IF's UINT8 condition, a comparison's or IS_NAN's own output type.
    """
    tensors = [t for _, t in desc.input_slots() + desc.output_slots()]
    counts = {t.data_type: sum(u.data_type is t.data_type for u in tensors) for t in tensors}
    main = max(counts, key=lambda dt: (counts[dt], dt is tensors[0].data_type))
    changes = {}
    for f in desc.declared(INPUT) + desc.declared(OUTPUT):
        t = getattr(desc, f.name)
        if t is not None:
            new_type = data_type if t.data_type is main else t.data_type
            changes[f.name] = t.like(data_type=new_type, sizes=tuple(sizes))
    return dataclasses.replace(desc, **changes)


def _bind_points(desc: Any, kind: str) -> list[tuple[str, bool, list]]:
    """(DML member name, is array, present tensor descs) of each tensor field of a kind."""
    out = []
    for f in desc.declared(kind):
        value = getattr(desc, f.name)
        if value is None:
            continue
        tensors = list(value) if f.metadata["array"] else [value]
        out.append((dml_member_name(f.name), f.metadata["array"], tensors))
    return out


def example_inputs(spec: OperatorSpec) -> tuple[np.ndarray, ...]:
    """The example's input arrays in logical-mode order (shapes = Sizes, dtypes = DataType)."""
    desc = example_desc(spec)
    arrays = []
    for name, array, tensors in _bind_points(desc, INPUT):
        values = spec.example.inputs[name]
        for t, flat in zip(tensors, values if array else [values]):
            arrays.append(_array(flat, t.dtype, t.sizes, f"{spec.name} example {name}"))
    return tuple(arrays)


def _array(flat: Any, dtype: Any, sizes: tuple[int, ...], what: str) -> np.ndarray:
    data = np.asarray(flat, dtype=dtype)
    if data.size != math.prod(sizes):
        raise ValueError(f"{what}: {data.size} values for Sizes {list(sizes)}")
    return data.reshape(sizes)


def example_model(spec: OperatorSpec) -> dict:
    """A DxDispatch model that runs the example: one resource per tensor, a dispatch, and a
    print of every output resource (the inputs as the example gives them, outputs zeroed)."""
    desc = example_desc(spec)
    resources: dict[str, Any] = {}
    bindings: dict[str, Any] = {}
    prints = []
    for kind in (INPUT, OUTPUT):
        for name, array, tensors in _bind_points(desc, kind):
            names = []
            for i, t in enumerate(tensors):
                rname = f"{name}{i}" if array else name
                if kind == INPUT:
                    values = spec.example.inputs[name]
                    flat = np.asarray(values[i] if array else values, t.dtype).reshape(-1)
                    initial: Any = [_json_number(v) for v in flat.tolist()]
                else:
                    initial = {"valueCount": t.element_count, "value": 0}
                    prints.append({"type": "print", "resource": rname})
                resources[rname] = {
                    "initialValuesDataType": t.data_type.name,
                    "initialValues": initial,
                }
                names.append(rname)
            bindings[name] = names if array else names[0]
    short = spec.name.removeprefix("DML_OPERATOR_").lower()
    return {
        "resources": resources,
        "dispatchables": {short: copy.deepcopy(dict(spec.example.dispatchable))},
        "commands": [
            {"type": "dispatch", "dispatchable": short, "bindings": bindings},
            *prints,
        ],
    }


def _json_number(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


# ---------------------------------------------------------------------------------------------
# The fast-path registry, for people: `dml-jax list-operators --fast-paths`, docs/fast-paths.md


def _module_of(fn: Any) -> str:
    """``kernels.reduce_paths`` for a lowering defined in ``dml_jax/kernels/reduce_paths.py``."""
    module = getattr(fn, "__module__", None) or fn.func.__module__  # a functools.partial
    return str(module).removeprefix("dml_jax.")


def fast_path_lines() -> list[str]:
    """The lines of ``dml-jax list-operators --fast-paths``: each operator type with its CUDA
    fast paths in the order ``fastpath.select`` tries them, then the graph epilogues."""
    from . import fastpath

    by_type: dict[str, list[str]] = {}
    for path in fastpath.registered():
        alone = ", standalone" if path.standalone else ""
        by_type.setdefault(path.operator_type, []).append(
            f"{path.name} ({_module_of(path.lower)}{alone})"
        )
    width = max(len(t) for t in by_type)
    lines = [f"{'Operator':<{width}}  Fast paths (module), tried in this order"]
    lines += [f"{t:<{width}}  {'; '.join(names)}" for t, names in by_type.items()]
    pairs = [(f"{e.producer} -> {e.consumer}", e) for e in fastpath.epilogues()]
    if pairs:
        width = max(len(label) for label, _ in pairs)
        lines += ["", f"{'Graph epilogue (producer -> consumer)':<{width}}  Name (module)"]
        lines += [f"{label:<{width}}  {e.name} ({_module_of(e.lower)})" for label, e in pairs]
    runs = [(f"{c.first} -> ... ({c.longest} nodes at most)", c) for c in fastpath.chains()]
    if runs:
        width = max(len(label) for label, _ in runs)
        lines += ["", f"{'Graph chain (first node)':<{width}}  Name (module)"]
        lines += [f"{label:<{width}}  {c.name} ({_module_of(c.lower)})" for label, c in runs]
    return lines


def _summary(module_name: str) -> str:
    """The first paragraph of a module's docstring, on one line."""
    import importlib

    doc = importlib.import_module(f"dml_jax.{module_name}").__doc__ or ""
    return " ".join(doc.strip().split("\n\n")[0].split())


def fast_paths_markdown() -> str:
    """docs/fast-paths.md's generated part: the fast paths by kernel module and name (with the
    operator types each serves), the graph epilogues, chains and prologues, and what each kernel
    module's docstring says it applies to."""
    from . import fastpath

    groups: dict[tuple[str, str, bool], list[str]] = {}
    for path in fastpath.registered():
        key = (_module_of(path.lower), path.name, path.standalone)
        groups.setdefault(key, []).append(path.operator_type.removeprefix("DML_OPERATOR_"))
    lines = [
        "| kernel module | fast path | in a graph | operator types (`DML_OPERATOR_...`) |",
        "|---|---|---|---|",
    ]
    # By kernel module; within one, in registration order (the order ``select`` tries them).
    for (module, name, standalone), types in sorted(groups.items(), key=lambda kv: kv[0][0]):
        where = "only a node without neighbours" if standalone else "any node"
        lines.append(f"| `{module}` | `{name}` | {where} | {', '.join(types)} |")
    short = lambda t: t.removeprefix("DML_OPERATOR_")
    tables = (
        ("graph epilogue: producer", "consumer", fastpath.epilogues(),
         lambda e: (short(e.producer), short(e.consumer))),
        ("graph chain: first node", "nodes at most", fastpath.chains(),
         lambda c: (short(c.first), c.longest)),
    )  # fmt: skip
    for first, second, entries, cells in tables:
        lines += ["", f"| {first} | {second} | name | kernel module |", "|---|---|---|---|"]
        for e in entries:
            a, b = cells(e)
            lines.append(f"| {a} | {b} | `{e.name}` | `{_module_of(e.lower)}` |")
    lines += ["", "| graph prologue of the pair | its input | nodes at most | name | kernel module |",
              "|---|---|---|---|---|"]  # fmt: skip
    for p in fastpath.prologues():
        pair = f"{short(p.epilogue[0])} -> {short(p.epilogue[1])} `{p.epilogue[2]}`"
        lines.append(f"| {pair} | {p.slot} | {p.longest} | `{p.name}` | `{_module_of(p.lower)}` |")
    modules = sorted(
        {m for m, _, _ in groups}
        | {_module_of(e.lower) for e in fastpath.epilogues()}
        | {_module_of(c.lower) for c in fastpath.chains()}
    )
    lines += ["", "What each kernel module applies to (the first paragraph of its docstring):", ""]
    lines += [f"- `{m}`: {_summary(m)}" for m in modules]
    return "\n".join(lines)


def operator_groups_markdown() -> str:
    """docs/operators.md's generated table: each operator group (a module of ``dml_jax/ops/``)
    with its registered operators and the feature level each was introduced at."""
    groups: dict[str, list[str]] = {}
    for spec in operators():
        group = spec.desc_class.__module__.removeprefix("dml_jax.ops.")
        level = introduced(next(iter(spec.tables.values()))).label
        groups.setdefault(group, []).append(f"{spec.name.removeprefix('DML_OPERATOR_')} {level}")
    lines = ["| group (`dml_jax/ops/`) | operators (feature level) |", "|---|---|"]
    lines += [f"| `{g}` | {', '.join(names)} |" for g, names in sorted(groups.items())]
    lines.append(f"\n{sum(len(n) for n in groups.values())} operators in {len(groups)} groups.")
    return "\n".join(lines)
