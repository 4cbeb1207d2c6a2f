"""The console's jobs beyond its live list: `/console/all` pages through every job with the API's
own listing and cursor, each job once, a "more" link while there are more, with Temporal up
(real dev server) and down (the audit trail alone). Served by uvicorn, read over HTTP."""

from __future__ import annotations

import re
from collections.abc import Iterator
from html import unescape

import httpx
import pytest
from temporalio.testing import WorkflowEnvironment

from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from tests.integration.test_api_support import serve_in_loop
from tests.ui.console_support import console_config, make_tokens
from tests.unit.test_recovery_metrics import ended, story

pytestmark = pytest.mark.timeout(300)
JOBS = 130
CLUSTER = "paging"  # the Temporal dev server is shared: other tests' live jobs may be listed
JOB_LINK = re.compile(rf'href="/console/jobs/{CLUSTER}/(\d+)\?')
ROW = re.compile(r'class="job">\d+</a>')


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuditStore]:
    """130 jobs that ran, failed once, recovered and completed (no workflow left running)."""
    path = tmp_path_factory.mktemp("paging") / "audit.db"
    audit = AuditStore(f"sqlite:///{path}")
    audit.create_schema()
    for job in range(1, JOBS + 1):
        events = [*story(job, job * 200), ended(job, job * 200 + 150)]
        wid = f"resurgo:{CLUSTER}:{job}:1700000000"
        audit.append(
            [e.model_copy(update={"cluster": CLUSTER, "workflow_id": wid}) for e in events]
        )
    yield audit
    audit.close()


async def pages(base: str, limit: int) -> tuple[list[list[int]], str]:
    """Follow the "more" links from the first page: the job ids on each page, and the first
    page's text."""
    found: list[list[int]] = []
    first = ""
    url: str | None = f"/console/all?limit={limit}"
    async with httpx.AsyncClient(base_url=base, timeout=60) as browser:
        while url is not None:
            page = await browser.get(url)
            assert page.status_code == 200, page.text[:500]
            first = first or page.text
            assert len(ROW.findall(page.text)) <= limit
            found.append([int(j) for j in JOB_LINK.findall(page.text)])
            more = re.search(r'<a href="([^"]+)" id="more"', page.text)
            url = unescape(more.group(1)) if more else None
            assert (more is None) == ('id="end"' in page.text)
            assert len(found) <= JOBS  # a cursor that never ends would loop here
    return found, first


@pytest.mark.parametrize("temporal", ["up", "down"])
async def test_every_job_once_page_by_page(
    temporal: str,
    store: AuditStore,
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
) -> None:
    _, entries = make_tokens()
    address = temporal_address if temporal == "up" else "127.0.0.1:1"
    config = console_config(address, store.url, entries)
    client = temporal_env.client if temporal == "up" else None
    app = create_app(config, store=store, client=client, insecure=True)
    async with serve_in_loop(app) as base:
        found, first = await pages(base, 50)
        async with httpx.AsyncClient(base_url=base, timeout=60) as browser:
            live = await browser.get("/console/")
            bogus = await browser.get("/console/all", params={"cursor": "not-a-cursor"})
            too_many = await browser.get("/console/all", params={"limit": "5000"})
    assert len(found) >= 3 and all(found)  # 130 jobs at 50 a page
    flat = [j for p in found for j in p]
    assert flat == list(range(JOBS, 0, -1))  # newest first, each job once
    # The live list leads there; a forged cursor or a huge page is refused, not served.
    assert 'href="/console/all" id="all-jobs"' in live.text
    assert bogus.status_code == 400 and "cannot be listed" in bogus.text
    assert too_many.status_code == 400
    # Without Temporal the same pages come from the audit trail, and say so.
    assert ("Temporal cannot be read" in first) is (temporal == "down")
