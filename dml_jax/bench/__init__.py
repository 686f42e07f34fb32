"""``dml-jax bench``: the benchmark suites on one harness, and the results page built from them.

    dml-jax bench --suite operators            # one suite; writes benchmarks/results/operators.json
    dml-jax bench --suite all --quick          # every suite, each in its own process
    dml-jax bench --report                     # benchmarks/RESULTS.md from the suites' JSON

Every suite (``dml_jax.bench.suites.<name>``) times with ``harness.Timer`` (the median of
samples, each many dispatches then one sync; the cold time apart) and writes one JSON report:
suite, device, jax version, date, commit, rows, and what it skipped and why (no PyTorch, one
device). ``--quick`` runs tiny shapes on any backend (what the tests run). The results page
(``page.render``) has one table per suite, headed by its report's device, jax, date and commit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from .harness import SUITES, Run, Timer, environment, suite_module

__all__ = ["SUITES", "Run", "Timer", "environment", "main", "suite_module"]

DEFAULT_OUT = "benchmarks/results"
DEFAULT_PAGE = "benchmarks/RESULTS.md"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dml-jax bench",
        description="Benchmark suites on one harness, and the results page built from them.",
    )
    p.add_argument(
        "--suite",
        help=f"suite(s) to run, comma-separated, or 'all': {', '.join(SUITES)}",
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="write the results page (--page) from the JSON under --out (after any --suite)",
    )
    p.add_argument("--quick", action="store_true", help="tiny shapes, any backend (the tests)")
    p.add_argument(
        "--out", default=DEFAULT_OUT, help="folder of the suites' JSON (default %(default)s)"
    )
    p.add_argument("--page", default=DEFAULT_PAGE, help="results page (default %(default)s)")
    p.add_argument("--samples", type=int, default=5, help="timed samples per measurement")
    p.add_argument(
        "--sample-s",
        type=float,
        default=None,
        help="target seconds per sample (default 0.05; 0.005 with --quick)",
    )
    p.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no further case after this many seconds (the rest is reported skipped)",
    )
    p.add_argument("--no-torch", action="store_true", help="skip PyTorch")
    p.add_argument(
        "--resume",
        action="store_true",
        help="a further part of the run whose report is on disk (same commit, card, versions "
        "and options but --only): its rows are kept and the cases they hold not run again",
    )
    return p


def _common_argv(args: argparse.Namespace) -> list[str]:
    """The shared options of ``args`` as a command line (for ``--suite all``'s processes)."""
    out = ["--out", args.out, "--samples", str(args.samples)]
    if args.quick:
        out.append("--quick")
    if args.sample_s is not None:
        out += ["--sample-s", str(args.sample_s)]
    if args.budget_s is not None:
        out += ["--budget-s", str(args.budget_s)]
    if args.no_torch:
        out.append("--no-torch")
    return out


def main(argv: list[str] | None = None) -> int:
    """Runs ``dml-jax bench``; returns the exit status (2: a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _parser()
    try:
        first, rest = parser.parse_known_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    names = []
    if first.suite:
        names = list(SUITES) if first.suite == "all" else first.suite.split(",")
        unknown = [n for n in names if n not in SUITES]
        if unknown:
            print(f"dml-jax bench: unknown suite {unknown[0]!r}; known: {', '.join(SUITES)}",
                  file=sys.stderr)  # fmt: skip
            return 2
    elif not first.report:
        parser.print_usage(sys.stderr)
        print("dml-jax bench: give --suite NAME and/or --report", file=sys.stderr)
        return 2
    if len(names) > 1:
        if rest:
            print(f"dml-jax bench: {rest[0]!r} applies to one suite only", file=sys.stderr)
            return 2
        status = 0
        for name in names:  # each suite in its own process: memory and caches start empty
            cmd = [sys.executable, "-m", "dml_jax.bench", "--suite", name, *_common_argv(first)]
            print(f"== {' '.join(cmd[1:])}", flush=True)
            status = max(status, subprocess.run(cmd, check=False).returncode)
    elif names:
        status = _run_one(names[0], argv)
    else:
        status = 0
    if first.report and status != 2:
        from .page import write_page

        path = write_page(Path(first.out), Path(first.page))
        print(f"wrote {path}")
    return status


def _run_one(name: str, argv: list[str]) -> int:
    module = suite_module(name)
    parser = _parser()
    module.add_arguments(parser.add_argument_group(f"suite {name}"))
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    # JAX and PyTorch share the GPU: without this JAX takes 75% of its memory up front.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    path = Path(args.out) / f"{name}.json"
    run = Run(name, args, path)
    env = run.report
    print(f"dml-jax bench --suite {name} on {env['device']} ({env['backend']}), jax {env['jax']},"
          f" commit {env['commit']}{' (quick)' if run.quick else ''}", flush=True)  # fmt: skip
    try:
        status = module.run(run) or 0
    finally:
        run.write()
    print(f"wrote {path}")
    return status
