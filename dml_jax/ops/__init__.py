"""Operator families, one module per DirectML group; importing this package fills the registry.

Every module here is imported (in name order), so a new family module needs no line elsewhere.
The operator classes are reached through the registry (``dml_jax`` re-exports them).
"""

import importlib as _importlib
import pkgutil as _pkgutil

for _module in sorted(m.name for m in _pkgutil.iter_modules(__path__)):
    if not _module.startswith("_"):
        _importlib.import_module(f"{__name__}.{_module}")
