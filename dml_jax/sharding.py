"""Running compiled operators on arrays sharded with ``jax.sharding`` (GSPMD under ``jax.jit``).

Descriptors never change for distribution: the tensors keep their logical ``Sizes`` and JAX
decides the layout. Two things live here:

- ``normalize_shardings`` checks the ``in_shardings`` / ``out_shardings`` given to
  ``compile_operator`` (one ``jax.sharding.Sharding`` or ``None`` per tensor) before anything is
  traced, so a wrong count or a ``PartitionSpec`` longer than the tensor's rank is a
  ``ValidationError`` rather than a JAX traceback.
- ``run_lowered`` makes the lowerings work on arrays sharded over a mesh with *explicit* axes
  (the default of ``jax.make_mesh``). There JAX types every array with its sharding and asks for
  the output sharding of reshapes that merge or split a sharded dimension, which the lowerings
  (reshape + transpose for DEPTH_TO_SPACE, broadcast + reshape for TILE, ...) do on purpose.
  Rather than teach every lowering about layouts, the operator body runs with those axes
  switched to *auto* (``jax.sharding.auto_axes``), where GSPMD propagates shardings and inserts
  the communication, and the results come back with an explicit sharding chosen by
  ``default_output_spec``. Unsharded and auto-axis inputs take the plain path unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from .errors import ValidationError
from .tensor import TensorDesc


def normalize_shardings(
    shardings: Any, descs: Sequence[TensorDesc | None], paths: Sequence[str], owner: str, role: str
) -> tuple[Sharding | None, ...] | None:
    """Checks shardings given for a list of tensors and returns one entry per tensor.

    Args:
        shardings: ``None`` (let JAX choose), one ``jax.sharding.Sharding`` used for every
            tensor, or a sequence with one ``Sharding`` or ``None`` per tensor in schema order.
        descs: the tensors, in schema order.
        paths: their DML field paths, for messages.
        owner: the operator type (or graph name) that prefixes messages.
        role: ``"in_shardings"`` or ``"out_shardings"``.

    Returns:
        ``None`` when no tensor has a sharding, else a tuple with one entry per tensor.

    Raises:
        ValidationError: wrong count, an entry that is not a ``Sharding``, or a
            ``NamedSharding`` whose ``PartitionSpec`` has more entries than the tensor has
            dimensions (a shorter spec leaves the trailing dimensions unsharded, as in JAX).
    """
    if shardings is None:
        return None
    if isinstance(shardings, Sharding):
        entries = (shardings,) * len(descs)
    elif isinstance(shardings, (list, tuple)):
        entries = tuple(shardings)
        if len(entries) != len(descs):
            raise ValidationError(
                f"{owner}: {role} must have one entry per tensor ({len(descs)}: "
                f"{', '.join(paths)}), got {len(entries)}"
            )
    else:
        raise ValidationError(
            f"{owner}: {role} must be None, a jax.sharding.Sharding or a sequence of them, "
            f"got {type(shardings).__name__}"
        )
    for i, (s, t, path) in enumerate(zip(entries, descs, paths)):
        where = f"{role}[{i}] ({path})"
        if s is None:
            continue
        if not isinstance(s, Sharding):
            got = type(s).__name__
            if isinstance(s, PartitionSpec):
                got = "a PartitionSpec (wrap it in a NamedSharding with a mesh)"
            raise ValidationError(
                f"{owner}: {where} must be a jax.sharding.Sharding or None, got {got}"
            )
        # A graph input that feeds no node has no desc and takes any array.
        if t is not None and isinstance(s, NamedSharding) and len(s.spec) > t.rank:
            raise ValidationError(
                f"{owner}: {where} has a PartitionSpec of {len(s.spec)} entries {s.spec}, "
                f"more than the tensor's {t.rank} dimensions (Sizes {t.sizes})"
            )
    if all(s is None for s in entries):
        return None
    return entries


def _explicit_input_sharding(arrays: Sequence[Any]) -> NamedSharding | None:
    """The sharding of the first input sharded over an explicit mesh axis, if any."""
    for a in arrays:
        try:
            s = jax.typeof(a).sharding
        except TypeError:  # not an array-like JAX understands: the plain path reports it
            continue
        mesh = getattr(s, "mesh", None)
        if mesh is None or mesh.empty or not mesh.explicit_axes:
            continue
        if any(entry is not None for entry in s.spec):
            return s
    return None


def mesh_axes(entry: Any) -> tuple[str, ...]:
    """The mesh axis names of one ``PartitionSpec`` entry (None, a name, or a tuple or list of
    names), in order."""
    if entry is None:
        return ()
    return tuple(entry) if isinstance(entry, tuple | list) else (entry,)


def ways(mesh: Any, entry: Any) -> int:
    """Into how many parts one ``PartitionSpec`` entry splits a dimension over ``mesh``."""
    return math.prod(mesh.shape[a] for a in mesh_axes(entry))


def default_output_spec(sharding: NamedSharding, sizes: Sequence[int]) -> PartitionSpec:
    """The output layout used on explicit meshes: the input's spec where it still fits.

    Dimension ``d`` of the output stays sharded over the mesh axes the input used for
    dimension ``d`` when its size is a multiple of their product (a batch dimension keeps its
    sharding through every operator); otherwise it is replicated. Callers who want another
    layout pass ``out_shardings`` or reshard afterwards.
    """
    mesh = sharding.mesh
    spec = tuple(sharding.spec)
    out = []
    for d, n in enumerate(sizes):
        entry = spec[d] if d < len(spec) else None
        out.append(entry if mesh_axes(entry) and n % ways(mesh, entry) == 0 else None)
    return PartitionSpec(*out)


def run_lowered(
    lowered: Callable[..., tuple],
    arrays: Sequence[Any],
    out_descs: Sequence[TensorDesc],
    out_shardings: Sequence[Any] | None = None,
) -> tuple:
    """Calls an operator body, switching explicit mesh axes to auto around it when needed. The
    outputs take ``out_shardings``' specs where given (the caller's requested layout), else
    ``default_output_spec``."""
    s = _explicit_input_sharding(arrays)
    if s is None:
        return tuple(lowered(*arrays))
    given = out_shardings if out_shardings is not None else (None,) * len(out_descs)
    outs = tuple(
        NamedSharding(
            s.mesh,
            o.spec if isinstance(o, NamedSharding) else default_output_spec(s, t.sizes),
        )
        for t, o in zip(out_descs, given)
    )

    def body(*xs):
        return tuple(lowered(*xs))

    return jax.sharding.auto_axes(body, axes=s.mesh.explicit_axes, out_sharding=outs)(*arrays)
