"""Job arrays in the Recovery Console, in a real headless Chromium against the real API
(uvicorn) on the real Temporal dev server: the jobs list names array tasks `<array>_<task>`, a
task's page links to its array's page, and the array page shows the coordinator's findings,
failures by fingerprint and tasks. The failure's summary quotes hostile output: it shows as
text. The cluster side is the scripted array of tests/integration/test_array_coordination.py.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio import activity
from temporalio.testing import WorkflowEnvironment

from resurgo.array_models import ArrayInput
from resurgo.audit.store import AuditStore
from resurgo.contracts import (
    AnomalyKind,
    AttributeRequest,
    Attribution,
    Category,
    Directive,
    JobKey,
    LogLine,
    Mode,
    RecoveryInput,
)
from resurgo.contracts import ClusterGates as Gates
from resurgo.workflows.array_coordinator import ArrayCoordinatorWorkflow
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_api_arrays import StoredArray, _attrs
from tests.integration.test_array_coordination import ARRAY, BUG, NOW, RETRY_BUGS, Failure, Harness
from tests.ui.console_support import HOSTILE, Console, console_config, make_tokens, serve_console
from tests.ui.test_temporal_ui import ensure_chromium

pytestmark = pytest.mark.timeout(300)


@dataclass
class HostileArray(StoredArray):
    """Every task fails with the same bug, its summary and evidence quoting hostile output."""

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        f = self.failures[self.task(req.job.job_id)]
        return Attribution(
            kind=AnomalyKind.CRASH, category=f.category, confidence=0.9,
            fingerprint=f.fingerprint, summary=f"KeyError in data.py: {HOSTILE}",
            evidence=[LogLine(source=f"{f.node}:/home/alice/out.log", line_no=41, text=HOSTILE)],
        )  # fmt: skip


@dataclass
class Site:
    base: str
    cluster: str
    tokens: dict[str, str]
    shots: Path


@pytest.fixture
async def site(
    temporal_env: WorkflowEnvironment, temporal_address: str, tmp_path: Path
) -> AsyncIterator[Site]:
    ensure_chromium()
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    store = AuditStore(url)
    store.create_schema()
    scripted = HostileArray({t: Failure(BUG, Category.APPLICATION, f"node{t % 2 + 1}")
                             for t in range(3)}, pending=2, store=store)  # fmt: skip
    h = Harness(temporal_env.client, scripted)
    h.name = "uiarr" + uuid.uuid4().hex[:8]
    h.queue = f"test-{h.name}"
    core, controller = h.workers()
    tokens, entries = make_tokens()
    config = console_config(temporal_address, url, entries)
    async with core, controller, serve_console(config, store, temporal_env.client) as base:
        inp = ArrayInput(array=h.array_key(), policy=RETRY_BUGS, mode=Mode.OBSERVE,
                         poll_seconds=1.0, user="alice")  # fmt: skip
        coordinator = await h.client.start_workflow(
            ArrayCoordinatorWorkflow.run, inp, id=inp.array.workflow_id(), task_queue=h.queue,
            search_attributes=_attrs(h.name, str(ARRAY)),
        )  # fmt: skip
        for task in range(3):
            key = JobKey(cluster=h.name, job_id=ARRAY + 1 + task, submit_time=NOW,
                         array_job_id=ARRAY, array_task_id=task)  # fmt: skip
            rec = RecoveryInput(job=key, directive=Directive(mode=Mode.OBSERVE), policy=RETRY_BUGS,
                                gates=Gates())  # fmt: skip
            handle = await h.client.start_workflow(
                JobRecoveryWorkflow.run, rec, id=key.workflow_id(), task_queue=h.queue,
                search_attributes=_attrs(h.name, key.slurm_ref()),
            )  # fmt: skip
            await handle.result()
        try:
            yield Site(base, h.name, tokens, tmp_path / "shots")
        finally:
            await coordinator.terminate("test over")
            store.close()


async def test_array_tasks_are_named_and_their_array_has_a_page(site: Site) -> None:
    c = site.cluster

    def script(b: Console) -> None:
        b.login(site.tokens["viewer"])
        b.wait_reloading(f"{ARRAY}_0", f"{ARRAY}_1", f"{ARRAY}_2", what="jobs list")
        link = b.driver.find_element("link text", f"{ARRAY}_1")
        assert f"/console/jobs/{c}/{ARRAY}_1?" in link.get_attribute("href")
        link.click()
        page = b.wait_for_text(f"{c}/{ARRAY}_1", "Timeline", f"Slurm job {ARRAY + 2}",
                               what="task page")  # fmt: skip
        # A viewer without the user's grant reads verdicts, never the output lines.
        assert "withheld" in page and "/home/alice/out.log" in page
        b.driver.find_element("id", "array-link").click()
        page = b.wait_reloading(f"Array {c}/{ARRAY}_*", "systematic", "PENDING 2",
                                what="array page")  # fmt: skip
        assert "observe" in b.driver.find_element("id", "array-mode").text
        assert BUG in b.driver.find_element("id", "fingerprints").text
        assert "0, 1, 2" in b.driver.find_element("id", "fingerprints").text
        tasks = b.driver.find_element("id", "tasks").text
        assert all(f"{ARRAY}_{t} {ARRAY + 1 + t}" in tasks for t in range(3)), tasks
        # The failure's summary quotes the output: shown literally, never run.
        assert HOSTILE in b.driver.find_element("id", "findings").text
        assert b.driver.execute_script("return window.__pwned === undefined")
        assert not b.driver.find_elements("css selector", "#findings script, #findings img")
        b.shot("array-page", full=True)
        # Hostile addresses are refused with the console's error page.
        for bad in [f"/console/arrays/{c}/{ARRAY}_1", f"/console/arrays/{c}/1e3",
                    f"/console/jobs/{c}/{ARRAY}_1x"]:  # fmt: skip
            b.open(bad)
            b.wait_for_text("not a", what=f"refusal of {bad}")
        b.open(f"/console/arrays/{c}/{ARRAY + 99}")
        b.wait_for_text(f"no array {ARRAY + 99}", what="unknown array")

    def run() -> None:
        b = Console(site.base, site.shots)
        try:
            script(b)
        finally:
            b.quit()

    await asyncio.to_thread(run)
