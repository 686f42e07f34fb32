"""The compiled steps of generation (``generation.Generator``'s programs): a session's prefill
and decode steps for one way of choosing tokens (``DecodeSteps``), each compiled once per prompt
bucket and past bucket and shared by the generators of that session, and the choice of the next
token (onnxruntime-genai's repetition penalty, minimum length and repeated n-grams where set, then
``select_tokens``: greedy, or sampled after temperature, top-k and top-p).

A decode step's state is (cache, pending, mask, tokens, done, key, search, chosen): the cache,
one buffer of every layer's keys and values stacked after its positions (a GroupQueryAttention
step's: each layer's buffers, which its presents replace); the last token's keys and values,
which the next step writes into the cache before it reads it (none for a GroupQueryAttention
step); the attention mask over the cache; the tokens (prompts and generated) on the device;
which rows have ended; the sampling key; beam search's scores and hypotheses (``beams``; empty
without beams), by which a step also gathers the rows of the cache, the mask and the tokens that
each beam continues; and what the last token was chosen from: the model's logits at the last
position (float32 [rows, vocabulary], in the rows' order before a beam search's choice) and the
rows that had ended before it (``Generator.get_logits`` / ``set_logits``; ``choose_fn``). A
dispatch runs ``count`` such steps (``steps_fn``), the state and the length donated, so that
the cache is updated in place. Speculative decoding's rounds (``rounds_fn``) take the same
state.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ValidationError
from . import beams as beam_search
from .elements import ONNX, graph_dtype
from .padding_probe import padded_side
from .roles import DecoderRoles
from .speculative import ngram_drafts

# The XLA options by which sessions put matrix products on cuBLAS and leave sibling products
# unmerged (``GPU_COMPILER_OPTIONS``); a decode step's compiles take neither unless told.
TRITON_GEMM = "xla_gpu_enable_triton_gemm"
DOT_MERGER = "xla_gpu_dot_merger_threshold_mb"
NEVER = 2**31 - 1  # a run of steps in which no row ended: the length it reports


def _eos_ids(eos: Any) -> tuple[int, ...]:
    if eos is None:
        return ()
    if isinstance(eos, int | np.integer):
        return (int(eos),)
    return tuple(int(e) for e in eos)


def _positions_first(pasts: list, axis: int) -> Any:
    """Pasts or presents of one shape (their positions on ``axis``) stacked as the cache holds
    them (``DecodeSteps.stacked_shape``): {positions, which one, their other dimensions}."""
    return jnp.stack([jnp.moveaxis(p, axis, 0) for p in pasts], axis=1)


def _chosen(logits: Any, before: Any) -> tuple:
    """The state's record of a choice: the logits it read (float32) and the rows ended before
    it."""
    return logits.astype(jnp.float32), before


def _repeated(arrays: list, copies: int) -> list:
    """Each of ``arrays`` with each row (axis 0) ``copies`` times in a row."""
    return arrays if copies == 1 else [jnp.repeat(a, copies, axis=0) for a in arrays]


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


def _repeated_ngram_ends(tokens, ids, real, counts, at, n: int, vocab: int) -> Any:
    """[batch, vocabulary]: the tokens that would end an n-gram of ``n`` tokens already among
    each row's real tokens (``real``: its columns before ``at``, ``counts`` of them): the token
    after every earlier occurrence of the row's last ``n - 1`` tokens (Hugging Face's
    ``no_repeat_ngram_size``; with ``n`` 1, every token the row holds). ``ids``: ``tokens``
    with ids outside the vocabulary moved past it."""
    batch, width = tokens.shape
    starts = width - n + 1  # the n-grams' first columns
    if starts <= 0:
        return jnp.zeros((batch, vocab), bool)
    # an n-gram of real tokens (its first and last columns real: the real ones are contiguous)
    match = real[:, :starts] & real[:, n - 1 : n - 1 + starts]
    for j in range(n - 1):  # whose first n - 1 tokens are the row's last n - 1
        last = jax.lax.dynamic_slice_in_dim(tokens, at - (n - 1) + j, 1, axis=1)
        match = match & (tokens[:, j : j + starts] == last)
    match = match & (counts >= n - 1)[:, None]  # a row of fewer tokens bans none
    banned = jnp.zeros((batch, vocab), jnp.int32).at[
        jnp.arange(batch)[:, None], ids[:, n - 1 : n - 1 + starts]
    ].max(match.astype(jnp.int32), mode="drop")  # fmt: skip
    return banned > 0


class DecodeSteps:
    """The compiled prefill and decode steps of one session for one way of choosing tokens,
    shared by the generators of that session (``DecodeSteps.of``): each program is compiled
    once per prompt bucket and past bucket, however many generators run.

    Attributes:
        compiles: the step functions traced and compiled so far.
        ready: the steps (``steps_fn``'s arguments) compiled, run or compiled ahead.
        eos: the end token ids.
    """

    def __init__(self, session: Any, roles: DecoderRoles, sampling: tuple, eos: tuple, pad: int,
                 penalties: tuple = (1.0, 0, 0), beams: tuple | None = None):  # fmt: skip
        self.session = session
        self.roles = roles
        self.sampling = sampling  # (do_sample, top_k, top_p, temperature)
        self.eos = eos
        self.pad = pad
        self.penalties = penalties  # (repetition_penalty, min_length, no_repeat_ngram_size)
        self.beams = beams  # (num_beams, length_penalty, early_stopping), or None
        self._steps: dict[tuple, Any] = {}
        self._prefills: dict[tuple, Any] = {}
        self.ready: set[tuple] = set()  # steps compiled (run, or compiled ahead)
        self.compiles = 0

    @classmethod
    def of(cls, session: Any, roles: DecoderRoles, params: Any) -> DecodeSteps:
        """The session's steps for ``params``' way of choosing tokens (a ``GeneratorParams``;
        made on first use)."""
        sampling = (
            bool(params.do_sample),
            int(params.top_k),
            float(params.top_p),
            float(params.temperature),
        )
        eos, pad = _eos_ids(params.eos_token_id), int(params.pad_token_id)
        penalties = (
            float(params.repetition_penalty),
            int(params.min_length),
            int(params.no_repeat_ngram_size),
        )
        beams = None
        if int(params.num_beams) > 1:
            beams = (int(params.num_beams), float(params.length_penalty),
                     bool(params.early_stopping))  # fmt: skip
        cache = session.__dict__.setdefault("_decode_steps", {})
        key = (sampling, eos, pad, penalties, beams)
        if key not in cache:
            cache[key] = cls(session, roles, sampling, eos, pad, penalties, beams)
        return cache[key]

    def cache_shape(self, batch: int, length: int) -> tuple[int, ...]:
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

    def stacked_shape(self, batch: int, length: int) -> tuple[int, ...]:
        """The shape of a Concat cache's one buffer (``_step_body``): its positions, then every
        layer's key and value, then a past's other dimensions in order."""
        shape = list(self.cache_shape(batch, length))
        del shape[self.roles.axis]
        return (length, 2 * self.roles.layers, *shape)

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
                shapes.append(self.cache_shape(batch, past))
        values = {}
        if r.use_cache_branch is not None:
            values[r.use_cache_branch] = np.array([use_cache])
        return self.session.program(shapes, values)

    def _run_model(self, program, params, ids, mask, positions, past, use_cache=True) -> tuple:
        from .. import fastpath

        inputs = self._inputs(ids, mask, positions, past, use_cache)
        with fastpath.target_platform(fastpath.platform_of(self.session._run_device)):
            outs = program.apply(self._named(program, params), *inputs)
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

    def _penalized(self, logits: Any, tokens: Any, at: Any, mask: Any) -> Any:
        """``logits`` [batch, vocabulary] after onnxruntime-genai's repetition penalty,
        minimum length and repeated n-grams (``penalties``; unchanged where none is set).
        ``mask`` holds a one for each of a row's real tokens so far (prompt and generated, not
        its left padding), which are the last of ``tokens``' columns before ``at``. Every
        token id among them has its logit divided by the penalty where positive, else
        multiplied by it (once however often it occurs); while a row holds fewer than
        ``min_length`` tokens its end tokens are not chosen (their logits -inf); a token that
        would end an n-gram of ``no_repeat_ngram_size`` tokens the row already holds is not
        chosen either."""
        penalty, min_length, ngram = self.penalties
        if penalty == 1.0 and not (min_length > 0 and self.eos) and ngram <= 0:
            return logits
        logits = logits.astype(jnp.float32)
        batch, vocab = logits.shape
        counts = jnp.sum(mask, axis=1).astype(jnp.int32)  # the real tokens so far, per row
        cols = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None]
        real = (cols < at) & (cols >= at - counts[:, None])
        ids = jnp.where((tokens >= 0) & (tokens < vocab), tokens, vocab)  # others dropped
        rows = jnp.arange(batch)[:, None]
        if penalty != 1.0:
            seen = jnp.zeros((batch, vocab), jnp.int32).at[rows, ids].max(
                real.astype(jnp.int32), mode="drop"
            ) > 0  # fmt: skip
            p = jnp.float32(penalty)
            logits = jnp.where(seen, jnp.where(logits > 0, logits / p, logits * p), logits)
        if ngram > 0:
            banned = _repeated_ngram_ends(tokens, ids, real, counts, at, ngram, vocab)
            logits = jnp.where(banned, -jnp.inf, logits)
        if min_length > 0 and self.eos:
            early = (counts < min_length)[:, None]
            ends = jnp.isin(jnp.arange(vocab), jnp.asarray(self.eos, jnp.int32))[None]
            logits = jnp.where(early & ends, -jnp.inf, logits)
        return logits

    def _next(
        self, logits: Any, key: Any, done: Any, tokens: Any, at: Any, mask: Any, search: Any
    ) -> tuple:
        """The next token of each row chosen from ``logits`` [batch, vocabulary] (the pad id
        where a row is done; ``_penalized`` first, ``mask`` its real tokens so far) and written
        into ``tokens`` at column ``at``: (the tokens, the rows done after it (an end token),
        the search state, the row each row continues or None). With beams, ``beams.choose``
        chooses, the tokens' rows gathered."""
        logits = self._penalized(logits, tokens, at, mask)
        if self.beams is not None:
            lengths = jnp.sum(mask, axis=1).astype(jnp.int32)
            config = (*self.beams, self.eos, self.pad)
            picked, tokens, done, search = beam_search.choose(
                logits, search, done, tokens, at, lengths, config
            )
            return tokens, done, search, picked
        token = jnp.where(done, jnp.int32(self.pad), self._select(logits, key))
        for e in self.eos:
            done = done | (token == e)
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, token[:, None], at, axis=1)
        return tokens, done, search, None

    @property
    def _copies(self) -> int:
        """The rows of the steps' batch a prompt (its beams): the prefill runs the model once
        a prompt and repeats what it gives, the rows alike until the first choice."""
        return self.beams[0] if self.beams is not None else 1

    def initial_search(self, prompts: int, width: int) -> Any:
        """The search state a prefill starts from: beam search's (``beams.initial``), or
        empty."""
        if self.beams is None:
            return ()
        return beam_search.initial(prompts, self.beams[0], width)

    def finalize_fn(self) -> Any:
        """Beam search's hypotheses once it stops (``beams.finalize``), jitted: (search,
        tokens, done, lengths, end) -> hypotheses."""
        fn = self.__dict__.get("_finalize")
        if fn is None:
            config = (*self.beams, self.eos, self.pad)
            fn = self._finalize = jax.jit(
                lambda search, tokens, done, lengths, end: beam_search.finalize(
                    search, tokens, done, lengths, end, config
                )
            )
        return fn

    def prefill_fn(self, batch: int, seq: int, capacity: int) -> Any:
        """The prefill for prompts padded to ``seq`` into a cache of ``capacity`` positions:
        (params, tokens, mask, key, search) -> (cache, pending, tokens, done, search, chosen),
        the cache made on the device, its first ``seq`` positions the prompts' keys and values,
        the first token at ``seq``."""
        entry = self._prefills.get((batch, seq, capacity))
        if entry is not None:
            return entry
        if self.roles.kind == "gqa":
            return self._gqa_prefill_fn(batch, seq, capacity)
        # (a merged decoder's prefill takes its branch without the past, as Optimum's does)
        copies = self._copies
        program = self._program(batch // copies, seq, 0, use_cache=False)
        r = self.roles
        axis = r.axis
        dtype = graph_dtype(r.cache_dtype)

        def prefill(params, tokens, mask, key, search):
            ids = jax.lax.slice_in_dim(tokens[::copies], 0, seq, axis=1)
            mask = jax.lax.slice_in_dim(mask, 0, seq, axis=1)
            once = mask[::copies]
            positions = jnp.where(once > 0, jnp.cumsum(once, axis=1) - 1, 1).astype(jnp.int32)
            empty = [jnp.zeros(self.cache_shape(batch // copies, 0), dtype)] * (2 * r.layers)
            logits, presents = self._run_model(program, params, ids, once, positions, empty, False)
            logits, *presents = _repeated([logits, *presents], copies)
            # every layer's keys and values in one buffer, positions first (``_step_body``)
            cache = jax.lax.dynamic_update_slice_in_dim(
                jnp.zeros(self.stacked_shape(batch, capacity), dtype),
                _positions_first([p.astype(dtype) for p in presents], axis), 0, 0,
            )  # fmt: skip
            # (with beams, a prompt's rows are alike until this choice: none is gathered)
            before = jnp.zeros((batch,), bool)
            tokens, done, search, _ = self._next(logits[:, -1], key, before, tokens, seq, mask,
                                                 search)  # fmt: skip
            # The last prompt position again, as the first step's pending keys and values.
            last = jax.lax.slice_in_dim(cache, seq - 1, seq, axis=0)
            return cache, last, tokens, done, search, _chosen(logits[:, -1], before)

        fn = jax.jit(prefill, compiler_options=self.options())
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
        copies = self._copies
        program = self._program(batch // copies, seq, capacity, mask=seq)

        def prefill(params, tokens, mask, key, search):
            lens = jnp.sum(mask[::copies], axis=1).astype(jnp.int32)
            j = jnp.arange(seq, dtype=jnp.int32)[None]
            src = jnp.clip(seq - lens[:, None] + j, 0, seq - 1)
            ids = jnp.take_along_axis(tokens[::copies], src, axis=1)
            ids = jnp.where(j < lens[:, None], ids, self.pad)
            step_mask = (j < lens[:, None]).astype(mask.dtype)
            positions = jnp.where(j < lens[:, None], j, 1).astype(jnp.int32)
            zeros = [jnp.zeros(self.cache_shape(batch // copies, capacity), dtype)] * (2 * r.layers)
            logits, presents = self._run_model(program, params, ids, step_mask, positions, zeros)
            last = jnp.take_along_axis(logits, (lens - 1)[:, None, None], axis=1)[:, 0]
            last, *presents = _repeated([last, *presents], copies)
            before = jnp.zeros((batch,), bool)
            tokens, done, search, _ = self._next(last, key, before, tokens, seq, mask, search)
            cache = [p.astype(dtype) for p in presents]
            # The steps' pending keys and values: the prompt's last position's, which the
            # first step writes where they already are, so that every step of a bucket takes
            # one state structure (one compile). A GroupQueryAttention step has none.
            pending = [] if r.kind == "gqa" else [
                jax.lax.slice_in_dim(c, seq - 1, seq, axis=r.axis) for c in cache
            ]  # fmt: skip
            return cache, pending, tokens, done, search, _chosen(last, before)

        fn = jax.jit(prefill, compiler_options=self.options())
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
            cache, pending, mask, tokens, done, key, search, _ = state
            counts = jnp.sum(mask, axis=1).astype(jnp.int32)[:, None]  # cached, per entry
            ids = jax.lax.dynamic_slice_in_dim(tokens, length - 1, 1, axis=1)
            step_mask = (jnp.arange(total)[None] < counts + 1).astype(mask.dtype)
            logits, presents = self._run_model(program, params, ids, step_mask, counts, cache)
            cache = [p.astype(dtype) for p in presents]
            mask = (jnp.arange(mask.shape[1])[None] < counts + 1).astype(mask.dtype)
            key, sub = self._split(key)
            chosen = _chosen(logits[:, -1], done)
            tokens, done, search, picked = self._next(logits[:, -1], sub, done, tokens, length,
                                                      mask, search)  # fmt: skip
            if picked is not None:  # each beam's rows: its cache and mask
                cache = beam_search.gather_rows(picked, *cache)
                (mask,) = beam_search.gather_rows(picked, mask)
            return cache, pending, mask, tokens, done, key, search, chosen

        return program, step

    def _step_body(self, batch: int, past: int, capacity: int = 0) -> tuple[Any, Any]:
        """The program for past length ``past`` (a bucket, or exact) and one decode step on it,
        the cache's length a run-time value: (params, state, length) -> state, where the state
        is (cache, pending, mask, tokens, done, key). The cache is one buffer, every layer's
        keys and values stacked on an axis (the pasts in the session's input order), so that
        the last token's keys and values enter it in one write, not one a layer (two small
        kernels a layer on a GPU). ``pending`` holds them, stacked the same way, and the next
        step writes them into the cache before it reads it: the donated buffer is then read
        only after its in-place update, so XLA copies none of it (written after the read, each
        buffer was copied at every step). The positions come first (``stacked_shape``): the
        layout XLA takes inside a step on a GPU (a layer's past slice and its present's
        concatenation along the positions), which stacked on the first axis it made by
        transposing the whole buffer on the way into every dispatch and back out of it (one
        H200, the 1B-class decoder's HLO, 2026-11-30). For a GroupQueryAttention step
        ``past`` is the mask's bucket (``_gqa_step_body``)."""
        if self.roles.kind == "gqa":
            return self._gqa_step_body(batch, past, capacity)
        program = self._program(batch, 1, past)
        axis = self.roles.axis

        def step(params, state, length):
            cache, pending, mask, tokens, done, key, search, _ = state
            cache = jax.lax.dynamic_update_slice_in_dim(cache, pending, length - 2, 0)
            ids = jax.lax.dynamic_slice_in_dim(tokens, length - 1, 1, axis=1)
            # The new token's position: the number of real tokens before it.
            positions = jnp.sum(mask, axis=1, keepdims=True).astype(jnp.int32)
            # The positions from the cache's length to ``past`` are padding: masked out.
            head, cached = self._past(mask, cache, length - 1, past)
            step_mask = jnp.concatenate([head, jnp.ones((batch, 1), mask.dtype)], axis=1)
            pasts = [jnp.moveaxis(cached[:, j], 0, axis) for j in range(cache.shape[1])]
            logits, presents = self._run_model(program, params, ids, step_mask, positions, pasts)
            pending = _positions_first([
                jax.lax.slice_in_dim(p, past, past + 1, axis=axis).astype(cache.dtype)
                for p in presents
            ], axis)  # fmt: skip
            mask = jax.lax.dynamic_update_slice_in_dim(
                mask, jnp.ones((batch, 1), mask.dtype), length - 1, axis=1
            )
            key, sub = self._split(key)  # a key a step, whatever the prompt's padding
            chosen = _chosen(logits[:, -1], done)
            tokens, done, search, picked = self._next(logits[:, -1], sub, done, tokens, length,
                                                      mask, search)  # fmt: skip
            if picked is not None:  # each beam's rows: its cache, pending keys and mask
                cache, pending = beam_search.gather_rows(picked, cache, pending, axis=2)
                (mask,) = beam_search.gather_rows(picked, mask)
            return cache, pending, mask, tokens, done, key, search, chosen

        return program, step

    def front(self, capacity: int) -> bool:
        """Whether a Concat cache of ``capacity`` positions gives a step its past right-aligned
        in the bucket, the padding before the real positions (``padding_probe.padded_side``:
        a sliding window, which padding after the past moves); with neither side, the
        ``Generator`` runs exact lengths, where the two are one."""
        return (
            self.roles.kind == "concat" and padded_side(self.session, self.roles, capacity) != "end"
        )

    def _past(self, mask: Any, cache: Any, fed: Any, past: int) -> tuple[Any, Any]:
        """The mask's and the cache's ``past`` positions a step over ``fed`` cached ones reads:
        the first ``past`` (the padding after the real positions, masked), or with ``front``
        the ``past`` before ``fed``, zeros (masked) in front where fewer."""
        if not self.front(cache.shape[0]):
            return (jax.lax.slice_in_dim(mask, 0, past, axis=1),
                    jax.lax.slice_in_dim(cache, 0, past, axis=0))  # fmt: skip

        def before(x, axis):
            zeros = jnp.zeros_like(jax.lax.slice_in_dim(x, 0, past, axis=axis))
            return jax.lax.dynamic_slice_in_dim(jnp.concatenate([zeros, x], axis), fed, past, axis)

        return before(mask, 1), before(cache, 0)

    def _chunk_program(self, chunk: int, past: int, capacity: int) -> Any:
        """The program for ``chunk`` tokens of one row over the cache: ``past`` the past's
        bucket (a GroupQueryAttention step's: the mask's, over the whole buffer)."""
        if self.roles.kind == "gqa":
            return self._program(1, chunk, capacity, mask=past)
        return self._program(1, chunk, past)

    def _fed_chunk(self, program, params, cache, pending, mask, ids, fed, real, past) -> tuple:
        """``ids`` [1, chunk] (``real`` of them real, the padding last) run through ``program``
        over one row's cache, which holds ``fed`` positions: (logits [1, chunk, vocabulary],
        the cache with the chunk's keys and values written after them, those keys and values
        (a Concat cache's, positions first; None for a GroupQueryAttention cache), the real
        tokens fed before the chunk [1, 1])."""
        r, dtype = self.roles, graph_dtype(self.roles.cache_dtype)
        chunk = ids.shape[1]
        j = jnp.arange(chunk, dtype=jnp.int32)[None]
        base = jnp.sum(mask, axis=1, keepdims=True).astype(jnp.int32)
        if r.kind == "gqa":  # the whole buffer the past, ``base`` positions cached (the
            # prompt's padding not among them); the chunk's padding counted in (it is last)
            step_mask = (jnp.arange(past)[None] < base + chunk).astype(mask.dtype)
            logits, presents = self._run_model(program, params, ids, step_mask, base + j, cache)
            return logits, [p.astype(dtype) for p in presents], None, base
        cache = jax.lax.dynamic_update_slice_in_dim(cache, pending, fed - 1, 0)
        head, cached = self._past(mask, cache, fed, past)
        step_mask = jnp.concatenate([head, (j < real).astype(mask.dtype)], axis=1)
        pasts = [jnp.moveaxis(cached[:, k], 0, r.axis) for k in range(cache.shape[1])]
        logits, presents = self._run_model(program, params, ids, step_mask, base + j, pasts)
        new = _positions_first([
            jax.lax.slice_in_dim(p, past, past + chunk, axis=r.axis).astype(dtype)
            for p in presents
        ], r.axis)  # fmt: skip
        return logits, jax.lax.dynamic_update_slice_in_dim(cache, new, fed, 0), new, base

    def _kept(self, pending, mask, new, fed, base, valid) -> tuple:
        """The pending keys and values and the mask after a chunk whose first ``valid``
        positions stay (``_fed_chunk``'s ``new``, ``fed`` and ``base``): the last of them the
        next step's pending ones (a Concat cache), the mask on them alone."""
        if self.roles.kind == "gqa":
            return pending, (jnp.arange(mask.shape[1])[None] < base + valid).astype(mask.dtype)
        j = jnp.arange(new.shape[0], dtype=jnp.int32)[None]
        pending = jax.lax.dynamic_slice_in_dim(new, valid - 1, 1, axis=0)
        mask = jax.lax.dynamic_update_slice_in_dim(
            mask, (j < valid).astype(mask.dtype), fed, axis=1
        )
        return pending, mask

    def extend_fn(self, chunk: int, past: int, capacity: int) -> Any:
        """A later turn's tokens into a generation of one row (onnxruntime-genai's
        ``append_tokens`` after tokens were generated): ``chunk`` tokens (the real ones
        first, then padding) fed over the cache in one call of the session's program, their
        keys and values written after the ``fed`` positions it holds, and the next token
        chosen from the last real one's logits: (params, state, ids [1, chunk], fed, real) ->
        state, jitted, the state donated. ``past``: the past's bucket (a GroupQueryAttention
        step's: the mask's)."""
        entry = self._steps.get(("extend", chunk, past, capacity))
        if entry is not None:
            return entry
        program = self._chunk_program(chunk, past, capacity)

        def extend(params, state, ids, fed, real):
            cache, pending, mask, tokens, done, key, search, _ = state
            tokens = jax.lax.dynamic_update_slice_in_dim(tokens, ids, fed, axis=1)
            logits, cache, new, base = self._fed_chunk(program, params, cache, pending, mask,
                                                       ids, fed, real, past)  # fmt: skip
            pending, mask = self._kept(pending, mask, new, fed, base, real)
            last = jax.lax.dynamic_slice_in_dim(logits, real - 1, 1, axis=1)[:, 0]
            key, sub = self._split(key)
            before = jnp.zeros_like(done)
            tokens, done, search, _ = self._next(last, sub, before, tokens, fed + real, mask,
                                                 search)  # fmt: skip
            return cache, pending, mask, tokens, done, key, search, _chosen(last, before)

        fn = jax.jit(extend, donate_argnums=(1,), compiler_options=self.options())
        entry = self._steps[("extend", chunk, past, capacity)] = (fn, program)
        self.compiles += 1
        return entry

    def _verify(self, program, params, state, ids, fed, drafts, limit, past) -> tuple:
        """One speculative round's check (``speculative``): the token chosen last (at column
        ``fed``, not yet fed) and ``drafts`` draft tokens after it (``ids`` [1, chunk], the
        padding last) run through the model over the cache in one call, then the tokens
        chosen one position after another as the steps would choose them (the penalties, then
        greedy or sampled, a key split a position), each draft kept while it equals the token
        chosen at its position: (the state, ``n``). ``n`` tokens are taken (at least one, at
        most ``limit``, none after an end token), at columns ``fed + 1`` on; the cache keeps
        the positions of the tokens fed before the last of them, which is the one chosen but
        not fed, as after a step."""
        cache, pending, mask, tokens, done, key, search, _ = state
        chunk = ids.shape[1]
        tokens = jax.lax.dynamic_update_slice_in_dim(tokens, ids, fed, axis=1)
        logits, cache, new, base = self._fed_chunk(program, params, cache, pending, mask, ids,
                                                   fed, 1 + drafts, past)  # fmt: skip
        n, running, before = jnp.int32(0), jnp.bool_(True), done
        seen = []  # per position: (rows done before its token, rows done after, key after)
        for i in range(chunk):
            # the penalties' mask: the real tokens up to this position's input, as the cache's
            # mask would be were the round to keep its positions up to this one
            _, mask_i = self._kept(pending, mask, new, fed, base, i + 1)
            key, sub = self._split(key)
            tokens, after, _, _ = self._next(logits[:, i], sub, before, tokens, fed + 1 + i,
                                             mask_i, search)  # fmt: skip
            seen.append((before, after, key))
            n = n + running.astype(jnp.int32)
            if i + 1 < chunk:
                same = tokens[0, fed + 1 + i] == ids[0, i + 1]
                running = running & same & (i < drafts) & ~after[0] & (n < limit)
            before = after
        pick = lambda k: jnp.stack([s[k] for s in seen])[n - 1]
        before, done, key = pick(0), pick(1), pick(2)
        cols = jnp.arange(tokens.shape[1], dtype=jnp.int32)[None]
        dropped = (cols > fed + n) & (cols <= fed + chunk)
        tokens = jnp.where(dropped, jnp.int32(self.pad), tokens)
        pending, mask = self._kept(pending, mask, new, fed, base, n)
        last = jax.lax.dynamic_slice_in_dim(logits, n - 1, 1, axis=1)[:, 0]
        return (cache, pending, mask, tokens, done, key, search, _chosen(last, before)), n

    def rounds_fn(self, chunk: int, past: int, capacity: int, ngram: int) -> Any:
        """Speculative rounds of one row in one dispatch (``speculative``), as many as fit the
        program for ``past`` (the past's bucket; a GroupQueryAttention step's: the mask's), at
        most ``count``, until an end token or ``end`` (a ``lax.while_loop``): each looks up
        ``chunk - 1`` drafts in the row's tokens from column ``start`` on (``ngram_drafts``)
        and checks them (``_verify``), or where none is found runs the last token alone (the
        program for one token: a round of the whole chunk took twice a step's time on two CPU
        cores, 1.25x on an H200). (params, state, length, start, end, count) -> (state,
        length, counts: [rounds with drafts, drafts proposed, drafts accepted, rounds
        without]), jitted, the state donated."""
        entry = self._steps.get(("rounds", chunk, past, capacity, ngram))
        if entry is not None:
            return entry
        program = self._chunk_program(chunk, past, capacity)
        alone = self._chunk_program(1, past, capacity)  # a round without drafts: the token
        gqa = self.roles.kind == "gqa"

        def rounds(params, state, length, start, end, count):
            def fits(carry):
                state, length, i, _ = carry
                fed = length - 1
                room = fed - start + chunk <= past if gqa else fed <= past
                return (i < count) & room & (length < end) & ~jnp.all(state[4])

            def body(carry):
                state, length, i, counts = carry
                limit = end - length  # the tokens this round may take
                drafts, proposed = ngram_drafts(state[3][0], start, length, ngram, chunk - 1)
                proposed = jnp.minimum(proposed, limit - 1)
                ids = jnp.concatenate([state[3][0, length - 1][None], drafts])[None]
                state, n = jax.lax.cond(
                    proposed > 0,
                    lambda state: self._verify(program, params, state, ids, length - 1,
                                               proposed, limit, past),
                    lambda state: self._verify(alone, params, state, ids[:, :1], length - 1,
                                               0, limit, past),
                    state,
                )  # fmt: skip
                hit = (proposed > 0).astype(jnp.int32)
                counts = counts + jnp.stack([hit, proposed, n - 1, 1 - hit])
                return state, length + n, i + 1, counts

            carry = (state, length, jnp.int32(0), jnp.zeros((4,), jnp.int32))
            state, length, _, counts = jax.lax.while_loop(fits, body, carry)
            return state, length, counts

        fn = jax.jit(rounds, donate_argnums=(1,), compiler_options=self.options())
        entry = self._steps[("rounds", chunk, past, capacity, ngram)] = (fn, program)
        self.compiles += 1
        return entry

    def rewind_fn(self) -> Any:
        """A generation of one row cut back (``Generator.rewind_to``): (state, fed, keep) ->
        state, jitted, the state donated: ``keep`` positions of the cache stay (``fed`` it
        held, its last in ``pending`` for a Concat cache, written first), the mask zero after
        them, no row done; for a Concat cache the pending keys and values are then those of
        the last position kept, as a step expects them (``keep`` of a GroupQueryAttention
        cache counts its positions, without the prompt's padding)."""
        fn = self.__dict__.get("_rewind")
        if fn is not None:
            return fn
        gqa = self.roles.kind == "gqa"

        def rewind(state, fed, keep):
            cache, pending, mask, tokens, done, key, search, chosen = state
            if not gqa:
                cache = jax.lax.dynamic_update_slice_in_dim(cache, pending, fed - 1, 0)
                pending = jax.lax.dynamic_slice_in_dim(cache, keep - 1, 1, axis=0)
            cut = jnp.arange(mask.shape[1], dtype=jnp.int32)[None] < keep
            mask = jnp.where(cut, mask, jnp.zeros((), mask.dtype))
            return cache, pending, mask, tokens, jnp.zeros_like(done), key, search, chosen

        fn = self._rewind = jax.jit(rewind, donate_argnums=(0,))
        return fn

    def choose_fn(self) -> Any:
        """The last token chosen again, from other logits (``Generator.set_logits``; no beams):
        (state, logits [rows, vocabulary] float32, at) -> (state, whether every row has
        ended), jitted, the state donated: the token at column ``at`` chosen as the step chose
        it (the penalties, then greedy or sampled with the state's next key), the rows that
        had ended before it given the pad id again."""
        fn = self.__dict__.get("_choose")
        if fn is not None:
            return fn

        def choose(state, logits, at):
            cache, pending, mask, tokens, _, key, search, (_, before) = state
            key, sub = self._split(key)
            tokens, done, search, _ = self._next(logits, sub, before, tokens, at, mask, search)
            state = cache, pending, mask, tokens, done, key, search, _chosen(logits, before)
            return state, jnp.all(done)

        fn = self._choose = jax.jit(choose, donate_argnums=(0,))
        return fn

    def steps_fn(self, batch: int, past: int, capacity: int, count: int) -> Any:
        """``count`` decode steps at past length ``past`` from ``length`` in one dispatch (more
        than one: a ``lax.fori_loop`` of that fixed count), jitted, the state and the length (a
        device scalar) donated: (the new state, the first length at which every row had ended,
        before a step or after the last, ``NEVER`` if none, whether every row has ended, and
        the length after the steps, which the next dispatch takes), the second and third apart
        from the donated state so that the host may read them after the next dispatch took it."""
        entry = self._steps.get((batch, past, capacity, count))
        if entry is None:
            program, step = self._step_body(batch, past, capacity)

            def steps(params, state, length):
                def body(i, carry):
                    state, stop = carry
                    stop = jnp.where(jnp.all(state[4]) & (stop == NEVER), length + i, stop)
                    return step(params, state, length + i), stop

                carry = (state, jnp.int32(NEVER))
                state, stop = (
                    body(0, carry) if count == 1 else jax.lax.fori_loop(0, count, body, carry)
                )
                ended = jnp.all(state[4])
                stop = jnp.where(ended & (stop == NEVER), length + count, stop)
                return state, stop, ended, length + count

            fn = jax.jit(steps, donate_argnums=(1, 2), compiler_options=self.options())
            entry = self._steps[(batch, past, capacity, count)] = (fn, program)
            self.compiles += 1
        return entry

    def options(self) -> dict | None:
        """The session's XLA options, less its choice of cuBLAS for matrix products and of
        sibling products unmerged (unless the caller made them): a decode step's products have
        a row a sequence, and XLA's own (Triton) emitters read their weights 2.5-5x faster
        than cuBLAS there (an H200, float16 x [1, K] times [K, N]: 1.8-4.0 TB/s against
        0.69-0.80; benchmarks/experiments/gemv_forms_gpu.py); and with XLA's merging of
        sibling products the 1B-class LLaMA's steps took 1,042 us of kernels a token, against
        1,256 without (``generate_next_token``; decode_loops_gpu.py)."""
        options = dict(self.session.compiler_options)
        told = self.session._compiler_options or {}
        for name in (TRITON_GEMM, DOT_MERGER):
            if name not in told:
                options.pop(name, None)
        return options or None

    def params_for(self, program: Any) -> tuple:
        """The session's parameters of ``program`` as the steps take them: their values in the
        order of their sorted names, a tuple (``_named`` makes the dict again as the steps are
        traced). A dict's flattening sorts its names at every call: a jitted call of 311 small
        arrays took 109 us on this project's 2-core CPU with them as a dict, 75 as a tuple
        (the 1B-class 4-bit decoder's weights are 311 arrays)."""
        run = self.session._run_params(program)
        held = program.__dict__.get("_step_params")
        if held is None or held[0] is not run:
            names = tuple(sorted(run))
            held = program.__dict__["_step_params"] = (run, names, tuple(run[n] for n in names))
        return held[2]

    def _named(self, program: Any, params: tuple) -> dict:
        """``params_for``'s tuple as the program's parameters by name (the same sorted names)."""
        names = sorted(self.session._run_params(program))
        return dict(zip(names, params, strict=True))

    def put(self, array: Any) -> Any:
        """``array`` on the session's device, or replicated over its mesh."""
        mesh = self.session.mesh
        if mesh is None:
            return jax.device_put(array, self.session._device)
        from jax.sharding import NamedSharding, PartitionSpec

        return jax.device_put(array, NamedSharding(mesh, PartitionSpec()))
