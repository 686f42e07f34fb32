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

Buckets: where the step's graph shows the padding masked, the past length ``L`` is rounded up
to a bucket (powers of two by default, ``GeneratorParams.buckets``) and the positions between
the cache's length and ``L`` are masked out by the attention mask, so a decode loop over 2,048
positions compiles a handful of programs, not one per token. That holds when the model takes
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

Beam search (``num_beams`` > 1) runs a row of the steps' batch a beam: each prompt's rows start
alike, and each step gathers the rows its beams continue (``beams.py``). Speculative decoding by
n-grams (``ngram_size`` > 0) checks drafts from the sequence itself in one call a round
(``speculative.py``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ValidationError
from .buckets import MIN_BUCKET, bucket_length, bucket_sizes
from .decode_steps import NEVER, TRITON_GEMM, DecodeSteps, select_tokens  # noqa: F401 (the API's)
from .elements import ONNX
from .genai_model import Model  # noqa: F401 (the API's)
from .generation_params import GeneratorParams, ModelDefaults, check_params
from .padding_probe import padded_side, padding_moves, prompt_padding_moves
from .roles import DecoderRoles, find_roles, roles_of  # noqa: F401 (find_roles: the API's)
from .speculative import SpeculativeStats


class Generator:
    """onnxruntime-genai's ``Generator`` over a session (or a ``Model`` folder):
    ``append_tokens(prompts)`` (the prefill), then
    ``generate_next_token()`` until ``is_done()``; ``get_sequence(i)`` is prompt and generated
    ids. The cache, the attention mask and the tokens stay on the device (``GeneratorParams``
    says what is generated; the module's docstring how)."""

    def __init__(self, session: Any, params: GeneratorParams | None = None):
        params = params or GeneratorParams(session)
        if isinstance(session, ModelDefaults):  # an onnxruntime-genai model folder: its step
            session = session.session
        self.session = session
        self.params = params
        check_params(self.params)
        self.roles = roles_of(session)
        p, r = self.params, self.roles
        if r.kind not in ("concat", "gqa"):
            raise ValidationError(
                f"{ONNX}: generation: '{r.present[0][0]}' is neither Concat(past, new) nor a "
                "GroupQueryAttention's present; the Generator runs those two (InferenceSession."
                "run runs any step)"
            )
        # (a Concat step without position_ids: buckets asked for are tried, as the default's
        # are, and refused at the prompt where the probes find the padding moving something)
        self._buckets = bucket_sizes(p.buckets, r.bucketable, f"{ONNX}: generation")
        self._exact_why = ""  # why buckets went off at the prompt (``padding_moves``)
        self._fns = DecodeSteps.of(session, self.roles, p)
        self._fns.cache_shape(p.batch_size, 0)  # checks the heads and head size are fixed
        self._rows = p.batch_size * p.num_beams  # the steps' batch: a row a beam
        self._search: Any = ()  # beam search's state (``beams.py``)
        self._final: Any = None  # its hypotheses at the length they were made, once asked
        self.capacity = 0  # the cache's positions, set by the prompt (append_tokens)
        self._end = 0  # the tokens' length at the end: padded prompt and new tokens
        self._cache: list = []
        self._pending: list = []
        self._ended = False
        self._mask = None
        self._tokens = None  # [batch, capacity] int32 on the device
        self._length = 0  # positions used in the cache (and tokens)
        self._ahead = 0  # the device's length where steps ran past the end (``_settle``)
        # the tokens shown (``get_sequence``...): the prefill's choice waits for the first
        # ``generate_next_token``, as onnxruntime-genai shows it
        self._shown = 0
        self._device_length: Any = None  # (the length on the device, the length it is)
        self._done = None
        self._chosen: Any = None  # the logits the last token was chosen from (``get_logits``)
        self._all_ended: Any = False  # every row has ended (a device scalar after a step)
        # a step run by ``get_logits`` for the last token shown, its token not shown yet: the
        # rows ended after it wait in ``_peek_ended`` (``_all_ended`` is the shown state's)
        self._peeked = False
        self._peek_ended: Any = False
        self._stats = SpeculativeStats()  # speculative decoding's counts (``_speculate``)
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

    def _sized(self, longest: int, extra: int) -> int:
        """The prompt's bucket for a longest prompt of ``longest`` tokens; sets ``_end`` and
        ``capacity``. The tokens are kept as the padded prompt and the new tokens; a
        GroupQueryAttention cache holds each entry's positions first: as many as the longest
        prompt and the new tokens, in buckets like the mask that covers them."""
        p, gqa = self.params, self.roles.kind == "gqa"
        seq = self._length_for(longest)
        self._end = seq + p.max_length - longest
        self.capacity = self._length_for((p.max_length if gqa else self._end) + extra)
        return seq

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
        if self.params.ngram_size:
            lines.append(
                f"speculative decoding: drafts from the last {self.params.ngram_size} tokens' "
                f"earlier occurrence, up to {self.params.max_draft_tokens} a round, checked in "
                "one call"
            )
        # A GroupQueryAttention cache is the whole buffer: its mask's length is what varies.
        what = "mask length" if r.kind == "gqa" else "past length"
        if self._buckets is None:
            lines.append(f"{what}: exact, a program per length ({self._exact_why or r.why})")
        else:
            sizes = list(self._buckets) or f"powers of two from {MIN_BUCKET}"
            why = r.why
            if not r.bucketable:  # no position_ids: the probes found nothing moved
                why = (
                    "no position_ids input, but padding the prompt or the past moves nothing "
                    "the step computes (it numbers its tokens from the mask)"
                )
            if self.capacity and self._fns.front(self.capacity):
                moved = padding_moves(self.session, r, self.capacity)
                why += (
                    f"; the past right-aligned in its bucket, since padding after it moves: {moved}"
                )
            lines.append(f"{what}: bucketed to {sizes} ({why})")
        return "\n".join(lines)

    # -- onnxruntime-genai's calls ---------------------------------------------------------------

    def append_tokens(self, prompts: Any) -> None:
        """The prefill: ``prompts`` is a [batch, length] int array, or a list of id lists of
        different lengths (left-padded with ``pad_token_id``, the padding masked). Called
        again once tokens were generated (one prompt, no beams: a chat's next turn, as
        onnxruntime-genai's continuous decoding), the tokens follow the sequence shown so far
        (``_extend``)."""
        p, r = self.params, self.roles
        if self._tokens is not None:
            self._extend(prompts)
            return
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
        # a speculative round writes its drafts' keys and values (and tokens) past its end
        extra = p.max_draft_tokens if p.ngram_size else 0
        # Without position_ids a step may number its tokens from the sizes (GPT-2's positions:
        # padding moves them) or from the mask (BLOOM's ALiBi: it does not): the prompt probe
        # (a token alone and left-padded) and the past probe below tell, buckets tried on.
        nopos = not gqa and r.position_ids is None
        if nopos and p.buckets is None:
            self._buckets = ()
        seq = self._sized(longest, extra)
        moved = prompt_padding_moves(self.session, r, seq) if nopos else None
        if moved and self._buckets is not None:
            if p.buckets is not None:
                raise ValidationError(
                    f"{ONNX}: generation: buckets were asked for, but the step has no "
                    f"position_ids input and padding the prompt moves its tokens: {moved}"
                )
            self._buckets = None
            self._exact_why = f"no position_ids input, and padding moves the tokens: {moved}"
            seq = self._sized(longest, extra)
            moved = prompt_padding_moves(self.session, r, seq)
        if moved and len(set(map(len, rows))) > 1:
            raise ValidationError(
                f"{ONNX}: generation: prompts of different lengths need a position_ids input "
                "or a step that numbers its tokens from the mask (this one numbers them from "
                f"the sizes, so left padding would move them: {moved})"
            )
        # the padding after the past (in place) or before it (``DecodeSteps``' front layout: a
        # sliding window's), else exact lengths: never a moved window
        buckets = not gqa and self._buckets is not None
        if buckets and padded_side(self.session, r, self.capacity) is None:
            moved = padding_moves(self.session, r, self.capacity, front=True)
            if nopos:
                moved = f"no position_ids input, and padding moves the tokens: {moved}"
            if p.buckets is not None:
                raise ValidationError(
                    f"{ONNX}: generation: buckets were asked for, but a past padded to "
                    f"{self.capacity} positions changes what the step computes: {moved}"
                )
            self._buckets, self._exact_why = None, moved
            seq = self._sized(longest, extra)
        # a column past the end: the token a step after the last one chooses, never shown
        # (``get_logits`` at max_length runs the model on the last token)
        width = self._length_for(self._end + 1 + extra)
        tokens = np.full((self._rows, width), p.pad_token_id, np.int32)
        mask = np.zeros((self._rows, self.capacity), np.int32)
        for i, b in enumerate(np.repeat(np.arange(len(rows)), p.num_beams)):
            row = rows[b]  # each prompt a row a beam
            tokens[i, seq - len(row) : seq] = row
            if gqa:
                mask[i, : len(row)] = 1
            else:
                mask[i, seq - len(row) : seq] = 1
        fn, program = self._fns.prefill_fn(self._rows, seq, self.capacity)
        self._mask = self._fns.put(mask)
        search = jax.tree.map(self._fns.put, self._fns.initial_search(p.batch_size, width))
        self._cache, self._pending, self._tokens, self._done, self._search, self._chosen = fn(
            self._fns.params_for(program),
            self._fns.put(tokens),
            self._mask,
            jax.random.fold_in(self._key, 0),
            search,
        )
        self._final = None
        self._going_on()
        self._length = seq + 1
        self._shown = seq
        self._ahead = 0
        self._prompt = seq
        self._lengths = [len(row) for row in rows]

    def _extend(self, tokens: Any) -> None:
        """``append_tokens`` after the prompt: the tokens shown but not yet fed to the model
        (the last generated one) and the new ones run through the model in one call
        (``DecodeSteps.extend_fn``; their count in a bucket where it fits), their keys and
        values joining the cache, the next token chosen (shown by the next
        ``generate_next_token``); the end tokens seen before no longer end the sequence."""
        p = self.params
        if p.batch_size != 1 or p.num_beams != 1:
            raise ValidationError(
                f"{ONNX}: generation: append_tokens after the prompt takes one sequence "
                f"(batch_size 1, num_beams 1), not batch_size {p.batch_size} and num_beams "
                f"{p.num_beams}"
            )
        rows = tokens.tolist() if hasattr(tokens, "tolist") else list(tokens)
        if rows and isinstance(rows[0], list | tuple):
            if len(rows) != 1:
                raise ValidationError(f"{ONNX}: generation: {len(rows)} rows for one sequence")
            rows = list(rows[0])
        new = [int(t) for t in rows]
        if not new:
            raise ValidationError(f"{ONNX}: generation: no tokens to append")
        fed, shown = self._length - 1, self._shown  # positions in the cache; tokens shown
        if shown + len(new) >= self._end:
            raise ValidationError(
                f"{ONNX}: generation: {len(new)} tokens more leave nothing to generate within "
                f"max_length {p.max_length}"
            )
        if self._ahead:  # steps ran after the end: their state dropped first
            self._cut(self._length)
        if self._length > shown + 1:  # a speculative round's tokens not shown: dropped
            self._cut(shown + 1)
            fed = shown
        chunk = [int(t) for t in np.asarray(self._tokens[0, fed:shown])] + new
        gqa = self.roles.kind == "gqa"
        # the positions cached: a GroupQueryAttention cache holds the prompt without its
        # padding first (the tokens keep it)
        cached = fed - (self._prompt - self._lengths[0]) if gqa else fed
        room = min(self._tokens.shape[1] - fed, self.capacity - cached)
        size = self._length_for(len(chunk))
        size = size if size <= room else len(chunk)  # a bucket where it fits
        past = self._length_for(cached + size if gqa else fed)
        past = past if not gqa or past <= self.capacity else cached + size
        fn, program = self._fns.extend_fn(size, past, self.capacity)
        ids = np.full((1, size), p.pad_token_id, np.int32)
        ids[0, : len(chunk)] = chunk
        state = fn(self._fns.params_for(program), self._state(), self._fns.put(ids),
                   self._fns.put(np.int32(fed)), self._fns.put(np.int32(len(chunk))))  # fmt: skip
        self._set_state(state)
        self._length, self._shown = shown + len(new) + 1, shown + len(new)
        self._going_on()

    def rewind_to(self, length: int) -> None:
        """onnxruntime-genai's ``rewind_to``: the sequence (one, no beams) cut back to its
        first ``length`` tokens (at least 1, at most those shown), the cache's positions after
        them dropped; the next ``generate_next_token`` chooses the token after them, or
        ``append_tokens`` adds a turn (a cached system prompt: generate, rewind, append)."""
        p = self.params
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        if p.batch_size != 1 or p.num_beams != 1:
            raise ValidationError(
                f"{ONNX}: generation: rewind_to takes one sequence (batch_size 1, num_beams 1)"
            )
        pad = self._prompt - self._lengths[0]
        if isinstance(length, bool) or not isinstance(length, int | np.integer):
            raise ValidationError(f"{ONNX}: generation: rewind_to takes an int, got {length!r}")
        if not 1 <= length <= self._shown - pad:
            raise ValidationError(
                f"{ONNX}: generation: rewind_to({length}): the sequence holds "
                f"{self._shown - pad} tokens (1 to that many stay)"
            )
        self._cut(pad + int(length))
        self._shown = self._length
        self._going_on()

    def _cut(self, column: int) -> None:
        """The device's state cut back to the tokens before ``column`` (``rewind_fn``): the
        token at ``column - 1`` chosen but not fed, as after a step, the cache keeping the
        positions before it. The device may have run further than the host's length says
        (``_ahead``: steps dispatched after every row had ended, which ``_settle`` dropped);
        its pending keys and values are then those of its own last position."""
        pad = self._prompt - self._lengths[0]
        keep = column - 1 - (pad if self.roles.kind == "gqa" else 0)
        fed = max(self._ahead, self._length) - 1
        state = self._fns.rewind_fn()(self._state(), self._fns.put(np.int32(fed)),
                                      self._fns.put(np.int32(keep)))  # fmt: skip
        self._set_state(state)
        self._length, self._ahead = column, 0

    def generate_next_token(self) -> None:
        """One token more in each sequence, as onnxruntime-genai's call gives it: the first
        after ``append_tokens`` is the prefill's choice (already made: shown now); each later
        one a decode step (the cache takes the last token's keys and values, and the next
        token joins the sequences)."""
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        if self._shown >= self._end:
            raise ValidationError(
                f"{ONNX}: generation: max_length {self.params.max_length} reached"
            )
        if self._shown < self._length:  # chosen already (a prefill, a turn, a round)
            self._unpeek()
            self._shown += 1
            return
        if self._ahead:  # steps ran after the end: their state dropped first
            self._cut(self._length)
        if self.params.ngram_size and not self._at_end():
            self._speculate(1)
        else:  # (every row ended: a step gives each its pad id, as without drafts)
            self._dispatch(1)
        self._shown += 1

    def _dispatch(self, count: int) -> Any:
        """``count`` decode steps from the current length in one dispatch
        (``DecodeSteps.steps_fn``), not waited for; returns the device scalar of the length
        at which every row had ended (``NEVER``: none did)."""
        made = (*self._step_id(self._length), count)
        fn, program = self._fns.steps_fn(*made)
        state = self._state()
        # the length on the device, as the last dispatch left it (donated, as the state is), else
        # put there: never a host scalar, which the call would copy in at every dispatch (one
        # H200, the 1B-class float16 decoder a token a dispatch: 913 -> 784 us of host time a
        # dispatch). (jnp.int32 would dispatch a conversion of its own first.)
        length = self._device_length
        if length is None or length[1] != self._length:
            length = (self._fns.put(np.int32(self._length)), self._length)
        state, stop, self._all_ended, after = fn(self._fns.params_for(program), state, length[0])
        self._set_state(state)
        self._fns.ready.add(made)
        self._length += count
        self._device_length = (after, self._length)
        return stop

    def _state(self) -> tuple:
        """The decode steps' state (``decode_steps``' docstring says what each part is)."""
        return (self._cache, self._pending, self._mask, self._tokens, self._done, self._key,
                self._search, self._chosen)  # fmt: skip

    def _set_state(self, state: tuple) -> None:
        """``_state()``'s parts, from what a step, a turn or a cut returned."""
        (self._cache, self._pending, self._mask, self._tokens, self._done, self._key,
         self._search, self._chosen) = state  # fmt: skip
        self._final = None

    def _going_on(self) -> None:
        """Generation goes on from the state set (a prompt, a turn, a rewind): ended where
        its rows are, nothing read behind."""
        self._all_ended = jnp.all(self._done) if self._fns.eos else False
        self._behind, self._ended, self._peeked = None, False, False

    def _unpeek(self) -> None:
        """The step ``get_logits`` ran is now one the generator shows: its rows' ends count."""
        if self._peeked:
            self._all_ended, self._peeked = self._peek_ended, False

    def _step_id(self, length: int) -> tuple:
        return (self._rows, self._step_key(length), self._gqa_capacity)

    def compile_ahead(self, workers: int | None = None) -> int:
        """Compiles now the decode steps of every bucket this generation can still reach (up
        to ``max_length``), which the steps would otherwise compile one at a time as they reach
        each bucket: each step (and, with ``steps_per_dispatch`` > 1, each bucket's run of that
        many; with speculative decoding, each bucket's rounds) is traced here and XLA compiles
        them side by side on ``workers`` threads (default: as many as the programs, at most the
        CPUs). What a server calls after its
        first ``append_tokens`` to take a long generation's compiles at once. Returns the
        number of programs compiled."""
        import os
        from concurrent.futures import ThreadPoolExecutor

        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        span: dict[tuple, int] = {}  # each step's lengths still to come
        for n in range(self._length, self._end):
            made = self._round_id(n) if self.params.ngram_size else self._step_id(n)
            span[made] = span.get(made, 0) + 1
        count = int(self.params.steps_per_dispatch)
        if self.params.ngram_size:  # the rounds' programs (a count of rounds a call's value)
            todo = list(span)
        else:
            todo = [(*i, 1) for i in span] + [(*i, count) for i in span if 1 < count <= span[i]]
        todo = [made for made in todo if made not in self._fns.ready]
        if not todo:
            return 0
        state = self._state()
        shapes = jax.tree.map(
            lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), state
        )
        lowered = []
        for made in todo:  # (the scalars on the device, as ``_dispatch`` and ``_speculate``)
            if made[0] == "rounds":
                fn, program = self._fns.rounds_fn(*made[1:])
                scalars = [self._fns.put(np.int32(0))] * 4
            else:
                fn, program = self._fns.steps_fn(*made)
                scalars = [self._fns.put(np.int32(0))]
            lowered.append(fn.trace(self._fns.params_for(program), shapes, *scalars).lower())
        with ThreadPoolExecutor(max(1, min(len(lowered), workers or os.cpu_count() or 1))) as pool:
            list(pool.map(lambda low: low.compile(), lowered))
        self._fns.ready.update(todo)
        return len(todo)

    def generate_until_done(self) -> None:
        """Decode steps until ``is_done()``, bucket by bucket (``generate_bucket``): runs of
        ``steps_per_dispatch`` steps a dispatch, queued without waiting for the device."""
        while self.generate_bucket():
            pass

    def generate_bucket(self) -> bool:
        """The decode steps whose past runs at the current bucket (with exact lengths, one
        step), a dispatch a step (``steps_per_dispatch`` > 1: runs of that many in one, the
        rest a step each), queued without waiting for the device, every token shown after
        them (the prefill's too; ``generate_next_token``); with end tokens watched,
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
        self._unpeek()
        more = self._rounds() if self.params.ngram_size else self._bucket()
        self._shown = min(self._length, self._end)  # (not a token ``get_logits`` chose after it)
        return more

    def _bucket(self) -> bool:
        """``generate_bucket``'s steps (the tokens shown after them)."""
        watch = bool(self._fns.eos)
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

    def _rounds(self) -> bool:
        """``generate_bucket``'s speculative rounds: one dispatch of those the current past
        bucket's program holds (``_speculate``); False when nothing is left to do."""
        if self._at_end():
            return False
        self._speculate(NEVER)
        return not self._at_end()

    def _at_end(self) -> bool:
        return self._length >= self._end or (bool(self._fns.eos) and bool(self._all_ended))

    def _speculate(self, count: int) -> None:
        """Up to ``count`` speculative rounds in one dispatch (``DecodeSteps.rounds_fn``: the
        drafts looked up and checked on the device, as many rounds as the program for the
        current past bucket holds), the length they reached read back (a sync a dispatch)."""
        made = self._round_id(self._length)
        fn, program = self._fns.rounds_fn(*made[1:])
        self._fns.ready.add(made)
        scalars = (self._length, self._prompt - self._lengths[0], self._end, count)
        state, length, counts = fn(self._fns.params_for(program), self._state(),
                                   *(self._fns.put(np.int32(v)) for v in scalars))  # fmt: skip
        self._set_state(state)
        self._length = int(length)
        self._stats.add(np.asarray(counts))
        if self._fns.eos:
            self._all_ended = jnp.all(self._done)

    def _round_id(self, length: int) -> tuple:
        """The speculative rounds' program for a round at ``length`` (``rounds_fn``'s
        arguments): the past's bucket (a GroupQueryAttention step's: the mask's over the whole
        buffer, as a turn's), the chunk of the last token and its drafts."""
        p = self.params
        start = self._prompt - self._lengths[0]  # the row's first real column
        chunk, fed = p.max_draft_tokens + 1, length - 1
        if self.roles.kind == "gqa":
            past = self._length_for(fed - start + chunk)
            past = past if past <= self.capacity else fed - start + chunk
        else:
            past = self._length_for(fed)
        return ("rounds", chunk, past, self._gqa_capacity, p.ngram_size)

    def get_speculative_stats(self) -> dict:
        """onnxruntime-genai's ``get_speculative_stats``: speculative decoding's rounds, drafts
        proposed and accepted, the model's calls, the tokens they gave (``speculative``)."""
        return self._stats.as_dict()

    def _settle(self, stop: Any) -> bool:
        """Whether every row had ended by the length ``stop`` (a dispatch's report) says; if so
        the generation ends there, the steps queued after it dropped (they changed no token
        the generator shows)."""
        stop = int(stop)
        if stop == NEVER:
            return False
        if stop < self._length:  # the device's state is some steps further (``_cut``)
            self._ahead = max(self._ahead, self._length)
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
        if self._shown < min(self._length, self._end) and not self._peeked:
            return False  # a token still to show (the prefill's or a turn's choice)
        if self._shown >= self._end or self._ended:
            return True
        return bool(self._fns.eos) and bool(self._all_ended)

    def get_sequence(self, index: int) -> np.ndarray:
        """Row ``index``: its prompt (without padding) and the tokens generated so far. With
        beams, sequence ``index`` of ``batch_size * num_return_sequences``: prompt ``index //
        num_return_sequences``'s hypothesis of that rank (best first), its open beams taken as
        hypotheses where it is not done (as onnxruntime-genai's ``get_sequence``); a
        hypothesis that ended with an end token holds the tokens before it."""
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        if self.params.num_beams > 1:
            return self._hypotheses()[index]
        tokens = np.asarray(self._tokens[index, : self._shown])
        return tokens[self._prompt - self._lengths[index] :]

    def _hypotheses(self) -> list[np.ndarray]:
        """Beam search's result so far: each prompt's ``num_return_sequences`` best
        hypotheses, in order (``beams.finalize`` over the open beams)."""
        if self._final is None or self._final[0] != self._length:
            p, beams = self.params, self.params.num_beams
            # each row's real tokens: its prompt's and those generated
            lengths = np.repeat(np.asarray(self._lengths, np.int32), beams)
            lengths = lengths + np.int32(self._length - self._prompt)
            h = self._fns.finalize_fn()(
                self._search, self._tokens, self._done, self._fns.put(lengths),
                self._fns.put(np.int32(self._length)),
            )  # fmt: skip
            tokens, end, length = (np.asarray(h[k]) for k in ("tokens", "end", "length"))
            out = [
                tokens[b, r, end[b, r] - length[b, r] : end[b, r]]
                for b in range(p.batch_size)
                for r in range(p.num_return_sequences)
            ]
            self._final = (self._length, out)
        return self._final[1]

    def get_next_tokens(self) -> np.ndarray:
        """The last token shown of each row (after ``append_tokens``, each prompt's last; with
        beams, of each beam: ``batch_size * num_beams``)."""
        return np.asarray(self._tokens[:, self._shown - 1])

    def token_count(self) -> int:
        """onnxruntime-genai's ``token_count``: the tokens of the sequences so far (the
        longest prompt and those generated; 0 before ``append_tokens``)."""
        if self._tokens is None:
            return 0
        return self._shown - (self._prompt - max(self._lengths))

    def get_logits(self) -> np.ndarray:
        """onnxruntime-genai's ``get_logits``: the model's logits after the last token of each
        sequence (after ``append_tokens``, the prompt's last), from which
        ``generate_next_token`` chooses the next one: float32 [batch, 1, vocabulary]. Where
        the model has not run on that token yet, a decode step runs it now (the step the next
        ``generate_next_token`` shows; at max_length one past it, whose token is never
        shown). One row a sequence: no beams."""
        self._one_row_each("get_logits")
        self._run_to_shown()
        return np.asarray(self._chosen[0])[:, None, :]

    def set_logits(self, logits: Any) -> None:
        """onnxruntime-genai's ``set_logits``: the next token of each sequence chosen from
        ``logits`` ([batch, 1, vocabulary] or [batch, vocabulary]) in place of the model's, as
        ``generate_next_token`` would choose it (the penalties, then greedy or sampled); the
        next ``generate_next_token`` shows it. Where the model has not run on the last token
        yet, it runs first, as for ``get_logits`` (onnxruntime-genai refuses the call there:
        docs/semantics.md). No beams."""
        self._one_row_each("set_logits")
        where = f"{ONNX}: generation: set_logits"
        if self._shown >= self._end:
            raise ValidationError(f"{where}: max_length {self.params.max_length} reached")
        try:
            values = np.asarray(logits, dtype=np.float32)
        except (TypeError, ValueError) as e:
            raise ValidationError(f"{where}: logits are not numbers: {e}") from None
        self._run_to_shown()
        rows, vocab = self._chosen[0].shape
        if values.ndim == 3 and values.shape[1] == 1:
            values = values[:, 0]
        if values.shape != (rows, vocab):
            raise ValidationError(
                f"{where}: logits of shape {list(np.shape(logits))}, not [{rows}, 1, {vocab}] "
                f"or [{rows}, {vocab}] (batch, vocabulary)"
            )
        at = self._fns.put(np.int32(self._length - 1))
        state, ended = self._fns.choose_fn()(self._state(), self._fns.put(values), at)
        self._set_state(state)
        if not self._fns.eos:
            return
        if self._peeked:
            self._peek_ended = ended
        else:
            self._all_ended = ended

    def _one_row_each(self, call: str) -> None:
        if self._tokens is None:
            raise ValidationError(f"{ONNX}: generation: append_tokens(prompts) comes first")
        if self.params.ngram_size:
            raise ValidationError(
                f"{ONNX}: generation: {call} with speculative decoding (ngram_size "
                f"{self.params.ngram_size}) is not supported"
            )
        if self.params.num_beams != 1:
            raise ValidationError(
                f"{ONNX}: generation: {call} takes one row a sequence (num_beams 1, not "
                f"{self.params.num_beams})"
            )

    def _run_to_shown(self) -> None:
        """The model run on the last token shown, if it has not (``get_logits``): a decode
        step now, its token not shown until the next ``generate_next_token``."""
        if self._ahead:  # steps ran after the end: their state dropped first
            self._cut(self._length)
        if self._length == self._shown + 1:  # the prefill's, a turn's or such a step's choice
            return
        before = self._all_ended
        self._dispatch(1)
        self._peek_ended, self._all_ended, self._peeked = self._all_ended, before, True

    @property
    def generated(self) -> np.ndarray:
        """[batch, tokens generated so far] (the prompt excluded). With beams, [batch_size *
        num_return_sequences, ...]: each prompt's best hypotheses (``get_sequence``), the
        tokens after the prompt, padded with ``pad_token_id`` to the same length."""
        if self.params.num_beams == 1:
            return np.asarray(self._tokens[:, self._prompt : self._shown])
        p = self.params
        out = np.full((len(self._hypotheses()), self._length - self._prompt), p.pad_token_id,
                      np.int32)  # fmt: skip
        for i, seq in enumerate(self._hypotheses()):
            new = seq[self._lengths[i // p.num_return_sequences] :]
            out[i, : len(new)] = new
        return out


def generate(session: Any, prompts: Any, max_new_tokens: int = 64, **options: Any) -> np.ndarray:
    """Generates up to ``max_new_tokens`` after each prompt (``GeneratorParams`` options:
    ``do_sample``, ``top_k``, ``top_p``, ``temperature``, ``repetition_penalty``,
    ``min_length``, ``no_repeat_ngram_size``, ``num_beams``, ``num_return_sequences``,
    ``eos_token_id``, ``seed``, ``buckets``...): [batch, n] ids, n up to ``max_new_tokens``
    (fewer when every row met an end token), rows that ended early padded with
    ``pad_token_id``; with beams, [batch * num_return_sequences, n], each prompt's best
    sequences in order. The decode steps run on the
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
