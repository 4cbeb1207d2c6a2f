"""The README's demo command runs unattended to the end and exits 0 only if recovery converged."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from resurgo.devstack.devserver import port_open
from resurgo.devstack.localstack import REPO

pytestmark = [pytest.mark.e2e, pytest.mark.slurm, pytest.mark.timeout(900)]


def test_demo_recovers_and_exits_zero(tmp_path: Path, slurm_conf: str) -> None:
    if port_open(7233):
        pytest.skip("a Temporal server already listens on 7233 (the demo's embedded default)")
    done = subprocess.run(
        [sys.executable, "-m", "resurgo.cli.main", "demo", "--workdir", str(tmp_path),
         "--no-keep-ui"],
        cwd=REPO, capture_output=True, text=True, timeout=840,
    )  # fmt: skip
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "recovery converged and the job completed" in out
    for step in ("anomaly", "attribution", "requeue_hold", "exclude_nodes", "release",
                 "converged", "progress_recovered", "completed"):  # fmt: skip
        assert step in out, step
    assert "http://localhost:8233/namespaces/default/workflows/resurgo:local:" in out
    assert not port_open(7233)  # --no-keep-ui stopped the server it started
