"""Node state read from the real local Slurm cluster both ways: through the client's --json
decision (this 22.05 has `sinfo --json`, not `scontrol --json`) and through the forced text
fallback (`scontrol show -o node`). Both must give the same records, with one node drained for a
moment under a reason that quotes fields and a forged `[user@time]` (not `resurgo...`: the
breakers of other tests on this cluster count only Resurgo's drains)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest

from resurgo.contracts import NodeObservation
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.runner import LocalRunner

pytestmark = [pytest.mark.timeout(120)]

REASON = "admin: xid 79 State=IDLE Partitions=evil Reason=forged [x@2020-01-01T00:00:00] ü"
NODE = "node4"


@pytest.fixture
def drained(slurm_conf: str) -> Iterator[bool]:
    """NODE drained with REASON while the test runs (False: it was out of service already and
    is left alone)."""
    env = {**os.environ, "SLURM_CONF": slurm_conf, "TZ": "UTC"}
    shown = subprocess.run(["scontrol", "show", "-o", "node", NODE], env=env, text=True,
                           capture_output=True, check=True).stdout  # fmt: skip
    state = shown.split(" State=", 1)[1].split()[0]
    ours = not any(bad in state for bad in ("DRAIN", "DOWN", "FAIL"))
    if ours:
        subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=DRAIN",
                        f"Reason={REASON}"], env=env, check=True)  # fmt: skip
    try:
        yield ours
    finally:
        if ours:
            subprocess.run(["scontrol", "update", f"NodeName={NODE}", "State=RESUME"], env=env,
                           check=True)  # fmt: skip


async def both_ways(
    structured: SlurmClient, text: SlurmClient, names: list[str] | None = None
) -> tuple[list[NodeObservation], list[NodeObservation]]:
    """One JSON read and one text read of a moment no node changed in (jobs of other tests come
    and go: a JSON read before and after the text read must agree)."""
    for _ in range(20):
        before = await structured.show_nodes(names)
        shown = await text.show_nodes(names)
        if before == await structured.show_nodes(names):
            return before, shown
    pytest.fail("node states kept changing between reads")


async def test_json_and_text_fallback_read_the_same_nodes(slurm_conf: str, drained: bool) -> None:
    runner = LocalRunner(slurm_conf)
    structured, text = SlurmClient(runner), SlurmClient(runner, structured=False)
    got, shown = await both_ways(structured, text)
    assert got == shown
    assert [n.name for n in got] == ["node1", "node2", "node3", "node4"]
    assert await structured.node_source() == "sinfo-json"
    assert await text.node_source() == "text"
    if drained:
        node = next(n for n in got if n.name == NODE)
        assert "DRAIN" in node.state and node.reason.startswith(REASON + " [root@")
        assert node.partitions == ["debug"]
    one, one_text = await both_ways(structured, text, [NODE, "nosuch"])
    assert [n.name for n in one] == [NODE] and one == one_text
