"""Record the job-array histories for the replay tests.

    .venv/bin/python -m tests.replay.record_arrays [NAME_SUFFIX]

Runs the systematic-failure scenario of tests/integration/test_array_coordination.py (a bug in
every task of an array, action mode) on a throwaway dev server and writes the history of the
task that the array stopped (a JobRecoveryWorkflow: it joins tests/replay/histories/, replayed
with every other) and of the array's coordinator (tests/replay/array_histories/).
"""

from __future__ import annotations

import asyncio
import sys

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurgo.contracts import Category, JobKey, Mode
from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.integration.test_array_coordination import (
    ARRAY,
    ARRAY_HISTORIES,
    BUG,
    NOW,
    RETRY_BUGS,
    Failure,
    Harness,
    ScriptedArray,
)
from tests.integration.test_workflow import HISTORIES


async def main(suffix: str) -> None:
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
    )
    ARRAY_HISTORIES.mkdir(parents=True, exist_ok=True)
    try:
        cluster = ScriptedArray({t: Failure(BUG, Category.APPLICATION, f"node{t % 2 + 1}")
                                 for t in range(3)})  # fmt: skip
        harness = Harness(env.client, cluster)
        core, controller = harness.workers()
        async with core, controller:
            coordinator = await harness.coordinator(Mode.ACTION, RETRY_BUGS)
            for task in range(3):
                await harness.task(task, Mode.ACTION, RETRY_BUGS)
            await coordinator.result()
            stopped = JobKey(cluster=harness.name, job_id=ARRAY + 3, submit_time=NOW,
                             array_job_id=ARRAY, array_task_id=2)  # fmt: skip
            task_history = await env.client.get_workflow_handle(
                stopped.workflow_id()
            ).fetch_history()
            coordinator_history = await coordinator.fetch_history()
        for path, history in (
            (HISTORIES / f"array_task_systematic{suffix}.json", task_history),
            (ARRAY_HISTORIES / f"array_coordinator{suffix}.json", coordinator_history),
        ):
            path.write_text(history.to_json())
            print(f"wrote {path}")
    finally:
        await env.shutdown()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else ""))
