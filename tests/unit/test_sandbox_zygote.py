"""The warm sandbox's user namespace map (infra/zygote_process.py): the zygote's own slot uid is its
root, every other slot uid is itself, and nothing else is mapped, the host's root least of all:
whatever runs in it can become a run's uid and no other."""

from __future__ import annotations

import pytest

from evobus.infra.sandbox_slots import SLOT_COUNT, UID_BASE
from evobus.infra.zygote_process import id_map

SLOTS = range(UID_BASE, UID_BASE + SLOT_COUNT)


@pytest.mark.parametrize("own", [UID_BASE, UID_BASE + 1, UID_BASE + 2047, SLOTS[-2], SLOTS[-1]])
def test_the_zygote_is_root_over_the_slot_uids_and_nothing_else(own: int) -> None:
    ranges = [tuple(map(int, line.split())) for line in id_map(own).splitlines()]
    assert 1 <= len(ranges) <= 3  # within what every kernel takes (5 lines before 4.15)
    mapping: dict[int, int] = {}
    for inside, outside, count in ranges:
        for offset in range(count):
            assert inside + offset not in mapping, "ranges overlap"
            mapping[inside + offset] = outside + offset
    assert mapping[0] == own  # its root is its own slot's uid on the host
    assert sorted(mapping.values()) == sorted(SLOTS)  # each slot uid once, nothing else
    assert all(mapping[uid] == uid for uid in SLOTS if uid != own)  # the runs' uids as they are
