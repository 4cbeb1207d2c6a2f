"""Record NodeHealthWorkflow histories for tests/integration/test_node_health_replay.py.

    .venv/bin/python -m tests.replay.record_node_health [NAME_SUFFIX]

Runs the scripted scenario of tests/integration/test_node_health_workflow.py (approval, drain, a
failed then a passing validation) on a throwaway dev server and writes its history to
tests/replay/node_histories/. Record a new one whenever the workflow changes in a released
version and keep the old files: every one of them must still replay.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurgo.audit.store import AuditStore
from resurgo.contracts import ApprovalDecision
from resurgo.devstack.devserver import temporal_binary
from resurgo.nodes.models import RepairMark
from resurgo.workflows.node_client import decide_drain, mark_repaired
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.integration.test_node_health_workflow import (
    ScriptedNode,
    phase,
    running,
    start,
    start_input,
)

HISTORIES = Path(__file__).resolve().parent / "node_histories"


async def record(suffix: str) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
    )  # fmt: skip
    try:
        node = ScriptedNode()
        node.verdicts = [False, True]
        store = AuditStore("sqlite:///:memory:")
        async with running(env, store, node) as cluster:
            client = env.client
            handle = await start(client, start_input(cluster, require_approval=True))
            await phase(handle, "awaiting_approval")
            approve = ApprovalDecision(generation=0, approve=True, actor="ann")
            await decide_drain(client, cluster, "n1", approve)
            await phase(handle, "drained")
            await mark_repaired(client, cluster, "n1", RepairMark(actor="ann"))
            while not node.returns:
                await asyncio.sleep(0.05)
            await phase(handle, "drained")
            await mark_repaired(client, cluster, "n1", RepairMark(actor="ann"))
            assert await handle.result() == "resumed"
            history = await handle.fetch_history()
        out = HISTORIES / f"lemon_validated_{suffix}.json"
        out.write_text(history.to_json())
        print(out)
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(record(sys.argv[1] if len(sys.argv) > 1 else "v1"))
