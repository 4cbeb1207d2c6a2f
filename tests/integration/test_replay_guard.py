"""The replay tests must catch a workflow change that would break running jobs.

Two variants of JobRecoveryWorkflow replay every recorded history: one adds a timer before the
first step without a guard (a running job's history cannot match it: the replay must fail with
a nondeterminism error), the other makes the same change behind `workflow.patched` (old
histories take the old path: the replay must pass). If the first ever passes, the recorded
histories no longer exercise the workflow and the replay suite guards nothing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer
from temporalio.workflow import NondeterminismError

from tests.replay.variants import GuardedChange, UnguardedChange

HISTORIES = Path(__file__).resolve().parents[1] / "replay" / "histories"


def histories() -> list[WorkflowHistory]:
    files = sorted(HISTORIES.glob("*.json"))
    assert files, f"no recorded histories in {HISTORIES}"
    return [WorkflowHistory.from_json(p.stem, p.read_text()) for p in files]


@pytest.mark.parametrize("history", histories(), ids=lambda h: h.workflow_id)
async def test_unguarded_change_fails_replay(history: WorkflowHistory) -> None:
    replayer = Replayer(workflows=[UnguardedChange], data_converter=pydantic_data_converter)
    with pytest.raises(NondeterminismError):
        await replayer.replay_workflow(history)


@pytest.mark.parametrize("history", histories(), ids=lambda h: h.workflow_id)
async def test_same_change_behind_a_patch_replays(history: WorkflowHistory) -> None:
    replayer = Replayer(workflows=[GuardedChange], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
