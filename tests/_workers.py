"""For the tests that run a worker script of this folder in a subprocess on the CPU (its
simulated device count is fixed when JAX starts there): ``report`` runs one and returns the
JSON object its last line prints; ``outside`` and ``regions`` read the workers' jaxprs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def report(script: str, timeout: int = 600) -> dict:
    env = dict(os.environ, PYTHONPATH=str(ROOT), JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / script)],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def outside(jaxpr, inside: bool = False) -> int:
    """Kernel calls of ``jaxpr`` (``fastpath.OPAQUE_PRIMITIVES``, at any depth) not nested in a
    ``custom_partitioning`` region: kernels XLA's partitioner would run whole on every device."""
    import jax.extend.core

    from dml_jax import fastpath

    count = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in fastpath.OPAQUE_PRIMITIVES and not inside:
            count += 1
        nested = inside or eqn.primitive.name == "custom_partitioning"
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            count += outside(sub, nested)
    return count


def regions(jaxpr) -> int:
    """``custom_partitioning`` regions of ``jaxpr``, at any depth."""
    import jax.extend.core

    count = 0
    for eqn in jaxpr.eqns:
        count += eqn.primitive.name == "custom_partitioning"
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            count += regions(sub)
    return count


CALLS: list = []  # the shapes the (interpreted) row kernels were called with


def interpreted() -> None:
    """The normalization and softmax kernels in Pallas's interpret mode, so that programs
    holding them compile (and run) on the CPU; each call's rows recorded in ``CALLS``."""
    from dml_jax.kernels import mvn, softmax

    kernel_mvn, kernel_softmax = mvn.mvn_kernel, softmax.softmax_kernel

    def mvn_interpret(x2, v, form, affine=(), interpret=False):
        CALLS.append(list(x2.shape))
        return kernel_mvn(x2, v, form, affine, True)

    def softmax_interpret(x, v, log, interpret=False, hard=False):
        CALLS.append(list(x.shape))
        return kernel_softmax(x, v, log, True, hard)

    mvn.mvn_kernel, softmax.softmax_kernel = mvn_interpret, softmax_interpret


def collective_counts(text: str) -> dict:
    """The collectives of a compiled program's HLO text by kind, those present: how many
    (``dml_jax.hlo.collectives``' counts)."""
    from dml_jax import hlo

    return {k: v["count"] for k, v in hlo.collectives(text).items()}
