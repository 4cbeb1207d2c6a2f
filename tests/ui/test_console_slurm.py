"""The Recovery Console fed by a real recovery: real Slurm, a real PyTorch DDP job with an ECC
fault on rank 1, real worker, controller and `resurgo api` processes, and a headless Chromium.

The operator sees the job appear without reloading, reads the attribution and its evidence
lines, approves in the page, and the requeue happens in Slurm.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e.conftest import Deployment, deploy  # noqa: F401  (the fixture)
from tests.e2e.test_approvals import ApiProcess, api_for  # noqa: F401  (the fixture)
from tests.ui.console_support import Console
from tests.ui.test_temporal_ui import ensure_chromium

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(600)]

APPROVAL = {"approval": "required", "approval_timeout": 600}


def test_a_real_recovery_seen_and_approved_in_the_console(
    deploy: Callable[..., Deployment],  # noqa: F811
    api_for: Callable[[Deployment], ApiProcess],  # noqa: F811
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    ensure_chromium()
    dep = deploy()
    api = api_for(dep)
    console = Console(api.url, tmp_path_factory.mktemp("console-slurm"))
    job = 0
    try:
        console.login(api.tokens["operator"])
        console.wait_for_text("Jobs", f"operator-{dep.name}", what="jobs page")
        console.driver.execute_script("window.__same_page = true")
        job = dep.submit(mode="action", fault="ecc", fault_rank="1", extra_directive=APPROVAL)
        # The stream brings the job, then its failure, without a reload.
        console.wait_for_text(
            str(job),
            "needs approval",
            "hardware_gpu",
            timeout=300,
            what="the job awaiting approval",
        )
        assert console.driver.execute_script("return window.__same_page === true")
        culprit = next(e for e in dep.events(job) if e.type == "attribution").data
        assert culprit["culprit_nodes"], culprit
        row = console.driver.find_element("css selector", f"tr[data-search*='{job}']")
        assert culprit["culprit_nodes"][0] in row.text
        console.shot("slurm-jobs")

        console.driver.find_element("link text", str(job)).click()
        page = console.wait_for_text(
            "attribution", "Waiting for approval", "Policy:", what="timeline"
        )
        evidence = culprit.get("evidence") or []
        assert evidence, "the attribution quotes no line"
        assert str(evidence[0]["line_no"]) in page and evidence[0]["source"] in page
        console.shot("slurm-timeline")

        console.open("/console/approvals")
        box = console.driver.find_element("css selector", f".approval[data-job='{dep.name}/{job}']")
        box.find_element("name", "reason").send_keys("approved in the console")
        box.find_element("css selector", "button.approve").click()
        console.wait_for_text(f"{dep.name}/{job} g1 approved.", what="approval flash")

        rec = dep.wait_event(job, "reconciliation", timeout=180)
        assert rec.data["status"] == "converged", rec.summary
        assert dep.job(job).restarts == 1
        approved = [e for e in dep.events(job) if e.type == "approval_approved"]
        assert [e.data["actor"] for e in approved] == [f"operator-{dep.name}"]
        console.open(f"/console/jobs/{dep.name}/{job}")
        console.wait_reloading(
            "requeue_hold",
            "exclude_nodes",
            "release",
            "reconciliation",
            "approved in the console",
            timeout=60,
            what="actions",
        )
        console.shot("slurm-timeline-after", full=True)
    finally:
        console.quit()
        if job:
            dep.cancel(job)
