"""The orchestrator's results batch: its default, its variable, and a bad value named."""

from __future__ import annotations

import pytest

from evobus.bus.batch_consumer import BATCH_ENV, DEFAULT_BATCH, batch_size


def test_the_batch_is_the_default_unless_the_variable_says(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BATCH_ENV, raising=False)
    assert batch_size() == DEFAULT_BATCH
    monkeypatch.setenv(BATCH_ENV, "1")
    assert batch_size() == 1


@pytest.mark.parametrize("raw", ["0", "-3", "many", "2.5"])
def test_a_batch_that_is_not_a_whole_number_of_at_least_one_is_named(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(BATCH_ENV, raw)
    with pytest.raises(ValueError, match=f"{BATCH_ENV} must be .* got '{raw}'"):
        batch_size()
