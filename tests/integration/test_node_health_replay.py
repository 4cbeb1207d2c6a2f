"""Every recorded NodeHealthWorkflow history replays with the current code (a change to the
commands the workflow issues must be guarded with `workflow.patched`)."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from resurgo.workflows.node_health import NodeHealthWorkflow

HISTORIES = Path(__file__).resolve().parents[1] / "replay" / "node_histories"


def histories() -> list[WorkflowHistory]:
    files = sorted(HISTORIES.glob("*.json"))
    assert files, f"no recorded histories in {HISTORIES}"
    return [WorkflowHistory.from_json(p.stem, p.read_text()) for p in files]


@pytest.mark.parametrize("history", histories(), ids=lambda h: h.workflow_id)
async def test_recorded_history_replays(history: WorkflowHistory) -> None:
    replayer = Replayer(workflows=[NodeHealthWorkflow], data_converter=pydantic_data_converter)
    await replayer.replay_workflow(history)
