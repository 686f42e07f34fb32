"""Generation with decoder models: onnxruntime-genai's ``Generator`` / ``GeneratorParams`` over an
``InferenceSession`` of one decode step with its key / value cache.

A decoder export is one step: ``input_ids`` and an ``attention_mask`` over past and new tokens
in, optionally ``position_ids``, and per layer a past key and value [batch, kv heads, past,
head size]; ``logits`` and per layer a present key and value out, the present being the past
with the new tokens' keys after it (``Concat`` on the sequence axis). ``roles.find_roles`` finds
those inputs and outputs by the names the exporters write and checks the cache pattern in the
graph.

The generator keeps the cache on the device in one buffer of ``max_length`` positions (rounded
up to a bucket), every layer's keys and values stacked. Each step writes the previous token's
keys and values into the buffer (one ``lax.dynamic_update_slice`` for all layers), then reads
each layer's first ``L`` positions as its past and runs the session's program for that past
length; the buffer is donated, so the write is in place and nothing is copied back to the host.
The tokens stay on the device.

Buckets: where the step's graph shows the padding masked, the past length ``L`` is rounded up to a bucket
(powers of two by default, ``GeneratorParams.buckets``) and the positions between the cache's
length and ``L`` are masked out by the attention mask, so a decode loop over 2,048 positions
compiles a handful of programs, not one per token. That holds when the model takes
``position_ids`` (so no position is computed from the past's size) and its attention mask covers
past and new tokens; then the padded keys only ever meet a zero in the attention mask, and a
padded step's tokens equal the exact step's (tests/test_generation.py). Otherwise every past
length is its own program (``explain()`` says why). Prompts are left-padded to the longest (and,
with buckets, to a bucket), their padding masked, positions counted from each row's first real
token as Hugging Face's ``generate`` counts them.

A model-builder step (each present a com.microsoft GroupQueryAttention's, ``roles.kind``
"gqa") keeps each entry's positions first in its cache: the prompts enter the model
right-padded, the whole buffer is the past, the presents are the next buffer, and the mask
(ones on each entry's positions and the new one) is what is bucketed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ValidationError
from .buckets import MIN_BUCKET, bucket_length, bucket_sizes
from .elements import ONNX, graph_dtype
from .roles import DecoderRoles, find_roles, roles_of  # noqa: F401 (find_roles: the API's)

# The XLA option by which sessions put matrix products on cuBLAS (``GPU_COMPILER_OPTIONS``).
TRITON_GEMM = "xla_gpu_enable_triton_gemm"
_NEVER = 2**31 - 1  # a run of steps in which no row ended: the length it reports


@dataclass
class GeneratorParams:
    """What to generate (onnxruntime-genai's ``GeneratorParams`` and its search options).

    Attributes:
        max_length: the total length, prompt included, at which a sequence stops.
        batch_size: the number of prompts.
        do_sample: sample (else greedy: the most probable token).
        top_k: sample among the ``top_k`` most probable tokens (0: all).
        top_p: sample among the most probable tokens whose probabilities add up to ``top_p``.
        temperature: the logits are divided by it before sampling.
        eos_token_id: an int or a list of ints ending a sequence (None: none).
        pad_token_id: the id put before shorter prompts and after a finished sequence.
        seed: the sampling's random seed.
        buckets: the past lengths programs are compiled for: None (powers of two from 16, where
            the step's graph shows the padding masked), False (every length exact), or a list of lengths.
        steps_per_dispatch: ``generate_until_done``'s decode steps a dispatch (not
            onnxruntime-genai's): n > 1 (16 by default), runs of n steps inside a bucket as
            one ``lax.fori_loop`` of a fixed count (no condition for the host to read between
            them, the arguments passed once), the rest a step each (a second program a
            bucket); 1, a step each. Where the host's work a dispatch bounds the steps (a small
            model) runs are several times faster (benchmarks/experiments/README.md,
            ``decode_step_gpu.py``).
    """

    session: Any = None
    max_length: int = 256
    batch_size: int = 1
    do_sample: bool = False
    top_k: int = 0
    top_p: float = 1.0
    temperature: float = 1.0
    eos_token_id: Any = None
    pad_token_id: int = 0
    seed: int = 0
    buckets: Any = None
    steps_per_dispatch: int = 16

    def __post_init__(self) -> None:
        _check_params(self)

    def set_search_options(self, **options: Any) -> None:
        """onnxruntime-genai's ``set_search_options(max_length=..., top_k=..., ...)``."""
        for k, v in options.items():
            if not hasattr(self, k) or k == "session":
                raise ValidationError(f"{ONNX}: generation: unknown search option '{k}'")
            setattr(self, k, v)
        _check_params(self)


def _check_params(p: GeneratorParams) -> None:
    where = f"{ONNX}: generation"
    if not isinstance(p.max_length, int | np.integer) or p.max_length < 2:
        raise ValidationError(
            f"{where}: max_length must be an int of at least 2, got {p.max_length!r}"
        )
    if not isinstance(p.batch_size, int | np.integer) or p.batch_size < 1:
        raise ValidationError(f"{where}: batch_size must be a positive int, got {p.batch_size!r}")
    if not isinstance(p.top_k, int | np.integer) or p.top_k < 0:
        raise ValidationError(f"{where}: top_k must be an int >= 0, got {p.top_k!r}")
    if not 0.0 < float(p.top_p) <= 1.0:
        raise ValidationError(f"{where}: top_p must be in (0, 1], got {p.top_p!r}")
    if not float(p.temperature) > 0.0 or not math.isfinite(float(p.temperature)):
        raise ValidationError(f"{where}: temperature must be > 0, got {p.temperature!r}")
    bucket_sizes(p.buckets, True, where)
    n = p.steps_per_dispatch
    if not isinstance(n, int | np.integer) or isinstance(n, bool) or n < 1:
        raise ValidationError(f"{where}: steps_per_dispatch must be an int >= 1, got {n!r}")


def _eos_ids(eos: Any) -> tuple[int, ...]:
    if eos is None:
        return ()
    if isinstance(eos, int | np.integer):
        return (int(eos),)
    return tuple(int(e) for e in eos)


def select_tokens(
    logits: Any, key: Any, do_sample: bool, top_k: int, top_p: float, temperature: float
) -> Any:
    """The next token of each row of ``logits`` [batch, vocabulary]: the argmax, or a sample
    after temperature, top-k and top-p (the smallest set of most probable tokens whose
    probability reaches ``top_p``; at least one)."""
    logits = logits.astype(jnp.float32)
    if not do_sample:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    logits = logits / temperature
    vocab = logits.shape[-1]
    if 0 < top_k < vocab:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]
        logits = jnp.where(logits < kth, -jnp.inf, logits)
    if top_p < 1.0:
        order = jnp.argsort(-logits, axis=-1)
        ranked = jnp.take_along_axis(logits, order, axis=-1)
        probs = jax.nn.softmax(ranked, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # the probability of the tokens ranked above
        drop = before >= top_p
        drop = drop.at[:, 0].set(False)
        ranked = jnp.where(drop, -jnp.inf, ranked)
        logits = (
            jnp.full_like(logits, -jnp.inf)
            .at[jnp.arange(logits.shape[0])[:, None], order]
            .set(ranked)
        )
    return jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)


class DecodeSteps:
    """The compiled prefill and decode steps of one session for one way of choosing tokens,
    shared by the generators of that session (``DecodeSteps.of``): each program is compiled
    once per prompt bucket and past bucket, however many generators run.

    Attributes:
        compiles: the step functions traced and compiled so far.
    """

    def __init__(self, session: Any, roles: DecoderRoles, sampling: tuple, eos: tuple, pad: int):
        self.session = session
        self.roles = roles
        self.sampling = sampling  # (do_sample, top_k, top_p, temperature)
        self._eos = eos
        self.pad = pad
        self._steps: dict[tuple, Any] = {}
        self._prefills: dict[tuple, Any] = {}
        self._ready: set[tuple] = set()  # steps compiled (run, or compiled ahead)
        self.compiles = 0

    @classmethod
    def of(cls, session: Any, roles: DecoderRoles, params: GeneratorParams) -> DecodeSteps:
        """The session's steps for ``params``' way of choosing tokens (made on first use)."""
        sampling = (
            bool(params.do_sample),
            int(params.top_k),
            float(params.top_p),
            float(params.temperature),
        )
        eos, pad = _eos_ids(params.eos_token_id), int(params.pad_token_id)
        cache = session.__dict__.setdefault("_decode_steps", {})
        key = (sampling, eos, pad)
        if key not in cache:
            cache[key] = cls(session, roles, sampling, eos, pad)
        return cache[key]

    def _cache_shape(self, batch: int, length: int) -> tuple[int, ...]:
        shape = list(self.roles.cache_shape)
        declared = {i.name: i.shape for i in self.session.get_inputs()}[self.roles.past[0][0]]
        for k in (1, 3):
            if not isinstance(shape[k], int):
                raise ValidationError(
                    f"{ONNX}: generation: '{self.roles.past[0][0]}' dimension {k} must be "
                    f"fixed (heads, head size), got {declared[k]!r}"
                )
        shape[0], shape[self.roles.axis] = batch, length
        return tuple(shape)

    # -- the steps ----------------------------------------------------------------------

    def _inputs(self, ids, mask, positions, past, use_cache: bool = True) -> list:
        """The step's inputs in the session's input order (a merged decoder's
        ``use_cache_branch``: ``use_cache``, which its program is specialised on)."""
        r = self.roles
        by_name = {r.input_ids: ids, r.attention_mask: mask}
        if r.use_cache_branch is not None:
            by_name[r.use_cache_branch] = jnp.array([use_cache])
        if r.position_ids is not None:
            by_name[r.position_ids] = positions
        for (k, v), (pk, pv) in zip(r.past, zip(past[::2], past[1::2])):
            by_name[k], by_name[v] = pk, pv
        return [by_name[i.name] for i in self.session.get_inputs()]

    def _program(
        self, batch: int, seq: int, past: int, mask: int | None = None, use_cache: bool = True
    ) -> Any:
        """The session's program for ``seq`` new tokens over a past of ``past`` positions and
        a mask of ``mask`` (default: past + seq)."""
        r = self.roles
        shapes = []
        for i in self.session.get_inputs():
            if i.name in (r.input_ids, r.position_ids):
                shapes.append((batch, seq))
            elif i.name == r.attention_mask:
                shapes.append((batch, past + seq if mask is None else mask))
            elif i.name == r.use_cache_branch:
                shapes.append((1,))
            else:
                shapes.append(self._cache_shape(batch, past))
        values = {}
        if r.use_cache_branch is not None:
            values[r.use_cache_branch] = np.array([use_cache])
        return self.session.program(shapes, values)

    def _run_model(self, program, params, ids, mask, positions, past, use_cache=True) -> tuple:
        from .. import fastpath

        inputs = self._inputs(ids, mask, positions, past, use_cache)
        with fastpath.target_platform(fastpath.platform_of(self.session._run_device)):
            outs = program.apply(params, *inputs)
        names = [o.name for o in self.session.get_outputs()]
        out = dict(zip(names, outs))
        logits = out[self.roles.logits]
        presents = [out[n] for pair in self.roles.present for n in pair]
        return logits, presents

    def _select(self, logits: Any, key: Any) -> Any:
        return select_tokens(logits, key, *self.sampling)

    def _split(self, key: Any) -> tuple[Any, Any]:
        """A step's key and the next one: split where tokens are sampled; greedy selection
        reads no key, so it stays as it is (no random-number kernels a step)."""
        if not self.sampling[0]:
            return key, key
        return jax.random.split(key)

    def _next(self, logits: Any, key: Any, done: Any, tokens: Any, at: Any) -> tuple[Any, Any]:
        """The next token of each row chosen from ``logits`` [batch, vocabulary] (the pad id
        where a row is done) and written into ``tokens`` at column ``at``; the tokens and the
        rows done after it (an end token)."""
        token = jnp.where(done, jnp.int32(self.pad), self._select(logits, key))
        for e in self._eos:
            done = done | (token == e)
        return jax.lax.dynamic_update_slice_in_dim(tokens, token[:, None], at, axis=1), done

    def _prefill_fn(self, batch: int, seq: int, capacity: int) -> Any:
        """The prefill for prompts padded to ``seq`` into a cache of ``capacity`` positions:
        (params, tokens, mask, key) -> (cache, pending, tokens, done), the cache made on the
        device, its first ``seq`` positions the prompts' keys and values, the first token at
        ``seq``."""
        entry = self._prefills.get((batch, seq, capacity))
        if entry is not None:
            return entry
        if self.roles.kind == "gqa":
            return self._gqa_prefill_fn(batch, seq, capacity)
        # (a merged decoder's prefill takes its branch without the past, as Optimum's does)
        program = self._program(batch, seq, 0, use_cache=False)
        r = self.roles
        axis = r.axis
        dtype = graph_dtype(r.cache_dtype)

        def prefill(params, tokens, mask, key):
            ids = jax.lax.slice_in_dim(tokens, 0, seq, axis=1)
            mask = jax.lax.slice_in_dim(mask, 0, seq, axis=1)
            positions = jnp.where(mask > 0, jnp.cumsum(mask, axis=1) - 1, 1).astype(jnp.int32)
            empty = [jnp.zeros(self._cache_shape(batch, 0), dtype)] * (2 * r.layers)
            logits, presents = self._run_model(program, params, ids, mask, positions, empty, False)
            # every layer's keys and values in one buffer (``_step_body``)
            cache = jax.lax.dynamic_update_slice_in_dim(
                jnp.zeros((2 * r.layers, *self._cache_shape(batch, capacity)), dtype),
                jnp.stack([p.astype(dtype) for p in presents]), 0, axis + 1,
            )  # fmt: skip
            tokens, done = self._next(logits[:, -1], key, jnp.zeros((batch,), bool), tokens, seq)
            # The last prompt position again, as the first step's pending keys and values.
            last = jax.lax.slice_in_dim(cache, seq - 1, seq, axis=axis + 1)
            return cache, last, tokens, done

        fn = jax.jit(prefill, compiler_options=self._options())
        entry = self._prefills[(batch, seq, capacity)] = (fn, program)
        self.compiles += 1
        return entry

    def _gqa_prefill_fn(self, batch: int, seq: int, capacity: int) -> Any:
        """The prefill of a GroupQueryAttention step (``roles.kind`` "gqa"): its cache holds
        each entry's positions first, so the prompts enter right-padded (the tokens array
        stays left-padded: each row's prompt moved to the front), over a zero past buffer of
        ``capacity`` positions that its presents fill; ``mask`` [batch, capacity] has ones on
        each entry's cached positions. The first token is read at each prompt's last
        position."""
        r = self.roles
        dtype = graph_dtype(r.cache_dtype)
        program = self._program(batch, seq, capacity, mask=seq)

        def prefill(params, tokens, mask, key):
            lens = jnp.sum(mask, axis=1).astype(jnp.int32)
            j = jnp.arange(seq, dtype=jnp.int32)[None]
            src = jnp.clip(seq - lens[:, None] + j, 0, seq - 1)
            ids = jnp.where(j < lens[:, None], jnp.take_along_axis(tokens, src, axis=1), self.pad)
            step_mask = (j < lens[:, None]).astype(mask.dtype)
            positions = jnp.where(j < lens[:, None], j, 1).astype(jnp.int32)
            zeros = [jnp.zeros(self._cache_shape(batch, capacity), dtype)] * (2 * r.layers)
            logits, presents = self._run_model(program, params, ids, step_mask, positions, zeros)
            last = jnp.take_along_axis(logits, (lens - 1)[:, None, None], axis=1)[:, 0]
            tokens, done = self._next(last, key, jnp.zeros((batch,), bool), tokens, seq)
            cache = [p.astype(dtype) for p in presents]
            # The steps' pending keys and values: the prompt's last position's, which the
            # first step writes where they already are, so that every step of a bucket takes
            # one state structure (one compile). A GroupQueryAttention step has none.
            pending = [] if r.kind == "gqa" else [
                jax.lax.slice_in_dim(c, seq - 1, seq, axis=r.axis) for c in cache
            ]  # fmt: skip
            return cache, pending, tokens, done

        fn = jax.jit(prefill, compiler_options=self._options())
        entry = self._prefills[(batch, seq, capacity)] = (fn, program)
        self.compiles += 1
        return entry

    def _gqa_step_body(self, batch: int, total: int, capacity: int) -> tuple[Any, Any]:
        """A GroupQueryAttention decode step: the whole past buffer of ``capacity`` positions
        in, a mask of ``total`` (a bucket) with ones on each entry's cached positions and the
        new one (GroupQueryAttention reads its sum, as ``seqlens_k``, and its length); the
        presents, the buffers with the new keys written at each entry's length, are the next
        cache."""
        program = self._program(batch, 1, capacity, mask=total)
        dtype = graph_dtype(self.roles.cache_dtype)

        def step(params, state, length):
            cache, pending, mask, tokens, done, key = state
            counts = jnp.sum(mask, axis=1).astype(jnp.int32)[:, None]  # cached, per entry
            ids = jax.lax.dynamic_slice_in_dim(tokens, length - 1, 1, axis=1)
            step_mask = (jnp.arange(total)[None] < counts + 1).astype(mask.dtype)
            logits, presents = self._run_model(program, params, ids, step_mask, counts, cache)
            cache = [p.astype(dtype) for p in presents]
            mask = (jnp.arange(mask.shape[1])[None] < counts + 1).astype(mask.dtype)
            key, sub = self._split(key)
            tokens, done = self._next(logits[:, -1], sub, done, tokens, length)
            return cache, pending, mask, tokens, done, key

        return program, step

    def _step_body(self, batch: int, past: int, capacity: int = 0) -> tuple[Any, Any]:
        """The program for past length ``past`` (a bucket, or exact) and one decode step on it,
        the cache's length a run-time value: (params, state, length) -> state, where the state
        is (cache, pending, mask, tokens, done, key). The cache is one buffer, every layer's
        keys and values stacked on a first axis (the pasts in the session's input order), so
        that the last token's keys and values enter it in one write, not one a layer (two
        small kernels a layer on a GPU). ``pending`` holds them, stacked the same way, and the
        next step writes them into the cache before it reads it: the donated buffer is then read
        only after its in-place update, so XLA copies none of it (written after the read, each
        buffer was copied at every step). For a GroupQueryAttention step ``past`` is the mask's
        bucket (``_gqa_step_body``)."""
        if self.roles.kind == "gqa":
            return self._gqa_step_body(batch, past, capacity)
        program = self._program(batch, 1, past)
        axis = self.roles.axis

        def step(params, state, length):
            cache, pending, mask, tokens, done, key = state
            cache = jax.lax.dynamic_update_slice_in_dim(cache, pending, length - 2, axis + 1)
            ids = jax.lax.dynamic_slice_in_dim(tokens, length - 1, 1, axis=1)
            # The new token's position: the number of real tokens before it.
            positions = jnp.sum(mask, axis=1, keepdims=True).astype(jnp.int32)
            # The positions from the cache's length to ``past`` are padding: masked out.
            head = jax.lax.slice_in_dim(mask, 0, past, axis=1)
            step_mask = jnp.concatenate([head, jnp.ones((batch, 1), mask.dtype)], axis=1)
            pasts = [jax.lax.slice_in_dim(cache[j], 0, past, axis=axis) for j in range(len(cache))]
            logits, presents = self._run_model(program, params, ids, step_mask, positions, pasts)
            pending = jnp.stack([
                jax.lax.slice_in_dim(p, past, past + 1, axis=axis).astype(cache.dtype)
                for p in presents
            ])  # fmt: skip
            mask = jax.lax.dynamic_update_slice_in_dim(
                mask, jnp.ones((batch, 1), mask.dtype), length - 1, axis=1
            )
            key, sub = self._split(key)  # a key a step, whatever the prompt's padding
            tokens, done = self._next(logits[:, -1], sub, done, tokens, length)
            return cache, pending, mask, tokens, done, key

        return program, step

    def _steps_fn(self, batch: int, past: int, capacity: int, count: int) -> Any:
        """``count`` decode steps at past length ``past`` from ``length`` in one dispatch (more
        than one: a ``lax.fori_loop`` of that fixed count), jitted, the state and the length (a
        device scalar) donated: (the new state, the first length at which every row had ended,
        before a step or after the last, ``_NEVER`` if none, whether every row has ended, and
        the length after the steps, which the next dispatch takes), the second and third apart
        from the donated state so that the host may read them after the next dispatch took it."""
        entry = self._steps.get((batch, past, capacity, count))
        if entry is None:
            program, step = self._step_body(batch, past, capacity)

            def steps(params, state, length):
                def body(i, carry):
                    state, stop = carry
                    stop = jnp.where(jnp.all(state[4]) & (stop == _NEVER), length + i, stop)
                    return step(params, state, length + i), stop

                carry = (state, jnp.int32(_NEVER))
                state, stop = (
                    body(0, carry) if count == 1 else jax.lax.fori_loop(0, count, body, carry)
                )
                ended = jnp.all(state[4])
                stop = jnp.where(ended & (stop == _NEVER), length + count, stop)
                return state, stop, ended, length + count

            fn = jax.jit(steps, donate_argnums=(1, 2), compiler_options=self._options())
            entry = self._steps[(batch, past, capacity, count)] = (fn, program)
            self.compiles += 1
        return entry

    def _options(self) -> dict | None:
        """The session's XLA options, less its choice of cuBLAS for matrix products (unless the
        caller made it): a decode step's products have a row a sequence, and XLA's own
        (Triton) emitters read their weights 2.5-5x faster than cuBLAS there (an H200, float16
        x [1, K] times [K, N]: 1.8-4.0 TB/s against 0.69-0.80; benchmarks/experiments
        gemv_forms_gpu.py)."""
        options = dict(self.session.compiler_options)
        if TRITON_GEMM not in (self.session._compiler_options or {}):
            options.pop(TRITON_GEMM, None)
        return options or None

    def _params_for(self, program: Any) -> dict:
        return self.session._run_params(program)

    def put(self, array: Any) -> Any:
        """``array`` on the session's device, or replicated over its mesh."""
        mesh = self.session.mesh
        if mesh is None:
            return jax.device_put(array, self.session._device)
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(array, NamedSharding(mesh, PartitionSpec()))


class Generator:
    """onnxruntime-genai's ``Generator``: ``append_tokens(prompts)`` (the prefill), then
    ``generate_next_token()`` until ``is_done()``; ``get_sequence(i)`` is prompt and generated
    ids. The cache, the attention mask and the tokens stay on the device (``GeneratorParams``
    says what is generated; the module's docstring how)."""

    def __init__(self, session: Any, params: GeneratorParams | None = None):
        self.session = session
        self.params = params or GeneratorParams(session)
        _check_params(self.params)
        self.roles = roles_of(session)
        p, r = self.params, self.roles
        if r.kind not in ("concat", "gqa"):
            raise ValidationError(
                f"{ONNX}: generation: '{r.present[0][0]}' is neither Concat(past, new) nor a "
                "GroupQueryAttention's present; the Generator runs those two (InferenceSession."
                "run runs any step)"
            )
        if p.buckets not in (None, False) and not r.bucketable:
            raise ValidationError(
                f"{ONNX}: generation: buckets were asked for, but the graph does not show the padding "
                f"masked: {r.why}"
            )
        self._buckets = bucket_sizes(p.buckets, r.bucketable, f"{ONNX}: generation")
        self._fns = DecodeSteps.of(session, self.roles, p)
        self._fns._cache_shape(p.batch_size, 0)  # checks the heads and head size are fixed
        self.capacity = 0  # the cache's positions, set by the prompt (append_tokens)
        self._end = 0  # the tokens' length at the end: padded prompt and new tokens
        self._cache: list = []
        self._pending: list = []
        self._ended = False
        self._mask = None
        self._tokens = None  # [batch, capacity] int32 on the device
        self._length = 0  # positions used in the cache (and tokens)
        self._device_length: Any = None  # (the length on the device, the length it is)
        self._done = None
        self._all_ended: Any = False  # every row has ended (a device scalar after a step)
        # the last dispatch's report while end tokens are watched (``_dispatch``)
        self._behind: Any = None
        # on the device as the steps' outputs are, so that the first step's call is theirs
        self._key = self._fns.put(jax.random.PRNGKey(p.seed))

    @property
    def compiles(self) -> int:
        """The step functions compiled for this generator's session and way of choosing
        tokens so far (prefill and decode, per bucket)."""
        return self._fns.compiles

    # -- shapes ----------------------------------------------------------------------------------

    def _length_for(self, n: int) -> int:
        """The past length a step for ``n`` positions runs at: the bucket, or ``n``."""
        return bucket_length(n, self._buckets)

    def explain(self) -> str:
        """The roles the generator found and how the past length is compiled."""
        r = self.roles
        lines = [
            (
                f"input_ids: {r.input_ids}; attention_mask: {r.attention_mask}; position_ids: "
                f"{r.position_ids or 'none'}; logits: {r.logits}"
            ),
            (
                f"cache: {r.layers} layers, past {r.past[0][0]} ... -> present "
                f"{r.present[0][0]} ..., axis {r.axis}, "
                + (f"{self.capacity} positions" if self.capacity else "sized by the prompt")
            ),
        ]
        # A GroupQueryAttention cache is the whole buffer: its mask's length is what varies.
        what = "mask length" if r.kind == "gqa" else "past length"
        if self._buckets is None:
            lines.append(f"{what}: exact, a program per length ({r.why})")
        else:
            sizes = list(self._buckets) or f"powers of two from {MIN_BUCKET}"
            lines.append(f"{what}: bucketed to {sizes} ({r.why})")
        return "\n".join(lines)

    # -- onnxruntime-genai's calls ---------------------------------------------------------------

    def append_tokens(self, prompts: Any) -> None:
        """The prefill: ``prompts`` is a [batch, length] int array, or a list of id lists of
        different lengths (left-padded with ``pad_token_id``, the padding masked)."""
        p, r = self.params, self.roles
        if self._tokens is not None:
            raise ValidationError(
                f"{ONNX}: generation: append_tokens after the prompt is not supported; "
                "start a new Generator"
            )
        rows = [
            list(map(int, row))
            for row in (prompts.tolist() if hasattr(prompts, "tolist") else prompts)
        ]
        if len(rows) != p.batch_size:
            raise ValidationError(
                f"{ONNX}: generation: {len(rows)} prompts for batch_size {p.batch_size}"
            )
        if any(not row for row in rows):
            raise ValidationError(f"{ONNX}: generation: a prompt is empty")
        longest = max(map(len, rows))
        if longest >= p.max_length:
            raise ValidationError(
                f"{ONNX}: generation: a prompt of {longest} tokens leaves nothing to generate "
                f"within max_length {p.max_length}"
            )
        gqa = r.kind == "gqa"  # positions from each entry's own length: any padding is fine
        if not gqa and r.position_ids is None and len(set(map(len, rows))) > 1:
            raise ValidationError(
                f"{ONNX}: generation: prompts of different lengths need a position_ids input "
                "(without one the model numbers tokens from the past's size, so left padding "
                "would move them)"
            )
        seq = self._length_for(longest)
        self._end = seq + p.max_length - longest
        # The tokens are kept as the padded prompt and the new tokens; a GroupQueryAttention
        # cache holds each entry's positions first: as many as the longest prompt and the new
        # tokens, in buckets like the mask that covers them.
        self.capacity = self._length_for(p.max_length if gqa else self._end)
        batch = p.batch_size
        tokens = np.full((batch, self._length_for(self._end)), p.pad_token_id, np.int32)
        mask = np.zeros((batch, self.capacity), np.int32)
        for b, row in enumerate(rows):
            tokens[b, seq - len(row) : seq] = row
            if gqa:
                mask[b, : len(row)] = 1
            else:
                mask[b, seq - len(row) : seq] = 1
        fn, program = self._fns._prefill_fn(batch, seq, self.capacity)
        self._mask = self._fns.put(mask)
        self._cache, self._pending, self._tokens, self._done = fn(
            self._fns._params_for(program),
            self._fns.put(tokens),
            self._mask,
            jax.random.fold_in(self._key, 0),
        )
        self._all_ended = jnp.all(self._done) if self._fns._eos else False
        self._behind, self._ended = None, False
        self._length = seq + 1
        self._prompt = seq
        self._lengths = [len(row) for row in rows]

    def generate_next_token(self) -> None:
        """One decode step: the cache takes the last token's keys and values, and the next
        token joins the sequences."""
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        if self._length >= self._end:
            raise ValidationError(
                f"{ONNX}: generation: max_length {self.params.max_length} reached"
            )
        self._dispatch(1)

    def _dispatch(self, count: int) -> Any:
        """``count`` decode steps from the current length in one dispatch
        (``DecodeSteps._steps_fn``), not waited for; returns the device scalar of the length
        at which every row had ended (``_NEVER``: none did)."""
        made = (*self._step_id(self._length), count)
        fn, program = self._fns._steps_fn(*made)
        state = (self._cache, self._pending, self._mask, self._tokens, self._done, self._key)
        # the length on the device, as the last dispatch left it (donated, as the state is), else
        # put there: never a host scalar, which the call would copy in at every dispatch (one
        # H200, the 1B-class float16 decoder a token a dispatch: 913 -> 784 us of host time a
        # dispatch). (jnp.int32 would dispatch a conversion of its own first.)
        length = self._device_length
        if length is None or length[1] != self._length:
            length = (self._fns.put(np.int32(self._length)), self._length)
        state, stop, self._all_ended, after = fn(self._fns._params_for(program), state, length[0])
        self._cache, self._pending, self._mask, self._tokens, self._done, self._key = state
        self._fns._ready.add(made)
        self._length += count
        self._device_length = (after, self._length)
        return stop

    def _step_id(self, length: int) -> tuple:
        return (self.params.batch_size, self._step_key(length), self._gqa_capacity)

    def compile_ahead(self, workers: int | None = None) -> int:
        """Compiles now the decode steps of every bucket this generation can still reach (up
        to ``max_length``), which the steps would otherwise compile one at a time as they reach
        each bucket: each step (and, with ``steps_per_dispatch`` > 1, each bucket's run of that
        many) is traced here and XLA compiles them side by side on ``workers`` threads
        (default: as many as the programs, at most the CPUs). What a server calls after its
        first ``append_tokens`` to take a long generation's compiles at once. Returns the
        number of programs compiled."""
        import os
        from concurrent.futures import ThreadPoolExecutor

        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        span: dict[tuple, int] = {}  # each step's lengths still to come
        for n in range(self._length, self._end):
            made = self._step_id(n)
            span[made] = span.get(made, 0) + 1
        count = int(self.params.steps_per_dispatch)
        todo = [(*i, 1) for i in span] + [(*i, count) for i in span if 1 < count <= span[i]]
        todo = [made for made in todo if made not in self._fns._ready]
        if not todo:
            return 0
        state = (self._cache, self._pending, self._mask, self._tokens, self._done, self._key)
        shapes = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
        )
        lowered = []
        for made in todo:
            fn, program = self._fns._steps_fn(*made)
            length = self._fns.put(np.int32(0))  # as ``_dispatch`` passes it: on the device
            lowered.append(fn.trace(self._fns._params_for(program), shapes, length).lower())
        with ThreadPoolExecutor(max(1, min(len(lowered), workers or os.cpu_count() or 1))) as pool:
            list(pool.map(lambda low: low.compile(), lowered))
        self._fns._ready.update(todo)
        return len(todo)

    def generate_until_done(self) -> None:
        """Decode steps until ``is_done()``, bucket by bucket (``generate_bucket``): runs of
        ``steps_per_dispatch`` steps a dispatch, queued without waiting for the device."""
        while self.generate_bucket():
            pass

    def generate_bucket(self) -> bool:
        """The decode steps whose past runs at the current bucket (with exact lengths, one
        step), a dispatch a step (``steps_per_dispatch`` > 1: runs of that many in one, the
        rest a step each), queued without waiting for the device: with end tokens watched,
        whether every row has ended is read one dispatch behind, so that the device always has
        the next one queued, and the steps found to start after every row ended are dropped
        (they changed no token the generator shows). False when nothing is left to do
        (``is_done()``).

        (One ``lax.while_loop`` a bucket, tried first, ran the 1B-class decoder a few percent
        slower on an H100 and an H200: its host reads the loop's condition at every step
        before it launches the next, so the device waits on the host;
        benchmarks/experiments/README.md, ``decode_step_gpu.py``.)"""
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        watch = bool(self._fns._eos)
        key = self._step_key(self._length)
        count = int(self.params.steps_per_dispatch)
        while True:
            at_end = self._length >= self._end or self._ended
            if at_end or self._step_key(self._length) != key:
                # leaving the bucket: the last dispatch is read now (a sync a bucket)
                if watch and self._behind is not None and self._settle(self._behind):
                    return False
                return not at_end
            previous = self._behind
            last = self._length + count - 1  # a run stays in the bucket and before the end
            run = count > 1 and last < self._end and self._step_key(last) == key
            stop = self._dispatch(count if run else 1)
            self._behind = stop if watch else None
            # the dispatch before this one, read while this one is queued
            if watch and previous is not None and self._settle(previous):
                return False

    def _settle(self, stop: Any) -> bool:
        """Whether every row had ended by the length ``stop`` (a dispatch's report) says; if so
        the generation ends there, the steps queued after it dropped (they changed no token
        the generator shows)."""
        stop = int(stop)
        if stop == _NEVER:
            return False
        self._length, self._ended, self._behind = stop, True, None
        return True

    def _step_key(self, length: int) -> int:
        """The bucket the step at ``length`` (its input token at ``length - 1``) runs at: the
        past's length for a Concat cache; for a GroupQueryAttention one, the mask's (the
        longest entry's cached positions and the new one)."""
        if self.roles.kind == "gqa":
            return self._length_for(max(self._lengths) + length - self._prompt)
        return self._length_for(length - 1)

    @property
    def _gqa_capacity(self) -> int:
        """The cache's positions where a step's program depends on them (GroupQueryAttention
        steps take the whole buffer), else 0."""
        return self.capacity if self.roles.kind == "gqa" else 0

    def is_done(self) -> bool:
        """Every sequence ended (an end token) or max_length is reached."""
        if self._tokens is None:
            return False
        if self._length >= self._end:
            return True
        if self._ended:
            return True
        return bool(self._fns._eos) and bool(self._all_ended)

    def get_sequence(self, index: int) -> np.ndarray:
        """Row ``index``: its prompt (without padding) and the tokens generated so far."""
        tokens = np.asarray(self._tokens[index, : self._length])
        return tokens[self._prompt - self._lengths[index] :]

    def get_next_tokens(self) -> np.ndarray:
        """The last token of each row."""
        return np.asarray(self._tokens[:, self._length - 1])

    @property
    def generated(self) -> np.ndarray:
        """[batch, tokens generated so far] (the prompt excluded)."""
        return np.asarray(self._tokens[:, self._prompt : self._length])


def generate(session: Any, prompts: Any, max_new_tokens: int = 64, **options: Any) -> np.ndarray:
    """Generates up to ``max_new_tokens`` after each prompt (``GeneratorParams`` options:
    ``do_sample``, ``top_k``, ``top_p``, ``temperature``, ``eos_token_id``, ``seed``,
    ``buckets``...): [batch, n] ids, n up to ``max_new_tokens`` (fewer when every row met an
    end token), rows that ended early padded with ``pad_token_id``. The decode steps run on the
    device, one dispatch per bucket (``Generator.generate_until_done``)."""
    rows = prompts.tolist() if hasattr(prompts, "tolist") else list(prompts)
    longest = max(len(r) for r in rows)
    params = GeneratorParams(
        session, max_length=longest + int(max_new_tokens), batch_size=len(rows), **options
    )
    g = Generator(session, params)
    g.append_tokens(rows)
    g.generate_until_done()
    return g.generated
