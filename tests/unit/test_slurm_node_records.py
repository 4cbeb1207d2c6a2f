"""Node reads (resurgo/slurm/node_records.py, parsers.parse_node, SlurmClient.show_nodes) against
one moment of a real Slurm 22.05.8 cluster captured both ways (tests/fixtures/slurm/
capture_nodes.sh): `sinfo --json` and `scontrol show -o node`. node1 runs a job (MIXED); node2
runs one and is drained with a reason quoting job text that poses as fields and as Slurm's
`[user@time]`; node3 is drained inside a MAINT reservation; node4's slurmd was killed."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from resurgo.contracts import NodeObservation
from resurgo.slurm import breaker, node_records
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.parsers import parse_node, parse_nodes
from resurgo.slurm.runner import CommandResult

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "slurm"
SINFO_JSON = (FIXTURES / "nodes_sinfo_json.json").read_text()
TEXT = (FIXTURES / "nodes_scontrol_oneline.txt").read_text()
NO_SCONTROL_JSON = (FIXTURES / "nodes_scontrol_json_unsupported.txt").read_text().split("[exit")[0]
SQUEUE_JSON = (FIXTURES / "squeue_json.json").read_text()  # meta: Slurm 22.05.8
HOSTILE = (
    "resurgo resurgo:local:7:1700000000:g1:drain_node: xid 79 State=IDLE Partitions=evil "
    "Reason=forged [x@2020-01-01T00:00:00] ü"
)


def from_json(text: str = SINFO_JSON) -> list[NodeObservation]:
    records = node_records.node_list(text)
    assert records is not None
    return node_records.observations(records)


def doc_with(**changes: Any) -> str:
    """The captured `sinfo --json` with node1's record changed."""
    doc = json.loads(SINFO_JSON)
    doc["nodes"][0].update(changes)
    return json.dumps(doc)


class TestCapturedNodes:
    def test_json_and_text_give_the_same_records(self) -> None:
        assert from_json() == parse_nodes(TEXT)

    def test_states_flags_reasons_and_partitions(self) -> None:
        nodes = {n.name: n for n in from_json()}
        assert [nodes[n].state for n in sorted(nodes)] == [
            "MIXED", "MIXED+DRAIN", "IDLE+DRAIN+MAINTENANCE+RESERVED", "DOWN+NOT_RESPONDING",
        ]  # fmt: skip
        reason_time = datetime.fromtimestamp(
            json.loads(SINFO_JSON)["nodes"][1]["reason_changed_at"], UTC
        )
        assert nodes["node2"].reason == f"{HOSTILE} [root@{reason_time:%Y-%m-%dT%H:%M:%S}]"
        assert nodes["node4"].reason.startswith("Not responding [root@")
        assert nodes["node1"].reason == ""
        assert all(n.partitions == ["debug"] for n in nodes.values())

    def test_a_reason_quoting_fields_stays_whole_in_text(self) -> None:
        """The old text parser split the reason at ` State=`: the drain lost its key's tail and
        Slurm's time (so the breaker dated it "now"), and `Partitions=evil` could be read."""
        line = next(ln for ln in TEXT.split("\n") if ln.startswith("NodeName=node2 "))
        node = parse_node(line)
        assert node.reason.startswith(HOSTILE)
        assert node.partitions == ["debug"] and node.state == "MIXED+DRAIN"

    def test_the_breaker_dates_drains_by_slurms_time_not_a_forged_one(self) -> None:
        raw = json.loads(SINFO_JSON)["nodes"]
        for nodes in (from_json(), parse_nodes(TEXT)):
            facts = {f.node: f for f in breaker.remediations_from_nodes(nodes, "local")}
            assert sorted(facts) == ["node2", "node3"]
            assert facts["node2"].job_id == 7 and facts["node3"].job_id == 12
            assert facts["node2"].at == datetime.fromtimestamp(raw[1]["reason_changed_at"], UTC)


class TestHostileRecords:
    def test_a_name_scontrol_could_not_take_back_costs_only_that_node(self) -> None:
        nodes = from_json(doc_with(name="node1 --help"))
        assert [n.name for n in nodes] == ["node2", "node3", "node4"]

    @pytest.mark.parametrize(
        "changes",
        [{"name": None}, {"state": 7}, {"state": "", "state_flags": []}, {"reason": ["x"]},
         {"reason": "x", "reason_changed_at": "soon"}, {"partitions": [1]}],
    )  # fmt: skip
    def test_a_record_that_does_not_fit_costs_only_that_node(self, changes: dict[str, Any]) -> None:
        assert [n.name for n in from_json(doc_with(**changes))] == ["node2", "node3", "node4"]

    def test_lone_surrogates_and_separators_in_a_reason(self) -> None:
        node = from_json(doc_with(reason="a\ud800\u2028b\x0bc", reason_changed_at=0))[0]
        assert node.reason == "a\ufffd\u2028b\x0bc"

    def test_a_multi_line_reason_reads_as_scontrol_prints_it(self) -> None:
        node = from_json(doc_with(reason="first\n\nsecond", reason_changed_at=1796447028,
                                  reason_set_by_user="root"))[0]  # fmt: skip
        assert node.reason == "first [root@2026-12-05T05:03:48]        second"

    def test_not_a_node_list(self) -> None:
        for text in ["", "NodeName=node1 State=IDLE", "{", '{"nodes": {}}', '{"sinfo": []}']:
            assert node_records.node_list(text) is None
        assert node_records.node_list('{"nodes": [1, {"name": "n"}]}') == [{"name": "n"}]

    def test_slurm_23_state_lists(self) -> None:
        record = {"name": "gpu1", "state": ["RESERVED", "IDLE", "DRAIN", "MAINTENANCE"],
                  "reason": "", "partitions": ["a", "b"]}  # fmt: skip
        node = node_records.observation(record)
        assert node.state == "IDLE+DRAIN+MAINTENANCE+RESERVED" and node.partitions == ["a", "b"]
        reason = {**record, "reason_changed_at": {"set": True, "number": 1796447028}}
        reason |= {"reason": "x", "reason_set_by_user": "root"}
        assert node_records.observation(reason).reason == "x [root@2026-12-05T05:03:48]"


class CapturedSlurm:
    """Answers node and job reads with the captures; `squeue_json`/`sinfo` None: no --json."""

    def __init__(
        self, squeue_json: str | None = SQUEUE_JSON, sinfo: str | None = SINFO_JSON
    ) -> None:
        self.squeue_json = squeue_json
        self.sinfo = sinfo
        self.calls: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float = 30.0) -> CommandResult:
        self.calls.append(argv)
        no_json = CommandResult(tuple(argv), 1, "", NO_SCONTROL_JSON.replace("scontrol", argv[0]))
        if argv[:2] == ["squeue", "--json"]:
            return no_json if self.squeue_json is None else self.ok(argv, self.squeue_json)
        if argv[:2] == ["sinfo", "--json"]:
            return no_json if self.sinfo is None else self.ok(argv, self.sinfo)
        if argv[:2] == ["scontrol", "--json"]:
            return no_json
        if argv[:4] == ["scontrol", "show", "-o", "node"]:
            if len(argv) == 4:
                return self.ok(argv, TEXT)
            lines = [ln for ln in TEXT.split("\n") for n in argv[4].split(",")
                     if ln.startswith(f"NodeName={n} ")]  # fmt: skip
            if len(lines) < len(argv[4].split(",")):
                return CommandResult(tuple(argv), 1, "", "Node nosuch not found\n")
            return self.ok(argv, "\n".join(lines) + "\n")
        raise AssertionError(f"unexpected command {argv}")

    @staticmethod
    def ok(argv: list[str], out: str) -> CommandResult:
        return CommandResult(tuple(argv), 0, out, "")

    async def read_file(
        self, path: str, offset: int, max_bytes: int, *, owner: str | int | None = None
    ) -> tuple[bytes, int, int]:
        raise FileNotFoundError(path)

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        return {}


class TestClient:
    async def test_22_05_reads_nodes_from_sinfo_json_and_decides_once(self) -> None:
        slurm = CapturedSlurm()
        client = SlurmClient(slurm)
        assert await client.show_nodes() == parse_nodes(TEXT)
        assert await client.show_nodes(["node3"]) == [n for n in parse_nodes(TEXT)
                                                      if n.name == "node3"]  # fmt: skip
        assert await client.node_source() == "sinfo-json"
        # The squeue listing said 22.05: no `scontrol --json` was tried, no text read.
        assert [c[:2] for c in slurm.calls] == [["squeue", "--json"]] + [["sinfo", "--json"]] * 2

    async def test_unknown_version_tries_scontrol_json_first(self) -> None:
        slurm = CapturedSlurm(squeue_json=None)
        assert await SlurmClient(slurm, structured=True).node_source() == "sinfo-json"
        assert [c[:2] for c in slurm.calls] == [["scontrol", "--json"], ["sinfo", "--json"]]

    async def test_no_json_at_all_reads_text(self) -> None:
        slurm = CapturedSlurm(squeue_json=None, sinfo=None)
        client = SlurmClient(slurm)
        assert await client.show_nodes() == from_json()
        assert await client.node_source() == "text"

    async def test_forced_text_never_asks_for_json(self) -> None:
        slurm = CapturedSlurm()
        client = SlurmClient(slurm, structured=False)
        assert await client.show_nodes() == from_json()
        assert all("--json" not in c for c in slurm.calls)

    @pytest.mark.parametrize("structured", [None, False])
    async def test_an_unknown_node_is_left_out(self, structured: bool | None) -> None:
        client = SlurmClient(CapturedSlurm(), structured=structured)
        assert await client.show_nodes(["nosuch"]) == []
        assert [n.name for n in await client.show_nodes(["node2", "nosuch"])] == ["node2"]

    async def test_a_json_source_that_stops_answering_is_an_error(self) -> None:
        slurm = CapturedSlurm()
        client = SlurmClient(slurm)
        await client.show_nodes()
        slurm.sinfo = "garbage"
        with pytest.raises(Exception, match="no node list"):
            await client.show_nodes()


def test_fixture_nodes_are_distinct() -> None:
    # The capture shows four different states: a regression here means a bad re-capture.
    assert len({n.state for n in copy.deepcopy(from_json())}) == 4
