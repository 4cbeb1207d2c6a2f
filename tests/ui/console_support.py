"""Shared by the console's browser tests and the screenshot command (no tests here): a real
API with its console served by uvicorn, the real JobRecoveryWorkflow and audit activity on the
real Temporal dev server, a scripted cluster side whose attribution quotes hostile log text,
and a headless Chromium that logs in like a person.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.client import Client
from temporalio.worker import Worker

from resurgo.activities.audit import AuditActivities
from resurgo.api.app import create_app
from resurgo.audit.store import AuditStore
from resurgo.config import ApiSettings, ApiToken, AuditSettings, ResurgoConfig, TemporalSettings
from resurgo.contracts import (
    AnomalyKind,
    AttributeRequest,
    Attribution,
    Category,
    LogLine,
    controller_task_queue,
)
from resurgo.tokens import hash_token, new_token
from resurgo.workflows.job_recovery import JobRecoveryWorkflow
from tests.integration.test_api_support import JobStarter, ScriptedCluster, serve_in_loop
from tests.ui.test_temporal_ui import CHROMEDRIVER, CHROMIUM, FLAGS

# What a cluster user can print into a job's output: it must show literally, never run.
HOSTILE = (
    "<script>window.__pwned = 1</script> [bold red]markup[/] "
    '<img src=x onerror="window.__pwned = 2"> Xid 79 on GPU 00000000:3B:00.0'
)
ROLES = {"viewer": "vera", "operator": "otto"}


class HostileCluster(ScriptedCluster):
    """The scripted cluster, whose attribution quotes a hostile output line as evidence."""

    @activity.defn(name="attribute_anomaly")
    async def attribute_anomaly(self, req: AttributeRequest) -> Attribution:
        return Attribution(
            kind=AnomalyKind.CRASH,
            category=Category.HARDWARE_GPU,
            culprit_nodes=["node2"],
            culprit_ranks=[1],
            confidence=0.95,
            fingerprint="hardware_gpu:ecc:node2",
            summary="uncorrectable ECC error on node2 (rank 1)",
            evidence=[
                LogLine(source="node2:/home/alice/run/out.log", line_no=4242, text=HOSTILE),
                LogLine(
                    source="node2:/var/log/kern.log",
                    line_no=17,
                    text="NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus",
                ),
            ],
        )


@asynccontextmanager
async def hostile_workers(
    client: Client, store: AuditStore
) -> AsyncIterator[tuple[JobStarter, HostileCluster]]:
    name = "ui" + uuid.uuid4().hex[:8]
    queue = f"test-{name}"
    scripted = HostileCluster()
    core = Worker(
        client,
        task_queue=queue,
        workflows=[JobRecoveryWorkflow],
        activities=[AuditActivities(store).record_audit],
    )
    side = Worker(client, task_queue=controller_task_queue(name), activities=scripted.activities())
    async with core, side:
        yield JobStarter(client, name, queue), scripted


def make_tokens() -> tuple[dict[str, str], dict[str, ApiToken]]:
    tokens = {role: new_token() for role in ROLES}
    entries = {
        ROLES[role]: ApiToken(role=role, sha256=hash_token(tok)) for role, tok in tokens.items()
    }
    return tokens, entries


def console_config(
    temporal_address: str, audit_url: str, entries: dict[str, ApiToken], **clusters: Any
) -> ResurgoConfig:
    return ResurgoConfig(
        temporal=TemporalSettings(address=temporal_address),
        audit=AuditSettings(url=audit_url),
        api=ApiSettings(tokens=entries),
        **({"clusters": clusters} if clusters else {}),
    )


@asynccontextmanager
async def serve_console(
    config: ResurgoConfig, store: AuditStore, client: Client | None
) -> AsyncIterator[str]:
    """The real API app (console included) under uvicorn; yields its base URL."""
    app = create_app(config, client=client, store=store)
    async with serve_in_loop(app) as base:
        yield base


@dataclass
class Console:
    """A headless Chromium on the console."""

    base: str
    shots: Path
    driver: Any = None

    def __post_init__(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        self.profile = tempfile.mkdtemp(prefix="console-chromium-")
        for flag in [*FLAGS, f"--user-data-dir={self.profile}"]:
            options.add_argument(flag)
        self.shots.mkdir(parents=True, exist_ok=True)
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def click_fresh(self, css: str, attempts: int = 5) -> None:
        """Find and click, again if a live reload replaced the element in between."""
        from selenium.common.exceptions import StaleElementReferenceException

        for attempt in range(attempts):
            try:
                self.driver.find_element("css selector", css).click()
                return
            except StaleElementReferenceException:
                if attempt == attempts - 1:
                    raise
                time.sleep(0.2)

    def login(self, token: str) -> None:
        self.open("/")
        self.driver.find_element("id", "token").send_keys(token)
        self.driver.find_element("id", "login").click()
        self.wait(lambda: "/login" not in self.driver.current_url, "login")

    def text(self) -> str:
        """The visible text ("" while the page is being replaced: it reloads itself)."""
        from selenium.common.exceptions import (
            NoSuchElementException,
            StaleElementReferenceException,
            WebDriverException,
        )

        try:
            return str(self.driver.find_element("tag name", "body").text)
        except (StaleElementReferenceException, NoSuchElementException):
            return ""
        except WebDriverException as exc:
            # Chrome reports a body swapped between lookup and read this way, not as stale.
            if "does not belong to the document" in str(exc):
                return ""
            raise

    def wait(self, ok: Callable[[], Any], what: str, timeout: float = 30) -> Any:
        from selenium.webdriver.support.wait import WebDriverWait

        try:
            return WebDriverWait(self.driver, timeout, poll_frequency=0.3).until(lambda _: ok())
        except Exception as exc:
            self.shot(f"{what}-failed")
            raise AssertionError(f"{what}: timed out\n--- page ---\n{self.text()[-3000:]}") from exc

    def wait_for_text(self, *needles: str, timeout: float = 30, what: str = "page") -> str:
        self.wait(lambda: all(n in self.text() for n in needles), f"{what} {needles}", timeout)
        return self.text()

    def wait_reloading(self, *needles: str, timeout: float = 60, what: str = "page") -> str:
        """Reload until every needle shows (a page that is not pushed live)."""

        def shown() -> bool:
            if all(n in self.text() for n in needles):
                return True
            self.driver.refresh()
            return False

        self.wait(shown, f"{what} {needles}", timeout)
        return self.text()

    def shot(self, name: str, full: bool = False) -> Path:
        path = self.shots / f"{name}.png"
        if full:  # the whole page, not only the window
            height = self.driver.execute_script("return document.body.scrollHeight")
            self.driver.set_window_size(1440, max(900, min(int(height) + 40, 4000)))
        self.driver.save_screenshot(str(path))
        return path

    def quit(self) -> None:
        with contextlib.suppress(Exception):
            self.driver.quit()
        shutil.rmtree(self.profile, ignore_errors=True)


__all__ = [
    "HOSTILE",
    "ROLES",
    "Console",
    "HostileCluster",
    "console_config",
    "hostile_workers",
    "make_tokens",
    "serve_console",
]
