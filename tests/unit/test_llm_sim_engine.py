"""The simulator's time model with injected time, its profiles, and its pure answer helpers."""

from __future__ import annotations

import random
import statistics
from dataclasses import replace

import msgspec
import pytest

from evobus.infra.llm_sim.answers import ChatMessage, ChatRequest, GenericAnswerer, schema_example
from evobus.infra.llm_sim.engine import (
    PREFIX_BLOCK_TOKENS,
    Completed,
    Engine,
    Faults,
    count_tokens,
    prefix_blocks,
)
from evobus.infra.llm_sim.profiles import QWEN3_8B_H100, TINY, Profile, get_profile, list_profiles
from evobus.infra.llm_sim.script import Script, ScriptError, parse_rules
from evobus.schemas.llm import ActorDraft, CriticVerdict

DEFAULT = QWEN3_8B_H100


def makespan(
    profile: Profile, batch: int, tokens: int, *, prompt_tokens: int = 0, time_scale: float = 1.0
) -> float:
    """Seconds until ``batch`` requests of ``tokens`` output tokens, all sent at 0, finish."""
    engine = Engine(profile, time_scale=time_scale)
    for _ in range(batch):
        engine.submit(prompt_tokens, [tokens], now=0.0)
    done = engine.advance(1e9)
    assert len(done) == batch
    return max(completed.finished_at for completed in done)


def throughput(profile: Profile, batch: int, tokens: int = 200) -> float:
    return batch * tokens / makespan(profile, batch, tokens)


def test_aggregate_decode_rate_rises_with_the_batch_and_saturates() -> None:
    rates = {batch: throughput(DEFAULT, batch) for batch in (1, 8, 64, 256, 512, 1024)}
    assert rates[1] == pytest.approx(DEFAULT.decode_tokens_per_s_batch1, rel=1e-6)
    assert rates[1] < rates[8] < rates[64] < rates[256] < rates[512] < rates[1024]
    assert rates[8] > 7 * rates[1]  # memory-bound: batching is almost free at first
    assert rates[1024] < 1.1 * rates[512]  # …and saturates
    assert rates[1024] < DEFAULT.peak_decode_tokens_per_s
    assert rates[1024] == pytest.approx(DEFAULT.decode_rate(1024), rel=1e-6)


def test_requests_beyond_max_num_seqs_wait_for_a_place() -> None:
    engine = Engine(TINY)
    ids = [engine.submit(0, [10], now=0.0) for _ in range(6)]
    engine.advance(1e-6)
    assert (engine.running, engine.waiting) == (4, 2)
    done = {completed.request_id: completed for completed in engine.advance(1e9)}
    first_wave = {done[i].finished_at for i in ids[:4]}
    assert len(first_wave) == 1
    first_free = first_wave.pop()
    for late in ids[4:]:
        assert done[late].first_token_at > first_free
        assert done[late].finished_at > first_free
    assert engine.counters.completed == 6 and engine.counters.output_tokens == 60


def test_prefill_adds_time_proportional_to_prompt_tokens() -> None:
    base = makespan(DEFAULT, 1, 1)
    one = makespan(DEFAULT, 1, 1, prompt_tokens=16_000)
    two = makespan(DEFAULT, 1, 1, prompt_tokens=32_000)
    assert one - base == pytest.approx(16_000 / DEFAULT.prefill_tokens_per_s)
    assert two - base == pytest.approx(2 * (one - base))


def test_the_choices_of_one_request_share_its_prefill() -> None:
    engine = Engine(DEFAULT)
    engine.submit(16_000, [1, 1, 1], now=0.0)
    (done,) = engine.advance(1e9)
    assert done.output_tokens == (1, 1, 1)
    expected = 16_000 / DEFAULT.prefill_tokens_per_s + DEFAULT.decode_step_seconds(3)
    assert done.finished_at == pytest.approx(expected)


def first_token_after(engine: Engine, text: str, now: float) -> float:
    """Seconds from submitting ``text`` alone at ``now`` to its first token."""
    engine.submit(count_tokens(text), [1], now=now, prefix=prefix_blocks(text))
    (done,) = engine.advance(now + 50.0)  # the calls below come 10 s or more apart
    return done.first_token_at - now


def test_a_prompt_whose_prefix_is_cached_prefills_only_the_rest() -> None:
    shared = "You are an expert. Improve the program below.\n" * 60  # 2760 chars: 43 blocks
    first, second = shared + "parent A\n" * 40, shared + "parent B\n" * 40
    engine = Engine(DEFAULT)
    cold = first_token_after(engine, first, 0.0)
    warm = first_token_after(engine, second, 100.0)  # shares only the leading blocks
    again = first_token_after(engine, second, 200.0)  # the whole prompt is cached now

    def full_blocks(text: str) -> int:  # tokens in whole blocks: a partial one is not cached
        return len(text) // (PREFIX_BLOCK_TOKENS * 4) * PREFIX_BLOCK_TOKENS

    shared_tokens = full_blocks(shared)
    assert engine.counters.cached_prompt_tokens == shared_tokens + full_blocks(second)
    assert again < warm < cold
    assert cold - warm == pytest.approx(shared_tokens / DEFAULT.prefill_tokens_per_s)
    off = Engine(DEFAULT, prefix_caching=False)
    assert first_token_after(off, first, 0.0) == pytest.approx(cold)
    assert first_token_after(off, first, 100.0) == pytest.approx(cold)  # no cache: no gain
    assert off.counters.cached_prompt_tokens == 0


def test_the_prefix_cache_forgets_the_least_recently_used_blocks() -> None:
    small = replace(TINY, prefix_cache_tokens=4 * PREFIX_BLOCK_TOKENS)
    engine = Engine(small)
    one, two = "a" * 64 * 4, "b" * 64 * 4  # four blocks each: the cache holds one prompt
    first_token_after(engine, one, 0.0)
    first_token_after(engine, two, 10.0)
    hits = engine.counters.cached_prompt_tokens
    first_token_after(engine, one, 20.0)  # evicted by ``two``: prefilled again
    assert engine.counters.cached_prompt_tokens == hits == 0
    first_token_after(engine, one, 30.0)  # all four blocks, less the last token computed
    assert engine.counters.cached_prompt_tokens == count_tokens(one) - 1


def test_output_lengths_are_long_tailed_and_bounded() -> None:
    engine = Engine(DEFAULT, seed=7)
    draws = sorted(engine.draw_output_tokens(0, 10**6) for _ in range(5000))
    median = statistics.median(draws)
    assert median == pytest.approx(DEFAULT.output_median_tokens, rel=0.1)
    p99 = draws[int(0.99 * len(draws))]
    assert p99 > 5 * median  # lognormal σ 0.9: the 99th percentile is ≈ 8× the median
    assert statistics.mean(draws) > median
    assert DEFAULT.output_min_tokens <= min(draws) <= max(draws) <= DEFAULT.output_max_tokens
    assert engine.draw_output_tokens(5000, 10**6) >= 5000  # never shorter than the content
    assert all(engine.draw_output_tokens(0, 10) <= 10 for _ in range(100))
    assert engine.draw_output_tokens(50, 10) == 10  # capped even below the content


def test_draws_are_deterministic_per_seed() -> None:
    def lengths(seed: int) -> list[int]:
        engine = Engine(TINY, seed=seed)
        return [engine.draw_output_tokens(0, 1000) for _ in range(50)]

    assert lengths(1) == lengths(1)
    assert lengths(1) != lengths(2)


def test_time_scale_scales_every_duration() -> None:
    for batch, prompt in ((1, 0), (16, 2000), (300, 500)):
        full = makespan(DEFAULT, batch, 50, prompt_tokens=prompt)
        fast = makespan(DEFAULT, batch, 50, prompt_tokens=prompt, time_scale=0.05)
        assert fast == pytest.approx(0.05 * full)


def test_advancing_in_small_steps_gives_the_same_history_as_one_jump() -> None:
    rng = random.Random(3)
    arrivals = sorted(
        (rng.uniform(0, 2), rng.randint(0, 3000), rng.randint(1, 300)) for _ in range(40)
    )

    def finish_times(step: float | None) -> dict[int, float]:
        engine = Engine(replace(DEFAULT, max_num_seqs=8))
        done: list[Completed] = []
        clock = 0.0
        for at, prompt, tokens in arrivals:
            while step is not None and clock + step < at:
                clock += step
                done.extend(engine.advance(clock))
            engine.submit(prompt, [tokens], now=at)
        done.extend(engine.advance(1e9))
        return {completed.request_id: completed.finished_at for completed in done}

    jumped, stepped = finish_times(None), finish_times(0.013)
    assert len(jumped) == len(stepped) == 40
    for request_id, finished in jumped.items():
        assert stepped[request_id] == pytest.approx(finished, abs=1e-9)


def test_next_event_is_never_later_than_a_completion() -> None:
    rng = random.Random(5)
    engine = Engine(TINY)
    now = 0.0
    for _ in range(30):
        engine.submit(rng.randint(0, 500), [rng.randint(1, 60)], now=now)
        now += rng.uniform(0, 0.1)
        engine.advance(now)
        wake = engine.next_event_at()
        assert wake is not None
        assert not engine.advance(wake - 1e-9)
    while (wake := engine.next_event_at()) is not None:
        assert not engine.advance(wake - 1e-9)
        engine.advance(wake)
    assert engine.counters.completed == 30


def test_utilisation_series_and_window_mean() -> None:
    engine = Engine(TINY)
    for _ in range(4):
        engine.submit(0, [100], now=1.0)
    (*_, last) = sorted(engine.advance(100.0), key=lambda c: c.finished_at)
    busy = last.finished_at - 1.0
    full = engine.utilisation(last.finished_at, busy)
    assert full.mean_active == pytest.approx(4.0)
    assert full.utilisation == pytest.approx(1.0)
    start, active = full.samples[0]
    assert start == pytest.approx(1.0) and active == 4
    later = last.finished_at + busy
    engine.advance(later)
    half = engine.utilisation(later, 2 * busy)
    assert half.mean_active == pytest.approx(2.0)
    assert [active for _, active in half.samples] == [4, 0]
    everything = engine.utilisation(later, 1e6)
    assert everything.window_s == pytest.approx(later)  # clipped to the history
    assert [active for _, active in everything.samples] == [0, 4, 0]


def test_injected_faults_follow_the_rates() -> None:
    failing = Engine(TINY, seed=1, faults=Faults(error_rate=1.0))
    statuses = {failing.draw_fault().status for _ in range(50)}
    assert statuses == {500, 429}
    spiky = Engine(TINY, time_scale=0.5, faults=Faults(spike_rate=1.0, spike_seconds=2.0))
    assert spiky.draw_fault().delay_s == pytest.approx(1.0)
    assert Engine(TINY).draw_fault().status is None
    with pytest.raises(ValueError, match="error_rate"):
        Faults(error_rate=1.5)


def test_profiles_are_listed_and_an_unknown_name_lists_them() -> None:
    names = [profile.name for profile in list_profiles()]
    assert names[0] == "qwen3-8b-h100" and "tiny" in names
    assert get_profile("tiny") is TINY
    with pytest.raises(ValueError, match=r"qwen3-8b-h100, tiny"):
        get_profile("gpt-5")
    assert DEFAULT.decode_rate(1) == pytest.approx(DEFAULT.decode_tokens_per_s_batch1)
    assert DEFAULT.decode_rate(round(DEFAULT.saturation_batch)) == pytest.approx(
        0.9 * DEFAULT.peak_decode_tokens_per_s, rel=1e-3
    )
    with pytest.raises(ValueError, match="peak"):
        replace(TINY, peak_decode_tokens_per_s=100.0)


def test_tokens_are_counted_at_four_characters() -> None:
    assert [count_tokens(text) for text in ("", "abc", "abcd", "abcde")] == [0, 1, 1, 2]


# The pure answer helpers.


def request(text: str, **fields: object) -> ChatRequest:
    message = ChatMessage(role="user", text=text)
    return ChatRequest(model="m", messages=(message,), **fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("output", [CriticVerdict, ActorDraft])
def test_a_schema_example_decodes_as_its_type(output: type[msgspec.Struct]) -> None:
    value = schema_example(msgspec.json.schema(output), label=output.__name__)
    decoded = msgspec.convert(value, output)
    assert "simulated" in msgspec.json.encode(decoded).decode()


def test_a_schema_example_honours_bounds_refs_and_unions() -> None:
    schema = {
        "$ref": "#/$defs/Top",
        "$defs": {
            "Top": {
                "type": "object",
                "properties": {
                    "items": {"type": "array", "items": {"$ref": "#/$defs/Leaf"}, "minItems": 2},
                    "count": {"type": "integer", "minimum": 3},
                    "ratio": {"type": "number", "exclusiveMaximum": -1},
                    "kind": {"enum": ["b", "a"]},
                    "maybe": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 4}]},
                    "when": {"type": "string", "format": "date-time"},
                },
                "required": ["items", "count", "ratio", "kind", "maybe", "when"],
            },
            "Leaf": {
                "type": "object",
                "properties": {"ok": {"type": "boolean"}},
                "required": ["ok"],
            },
        },
    }
    assert schema_example(schema) == {
        "items": [{"ok": False}, {"ok": False}],
        "count": 3,
        "ratio": -2,
        "kind": "b",
        "maybe": "simu",
        "when": "1970-01-01T00:00:00Z",
    }


def test_free_text_says_it_is_the_simulator() -> None:
    texts = GenericAnswerer().answer(request("hello", n=2))
    assert len(texts) == 2 and all(text.startswith("[evobus-llm-sim]") for text in texts)


def test_script_rules_match_in_order_within_their_schema_and_times() -> None:
    script = Script(
        parse_rules(
            b'[{"pattern": "diag", "response": {"a": 1}, "schema": "S", "times": 1},'
            b' {"pattern": "d.ag", "response": "second"}]',
            source="test",
        )
    )
    assert script.answer(request("please diagnose", schema_name="S", n=2)) == ['{"a":1}'] * 2
    assert script.answer(request("please diagnose", schema_name="S")) == ["second"]
    assert script.answer(request("nothing here")) is None


def test_a_bad_script_names_the_bad_key() -> None:
    with pytest.raises(ScriptError, match=r"\$\[0\]\.times"):
        parse_rules(b'[{"pattern": "x", "response": "y", "times": 0}]', source="test")
    with pytest.raises(ScriptError, match="bad pattern"):
        parse_rules(b'[{"pattern": "(", "response": "y"}]', source="test")


def test_each_kind_of_request_draws_the_same_lengths_whatever_comes_between() -> None:
    alone = Engine(TINY, seed=3)
    proposals = [alone.draw_output_tokens(0, 1000, "ActorDraft") for _ in range(20)]
    mixed = Engine(TINY, seed=3)
    drawn: list[int] = []
    for index in range(20):  # another tool's children, in free text, between other calls
        if index % 3 == 0:
            mixed.draw_output_tokens(0, 1000, "CriticVerdict")
        drawn.append(mixed.draw_output_tokens(0, 1000, "text"))
    assert drawn == proposals  # common random numbers: the n-th child, the n-th length
    assert len(set(proposals)) > 1
