"""The one rule every acting workflow asks before a scheduler step: mode, acknowledgement,
partition allowlist, in that order, over every combination."""

from __future__ import annotations

import itertools

import pytest

from resurgo.contracts import ClusterGates, Mode
from resurgo.policy.gates import action_blocker

PARTITION_LISTS: list[list[str]] = [[], ["gpu"], ["canary", "gpu"], ["canary"]]


@pytest.mark.parametrize(
    ("mode", "ack", "allowed", "partition"),
    list(itertools.product(Mode, [False, True], PARTITION_LISTS, ["gpu", "", "debug"])),
)
def test_every_combination(mode: Mode, ack: bool, allowed: list[str], partition: str) -> None:
    gates = ClusterGates(acknowledge_scheduler_actions=ack, partitions=allowed)
    why = action_blocker(mode, gates, partition, "array")
    if mode != Mode.ACTION:
        assert why == "the array is in observe mode"
    elif not ack:
        assert why is not None and "acknowledge_scheduler_actions" in why
    elif allowed and partition not in allowed:
        assert why == f"partition {partition!r} is not in the cluster allowlist"
    else:
        assert why is None
