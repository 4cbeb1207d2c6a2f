"""Record workflow histories for the replay tests.

    .venv/bin/python -m tests.replay.record [NAME_SUFFIX]

Runs the scripted scenarios of tests/integration/test_workflow.py (an action-mode recovery, an
approved recovery, a failure in observe mode, a failure read in the same batch as the first
progress line) on a throwaway dev server and writes their histories to tests/replay/histories/.
Record a new set whenever the workflow code changes in a released version, and keep the old
files: CI replays every one of them, so a change that breaks running workflows fails before it
ships (guard such changes with workflow.patched; tests/integration/test_replay_guard.py shows that
an unguarded change fails the replay).
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurgo.contracts import ApprovalDecision, Directive, Mode
from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.integration.test_workflow import (
    ACTION,
    APPROVAL,
    HISTORIES,
    CrashesInItsFirstBatch,
    FailsWhileRunning,
    FakeCluster,
    Harness,
    JobRecoveryWorkflow,
    OutputRefused,
)

DIRECTIVES = {
    "action_recovery": ACTION,
    "approval_approved": APPROVAL,
    "observe_failure": Directive(mode=Mode.OBSERVE),
    "progress_with_anomaly": ACTION,
    "evidence_limited": ACTION,
}
CLUSTERS = {
    "observe_failure": FailsWhileRunning,
    "progress_with_anomaly": CrashesInItsFirstBatch,
    "evidence_limited": OutputRefused,
}


async def main(suffix: str) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
    )
    HISTORIES.mkdir(parents=True, exist_ok=True)
    try:
        for name, directive in DIRECTIVES.items():
            cluster = CLUSTERS.get(name, FakeCluster)()
            harness = Harness(env.client, cluster)
            async with harness.worker(), harness.controller():
                handle = await harness.start(directive)
                if "approval" in name:
                    await harness.wait_for_type("approval_requested")
                    await handle.execute_update(
                        JobRecoveryWorkflow.decide_advice,
                        ApprovalDecision(generation=1, approve=True, actor="recorder"),
                    )
                await handle.result()
                history = await handle.fetch_history()
            path = HISTORIES / f"{name}{suffix}.json"
            path.write_text(history.to_json())
            print(f"wrote {path}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else ""))
