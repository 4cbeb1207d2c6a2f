"""Circuit breaker, per-node caps and cross-job memory: pure functions over real-format
`scontrol show -o job/node` lines (captures from tests/fixtures/slurm with fields changed), a
property over any sequence of requests, and SlurmActions against a scripted Slurm."""

from __future__ import annotations

import asyncio
import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resurgo.contracts import ActionRequest, ActionStep, JobKey, JobObservation
from resurgo.slurm import breaker
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.breaker import BreakerSettings, Remediation
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import PreconditionFailed
from resurgo.slurm.parsers import SQUEUE_SEP, compress_hostlist, parse_job, parse_node
from resurgo.slurm.runner import CommandResult

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
JOB = (FIXTURES / "scontrol_show_job_held_excluded.txt").read_text().splitlines()[0]
NODE = (FIXTURES / "scontrol_show_node_drain_oneline.txt").read_text().splitlines()[0]
NOW = datetime(2026, 11, 29, 15, 0, tzinfo=UTC)
CLUSTER = "prod"


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S")


def key(job_id: int, cluster: str = CLUSTER, gen: int = 1) -> str:
    return f"resurgo:{cluster}:{job_id}:1795961410:g{gen}:requeue_hold"


def job_line(
    job_id: int,
    exc: str,
    admin: str | None,
    *,
    submit: datetime = NOW,
    state: str = "PENDING",
) -> str:
    """The captured held+excluded job with its id, ExcNodeList, AdminComment, SubmitTime."""
    line = JOB.replace("JobId=3 ", f"JobId={job_id} ", 1)
    line = line.replace("ExcNodeList=node1 ", f"ExcNodeList={exc or '(null)'} ", 1)
    line = line.replace("JobState=PENDING ", f"JobState={state} ", 1)
    line = re.sub(r"SubmitTime=\S+", f"SubmitTime={stamp(submit)}", line, count=1)
    if admin is not None:  # Slurm prints AdminComment right before Comment
        line = line.replace(" Comment=", f" AdminComment={admin}  Comment=", 1)
    return line


def node_line(name: str, state: str = "IDLE", reason: str | None = None) -> str:
    line = NODE.replace("NodeName=node3 ", f"NodeName={name} ", 1)
    line = line.replace("State=IDLE+DRAIN ", f"State={state} ", 1)
    head, _, _ = line.partition(" Reason=")
    return head + (f" Reason={reason}" if reason is not None else "")


def tag(kind: str, job_id: int, at: datetime, cluster: str = CLUSTER) -> str:
    when = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "hold":
        return f"resurgo:hold key={key(job_id, cluster)} deadline={when} at={when}"
    return f"resurgo:released key={key(job_id, cluster)} at={when}"


def facts(jobs: list[str], nodes: tuple[str, ...] | list[str] = ()) -> list[Remediation]:
    return breaker.remediations_from_jobs(
        [parse_job(j) for j in jobs], CLUSTER
    ) + breaker.remediations_from_nodes([parse_node(n) for n in nodes], CLUSTER)


SETTINGS = BreakerSettings()  # 1 h window, 10 %, 3 per node, drain after 3 jobs


class TestFacts:
    def test_tagged_jobs_give_their_exclusions_at_the_tag_time(self) -> None:
        at = NOW - timedelta(minutes=5)
        got = facts(
            [
                job_line(11, "node[1-2]", tag("released", 11, at)),
                job_line(12, "node3", tag("hold", 12, at)),
                job_line(13, "node4", None),  # not ours: the user's own --exclude
                job_line(14, "node4", tag("hold", 14, at, cluster="staging")),  # another cluster
                job_line(15, "node4", "resurgo gen=1 nodes=node4"),  # not a tag
            ]
        )
        assert got == [
            Remediation("node1", "exclude", 11, at),
            Remediation("node2", "exclude", 11, at),
            Remediation("node3", "exclude", 12, at),
        ]

    def test_untimed_tag_falls_back_to_submit_time(self) -> None:
        old = NOW - timedelta(hours=3)
        line = job_line(21, "node2", f"resurgo:hold key={key(21)} deadline=none", submit=old)
        assert facts([line]) == [Remediation("node2", "exclude", 21, old)]

    def test_watchdog_release_tag_counts(self) -> None:
        admin = f"resurgo:released-by-watchdog key={key(22)} at=2026-11-29T14:59:00Z"
        assert [f.node for f in facts([job_line(22, "node1", admin)])] == ["node1"]

    def test_drained_nodes_with_resurgo_reason(self) -> None:
        got = facts(
            [],
            [
                NODE,  # the real capture: "resurgo: xid 79 ..." without a key, still ours
                node_line(
                    "node1", "IDLE+DRAIN", f"resurgo {key(7)}: xid [root@2026-11-29T14:30:00]"
                ),
                node_line("node2", "IDLE+DRAIN", "admin maintenance [root@2026-11-29T14:30:00]"),
                node_line("node4", "IDLE", None),
                node_line(
                    "node5",
                    "IDLE+DRAIN",
                    f"resurgo {key(8, 'staging')}: x [root@2026-11-29T14:30:00]",
                ),
            ],
        )
        assert got == [
            Remediation("node3", "drain", None, datetime(2026, 11, 29, 14, 11, 6, tzinfo=UTC)),
            Remediation("node1", "drain", 7, datetime(2026, 11, 29, 14, 30, tzinfo=UTC)),
        ]

    def test_cross_job_drain_reason_names_the_job(self) -> None:
        reason = f"resurgo cross-job: implicated in 3 jobs ({key(9)}) [root@2026-11-29T14:30:00]"
        assert [f.job_id for f in facts([], [node_line("node2", "MIXED+DRAIN", reason)])] == [9]


def refusal(
    known: list[Remediation], job_id: int, nodes: set[str], total: int = 20, **kw: object
) -> str | None:
    cfg = SETTINGS.model_copy(update=kw)
    return breaker.refusal(
        known, cluster=CLUSTER, job_id=job_id, requested=nodes, total_nodes=total,
        settings=cfg, now=NOW,
    )  # fmt: skip


class TestRefusal:
    def test_share_of_the_cluster(self) -> None:
        recent = NOW - timedelta(minutes=10)
        known = facts([job_line(1, "n1", tag("released", 1, recent))])
        assert refusal(known, 2, {"n2"}) is None  # 2 of 20 = 10 %
        why = refusal(known, 2, {"n2", "n3"})
        assert why and why.startswith("circuit breaker") and "limit 2" in why

    def test_floor_of_one_node_on_small_clusters(self) -> None:
        assert breaker.breaker_limit(4, 0.1) == 1 and breaker.breaker_limit(30, 0.1) == 3
        assert refusal([], 1, {"node1"}, total=4) is None
        known = [Remediation("node1", "exclude", 1, NOW)]
        assert refusal(known, 2, {"node2"}, total=4) is not None
        # Nothing new: already-remediated nodes never trip the breaker.
        assert refusal(known, 2, {"node1"}, total=4) is None

    def test_window(self) -> None:
        old = [Remediation(f"n{i}", "exclude", i, NOW - timedelta(hours=2)) for i in range(5)]
        assert refusal(old, 9, {"n9"}, total=10) is None
        assert refusal(old, 9, {"n9"}, total=10, window_seconds=3 * 3600) is not None

    def test_per_node_cap(self) -> None:
        known = [Remediation("n1", "exclude", j, NOW) for j in (1, 2, 3)]
        why = refusal(known, 4, {"n1"}, total=100)
        assert why and why.startswith("per-node cap") and "n1" in why
        assert refusal(known, 4, {"n1"}, total=100, max_remediations_per_node=4) is None
        # The same job excluding again (a retry, a later advice) is not a new remediation.
        assert refusal(known, 3, {"n1"}, total=100) is None

    def test_a_jobs_exclusion_and_drain_are_one_remediation(self) -> None:
        known = [
            Remediation("n1", "exclude", 1, NOW),
            Remediation("n1", "drain", 1, NOW),
            Remediation("n1", "exclude", 2, NOW),
        ]
        assert breaker.remediation_events(known, SETTINGS.window, NOW) == {"n1": {"job:1", "job:2"}}
        assert refusal(known, 3, {"n1"}, total=100) is None


class TestCrossJob:
    def test_k_distinct_jobs_in_the_window(self) -> None:
        recent = NOW - timedelta(minutes=1)
        jobs = [job_line(j, "node2", tag("released", j, recent)) for j in (1, 2)]
        jobs.append(job_line(3, "node[2-3]", tag("hold", 3, recent)))
        jobs.append(job_line(4, "node3", tag("hold", 4, NOW - timedelta(hours=2))))
        got = breaker.nodes_to_drain(facts(jobs), 3, SETTINGS.window, NOW)
        assert got == {"node2": 3}
        assert breaker.nodes_to_drain(facts(jobs), 1, SETTINGS.window, NOW) == {
            "node2": 3,
            "node3": 1,
        }

    def test_already_drained_is_not_advised_again(self) -> None:
        jobs = [job_line(j, "node3", tag("released", j, NOW)) for j in (1, 2, 3)]
        assert breaker.nodes_to_drain(facts(jobs, [NODE]), 3, SETTINGS.window, NOW) == {}

    def test_the_same_job_counts_once(self) -> None:
        known = [Remediation("n1", "exclude", 1, NOW)] * 5
        assert breaker.nodes_to_drain(known, 2, SETTINGS.window, NOW) == {}


NODES = [f"n{i}" for i in range(8)]
requests = st.lists(
    st.tuples(
        st.integers(1, 6),  # job
        st.sets(st.sampled_from(NODES), min_size=1, max_size=3),
        st.sampled_from(["exclude", "drain"]),
        st.integers(0, 7200),  # seconds after the start
    ),
    max_size=25,
)


class TestBreakerProperty:
    @settings(max_examples=300)
    @given(
        requests,
        st.floats(0.0, 1.0),
        st.integers(1, 4),
        st.integers(600, 3600),
    )
    def test_never_more_than_the_breaker_and_caps_allow(
        self,
        reqs: list[tuple[int, set[str], str, int]],
        share: float,
        cap: int,
        window: int,
    ) -> None:
        """Admit requests in time order only when `refusal` says so: at every moment the
        distinct remediated nodes in the window stay within the limit, and no node is
        remediated for more than `cap` jobs in any window."""
        cfg = BreakerSettings(
            window_seconds=window, max_excluded_share=share, max_remediations_per_node=cap
        )
        limit = breaker.breaker_limit(len(NODES), share)
        start = NOW - timedelta(hours=3)
        admitted: list[Remediation] = []
        for job_id, nodes, kind, offset in sorted(reqs, key=lambda r: r[3]):
            now = start + timedelta(seconds=offset)
            why = breaker.refusal(
                admitted, cluster=CLUSTER, job_id=job_id, requested=nodes,
                total_nodes=len(NODES), settings=cfg, now=now,
            )  # fmt: skip
            if why is None:
                admitted += [Remediation(n, kind, job_id, now) for n in nodes]  # type: ignore[arg-type]
            recent = breaker.remediated_nodes(admitted, cfg.window, now)
            assert len(recent) <= limit
            for jobs in breaker.remediation_events(admitted, cfg.window, now).values():
                assert len(jobs) <= cap


def squeue_record(obs: JobObservation) -> dict[str, object]:
    """The job as Slurm 22.05's `squeue --json` prints it (the fields Resurgo reads)."""

    def epoch(when: datetime | None) -> int:
        return int(when.timestamp()) if when else 0

    return {
        "job_id": obs.job_id, "name": obs.name, "user_name": obs.user,
        "partition": obs.partition, "job_state": obs.state, "state_reason": obs.reason,
        "restart_cnt": obs.restarts, "requeue": obs.requeue, "priority": obs.priority,
        "nodes": compress_hostlist(obs.node_list),
        "excluded_nodes": compress_hostlist(obs.exc_node_list),
        "exit_code": obs.exit_code << 8 | obs.exit_signal, "comment": obs.comment,
        "admin_comment": obs.admin_comment, "standard_output": obs.std_out,
        "current_working_directory": "/tmp", "submit_time": epoch(obs.submit_time),
        "start_time": epoch(obs.start_time), "end_time": epoch(obs.end_time),
        "node_count": obs.num_nodes, "batch_flag": bool(obs.batch_flag),
        "array_job_id": 0, "het_job_id": 0,
    }  # fmt: skip


class FakeSlurm:
    """Just enough of scontrol/squeue for SlurmActions: jobs and nodes as real-format lines,
    jobs listed the way `squeue --json` prints them."""

    def __init__(self, jobs: dict[int, str], nodes: dict[str, str]) -> None:
        self.jobs = jobs
        self.nodes = nodes
        self.calls: list[list[str]] = []

    async def run(self, argv: list[str], *, timeout: float = 30.0) -> CommandResult:
        self.calls.append(argv)
        if argv[:4] == ["scontrol", "show", "-o", "job"]:
            if len(argv) == 5:
                return CommandResult(tuple(argv), 0, self.jobs[int(argv[4])] + "\n", "")
            return CommandResult(
                tuple(argv), 0, "".join(line + "\n" for line in self.jobs.values()), ""
            )
        if argv[:4] == ["scontrol", "show", "-o", "node"]:
            return CommandResult(tuple(argv), 0, "".join(n + "\n" for n in self.nodes.values()), "")
        if argv[0] in ("scontrol", "sinfo") and "--json" in argv:  # nodes as text, like Slurm 21
            return CommandResult(tuple(argv), 1, "", f"{argv[0]}: unrecognized option '--json'")
        if argv[:2] == ["squeue", "--json"]:  # 22.05 prints every job whatever -j says
            records = [squeue_record(parse_job(line)) for line in self.jobs.values()]
            return CommandResult(tuple(argv), 0, json.dumps({"meta": {}, "jobs": records}), "")
        if argv[0] == "squeue":
            rows = []
            for job_id, line in self.jobs.items():
                if "-j" in argv and int(argv[argv.index("-j") + 1]) != job_id:
                    continue
                obs = parse_job(line)
                if "-j" in argv:
                    rows.append(f"{obs.name}{SQUEUE_SEP}{obs.comment}")
                else:
                    rows.append(SQUEUE_SEP.join([str(job_id), "", obs.state, "", "root",
                                                 "debug", obs.name, obs.comment]))  # fmt: skip
            return CommandResult(tuple(argv), 0, "".join(r + "\n" for r in rows), "")
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("JobId="):
            job_id = int(argv[2].split("=")[1])
            field, value = argv[3].split("=", 1)
            assert field == "ExcNodeList"
            self.jobs[job_id] = re.sub(
                r"ExcNodeList=\S+", f"ExcNodeList={value}", self.jobs[job_id]
            )
            return CommandResult(tuple(argv), 0, "", "")
        if argv[:2] == ["scontrol", "update"] and argv[2].startswith("NodeName="):
            name = argv[2].split("=")[1]
            reason = argv[4].removeprefix("Reason=")
            self.nodes[name] = node_line(name, "IDLE+DRAIN", f"{reason} [root@{stamp(NOW)}]")
            return CommandResult(tuple(argv), 0, "", "")
        raise AssertionError(f"unexpected command {argv}")

    async def read_file(
        self, path: str, offset: int, max_bytes: int, *, owner: str | int | None = None
    ) -> tuple[bytes, int, int]:
        raise NotImplementedError

    async def stat_files(self, paths: list[str]) -> dict[str, tuple[int, int] | None]:
        raise NotImplementedError


def actions_on(
    jobs: dict[int, str], n_nodes: int = 4, **kw: object
) -> tuple[SlurmActions, FakeSlurm]:
    nodes = {f"node{i}": node_line(f"node{i}") for i in range(1, n_nodes + 1)}
    fake = FakeSlurm(jobs, nodes)
    cfg = SETTINGS.model_copy(update=kw)
    return SlurmActions(SlurmClient(fake), cfg, CLUSTER), fake


def exclude(job_id: int, nodes: list[str]) -> ActionRequest:
    return ActionRequest(
        job=JobKey(cluster=CLUSTER, job_id=job_id, submit_time=NOW),
        step=ActionStep.EXCLUDE_NODES,
        idempotency_key=f"resurgo:{CLUSTER}:{job_id}:1795961410:g1:exclude_nodes",
        attempt=0,
        nodes=nodes,
    )


def held(job_id: int) -> str:
    return job_line(job_id, "", tag("hold", job_id, datetime.now(UTC)))


def recent_tag(job_id: int) -> str:
    return tag("released", job_id, datetime.now(UTC) - timedelta(minutes=1))


class TestSlurmActions:
    def test_second_node_on_a_small_cluster_is_refused_by_the_breaker(self) -> None:
        actions, fake = actions_on({1: job_line(1, "node1", recent_tag(1)), 2: held(2)})
        with pytest.raises(PreconditionFailed, match="refused by circuit breaker"):
            asyncio.run(actions.exclude_nodes(exclude(2, ["node2"])))
        assert not any(c[:2] == ["scontrol", "update"] for c in fake.calls)
        # The already-remediated node is fine: nothing new is taken out.
        result = asyncio.run(actions.exclude_nodes(exclude(2, ["node1"])))
        assert result.outcome == "applied" and parse_job(fake.jobs[2]).exc_node_list == ["node1"]

    def test_per_node_cap_refuses(self) -> None:
        jobs = {j: job_line(j, "node1", recent_tag(j)) for j in (1, 2, 3)}
        jobs[4] = held(4)
        actions, _ = actions_on(jobs, max_remediations_per_node=3)
        with pytest.raises(PreconditionFailed, match="per-node cap: node node1"):
            asyncio.run(actions.exclude_nodes(exclude(4, ["node1"])))

    def test_cross_job_advice_without_drain(self) -> None:
        jobs = {j: job_line(j, "node1", recent_tag(j)) for j in (1, 2)}
        jobs[3] = held(3)
        actions, fake = actions_on(jobs, max_remediations_per_node=5)
        result = asyncio.run(actions.exclude_nodes(exclude(3, ["node1"])))
        assert (
            "node node1 implicated in 3 jobs: drain advised (allow_drain is off)" in result.detail
        )
        assert "DRAIN" not in parse_node(fake.nodes["node1"]).state

    def test_cross_job_drain_when_allowed_and_only_once(self) -> None:
        jobs = {j: job_line(j, "node1", recent_tag(j)) for j in (1, 2)}
        jobs[3] = held(3)
        actions, fake = actions_on(jobs, allow_drain=True)
        result = asyncio.run(actions.exclude_nodes(exclude(3, ["node1"])))
        assert "node node1 implicated in 3 jobs: drain advised (drained)" in result.detail
        node = parse_node(fake.nodes["node1"])
        assert "DRAIN" in node.state
        assert node.reason.startswith("resurgo cross-job: implicated in 3 jobs (resurgo:prod:3:")
        # A retried step finds the exclusion and the drain done: no second drain.
        again = asyncio.run(actions.exclude_nodes(exclude(3, ["node1"])))
        assert again.outcome == "already_satisfied" and "drain advised" not in again.detail
        drains = [c for c in fake.calls if c[:2] == ["scontrol", "update"] and "State=DRAIN" in c]
        assert len(drains) == 1

    def test_without_breaker_settings_nothing_is_checked(self) -> None:
        fake = FakeSlurm({1: job_line(1, "node1", recent_tag(1)), 2: held(2)},
                         {f"node{i}": node_line(f"node{i}") for i in range(1, 5)})  # fmt: skip
        actions = SlurmActions(SlurmClient(fake))
        result = asyncio.run(actions.exclude_nodes(exclude(2, ["node2", "node3"])))
        assert result.outcome == "applied"


def test_job_observation_roundtrip_of_the_modified_capture() -> None:
    obs: JobObservation = parse_job(job_line(5, "node[2-3]", tag("hold", 5, NOW)))
    assert obs.job_id == 5 and obs.exc_node_list == ["node2", "node3"]
    assert obs.admin_comment.startswith("resurgo:hold key=resurgo:prod:5:") and obs.held
