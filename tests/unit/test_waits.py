"""The tests' shared waits: bounded by what is left of the running test's own timeout."""

from __future__ import annotations

import pytest

from tests.conftest import eventually, time_left, wait_until


@pytest.mark.timeout(50)
def test_time_left_is_a_share_of_the_tests_own_timeout() -> None:
    left = time_left()
    assert 30 < left <= 0.8 * 50
    assert left < time_left(0.95) <= 0.95 * 50


def test_without_a_marker_the_configured_timeout_counts(pytestconfig: pytest.Config) -> None:
    configured = float(pytestconfig.getoption("timeout", None) or pytestconfig.getini("timeout"))
    assert 0.5 * configured < time_left() <= 0.8 * configured


def test_wait_until_says_how_long_it_waited() -> None:
    calls = 0

    def third_time() -> bool:
        nonlocal calls
        calls += 1
        return calls == 3

    wait_until(third_time, interval=0.001)
    assert calls == 3
    with pytest.raises(AssertionError, match="condition not met within 0 s"):
        wait_until(lambda: False, timeout=0.01)


@pytest.mark.anyio
async def test_eventually_polls_plain_and_async_conditions() -> None:
    seen: list[int] = []

    async def filled() -> bool:
        seen.append(len(seen))
        return len(seen) >= 2

    await eventually(filled, interval=0.001)
    await eventually(lambda: len(seen) == 2)
    with pytest.raises(TimeoutError):
        await eventually(lambda: False, within=0.01)
