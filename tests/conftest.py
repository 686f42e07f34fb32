"""Shared test set-up: deterministic hypothesis profiles.

Profiles: ``ci`` (default, modest example counts) and ``thorough`` (select with
``DML_JAX_HYPOTHESIS_PROFILE=thorough python -m pytest``). Tests that need 64-bit types wrap
their bodies in ``with jax.enable_x64(True):`` themselves.
"""

import os

# Parallel workers (pytest-xdist) share one GPU on a CUDA machine: none may take most of its
# memory up front, as JAX does by default.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

# Most of the suite's time is XLA compiling thousands of small CPU programs; LLVM's optimization
# buys these tiny programs nothing. CPU-only machines (CI) skip its expensive passes and compile
# at LLVM's -O0 (the same IEEE operations, no fast-math either way: about a fifth of the suite's
# time on two cores); a CUDA machine keeps XLA's defaults, so GPU code is compiled as users get it.
if not os.path.exists("/dev/nvidiactl"):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "")
        + " --xla_llvm_disable_expensive_passes=true --xla_backend_optimization_level=0"
    ).strip()

from hypothesis import HealthCheck, settings

_COMMON = {
    "deadline": None,
    "derandomize": True,
    "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large],
    "print_blob": True,
}
settings.register_profile("ci", max_examples=12, **_COMMON)
settings.register_profile("thorough", max_examples=500, **_COMMON)
settings.load_profile(os.environ.get("DML_JAX_HYPOTHESIS_PROFILE", "ci"))
