"""The controller's node steps refuse what the cluster's gates forbid, before any Slurm command
that changes something: acknowledgement, allow_drain, the partition allowlist, someone else's
drain, the circuit breaker. Slurm is scripted (real `scontrol show -o node` record shapes)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.exceptions import ApplicationError

from resurgo.activities.node_health import NodeActivities
from resurgo.contracts import ClusterGates, NodeObservation
from resurgo.nodes.models import NodeDrainRequest, ReturnRequest
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.breaker import BreakerSettings, Remediation
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.runner import CommandResult

KEY = "resurgo-node:c1:node3"
RECORD = (
    "NodeName={name} Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUTot=4 NodeAddr=127.0.0.1 "
    "NodeHostName=localhost State={state} ThreadsPerCore=1 Partitions={partitions}  "
    "BootTime=2026-12-04T14:12:43 CfgTRES=cpu=4{reason}"
)


class ScriptedSlurm:
    """A runner answering `scontrol show -o node` and recording every other command."""

    def __init__(self, state: str = "IDLE", reason: str = "", partitions: str = "debug") -> None:
        self.nodes = {f"node{i}": (state if i == 3 else "IDLE", reason if i == 3 else "")
                      for i in range(1, 5)}  # fmt: skip
        self.partitions = partitions
        self.changes: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float = 30.0) -> CommandResult:
        if "--json" in argv:  # a Slurm without --json: nodes are read from text
            return CommandResult(tuple(argv), 1, "", f"{argv[0]}: unrecognized option '--json'")
        if argv[:4] == ["scontrol", "show", "-o", "node"]:
            names = argv[4].split(",") if len(argv) > 4 else sorted(self.nodes)
            lines = [
                RECORD.format(name=n, state=self.nodes[n][0], partitions=self.partitions,
                              reason=f" Reason={self.nodes[n][1]}" if self.nodes[n][1] else "")
                for n in names
            ]  # fmt: skip
            return CommandResult(tuple(argv), 0, "\n".join(lines) + "\n", "")
        if argv[:3] == ["scontrol", "show", "-o"]:
            return CommandResult(tuple(argv), 1, "", "not found")
        self.changes.append(argv)
        if argv[:2] == ["scontrol", "update"] and "State=DRAIN" in argv:
            node = argv[2].removeprefix("NodeName=")
            self.nodes[node] = ("IDLE+DRAIN", argv[4].removeprefix("Reason="))
        return CommandResult(tuple(argv), 0, "", "")

    async def read_file(self, *args: object, **kw: object) -> tuple[bytes, int, int]:
        raise FileNotFoundError

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        return {}


class KnownRemediations(SlurmActions):
    """What the breaker sees: `facts`, not a cluster-wide job listing."""

    def __init__(self, slurm: SlurmClient, facts: list[Remediation]) -> None:
        super().__init__(slurm)
        self.facts = facts

    async def remediations(self) -> tuple[list[Remediation], list[NodeObservation]]:
        nodes = [NodeObservation(name=f"node{i}", state="IDLE") for i in range(1, 5)]
        return self.facts, nodes


def activities(
    runner: ScriptedSlurm, *, ack: bool = True, allow: bool = True, partitions: list[str] = (),  # type: ignore[assignment]
    facts: list[Remediation] = (),  # type: ignore[assignment]
    share: float = 1.0,
) -> NodeActivities:  # fmt: skip
    breaker = BreakerSettings(allow_drain=allow, max_excluded_share=share)
    gates = ClusterGates(acknowledge_scheduler_actions=ack, partitions=list(partitions))
    actions = KnownRemediations(SlurmClient(runner), list(facts))
    return NodeActivities("c1", runner, gates, breaker, actions)


REQ = NodeDrainRequest(node="node3", key=KEY, reason=f"resurgo {KEY} lemon: jobs 1,2,3")


async def test_a_drain_passing_every_gate_is_done_once() -> None:
    runner = ScriptedSlurm()
    first = await activities(runner).node_drain(REQ)
    assert first.outcome == "applied"
    assert runner.changes == [
        ["scontrol", "update", "NodeName=node3", "State=DRAIN", f"Reason={REQ.reason}"]
    ]
    again = await activities(runner).node_drain(REQ)  # a retry after a lost completion
    assert again.outcome == "already_satisfied" and len(runner.changes) == 1


@pytest.mark.parametrize(
    ("setup", "why"),
    [
        ({"ack": False}, "acknowledge_scheduler_actions"),
        ({"allow": False}, "allow_drain is off"),
        ({"partitions": ["gpu"]}, "none of ['gpu']"),
        ({"share": 0.01, "facts": [Remediation("node1", "drain", None, datetime.now(UTC))]},
         "circuit breaker"),
    ],
)  # fmt: skip
async def test_gates_refuse_before_any_change(setup: dict[str, object], why: str) -> None:
    runner = ScriptedSlurm()
    with pytest.raises(ApplicationError) as refused:
        await activities(runner, **setup).node_drain(REQ)  # type: ignore[arg-type]
    assert why in str(refused.value) and refused.value.non_retryable
    assert runner.changes == []


async def test_someone_elses_drain_is_left_as_it_is() -> None:
    runner = ScriptedSlurm(
        state="IDLE+DRAIN", reason="bad DIMM, ticket 42 [root@2026-12-04T10:00:00]"
    )
    with pytest.raises(ApplicationError, match="already out of service"):
        await activities(runner).node_drain(REQ)
    assert runner.changes == []


async def test_a_failed_validation_drains_again_before_the_reservation_goes() -> None:
    runner = ScriptedSlurm(state="IDLE+MAINT+RESERVED")
    reason = f"resurgo node-health {KEY}: validation failed: FAIL gpu 3"
    done = await activities(runner).node_return(
        ReturnRequest(node="node3", key=KEY, passed=False, reason=reason)
    )
    assert done.outcome == "applied" and runner.nodes["node3"] == ("IDLE+DRAIN", reason)
    assert runner.changes[0][:4] == ["scontrol", "update", "NodeName=node3", "State=DRAIN"]


async def test_adopting_retags_only_a_drain_resurgo_made() -> None:
    job_drain = "resurgo resurgo:c1:77:1700000000:g1:drain_node: xid 79 [root@2026-12-04T10:00:00]"
    runner = ScriptedSlurm(state="IDLE+DRAIN", reason=job_drain)
    adopt = NodeDrainRequest(node="node3", key=KEY, reason=f"resurgo {KEY} awaiting validation",
                             adopt=True)  # fmt: skip
    done = await activities(runner).node_drain(adopt)
    assert done.outcome == "applied" and runner.nodes["node3"][1] == adopt.reason
    for state, reason in [("IDLE", ""), ("IDLE+DRAIN", "bad DIMM [root@2026-12-04T10:00:00]")]:
        other = ScriptedSlurm(state=state, reason=reason)
        with pytest.raises(ApplicationError, match="not adopting"):
            await activities(other).node_drain(adopt)
        assert other.changes == []
