"""The Recovery Console in a real headless Chromium, against the real API (uvicorn) on the real
Temporal dev server, with the real JobRecoveryWorkflow and audit activity, on SQLite and on
MariaDB. Only the cluster side is scripted (tests/ui/console_support.py); its attribution quotes
a hostile output line.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from temporalio.testing import WorkflowEnvironment

from resurgo.api.server import free_port
from resurgo.audit.store import AuditStore
from resurgo.config import ClusterSettings
from resurgo.contracts import Directive, Mode
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_api_support import JobStarter, terminate_running
from tests.mariadb import ensure_mariadb, fresh_database
from tests.ui.console_support import (
    HOSTILE,
    Console,
    HostileCluster,
    console_config,
    hostile_workers,
    make_tokens,
    serve_console,
)
from tests.ui.test_temporal_ui import ensure_chromium

pytestmark = pytest.mark.timeout(600)

APPROVAL = Directive(mode=Mode.ACTION, approval="required", approval_timeout=900)


@dataclass
class Stack:
    base: str
    store: AuditStore
    url: str
    jobs: JobStarter
    scripted: HostileCluster
    tokens: dict[str, str]
    shots: Path
    config_for: Callable[[str], object]


@pytest.fixture(scope="module", params=["sqlite", pytest.param("mariadb", marks=pytest.mark.mysql)])
async def stack(
    request: pytest.FixtureRequest,
    temporal_env: WorkflowEnvironment,
    temporal_address: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Stack]:
    ensure_chromium()
    drop: Callable[[], None] | None = None
    tmp = tmp_path_factory.mktemp("console")
    if request.param == "sqlite":
        url = f"sqlite:///{tmp / 'audit.db'}"
    else:
        url, drop = fresh_database(ensure_mariadb())
    store = AuditStore(url)
    store.create_schema()
    tokens, entries = make_tokens()
    try:
        async with hostile_workers(temporal_env.client, store) as (jobs, scripted):
            gated = {
                jobs.cluster: ClusterSettings(
                    acknowledge_scheduler_actions=True, partitions=["gpu"]
                )
            }
            config = console_config(temporal_address, url, entries, **gated)
            async with serve_console(config, store, temporal_env.client) as base:
                yield Stack(
                    base,
                    store,
                    url,
                    jobs,
                    scripted,
                    tokens,
                    tmp / "shots",
                    lambda address: console_config(address, url, entries, **gated),
                )
            await terminate_running(temporal_env.client, jobs.cluster)
    finally:
        store.close()
        if drop:
            drop()


async def in_browser(stack: Stack, script: Callable[[Console], None], base: str = "") -> None:
    def run() -> None:
        console = Console(base or stack.base, stack.shots)
        try:
            script(console)
        finally:
            console.quit()

    await asyncio.to_thread(run)


async def pending_in_store(stack: Stack, job: int) -> None:
    for _ in range(150):
        events = await asyncio.to_thread(
            stack.store.query, cluster=stack.jobs.cluster, job_id=job, types=["approval_requested"]
        )
        if events:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"job {job} never asked for approval")


async def test_operator_watches_the_job_appear_live_reads_its_story_and_approves(
    stack: Stack,
) -> None:
    job = 7101
    cluster = stack.jobs.cluster
    loop = asyncio.get_running_loop()
    started: asyncio.Future[None] = loop.create_future()

    async def start_job_once_the_page_is_open() -> None:
        await started
        handle = await stack.jobs.start(job, APPROVAL)
        stack.scripted.push(job, "crash")
        stack.scripted.push(job, "complete")  # what the next attempt does once requeued
        await pending_in_store(stack, job)
        stack.handle = handle  # type: ignore[attr-defined]

    starter = asyncio.create_task(start_job_once_the_page_is_open())

    def script(c: Console) -> None:
        c.login(stack.tokens["operator"])
        c.wait_for_text("Jobs", "otto", "scheduler actions acknowledged", what="jobs page")
        assert str(job) not in c.text()
        loads = c.driver.execute_script("return performance.getEntriesByType('navigation').length")
        c.driver.execute_script("window.__same_page = true")
        loop.call_soon_threadsafe(started.set_result, None)
        # Pushed over the event stream: the page is never reloaded.
        c.wait_for_text(
            str(job),
            "awaiting_approval",
            "needs approval",
            "hardware_gpu",
            "node2",
            timeout=60,
            what="live row",
        )
        assert c.driver.execute_script("return window.__same_page === true")
        assert loads == 1
        c.shot("jobs-live")

        c.driver.find_element("link text", str(job)).click()
        page = c.wait_for_text(
            "Timeline",
            "attribution",
            "uncorrectable ECC error on node2",
            "Waiting for approval",
            what="timeline",
        )
        assert HOSTILE in page  # shown literally, as text
        assert "node2:/home/alice/run/out.log" in page and "4242" in page
        assert "Policy: requeue excluding node2, because" in page
        assert c.driver.execute_script("return window.__pwned === undefined")
        assert not c.driver.find_elements("css selector", ".logline script, .logline img")
        c.shot("timeline-pending")

        c.open("/console/approvals")
        c.wait_for_text(f"{cluster}/{job}", "fails open in", what="approvals inbox")
        c.shot("approvals")
        box = c.driver.find_element("css selector", f".approval[data-job='{cluster}/{job}']")
        box.find_element("name", "reason").send_keys("node2 is known bad <b>ok</b>")
        box.find_element("css selector", "button.approve").click()
        c.wait_for_text(f"{cluster}/{job} g1 approved.", what="approval flash")

        c.open(f"/console/jobs/{cluster}/{job}")
        # The page follows the job (it reloads itself when the job's row changes).
        c.wait_for_text(
            "requeue_hold",
            "exclude_nodes",
            "release",
            "progress recovered",
            "completed",
            timeout=60,
            what="actions on the timeline",
        )
        c.wait_for_text("approved", "node2 is known bad <b>ok</b>", what="decision")

    await in_browser(stack, script)
    await starter
    outcome = await stack.handle.result()  # type: ignore[attr-defined]
    assert outcome.outcome == "completed"
    assert stack.scripted.steps[job][:3] == ["requeue_hold", "exclude_nodes", "release"]
    events = await asyncio.to_thread(
        stack.store.query, cluster=cluster, job_id=job, types=["approval_approved"]
    )
    assert [(e.data["actor"], e.data["reason"]) for e in events] == [
        ("otto", "node2 is known bad <b>ok</b>")
    ]


async def test_a_viewer_sees_the_inbox_but_cannot_approve(stack: Stack) -> None:
    job = 7102
    handle = await stack.jobs.start(job, APPROVAL)
    stack.scripted.push(job, "crash")
    await pending_in_store(stack, job)
    cluster = stack.jobs.cluster
    answers: dict[str, object] = {}

    def script(c: Console) -> None:
        c.login(stack.tokens["viewer"])
        c.open("/console/approvals")
        c.wait_for_text(f"{cluster}/{job}", "only operators can approve", what="viewer inbox")
        assert not c.driver.find_elements("css selector", "button.approve, button.reject")
        c.shot("approvals-viewer")
        # A viewer without alice in its users reads the verdict, not her job's output lines.
        c.open(f"/console/jobs/{cluster}/{job}")
        page = c.wait_for_text("attribution", "withheld", what="viewer timeline")
        assert "window.__pwned" not in page and "fallen off the bus" not in page
        assert "uncorrectable ECC error on node2" in page
        # Forge the operator's form from inside the page, with the session's own CSRF token.
        answers["status"] = c.driver.execute_async_script(
            """
            const done = arguments[arguments.length - 1];
            const csrf = document.querySelector("input[name=csrf]").value;
            fetch(arguments[0], {method: "POST", body: new URLSearchParams(
                {csrf: csrf, decision: "approve", reason: "viewer tries"})})
              .then(r => done(r.status));
            """,
            f"/console/approvals/{cluster}/{job}/1",
        )

    await in_browser(stack, script)
    assert answers["status"] == 403
    status = await handle.query(JobRecoveryWorkflow.status)
    assert status.pending_approval is not None and status.pending_approval.generation == 1
    decided = await asyncio.to_thread(
        stack.store.query,
        cluster=cluster,
        job_id=job,
        types=["approval_approved", "approval_rejected"],
    )
    assert decided == []


async def test_the_story_still_shows_when_temporal_is_down(stack: Stack) -> None:
    """An API whose Temporal does not answer (nothing listens there), over the same store."""
    job = 7103
    handle = await stack.jobs.start(job, Directive(mode=Mode.OBSERVE))
    stack.scripted.push(job, "crash")
    for _ in range(150):
        done = await asyncio.to_thread(
            stack.store.query, cluster=stack.jobs.cluster, job_id=job, types=["advice"]
        )
        if done:
            break
        await asyncio.sleep(0.2)
    await handle.terminate("the test takes Temporal away")
    cluster = stack.jobs.cluster
    down = stack.config_for(f"127.0.0.1:{free_port()}")

    def script(c: Console) -> None:
        c.login(stack.tokens["viewer"])
        c.wait_for_text("Temporal cannot be read", str(job), timeout=40, what="degraded jobs")
        c.shot("jobs-temporal-down")
        c.open(f"/console/jobs/{cluster}/{job}")
        c.wait_for_text(
            "Temporal",
            "unreachable",
            "attribution",
            "hardware_gpu",
            "uncorrectable ECC error on node2",
            timeout=40,
            what="degraded timeline",
        )
        c.shot("timeline-temporal-down")

    async with serve_console(down, stack.store, None) as base:  # type: ignore[arg-type]
        await in_browser(stack, script, base)


async def test_login_is_required_and_a_wrong_token_is_refused(stack: Stack) -> None:
    def script(c: Console) -> None:
        c.open("/console/nodes")
        assert c.driver.current_url.endswith("/console/login")
        c.driver.find_element("id", "token").send_keys("not-a-token")
        c.driver.find_element("id", "login").click()
        c.wait_for_text("That token is not valid.", what="refused login")
        assert c.driver.current_url.endswith("/console/login")
        c.login(stack.tokens["viewer"])
        cookie = {k["name"]: k for k in c.driver.get_cookies()}["resurgo_console"]
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert c.driver.execute_script("return document.cookie") == ""
        c.open("/console/nodes")
        c.wait_for_text("Nodes", what="nodes after login")

    await in_browser(stack, script)


async def test_an_operator_switches_the_mode_after_confirming(stack: Stack) -> None:
    job = 7104
    handle = await stack.jobs.start(job, Directive(mode=Mode.OBSERVE))
    cluster = stack.jobs.cluster

    def script(c: Console) -> None:
        c.login(stack.tokens["viewer"])
        c.open(f"/console/jobs/{cluster}/{job}")
        c.wait_for_text(f"{cluster}/{job}", "observe", what="viewer job page")
        assert not c.driver.find_elements("id", "mode-box")
        c.driver.delete_all_cookies()
        c.login(stack.tokens["operator"])
        c.open(f"/console/jobs/{cluster}/{job}")
        # The page may still reload once for the job's first phase change; once the box is
        # open it does not (an operator about to write keeps the page).
        c.click_fresh("#mode-box summary")
        form = c.driver.find_element("css selector", "form.mode")
        form.find_element("css selector", "option[value=action]").click()
        form.find_element("name", "reason").send_keys("validated in observe for a week")
        form.find_element("id", "set-mode").click()  # unconfirmed: the browser holds it back
        assert "is now in action mode" not in c.text()
        form.find_element("name", "confirm").click()
        form.find_element("id", "set-mode").click()
        c.wait_for_text(f"{cluster}/{job} is now in action mode.", what="mode flash")
        # The job moves on (its row in the stream changes): the page reloads itself and the
        # operator's confirmation is still there; a later visit does not repeat it.
        c.driver.execute_script("window.__before_reload = 1")
        stack.scripted.push(job, "crash")
        c.wait(
            lambda: c.driver.execute_script("return window.__before_reload === undefined"),
            "the page reloading for the job's new phase",
        )
        c.wait_for_text(f"{cluster}/{job} is now in action mode.", what="flash after reload")
        c.open(f"/console/jobs/{cluster}/{job}")
        c.wait_for_text(f"{cluster}/{job}", "Timeline", what="job page again")
        assert "is now in action mode." not in c.text()

    await in_browser(stack, script)
    status = await handle.query(JobRecoveryWorkflow.status)
    assert status.mode == Mode.ACTION
    changed = await asyncio.to_thread(
        stack.store.query, cluster=cluster, job_id=job, types=["mode_changed"]
    )
    assert [e.data.get("actor") for e in changed] == ["otto"]


async def test_forms_need_the_session_and_its_csrf_token(stack: Stack) -> None:
    """What a cross-site page or a script without the session could send is refused before
    anything reaches the workflow."""
    import httpx

    job = 7105
    await stack.jobs.start(job, APPROVAL)
    stack.scripted.push(job, "crash")
    await pending_in_store(stack, job)
    cluster = stack.jobs.cluster
    decide = f"/console/approvals/{cluster}/{job}/1"
    form = {"decision": "approve", "reason": "forged"}
    async with httpx.AsyncClient(base_url=stack.base) as anonymous:
        assert (await anonymous.get("/console/")).headers["location"] == "/console/login"
        assert (await anonymous.get("/console/stream")).status_code == 401
        resp = await anonymous.post(decide, data=form)
        assert resp.status_code == 303 and resp.headers["location"] == "/console/login"
    async with httpx.AsyncClient(base_url=stack.base) as browser:
        login = await browser.get("/console/login")
        csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
        assert (
            await browser.post(
                "/console/login", data={"csrf": csrf, "token": stack.tokens["operator"]}
            )
        ).status_code == 303
        assert (await browser.post(decide, data=form)).status_code == 403  # no token
        assert (await browser.post(decide, data={**form, "csrf": csrf})).status_code == 403  # stale
        page = await browser.get("/console/approvals")
        fresh = page.text.split('name="csrf" value="')[1].split('"')[0]
        as_json = await browser.post(decide, json={**form, "csrf": fresh})
        assert as_json.status_code == 415
    decided = await asyncio.to_thread(
        stack.store.query,
        cluster=cluster,
        job_id=job,
        types=["approval_approved", "approval_rejected"],
    )
    assert decided == []


async def test_a_form_sent_twice_is_decided_once(stack: Stack) -> None:
    """A double click or a retried post carries the rendered form's key: one decision."""
    import re

    import httpx

    job = 7106
    handle = await stack.jobs.start(job, APPROVAL)
    stack.scripted.push(job, "crash")
    stack.scripted.push(job, "complete")
    await pending_in_store(stack, job)
    cluster = stack.jobs.cluster
    async with httpx.AsyncClient(base_url=stack.base) as browser:
        login = await browser.get("/console/login")
        csrf = login.text.split('name="csrf" value="')[1].split('"')[0]
        await browser.post("/console/login", data={"csrf": csrf, "token": stack.tokens["operator"]})
        page = (await browser.get(f"/console/jobs/{cluster}/{job}")).text
        csrf = page.split('name="csrf" value="')[1].split('"')[0]
        key = re.search(r'name="key" value="([0-9a-f]+)"', page)
        assert key is not None
        form = {"csrf": csrf, "key": key.group(1), "decision": "approve", "reason": "twice"}
        path = f"/console/approvals/{cluster}/{job}/1"
        first, second = await browser.post(path, data=form), await browser.post(path, data=form)
        assert first.status_code == second.status_code == 303
        flash = await browser.get("/console/approvals")
        assert f"{cluster}/{job} g1 approved." in flash.text  # the retry got the first answer
    assert (await handle.result()).outcome == "completed"
    approvals = await asyncio.to_thread(
        stack.store.query, cluster=cluster, job_id=job, types=["approval_approved"]
    )
    assert len(approvals) == 1


async def test_insecure_mode_serves_without_login_and_says_so(stack: Stack) -> None:
    import httpx

    from resurgo.api.app import create_app
    from tests.integration.test_api_support import serve_in_loop

    config = stack.config_for("127.0.0.1:1")
    app = create_app(config, store=stack.store, insecure=True)  # type: ignore[arg-type]
    async with serve_in_loop(app) as base, httpx.AsyncClient(base_url=base) as browser:
        page = await browser.get("/console/")
        assert page.status_code == 200
        assert "Running with --insecure: no authentication" in page.text
        assert "insecure-local" in page.text
        forged = await browser.post(
            f"/console/jobs/{stack.jobs.cluster}/1/mode", data={"mode": "action", "confirm": "yes"}
        )
        assert forged.status_code == 403  # CSRF still required
