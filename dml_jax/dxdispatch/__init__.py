"""DxDispatch JSON models: resources, dispatchables and commands, executed with JAX.

A model file (DxDispatch's format) declares typed byte buffers (``resources``), DML operators
(``dispatchables``) and a list of ``commands`` (``dispatch``, ``print``, ``writeFile``).
``load_model`` parses and checks the whole file in plain Python (NumPy only reads data files);
``Executor`` then uploads every resource to a JAX device as a ``uint8`` array, compiles one XLA
program per dispatch command, and runs the commands in order. Every problem with a model is a
``ModelError`` naming the file and the JSON path.

Modules, in the order a model flows through them:

* ``jsonc``: JSON with comments and trailing commas.
* ``context``: ``ModelError``, JSON paths, the load context (memory budget, model folder).
* ``scalars``: JSON values as scalars of a DML data type (FLOAT16 truncation, sequences).
* ``resources``: buffer resources and their initializers (arrays, constants, files).
* ``dispatchables``: DML operators and graphs, compiled, with their bind points.
* ``bindings``: resources bound to bind points under DML's binding rules.
* ``commands``: ``dispatch``, ``print`` and ``writeFile``.
* ``load``: ``load_model``, everything checked before anything runs.
* ``plan``: one dispatch command as one XLA program over the resources' bytes.
* ``output``: printing in DxDispatch's format, ``writeFile``.
* ``run``: device choice, memory budget, the executor and its timing; ``run_model``.
* ``command_line``: what ``dml-jax run`` does with its parsed arguments.
"""

from .context import ModelError
from .jsonc import parse_json_text
from .load import Model, load_model
from .output import format_resource, format_value, write_file
from .resources import Resource
from .run import (
    Executor,
    RunOptions,
    default_memory_budget,
    describe_device,
    run_model,
    select_device,
)
from .scalars import float_to_half_truncated

__all__ = [
    "Executor",
    "Model",
    "ModelError",
    "Resource",
    "RunOptions",
    "default_memory_budget",
    "describe_device",
    "float_to_half_truncated",
    "format_resource",
    "format_value",
    "load_model",
    "parse_json_text",
    "run_model",
    "select_device",
    "write_file",
]
