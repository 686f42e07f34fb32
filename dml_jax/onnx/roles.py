"""The roles of a decoder step's inputs and outputs (``find_roles``): the token ids, the
attention mask, the positions, per layer the past and present keys and values, the logits, found
by the names the exporters write (PyTorch / Optimum ``past_key_values.N.key``, ``present.N.key``;
``past.N.key``; ``past_key_N``), and how each present holds its past: ``Concat(past, new)`` on
the sequence axis (a plain export) or a com.microsoft GroupQueryAttention's (ONNX Runtime GenAI's
model builder). ``DecoderRoles.bucketable`` says whether the graph shows a past padded to a
bucket length masked (its structure, not a proof over every computation: docs/onnx.md), which
``run`` (``buckets``) and the ``Generator`` (``generation``) rely on.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ValidationError
from .elements import ONNX

_PAST = re.compile(r"^past(?:_key_values)?[._](\d+)[._](key|value)$|^past_(key|value)_(\d+)$")
_PRESENT = re.compile(
    r"^present(?:_key_values)?[._](\d+)[._](key|value)$|^present_(key|value)_(\d+)$"
)


def _by_layer(names: Any, pattern: re.Pattern) -> dict[int, dict[str, str]]:
    """``{layer: {"key": name, "value": name}}`` of the names ``pattern`` matches (its groups:
    layer and kind, or kind and layer)."""
    out: dict[int, dict[str, str]] = {}
    for name in names:
        m = pattern.match(name)
        if m:
            layer, kind = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            out.setdefault(int(layer), {})[kind] = name
    return out


@dataclass(frozen=True)
class DecoderRoles:
    """The roles of a decoder step's inputs and outputs (names), found by ``find_roles``.

    Attributes:
        input_ids, attention_mask, position_ids: input names (position_ids None when absent).
        past: per layer the (key, value) input names; present: the (key, value) output names.
        logits: the logits output.
        axis: the sequence axis of the cache tensors.
        cache_shape: a past key's declared shape (ints and dimension names).
        cache_dtype: the cache's NumPy dtype.
        bucketable: the graph shows the padding of a bucketed past masked (``why`` says why
            not).
        kind: how each present holds the past: "concat" (``Concat(past, new)``: the past's
            positions, then the new ones), "gqa" (GroupQueryAttention's: each entry's valid
            positions first, zeros after them), "other".
        use_cache_branch: the input of Optimum's merged decoder choosing the step with the
            past (True) or without it (False), or None.
    """

    input_ids: str
    attention_mask: str
    position_ids: str | None
    past: tuple[tuple[str, str], ...]
    present: tuple[tuple[str, str], ...]
    logits: str
    axis: int
    cache_shape: tuple
    cache_dtype: np.dtype
    bucketable: bool
    why: str
    kind: str = "concat"
    use_cache_branch: str | None = None

    @property
    def layers(self) -> int:
        return len(self.past)


def roles_of(session: Any) -> DecoderRoles:
    """``find_roles(session)``, found once per session (its ``ValidationError`` too): the
    session's ``run`` buckets, its ``explain`` and its generators share them."""
    found = session.__dict__.get("_decoder_roles")
    if found is None:
        try:
            found = find_roles(session)
        except ValidationError as e:
            found = e
        session._decoder_roles = found
    if isinstance(found, ValidationError):
        raise found
    return found


def find_roles(session: Any) -> DecoderRoles:
    """The roles of ``session``'s inputs and outputs, by name; a ``ValidationError`` names what
    is missing or what else the step needs."""
    inputs = {i.name: i for i in session.get_inputs()}
    outputs = [o.name for o in session.get_outputs()]
    where = f"{ONNX}: generation"

    def need(name: str, what: str) -> str:
        if name not in inputs:
            raise ValidationError(
                f"{where}: the model has no '{name}' input ({what}); its inputs are "
                f"{sorted(inputs)}"
            )
        return name

    ids = need("input_ids", "the token ids")
    mask = need("attention_mask", "the attention mask over past and new tokens")
    positions = "position_ids" if "position_ids" in inputs else None
    # Optimum's merged decoder: an If on this input chooses the step with or without the past.
    use_cache = "use_cache_branch" if "use_cache_branch" in inputs else None
    past, present = _by_layer(inputs, _PAST), _by_layer(outputs, _PRESENT)
    if not past:
        raise ValidationError(
            f"{where}: the model has no past key / value inputs (past_key_values.N.key, "
            f"past.N.key or past_key_N); its inputs are {sorted(inputs)}"
        )
    layers = sorted(past)
    if layers != list(range(len(layers))):
        raise ValidationError(f"{where}: the past inputs' layers are {layers}, not 0..N-1")
    for k in layers:
        for kind in ("key", "value"):
            if kind not in past[k]:
                raise ValidationError(f"{where}: layer {k} has no past {kind} input")
            if kind not in present.get(k, {}):
                raise ValidationError(
                    f"{where}: layer {k} has no present {kind} output (present.{k}.{kind}); "
                    f"the model's outputs are {outputs}"
                )
    if "logits" not in outputs:
        raise ValidationError(f"{where}: the model has no 'logits' output; outputs: {outputs}")
    known = {ids, mask, positions, use_cache} | {n for d in past.values() for n in d.values()}
    other = sorted(set(inputs) - known)
    if other:
        raise ValidationError(
            f"{where}: the model has inputs with no role in a decode step: {other} (the roles "
            "are input_ids, attention_mask, position_ids, use_cache_branch and the past keys and "
            "values)"
        )
    first = inputs[past[0]["key"]]
    shape = tuple(first.shape or ())
    if len(shape) != 4:
        raise ValidationError(
            f"{where}: '{first.name}' must be declared with rank 4 [batch, heads, past, head "
            f"size], got shape {list(shape)}"
        )
    axis = 2
    dtype = session._input_dtypes[[i.name for i in session.get_inputs()].index(first.name)]
    graph = session.model.graph
    concat = _present_is_concat(graph, past, present, axis, merged=use_cache is not None)
    gqa = _present_is_gqa(graph, past, present, mask) if concat is not None else None
    if concat is None:
        kind, bucketable = "concat", positions is not None
        why = (
            "position_ids is an input and each present is Concat(past, new)"
            if bucketable
            else "no position_ids input: the model numbers new tokens from the past's size, so "
            "a padded past would move them"
        )
    elif gqa is None:
        kind, bucketable = "gqa", True
        why = (
            "each present is GroupQueryAttention's over its past alone, and the attention "
            "mask reaches only its seqlens_k and total_sequence_length"
        )
    else:
        kind, bucketable, why = "other", False, concat
    return DecoderRoles(
        ids,
        mask,
        positions,
        tuple((past[k]["key"], past[k]["value"]) for k in layers),
        tuple((present[k]["key"], present[k]["value"]) for k in layers),
        "logits",
        axis,
        shape,
        np.dtype(dtype),
        bucketable,
        why,
        kind,
        use_cache,
    )


def _present_is_gqa(graph: Any, past: dict, present: dict, mask: str) -> str | None:
    """None when every present key / value is output 1 / 2 of a com.microsoft
    GroupQueryAttention whose inputs 3 / 4 are that layer's past (through Identity nodes), no
    other node reads a past, and the attention mask reaches nothing but GroupQueryAttention's
    ``seqlens_k`` and ``total_sequence_length`` (inputs 5 and 6): then the past's rows beyond
    each entry's length, and the mask's padding zeros, change no output but the presents'
    capacity. Else why not."""
    producer = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list] = {}
    for n in graph.node:
        for k, name in enumerate(n.input):
            readers.setdefault(name, []).append((n, k))

    def through(name: str) -> str:
        node = producer.get(name)
        while node is not None and node.op_type == "Identity":
            name = node.input[0]
            node = producer.get(name)
        return name

    for layer, kinds in present.items():
        for slot, kind in ((1, "key"), (2, "value")):
            out = kinds[kind]
            node = producer.get(out)
            while node is not None and node.op_type == "Identity":
                node = producer.get(node.input[0])
            is_gqa = node is not None and node.op_type == "GroupQueryAttention"
            if (
                not is_gqa
                or node.domain != "com.microsoft"
                or through(node.output[slot]) != through(out)
            ):
                return f"'{out}' is not a GroupQueryAttention's present"
            name = past[layer][kind]
            if len(node.input) <= slot + 2 or through(node.input[slot + 2]) != name:
                return f"'{out}''s GroupQueryAttention does not read '{name}'"
            users = [(n, k) for n, k in readers.get(name, [])]
            if users != [(node, slot + 2)]:
                return f"'{name}' is read by other nodes than its GroupQueryAttention"
    # The mask's values and shape flow only into seqlens_k and total_sequence_length.
    seen, todo = set(), [mask]
    outputs = {o.name for o in graph.output}
    while todo:
        name = todo.pop()
        if name in outputs:
            return f"'{mask}' reaches the output '{name}'"
        for n, k in readers.get(name, []):
            if n.op_type == "GroupQueryAttention":
                if k not in (5, 6):
                    return f"'{mask}' reaches a GroupQueryAttention's input {k}"
                continue
            if any(a.type in (5, 10) for a in n.attribute):  # a subgraph
                return f"'{mask}' reaches a node with a subgraph"
            if id(n) not in seen:
                seen.add(id(n))
                todo.extend(o for o in n.output if o)
    return None


def _present_is_concat(
    graph: Any, past: dict, present: dict, axis: int, merged: bool = False
) -> str | None:
    """None when every present output is a Concat of its past input (first) and other values on
    the cache's sequence axis, through Identity nodes, one-input Concats (the TorchScript
    exporter's) and Casts to the past's own type (GPT-J's and CodeGen's), and with ``merged``
    in the then-branch of an If (Optimum's merged decoder); else why not."""
    producer = {o: n for n in graph.node for o in n.output}
    declared = {i.name: i.type.tensor_type.elem_type for i in graph.input}
    cache_type = declared.get(past[0]["key"])

    def passes(node: Any) -> bool:
        if node.op_type == "Cast":
            to = next((a.i for a in node.attribute if a.name == "to"), None)
            return to is not None and to == cache_type
        return node.op_type == "Identity" or (node.op_type == "Concat" and len(node.input) == 1)

    def source(name: str) -> Any:
        node = producer.get(name)
        while node is not None and passes(node):
            name = node.input[0]
            node = producer.get(name)
        return node, name

    for k, kinds in present.items():
        for kind, out in kinds.items():
            node, _ = source(out)
            if node is not None and node.op_type == "If" and merged:
                # Optimum's merged decoder: the cache branch (then) holds the step with its past;
                # its names resolve in the branch first, then outside it.
                branch = next(a.g for a in node.attribute if a.name == "then_branch")
                inner = branch.output[list(node.output).index(out)].name
                producer = {**producer, **{o: n for n in branch.node for o in n.output}}
                node, _ = source(inner)
            if node is None or node.op_type != "Concat":
                return f"'{out}' is not a Concat of the past and the new {kind}s"
            ax = next((a.i for a in node.attribute if a.name == "axis"), None)
            if ax not in (axis, axis - 4):
                return f"'{out}' is a Concat on axis {ax}, not the sequence axis {axis}"
            _, first = source(node.input[0])
            if first != past[k][kind]:
                return f"'{out}' is a Concat whose first input is not '{past[k][kind]}'"
    return None
