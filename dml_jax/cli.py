"""The ``dml-jax`` command line: run DxDispatch JSON models on JAX, list operators, benchmark.

    dml-jax run [MODEL.json] [-i N] [-r N] [-t MS] [-w N] [-v L] [-I MS] [--device D]
    dml-jax list-operators [--support | --fast-paths]
    dml-jax example OPERATOR
    dml-jax bench [...]

Exit codes: 0 success, 1 an error in the model or its data (one line naming the file and the
JSON path; ``--debug`` adds the traceback), 2 a usage error.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "default.json")


def _at_least(convert, minimum, what: str):
    """An argparse type: ``convert(text)`` (int or float), which must be >= ``minimum``."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'") from None
        if not value >= minimum:  # also rejects NaN
            raise argparse.ArgumentTypeError(f"expected {what}, got {text}")
        return value

    return parse


_positive_int = _at_least(int, 1, "a positive integer")
_non_negative_int = _at_least(int, 0, "an integer >= 0")
_non_negative_float = _at_least(float, 0, "a number >= 0")


_SIZE_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "KB": 1000,
    "KIB": 1 << 10,
    "M": 1 << 20,
    "MB": 1000**2,
    "MIB": 1 << 20,
    "G": 1 << 30,
    "GB": 1000**3,
    "GIB": 1 << 30,
    "T": 1 << 40,
    "TB": 1000**4,
    "TIB": 1 << 40,
}


def _memory_size(text: str) -> int:
    """``--max-memory``: bytes, with an optional unit (``512M``, ``2GiB``, ``1.5G``); 0: no
    limit."""
    number = text.strip().upper().rstrip("BIKMGT")
    unit = text.strip().upper()[len(number) :]
    try:
        value = float(number) * _SIZE_UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(
            f"expected a size such as 4G, 512MiB or 1000000, got '{text}'"
        ) from None
    if not 0 <= value < 2**64:
        raise argparse.ArgumentTypeError(f"expected a size >= 0, got '{text}'")
    return int(value)


def _verbosity(text: str) -> int:
    value = _non_negative_int(text)
    if value > 2:
        raise argparse.ArgumentTypeError(f"expected 0, 1 or 2, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (DxDispatch's option names for timing)."""
    parser = argparse.ArgumentParser(
        prog="dml-jax",
        description="Run DirectML operator models (DxDispatch's JSON format) on JAX/XLA.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    run = sub.add_parser(
        "run",
        help="run a DxDispatch JSON model",
        description="Run a DxDispatch JSON model: allocate its resources, "
        "compile its dispatchables and execute its commands.",
    )
    run.add_argument(
        "model",
        nargs="?",
        metavar="MODEL.json",
        help="the model file (default: the bundled example); an .onnx file runs the ONNX "
        "model once with random inputs (or --input files) and prints its outputs",
    )
    run.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an .onnx model's input from a .npy file (repeatable; others are random)",
    )
    run.add_argument(
        "-i",
        "--dispatch_iterations",
        type=_positive_int,
        default=1,
        metavar="N",
        help="timing samples per dispatch command (default 1)",
    )
    run.add_argument(
        "-r",
        "--dispatch_repeat",
        type=_positive_int,
        default=1,
        metavar="N",
        help="dispatches per sample; each sample is divided by N (default 1)",
    )
    run.add_argument(
        "-t",
        "--milliseconds_to_run",
        type=_non_negative_float,
        default=None,
        metavar="MS",
        help="take samples until MS milliseconds passed (overrides -i)",
    )
    run.add_argument(
        "-w",
        "--warmup_samples",
        type=_non_negative_int,
        default=1,
        metavar="N",
        help="at most N leading samples are cold and left out of the hot statistics (default 1)",
    )
    run.add_argument(
        "-v",
        "--timing_verbosity",
        type=_verbosity,
        default=0,
        metavar="L",
        help="0: one line per dispatch; 1: cold/hot statistics and initialize "
        "times; 2: also every iteration",
    )
    run.add_argument(
        "-I",
        "--dispatch_interval",
        type=_non_negative_float,
        default=0.0,
        metavar="MS",
        help="minimum milliseconds between samples (default 0)",
    )
    run.add_argument(
        "--device",
        default=None,
        metavar="D",
        help="JAX device: cpu, gpu, tpu or an index into jax.devices() "
        "(default: JAX's default device)",
    )
    run.add_argument(
        "--feature_level",
        default=None,
        metavar="FL",
        help="DML feature level to validate operators at, e.g. 5_0 (default: the newest)",
    )
    run.add_argument(
        "--bytes-as-chars",
        action="store_true",
        help="print INT8/UINT8 resources as characters, as DxDispatch does (default: numbers)",
    )
    run.add_argument(
        "--max-memory",
        type=_memory_size,
        default=None,
        metavar="SIZE",
        help="refuse models whose resources (or one dispatch's tensors next to "
        "them) need more than SIZE bytes, e.g. 2G; 0: no limit (default: 80%% "
        "of the device's memory, or half of the machine's for the CPU)",
    )
    run.add_argument(
        "--allow-outside-paths",
        action="store_true",
        help="let sourcePath and writeFile targets leave the model's folder",
    )
    run.add_argument(
        "--overwrite", action="store_true", help="let writeFile replace existing files"
    )
    run.add_argument(
        "--explain",
        action="store_true",
        help="for an .onnx model: first print, per ONNX node, the DML operators it became "
        "(jax: a JAX lowering where DirectML has no operator; folded; view; function body)",
    )
    _cache_dir_option(run)
    run.add_argument("--debug", action="store_true", help="show the Python traceback of errors")

    listing = sub.add_parser(
        "list-operators",
        help="list the supported DML operators",
        description="List the DML operators dml_jax supports, with the feature "
        "level each was introduced at.",
    )
    listing.add_argument(
        "--support",
        action="store_true",
        help="also print each operator's support table (feature level, dimension counts, "
        "data types)",
    )
    listing.add_argument(
        "--fast-paths",
        action="store_true",
        help="instead, print each operator's registered CUDA fast paths (Pallas kernels, cuDNN) "
        "in the order they are tried, and the graph epilogues",
    )
    example = sub.add_parser(
        "example",
        help="print an operator's example as a DxDispatch model",
        description="Print the example of a DML operator as a complete DxDispatch JSON model "
        "(save it and pass it to 'dml-jax run').",
    )
    example.add_argument(
        "operator", help="the operator, e.g. ELEMENT_WISE_ADD or DML_OPERATOR_TILE"
    )
    convert = sub.add_parser(
        "convert",
        help="write an ONNX model as a DML graph in DxDispatch's JSON format",
        description="Import an ONNX model onto DirectML operators and write it as one DML_GRAPH "
        "dispatchable (inputs and weights as .npy files beside OUT.json), runnable by "
        "'dml-jax run OUT.json' and by DirectML's DxDispatch.",
    )
    convert.add_argument("model", metavar="MODEL.onnx", help="the ONNX model")
    convert.add_argument("out", metavar="OUT.json", help="the DxDispatch model to write")
    convert.add_argument(
        "--free-dimension",
        action="append",
        default=[],
        metavar="NAME=N",
        help="the size of a symbolic dimension (repeatable; others are 1)",
    )
    convert.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input's values from a .npy file (repeatable; others are random)",
    )
    convert.add_argument("--debug", action="store_true", help="show the Python traceback")
    gen = sub.add_parser(
        "generate",
        help="generate tokens with an ONNX decoder step (past and present key / values)",
        description="Greedy, sampled or beam search generation with a decoder exported as one "
        "step with its cache (dml_jax.onnx.generate), or an onnxruntime-genai model folder "
        "(its genai_config.json's end id and search options the defaults): prints the "
        "generated ids of each prompt, and on stderr a progress line of tokens/s.",
    )
    gen.add_argument(
        "model",
        metavar="MODEL.onnx",
        help="the decoder step, or a folder with a genai_config.json",
    )
    gen.add_argument(
        "--prompt-ids",
        action="append",
        required=True,
        metavar="ID,ID,...",
        help="a prompt's token ids (repeat for a batch; shorter prompts are left-padded)",
    )
    gen.add_argument("--max-new-tokens", type=_positive_int, default=64, metavar="N")
    gen.add_argument("--do-sample", action="store_true", help="sample (default: greedy)")
    gen.add_argument("--top-k", type=_non_negative_int, metavar="K")
    gen.add_argument("--top-p", type=float, metavar="P")
    gen.add_argument("--temperature", type=float, metavar="T")
    gen.add_argument(
        "--repetition-penalty",
        type=float,
        metavar="P",
        help="divide (multiply, where negative) a repeated token's logit by P",
    )
    gen.add_argument(
        "--min-length",
        type=_non_negative_int,
        metavar="N",
        help="no end token before a sequence holds N tokens, its prompt included",
    )
    gen.add_argument(
        "--no-repeat-ngram-size",
        type=_non_negative_int,
        metavar="N",
        help="no n-gram of N tokens twice in a sequence",
    )
    gen.add_argument(
        "--num-beams",
        type=_positive_int,
        metavar="N",
        help="beam search with N beams a prompt (default 1: none)",
    )
    gen.add_argument(
        "--num-return-sequences",
        type=_positive_int,
        metavar="N",
        help="with beams: the N best sequences of each prompt, a line each",
    )
    gen.add_argument(
        "--length-penalty",
        type=float,
        metavar="P",
        help="with beams: a sequence's score is its log-probability over its length to P",
    )
    gen.add_argument(
        "--no-early-stopping",
        action="store_true",
        help="with beams: end a prompt only once no beam can beat its finished sequences",
    )
    gen.add_argument(
        "--ngram-size",
        type=int,
        metavar="N",
        help="speculative decoding: drafts from earlier occurrences of the last N tokens "
        "(2 to 16; one prompt)",
    )
    gen.add_argument(
        "--max-draft-tokens",
        type=int,
        metavar="K",
        help="with --ngram-size: at most K drafts a round (1 to 16, default 4)",
    )
    gen.add_argument("--eos-token-id", type=int, action="append", metavar="ID")
    gen.add_argument("--seed", type=int)
    gen.add_argument("--no-buckets", action="store_true", help="compile every past length exactly")
    gen.add_argument("--device", default=None, help="cpu or gpu (default: JAX's default)")
    _cache_dir_option(gen)
    gen.add_argument("--debug", action="store_true", help="show the Python traceback")
    sub.add_parser(
        "bench", help="run the benchmarks (options: dml-jax bench --help)", add_help=False
    )
    return parser


def _cache_dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cache-dir",
        default=None,
        metavar="DIR",
        help="keep the compiled programs in DIR and take them from there in later runs "
        "(JAX's persistent compilation cache; GPU autotuning results too)",
    )


def _use_cache_dir(path: str | None) -> str | None:
    """JAX's persistent compilation cache in ``path`` (made if missing), for every program
    however quickly it compiled and however small: a later process with the same model, inputs
    and versions compiles nothing XLA has already compiled. None where ``path`` is None or the
    cache is set; else the error line."""
    if path is None:
        return None
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        return f"error: --cache-dir: {path}: {e.strerror or e}"
    if not os.access(path, os.W_OK):
        return f"error: --cache-dir: {path}: not writable"
    import jax

    jax.config.update("jax_compilation_cache_dir", os.path.abspath(path))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    return None


def _generate(args: argparse.Namespace) -> int:
    import time

    from .errors import ValidationError

    try:
        prompts = [[int(t) for t in p.split(",") if t.strip()] for p in args.prompt_ids]
    except ValueError:
        print(
            f"error: --prompt-ids: expected ids such as 1,2,3, got {args.prompt_ids}",
            file=sys.stderr,
        )
        return 2
    try:
        import jax

        from .onnx import InferenceSession
        from .onnx.generation import Generator, GeneratorParams, Model

        if os.path.isdir(args.model):  # an onnxruntime-genai folder: its config's defaults
            session = Model(args.model, device=args.device)
        else:
            session = InferenceSession(args.model, device=args.device)
        given = {
            name: getattr(args, name)
            for name in ("top_k", "top_p", "temperature", "repetition_penalty", "min_length",
                         "no_repeat_ngram_size", "num_beams", "num_return_sequences",
                         "length_penalty", "eos_token_id", "seed", "ngram_size",
                         "max_draft_tokens")
            if getattr(args, name) is not None
        }  # fmt: skip
        for flag, name, value in ((args.do_sample, "do_sample", True),
                                  (args.no_early_stopping, "early_stopping", False),
                                  (args.no_buckets, "buckets", False)):  # fmt: skip
            if flag:
                given[name] = value
        params = GeneratorParams(
            session,
            max_length=max(map(len, prompts), default=0) + args.max_new_tokens,
            batch_size=len(prompts),
            **given,
        )
        g = Generator(session, params)
        t0 = time.perf_counter()
        g.append_tokens(prompts)
        jax.block_until_ready(g.get_next_tokens())
        first = time.perf_counter() - t0
        t1 = time.perf_counter()
        more = True
        while more:
            more = g.generate_bucket()
            done = g.generated.shape[1]  # (a sync: the progress line is true)
            rate = len(prompts) * (done - 1) / max(time.perf_counter() - t1, 1e-9)
            print(f"\r{done} tokens, {rate:.1f} tokens/s", end="", file=sys.stderr, flush=True)
        total = time.perf_counter() - t1
    except (ValidationError, OSError, ImportError) as e:
        if args.debug:
            raise
        print(f"error: {args.model}: {e}", file=sys.stderr)
        return 1
    out = g.generated
    print(
        f"\r{out.shape[1]} tokens a prompt: first token {first * 1e3:.1f} ms, then "
        f"{len(prompts) * (out.shape[1] - 1) / max(total, 1e-9):.1f} tokens/s "
        f"(compiles included; {g.compiles} programs)",
        file=sys.stderr,
    )
    if params.ngram_size:
        stats = g.get_speculative_stats()
        print(
            f"speculative: {stats['draft_tokens_accepted']} of {stats['draft_tokens_proposed']} "
            f"drafts accepted, {stats['target_forward_passes']} model calls for "
            f"{stats['tokens_emitted']} tokens",
            file=sys.stderr,
        )
    for row in out:  # a line a prompt (with beams, a line a sequence, a prompt's in order)
        print(",".join(str(int(t)) for t in row))
    return 0


def _convert(args: argparse.Namespace) -> int:
    import numpy as np

    from .errors import ValidationError
    from .onnx.convert import write_dxdispatch

    try:
        free = {}
        for item in args.free_dimension:
            name, sep, value = item.partition("=")
            if not sep or not name or not value.isdigit():
                print(f"error: --free-dimension: expected NAME=N, got '{item}'", file=sys.stderr)
                return 2
            free[name] = int(value)
        inputs = {name: np.load(path) for name, path in _onnx_inputs(args.input).items()}
        files = write_dxdispatch(args.model, args.out, free_dimensions=free, inputs=inputs)
    except (ValidationError, OSError, ValueError, ImportError) as e:
        if args.debug:
            raise
        print(f"error: {args.model}: {e}", file=sys.stderr)
        return 1
    print(f"wrote {files[0]} and {len(files) - 1} .npy files")
    return 0


def _list_operators(show_support: bool, show_fast_paths: bool = False) -> int:
    from .catalog import fast_path_lines, operator_lines

    if show_support and show_fast_paths:
        print("error: list-operators: --support and --fast-paths are exclusive", file=sys.stderr)
        return 2
    for line in fast_path_lines() if show_fast_paths else operator_lines(show_support):
        print(line)
    return 0


def _example(name: str) -> int:
    from .catalog import example_model
    from .errors import ValidationError
    from .registry import parse_operator_type

    try:
        spec = parse_operator_type(name)
    except ValidationError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(json.dumps(example_model(spec), indent=2))
    return 0


def _bench(argv: list[str]) -> int:
    try:
        from .bench import main as bench_main
    except ImportError:
        print(
            "error: the benchmark harness (dml_jax.bench) is not available in this installation",
            file=sys.stderr,
        )
        return 2
    return bench_main(argv)


def _run(args: argparse.Namespace) -> int:
    from .dxdispatch import RunOptions
    from .dxdispatch.command_line import run_command

    options = RunOptions(
        dispatch_iterations=args.dispatch_iterations,
        dispatch_repeat=args.dispatch_repeat,
        milliseconds_to_run=args.milliseconds_to_run,
        warmup_samples=args.warmup_samples,
        timing_verbosity=args.timing_verbosity,
        dispatch_interval=args.dispatch_interval,
        bytes_as_chars=args.bytes_as_chars,
        max_memory=args.max_memory,
        allow_outside_paths=args.allow_outside_paths,
        overwrite=args.overwrite,
    )
    return run_command(
        DEFAULT_MODEL if args.model is None else args.model,
        options,
        bundled=args.model is None,
        device=args.device,
        feature_level=args.feature_level,
        debug=args.debug,
        onnx_inputs=_onnx_inputs(args.input),
        explain=args.explain,
    )


def _onnx_inputs(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"error: --input: expected NAME=FILE.npy, got '{item}'")
        out[name] = path
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``dml-jax`` and ``python -m dml_jax``; returns the exit code."""
    try:
        return _main(list(sys.argv[1:] if argv is None else argv))
    except BrokenPipeError:
        # The reader went away (``dml-jax list-operators | head``): stop quietly, as Unix
        # tools do, and keep Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


def _main(argv: list[str]) -> int:
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse reports usage errors (and --help) by exiting
        return int(e.code or 0)
    if args.command == "list-operators":
        return _list_operators(args.support, args.fast_paths)
    if args.command == "example":
        return _example(args.operator)
    if args.command == "convert":
        return _convert(args)
    if args.command in ("run", "generate"):
        error = _use_cache_dir(args.cache_dir)
        if error:
            print(error, file=sys.stderr)
            return 2
    if args.command == "generate":
        return _generate(args)
    return _run(args)


if __name__ == "__main__":
    sys.exit(main())
