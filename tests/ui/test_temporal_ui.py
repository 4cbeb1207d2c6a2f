"""The real Temporal Web UI, driven by headless Chromium: a job's workflow is found by its
search attributes and its page tells the job's story (search attributes, summary, details).

The dev server runs with its UI on free ports; the job workflow is the real JobRecoveryWorkflow
with the real audit activity and a scripted cluster side (tests/integration/test_api_support.py).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from resurgo.api.server import free_port
from resurgo.audit.store import AuditStore
from resurgo.contracts import Directive, Mode
from resurgo.devstack.devserver import start_dev_server
from resurgo.workflows import search_attributes as sa
from tests.integration.test_api_support import recovery_workers

pytestmark = pytest.mark.timeout(900)  # generous only for installing Chromium on a fresh machine

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1600,1200",
]  # fmt: skip


def ensure_chromium() -> None:
    """Debian's chromium and chromium-driver: installed here when missing (as root)."""
    if Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists():
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        pytest.skip("chromium/chromium-driver missing and cannot be installed (not root/Debian)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update", "-qq"], env=env, timeout=600, check=False)
    done = subprocess.run(["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"],
                          env=env, timeout=1200, capture_output=True, text=True)  # fmt: skip
    if done.returncode != 0 or not Path(CHROMEDRIVER).exists():
        pytest.skip(f"chromium could not be installed: {done.stderr[-500:]}")


@pytest.fixture(scope="module")
def ui_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A dev server of our own WITH its UI: (gRPC address, UI base URL)."""
    tmp = tmp_path_factory.mktemp("ui")
    port, ui_port = free_port(), free_port()
    proc = start_dev_server(port=port, ui_port=ui_port, log_file=str(tmp / "temporal.log"))
    assert proc is not None, f"something already listens on {port}"
    try:
        yield f"127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
async def ui_client(ui_server: tuple[str, str]) -> AsyncIterator[Client]:
    yield await Client.connect(ui_server[0], data_converter=pydantic_data_converter)


class Browser:
    def __init__(self, profile: Path, shots: Path) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        options = webdriver.ChromeOptions()
        options.binary_location = CHROMIUM
        for flag in [*FLAGS, f"--user-data-dir={profile}"]:
            options.add_argument(flag)
        self.shots = shots
        self.driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))

    def text(self) -> str:
        """All visible text, including what the UI renders inside iframes (markdown)."""
        d = self.driver
        parts = [d.find_element("tag name", "body").text]
        for frame in d.find_elements("tag name", "iframe"):
            d.switch_to.frame(frame)
            parts.append(d.find_element("tag name", "body").text)
            d.switch_to.default_content()
        return "\n".join(parts)

    def wait_for_text(self, *needles: str, timeout: float = 30, shot: str = "page") -> str:
        from selenium.webdriver.support.wait import WebDriverWait

        seen = ""

        def found(_: object) -> bool:
            nonlocal seen
            seen = self.text()
            return all(n in seen for n in needles)

        try:
            WebDriverWait(self.driver, timeout, poll_frequency=0.5).until(found)
        except Exception as exc:
            self.driver.save_screenshot(str(self.shots / f"{shot}-failed.png"))
            missing = [n for n in needles if n not in seen]
            raise AssertionError(
                f"{shot}: not shown: {missing}\n--- page ---\n{seen[-3000:]}"
            ) from exc
        self.driver.save_screenshot(str(self.shots / f"{shot}.png"))
        return seen

    def click_tab(self, label: str) -> None:
        self.driver.find_element(
            "xpath", f"//a[normalize-space()='{label}'] | //button[normalize-space()='{label}']"
        ).click()

    def quit(self) -> None:
        self.driver.quit()


async def test_job_workflow_is_found_and_told_in_the_temporal_ui(
    ui_server: tuple[str, str], ui_client: Client, tmp_path: Path
) -> None:
    ensure_chromium()
    _, ui = ui_server
    store = AuditStore(f"sqlite:///{tmp_path / 'audit.db'}")
    async with recovery_workers(ui_client, store) as (jobs, scripted):
        handle = await jobs.start(
            4242, Directive(mode=Mode.ACTION, approval="required", approval_timeout=600),
            user="alice", partition="gpu", name="llama-7b",
        )  # fmt: skip
        scripted.push(4242, "crash")
        for _ in range(100):  # until the workflow waits for approval, with every attribute set
            described = await handle.describe()
            if described.typed_search_attributes.get(sa.NEEDS_APPROVAL):
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError("the job never reached awaiting_approval")
        run_id = described.run_id
        cluster = jobs.cluster
        expected = {
            "ResurgoCluster": f'"{cluster}"',
            "ResurgoSlurmJobId": '"4242"',
            "ResurgoUser": '"alice"',
            "ResurgoPartition": '"gpu"',
            "ResurgoMode": '"action"',
            "ResurgoState": '"awaiting_approval"',
            "ResurgoAttempt": "0",
            "ResurgoLastCategory": '"hardware_gpu"',
            "ResurgoNeedsApproval": "true",
        }

        def browse() -> None:
            shots = tmp_path / "screenshots"
            shots.mkdir()
            browser = Browser(tmp_path / "profile", shots)
            try:
                query = urllib.parse.quote(f'ResurgoCluster="{cluster}"')
                browser.driver.get(f"{ui}/namespaces/default/workflows?query={query}")
                listed = browser.wait_for_text(handle.id, "JobRecoveryWorkflow", shot="list")
                assert "1 RUNNING" in listed or "Running" in listed
                browser.driver.find_element("link text", handle.id).click()
                browser.wait_for_text(handle.id, run_id, "Search Attributes", shot="workflow")
                browser.click_tab("Search Attributes")
                shown = browser.wait_for_text(*expected, shot="search-attributes")
                for key, value in expected.items():
                    assert f'"{key}": {value}' in shown, (key, value)
                browser.click_tab("User Metadata")
                browser.wait_for_text(
                    f"{cluster}/4242 llama-7b (action)",  # the static summary
                    "awaiting approval", "requeue excluding node2", "hardware_gpu",
                    shot="user-metadata",
                )  # fmt: skip
            finally:
                browser.quit()

        try:
            await asyncio.to_thread(browse)
        finally:
            await handle.terminate("test over")
    store.close()
