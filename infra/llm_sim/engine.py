"""The time model: continuous batching as vLLM's scheduler does it, with time injected.

Requests wait in a FIFO queue; at the start of every engine step the scheduler admits waiting
sequences while fewer than ``max_num_seqs`` run, and every running sequence then emits one
token. A step lasts the prefill of the sequences it admitted (``prompt_tokens /
prefill_tokens_per_s``) plus one decode step, whose length grows linearly with the batch
(``Profile.decode_step_seconds``): aggregate throughput rises with the batch and saturates. A
sequence finishes when it has emitted its target length. All durations are multiplied by
``time_scale``.

The engine never reads a clock: ``submit`` and ``advance`` take the time, so the same model runs
in unit tests with made-up times and in the server with the wall clock. Runs of identical steps
(no admission possible, no sequence finishing) are processed in one go, so a long idle-free run
costs one pass over the batch, not one per token. Not modelled: the KV cache (which can cap
concurrency before ``max_num_seqs``), chunked-prefill token budgets, preemption.

Automatic prefix caching, on by default as in vLLM V1 (``prefix_caching``): a prompt's full
blocks of ``PREFIX_BLOCK_TOKENS`` tokens are identified by a chain of hashes (``prefix_blocks``:
a block is the same only when everything before it is too); a sequence admitted while the
leading blocks of its prompt are cached prefills only the rest, and its blocks are cached from
then on, the least recently used evicted beyond ``Profile.prefix_cache_tokens``. The ``n``
choices of one request share one prefill.
"""

from __future__ import annotations

import bisect
import math
import random
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass

from evobus.infra.llm_sim.profiles import Profile

CHARS_PER_TOKEN = 4
# vLLM's default KV-cache block size: prefix caching shares whole blocks only.
PREFIX_BLOCK_TOKENS = 16


def count_tokens(text: str) -> int:
    """Tokens in ``text``, counted as one per 4 characters (the usual BPE rule of thumb)."""
    return -(-len(text) // CHARS_PER_TOKEN)


def prefix_blocks(text: str) -> tuple[int, ...]:
    """The chained hashes of ``text``'s full prefix-cache blocks (``PREFIX_BLOCK_TOKENS``
    tokens at ``CHARS_PER_TOKEN`` characters each): two prompts share a block's hash only when
    they agree on everything up to its end, as vLLM's block hashes do."""
    size = PREFIX_BLOCK_TOKENS * CHARS_PER_TOKEN
    hashes: list[int] = []
    previous = 0
    for start in range(0, len(text) - size + 1, size):
        previous = hash((previous, text[start : start + size]))
        hashes.append(previous)
    return tuple(hashes)


@dataclass(frozen=True, kw_only=True)
class Faults:
    """Faults injected into requests, each drawn independently per request.

    Attributes:
        error_rate: fraction of requests refused at once with 500 or 429 (half each).
        spike_rate: fraction of requests whose answer is held back by a latency spike.
        spike_seconds: the length of one spike (simulated seconds, scaled by ``time_scale``).
    """

    error_rate: float = 0.0
    spike_rate: float = 0.0
    spike_seconds: float = 0.0

    def __post_init__(self) -> None:
        for name in ("error_rate", "spike_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if self.spike_seconds < 0:
            raise ValueError(f"spike_seconds must be at least 0, got {self.spike_seconds}")


@dataclass(frozen=True)
class Fault:
    """What happens to one request: an error status to answer at once, or an extra delay."""

    status: int | None = None
    delay_s: float = 0.0


@dataclass(frozen=True, kw_only=True)
class Completed:
    """A request whose every sequence has emitted its target length.

    Attributes:
        request_id: the id ``submit`` returned.
        submitted_at, first_token_at, finished_at: engine times.
        output_tokens: each sequence's length, in choice order.
    """

    request_id: int
    submitted_at: float
    first_token_at: float
    finished_at: float
    output_tokens: tuple[int, ...]


@dataclass(frozen=True, kw_only=True)
class Utilisation:
    """How full the batch was over a window.

    Attributes:
        window_s: the window actually covered (shorter than asked when history is shorter).
        mean_active: time-weighted mean of running sequences over the window.
        utilisation: ``mean_active / max_num_seqs``.
        samples: ``(time, running sequences)`` at each change of the batch within the window,
            the first one at the window's start.
    """

    window_s: float
    mean_active: float
    utilisation: float
    samples: list[tuple[float, int]]


@dataclass(eq=False)
class _Sequence:
    request_id: int
    arrival: float
    prompt_tokens: int
    target: int
    emitted: int = 0
    prefix: tuple[int, ...] = ()


@dataclass(eq=False)
class _Request:
    submitted_at: float
    output_tokens: tuple[int, ...]
    unfinished: int
    first_token_at: float | None = None


@dataclass(frozen=True)
class _Sample:
    time: float
    active: int
    area: float  # running-sequence·seconds accumulated up to ``time``


@dataclass(eq=False)
class _Counters:
    submitted: int = 0
    completed: int = 0
    output_tokens: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0  # prompt tokens a prefix-cache hit spared the prefill


class Engine:
    """The scheduler and clockwork of one simulated vLLM deployment.

    Args:
        profile: the deployment's numbers.
        time_scale: multiplies every simulated duration (0.05 runs the model 20× faster).
        seed: seeds the output-length and fault draws.
        faults: errors and latency spikes to inject.
        start: the engine time at which the history begins.
        sample_capacity: how many utilisation samples the ring buffer keeps.
        prefix_caching: reuse cached prompt blocks (vLLM's automatic prefix caching).
    """

    def __init__(
        self,
        profile: Profile,
        *,
        time_scale: float = 1.0,
        seed: int = 0,
        faults: Faults | None = None,
        start: float = 0.0,
        sample_capacity: int = 65_536,
        prefix_caching: bool = True,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be positive, got {time_scale}")
        self.profile = profile
        self.time_scale = time_scale
        self.faults = faults or Faults()
        self.counters = _Counters()
        self._seed = seed
        self._lengths: dict[str, random.Random] = {}  # one sequence of draws per kind
        self._fault_rng = random.Random(f"faults:{seed}")
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._requests: dict[int, _Request] = {}
        self._clock = start
        self._step_end: float | None = None
        self._samples: deque[_Sample] = deque([_Sample(start, 0, 0.0)], maxlen=sample_capacity)
        self.prefix_caching = prefix_caching
        self._cached: OrderedDict[int, None] = OrderedDict()  # block hashes, least recent first

    @property
    def running(self) -> int:
        """Sequences in the batch now."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Sequences queued for a place in the batch."""
        return len(self._waiting)

    def draw_output_tokens(self, content_tokens: int, max_tokens: int, kind: str = "") -> int:
        """A target output length drawn from the profile's lognormal distribution.

        Clipped to the profile's bounds, then raised to the answer's own ``content_tokens`` and
        capped at the request's ``max_tokens``. Each ``kind`` of request (the server passes the
        requested schema's name, or the response type) draws from a sequence of its own, every
        one seeded alike: the n-th request of a kind gets the n-th draw whatever other kinds
        came between. Two clients asking for the same answers in different formats and among
        different other calls (two tools' children, in a benchmark between them) get the same
        lengths: common random numbers, so that the comparison is of the clients, not of the
        luck of their draws.
        """
        profile = self.profile
        lengths = self._lengths.get(kind)
        if lengths is None:
            lengths = self._lengths[kind] = random.Random(f"lengths:{self._seed}")
        median = profile.output_median_tokens
        drawn = round(lengths.lognormvariate(math.log(median), profile.output_sigma))
        natural = min(max(drawn, profile.output_min_tokens), profile.output_max_tokens)
        return max(1, min(max(natural, content_tokens), max_tokens))

    def draw_fault(self) -> Fault:
        """The fault, if any, injected into the next request."""
        rng, faults = self._fault_rng, self.faults
        if faults.error_rate and rng.random() < faults.error_rate:
            return Fault(status=rng.choice((500, 429)))
        if faults.spike_rate and rng.random() < faults.spike_rate:
            return Fault(delay_s=faults.spike_seconds * self.time_scale)
        return Fault()

    def submit(
        self,
        prompt_tokens: int,
        output_tokens: Sequence[int],
        now: float,
        prefix: tuple[int, ...] = (),
    ) -> int:
        """Queue a request of ``len(output_tokens)`` sequences arriving at ``now``; its id.

        The sequences of one request share a prompt, so only the first pays its prefill, less
        the leading blocks of ``prefix`` (``prefix_blocks`` of the prompt) cached when it is
        admitted.
        """
        if not output_tokens or min(output_tokens) < 1:
            raise ValueError("a request needs at least one sequence of at least one token")
        request_id = self.counters.submitted
        self.counters.submitted += 1
        self.counters.prompt_tokens += prompt_tokens
        self._requests[request_id] = _Request(
            submitted_at=now, output_tokens=tuple(output_tokens), unfinished=len(output_tokens)
        )
        for index, target in enumerate(output_tokens):
            prefill = prompt_tokens if index == 0 else 0
            blocks = prefix if index == 0 else ()
            self._waiting.append(_Sequence(request_id, now, prefill, target, prefix=blocks))
        return request_id

    def advance(self, now: float) -> list[Completed]:
        """Run the engine up to ``now``; the requests that finished on the way."""
        completed: list[Completed] = []
        while True:
            if self._step_end is None:
                start = self._next_step_start()
                if start is None or start > now:
                    break
                self._begin_step(start)
                if self._step_end is None:
                    break
            if self._step_end > now:
                break
            completed.extend(self._finish_step())
            self._skip_identical_steps(now)
        if self._step_end is None:
            self._clock = max(self._clock, now)
        return completed

    def next_event_at(self) -> float | None:
        """The earliest time a request may finish (or a waiting one be admitted), if any.

        A lower bound: admissions only lengthen steps, so waking then is never late.
        """
        if self._step_end is None:
            return self._next_step_start()
        if self._waiting and len(self._running) < self.profile.max_num_seqs:
            return self._step_end
        fewest = min(seq.target - seq.emitted for seq in self._running)
        return self._step_end + (fewest - 1) * self._decode_seconds(len(self._running))

    def utilisation(self, now: float, since: float) -> Utilisation:
        """Mean running sequences over ``[now - since, now]`` (call ``advance(now)`` first)."""
        samples = list(self._samples)
        times = [sample.time for sample in samples]
        start = max(now - since, samples[0].time)
        window = now - start
        first = samples[max(0, bisect.bisect_right(times, start) - 1)]
        area_start = first.area + first.active * (start - first.time)
        last = samples[-1]
        area_now = last.area + last.active * (now - last.time)
        mean = (area_now - area_start) / window if window > 0 else float(len(self._running))
        shown = [(start, first.active)]
        shown.extend((s.time, s.active) for s in samples if start < s.time <= now)
        return Utilisation(
            window_s=window,
            mean_active=mean,
            utilisation=mean / self.profile.max_num_seqs,
            samples=shown,
        )

    def _decode_seconds(self, batch: int) -> float:
        return self.profile.decode_step_seconds(batch) * self.time_scale

    def _next_step_start(self) -> float | None:
        if self._running:
            return self._clock
        if self._waiting:
            return max(self._clock, self._waiting[0].arrival)
        return None

    def _begin_step(self, start: float) -> None:
        self._clock = start
        prefill = 0
        while (
            self._waiting
            and len(self._running) < self.profile.max_num_seqs
            and self._waiting[0].arrival <= start
        ):
            sequence = self._waiting.popleft()
            prefill += sequence.prompt_tokens - self._cache(sequence)
            self._running.append(sequence)
        if not self._running:
            return
        self._record(start)
        prefill_seconds = prefill / self.profile.prefill_tokens_per_s * self.time_scale
        self._step_end = start + prefill_seconds + self._decode_seconds(len(self._running))

    def _cache(self, sequence: _Sequence) -> int:
        """The prompt tokens of ``sequence`` found in the prefix cache (at least its last token
        is computed, as vLLM does); its blocks are cached from now on."""
        if not self.prefix_caching or not sequence.prefix:
            return 0
        hits = 0
        for block in sequence.prefix:
            if block not in self._cached:
                break
            hits += 1
        for block in sequence.prefix:
            self._cached[block] = None
            self._cached.move_to_end(block)
        capacity = self.profile.prefix_cache_tokens // PREFIX_BLOCK_TOKENS
        while len(self._cached) > capacity:
            self._cached.popitem(last=False)
        cached = min(hits * PREFIX_BLOCK_TOKENS, sequence.prompt_tokens - 1)
        self.counters.cached_prompt_tokens += cached
        return cached

    def _finish_step(self) -> list[Completed]:
        assert self._step_end is not None
        end = self._step_end
        self._clock, self._step_end = end, None
        self.counters.output_tokens += len(self._running)
        still: list[_Sequence] = []
        completed: list[Completed] = []
        for sequence in self._running:
            sequence.emitted += 1
            request = self._requests[sequence.request_id]
            if request.first_token_at is None:
                request.first_token_at = end
            if sequence.emitted < sequence.target:
                still.append(sequence)
                continue
            request.unfinished -= 1
            if request.unfinished == 0:
                del self._requests[sequence.request_id]
                self.counters.completed += 1
                completed.append(
                    Completed(
                        request_id=sequence.request_id,
                        submitted_at=request.submitted_at,
                        first_token_at=request.first_token_at,
                        finished_at=end,
                        output_tokens=request.output_tokens,
                    )
                )
        self._running = still
        self._record(end)
        return completed

    def _skip_identical_steps(self, now: float) -> None:
        """Run, in one go, the decode steps before ``now`` that admit nobody and finish nobody."""
        if not self._running:
            return
        if self._waiting and len(self._running) < self.profile.max_num_seqs:
            return
        step = self._decode_seconds(len(self._running))
        fewest = min(sequence.target - sequence.emitted for sequence in self._running)
        steps = min(fewest - 1, math.floor((now - self._clock) / step))
        if steps <= 0:
            return
        for sequence in self._running:
            sequence.emitted += steps
        self.counters.output_tokens += steps * len(self._running)
        self._clock += steps * step

    def _record(self, time: float) -> None:
        last = self._samples[-1]
        active = len(self._running)
        if active == last.active:
            return
        area = last.area + last.active * (time - last.time)
        self._samples.append(_Sample(time, active, area))
