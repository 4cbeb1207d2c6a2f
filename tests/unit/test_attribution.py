"""Attribution rules on focused cases, in the real formats of srun, torch, NCCL, gloo, kernel.

The corpus test (test_attribution_corpus.py) covers whole runs; these pin down single rules.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from activities.attribute.evidence import BundleError, load_bundle, read_lines
from activities.attribute.metrics import findings
from activities.attribute.offline import analyse_bundle, default_advice
from activities.attribute.rules import attribute, fingerprint
from activities.attribute.scheduler import owner_cancelled, parse_scheduler
from activities.attribute.topology import learn_topology
from activities.detect.registry import Registry
from workflows.contracts import (
    AdviceKind,
    Anomaly,
    AnomalyKind,
    Category,
    JobObservation,
    LogLine,
    NodeObservation,
)

REGISTRY = Registry.default()
NODES2 = ["node1", "node2"]


def lines(text: str, source: str = "job.log") -> list[LogLine]:
    return [
        LogLine(source=source, line_no=n, text=t)
        for n, t in enumerate(text.strip("\n").split("\n"), 1)
    ]


def job(state: str = "FAILED", nodes: list[str] | None = None, code: int = 143) -> JobObservation:
    return JobObservation(
        job_id=42, state=state, node_list=nodes or NODES2, exit_code=code, user="alice"
    )


def run(
    text: str,
    *,
    obs: JobObservation | None = None,
    node_logs: dict[str, str] | None = None,
    scheduler: str = "",
    metrics: str = "",
    anomaly: Anomaly | None = None,
    nodes: list[NodeObservation] | None = None,
):  # type: ignore[no-untyped-def]
    logs = {h: lines(t, f"dmesg_{h}.txt") for h, t in (node_logs or {}).items()}
    node_list = obs.node_list if obs else []
    return attribute(
        REGISTRY, anomaly, lines(text), obs, nodes or [], node_list,
        node_logs=logs, scheduler_lines=lines(scheduler, "scheduler.txt") if scheduler else [],
        metrics=lines(metrics, "metrics.txt") if metrics else [],
    )  # fmt: skip


PROGRESS = "\n".join(
    f"0:  iteration {i:8d}/      30 | elapsed time per iteration (ms): 2.0 | lm loss: 5.7E-01 |"
    for i in range(1, 12)
)
GLOO_CLOSED = (
    "RuntimeError: Got the following error when running the callback: RuntimeError: "
    "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
    "by peer [127.0.0.1]:6570. This is typically caused by a remote worker crashing."
)


class TestRootOverCascade:
    def test_sigkilled_rank_names_its_node_not_the_peer_that_lost_the_connection(self) -> None:
        # The peer's complaint and its own exit come first in the output; srun says who died.
        text = f"""{PROGRESS}
0: [rank0]: Traceback (most recent call last):
0: [rank0]: {GLOO_CLOSED}
srun: error: node1: task 0: Exited with exit code 1
srun: error: node2: task 1: Killed
srun: launch/slurm: _step_signal: Terminating StepId=29.0
srun: Force Terminated StepId=29.0"""
        a = run(text, obs=job())
        assert a.culprit_nodes == ["node2"] and a.culprit_ranks == [1]
        assert a.category == Category.UNKNOWN and a.kind == AnomalyKind.CRASH
        assert default_advice(a).kind == AdviceKind.REQUEUE
        assert any("task 1: Killed" in e.text for e in a.evidence)

    def test_segfault_reported_late_by_srun_still_wins_over_the_peers_exit(self) -> None:
        text = f"""{PROGRESS}
0: Fatal Python error: Segmentation fault
1: [rank1]: {GLOO_CLOSED.replace("Connection closed by peer", "Read error")}
srun: error: node2: task 1: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=35.0
srun: error: node1: task 0: Segmentation fault (core dumped)"""
        a = run(text, obs=job(code=139))
        assert a.culprit_nodes == ["node1"]
        assert a.category == Category.SYSTEM_SOFTWARE  # a native crash, no hardware on node1

    def test_the_same_exception_on_every_rank_is_the_application_with_no_culprit(self) -> None:
        text = f"""{PROGRESS}
1: [rank1]: ValueError: bad batch shape at iteration 12: expected [batch, 256] features
0: [rank0]: ValueError: bad batch shape at iteration 12: expected [batch, 256] features
srun: error: node1: task 0: Exited with exit code 1
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert a.confidence >= 0.8
        assert default_advice(a).kind == AdviceKind.STOP

    def test_an_exception_on_one_rank_is_retried_not_stopped(self) -> None:
        text = f"""{PROGRESS}
1: [rank1]: ValueError: bad batch shape at iteration 12
0: [rank0]: {GLOO_CLOSED}
srun: error: node2: task 1: Exited with exit code 1
srun: error: node1: task 0: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert a.culprit_ranks == [1]
        assert default_advice(a).kind == AdviceKind.REQUEUE

    def test_nan_loss_on_every_rank_is_not_a_stop(self) -> None:
        text = f"""{PROGRESS}
0: [rank0]: RuntimeError: Loss is NaN at iteration 12
1: [rank1]: RuntimeError: Loss is NaN at iteration 12"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION
        assert default_advice(a).kind == AdviceKind.REQUEUE

    def test_gloo_timeouts_on_peers_name_the_silent_rank(self) -> None:
        timeout = (
            "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/"
            "unbound_buffer.cc:78] Timed out waiting 8000ms for recv operation to complete"
        )
        text = f"""{PROGRESS}
0: [rank0]: {timeout}
2: [rank2]: {timeout}
srun: error: node1: task 0: Exited with exit code 1
srun: error: node3: task 2: Exited with exit code 1
srun: error: node2: task 1: Terminated"""
        a = run(text, obs=job(nodes=["node1", "node2", "node3"]))
        assert a.kind == AnomalyKind.HANG and a.category == Category.UNKNOWN
        assert a.culprit_nodes == ["node2"]
        assert default_advice(a).kind == AdviceKind.REQUEUE


class TestHardware:
    def test_xid_in_a_hosts_kernel_log_names_that_host(self, tmp_path: Path) -> None:
        (tmp_path / "job.log").write_text(
            f"{PROGRESS}\n0: [rank0]: {GLOO_CLOSED}\n"
            "srun: error: node2: task 1: Exited with exit code 1\n"
        )
        (tmp_path / "dmesg_node2.txt").write_text(
            "[Sun Nov 29 14:25:11 2026] NVRM: GPU at PCI:0000:3b:00: GPU-a46fe0c4-dab0-453f\n"
            "[Sun Nov 29 14:25:11 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=23878, "
            "name=python, GPU has fallen off the bus.\n"
        )
        report = analyse_bundle(tmp_path)
        a = report.attribution
        assert a.category == Category.HARDWARE_GPU and a.culprit_nodes == ["node2"]
        assert a.culprit_gpus == ["node2:0000:3b:00"]
        assert report.action == "requeue_excluding_nodes"
        assert any(e.source == "dmesg_node2.txt" for e in a.evidence)

    def test_ecc_error_in_the_job_log_is_placed_through_the_srun_label(self) -> None:
        text = f"""{PROGRESS}
1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered
0: [rank0]: {GLOO_CLOSED}
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["node2"])

    def test_nccl_host_prefix_places_an_ib_error(self) -> None:
        text = (
            "gpu7:41007:41166 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
            "from peer 10.11.0.14<58342> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0)"
        )
        a = run(text, obs=job(nodes=["gpu6", "gpu7"]))
        assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu7"])

    def test_dcgm_xid_metric_names_the_host(self) -> None:
        metrics = (
            'DCGM_FI_DEV_XID_ERRORS{gpu="5",UUID="GPU-2",Hostname="node2"} 0 1763626740000\n'
            'DCGM_FI_DEV_XID_ERRORS{gpu="5",UUID="GPU-2",Hostname="node2"} 79 1763626800000\n'
            'DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-1",Hostname="node1"} 0'
        )
        a = run("0: [rank0]: RuntimeError: CUDA error: unknown error", obs=job(), metrics=metrics)
        assert (a.category, a.culprit_nodes, a.culprit_gpus) == (
            Category.HARDWARE_GPU, ["node2"], ["node2:gpu5"],
        )  # fmt: skip

    def test_an_old_xid_from_days_before_the_job_is_not_evidence(self) -> None:
        obs = job().model_copy(update={"start_time": datetime(2026, 11, 29, 14, 0, tzinfo=UTC)})
        stale = "[Wed Nov 25 09:00:00 2026] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU"
        text = f"""{PROGRESS}
0: [rank0]: KeyError: 'optimizer'
1: [rank1]: KeyError: 'optimizer'"""
        a = run(text, obs=obs, node_logs={"node2": stale})
        assert a.category == Category.APPLICATION

    def test_a_down_node_is_the_culprit_of_a_node_failure(self) -> None:
        text = f"""{PROGRESS}
srun: error: Node failure on node2
slurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-11-20T08:40:10 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***"""  # noqa: E501
        down = NodeObservation(name="node2", state="DOWN+NOT_RESPONDING", reason="Not responding")
        a = run(text, obs=job("NODE_FAIL"), nodes=[down])
        assert (a.category, a.culprit_nodes, a.scheduler_outcome) == (
            Category.HARDWARE_HOST, ["node2"], "node_fail",
        )  # fmt: skip
        assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING
        assert not default_advice(a).counts_against_budget

    def test_oom_killer_on_the_killed_ranks_node_is_the_application(self) -> None:
        text = f"""{PROGRESS}
srun: error: node2: task 1: Killed
0: [rank0]: {GLOO_CLOSED}"""
        dmesg = (
            "Nov 29 14:20:01 node2 kernel: Out of memory: Killed process 4242 (python3) "
            "total-vm:801212340kB, anon-rss:512003112kB"
        )
        a = run(text, obs=job(), node_logs={"node2": dmesg})
        assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


class TestHangsStragglersAndHealthy:
    def test_a_hang_with_no_error_is_hang_unknown_and_requeued(self) -> None:
        a = run(PROGRESS, obs=job("RUNNING", code=0))
        assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.UNKNOWN, [])
        assert default_advice(a).kind == AdviceKind.REQUEUE

    def test_the_live_anomaly_kind_is_kept(self) -> None:
        anomaly = Anomaly(
            kind=AnomalyKind.HANG, attempt=0, detected_at=datetime.now(UTC), summary="hang"
        )
        a = attribute(REGISTRY, anomaly, lines(PROGRESS), job("RUNNING", code=0), [], NODES2)
        assert a.kind == AnomalyKind.HANG and a.category == Category.UNKNOWN

    def test_one_slow_rank_is_a_straggler_on_its_node(self) -> None:
        rows = []
        for step in range(1, 25):
            rows.append(f"0: [rank0] step={step} step_time_ms=1.2 node=node1")
            ms = 251.7 if step > 4 else 1.3
            rows.append(f"1: [rank1] step={step} step_time_ms={ms} node=node2")
        a = run("\n".join(rows), obs=job("RUNNING", code=0))
        assert (a.kind, a.culprit_nodes, a.culprit_ranks) == (
            AnomalyKind.STRAGGLER, ["node2"], [1],
        )  # fmt: skip

    def test_a_completed_job_is_healthy_whatever_its_log_says(self) -> None:
        text = f"""{PROGRESS}
0: ConnectionResetError: [Errno 104] Connection reset by peer
0: [resurgo-demo] training complete iteration=30"""
        a = run(text, obs=job("COMPLETED", code=0))
        assert (a.kind, a.category, a.fingerprint) == ("none", Category.NONE, "none")
        assert default_advice(a).kind == AdviceKind.NONE

    def test_cancelled_by_the_owner_means_nothing_to_do(self) -> None:
        text = f"{PROGRESS}\nslurmstepd: error: *** JOB 42 ON node1 CANCELLED AT 2026-11-20T08:33:00 ***"  # noqa: E501
        a = run(text, obs=job("CANCELLED", code=0))
        assert a.category == Category.SCHEDULER and a.scheduler_outcome == "owner_cancelled"
        assert default_advice(a).kind == AdviceKind.NONE

    def test_time_limit_is_the_schedulers(self) -> None:
        text = f"{PROGRESS}\nslurmstepd: error: *** JOB 7 ON node1 CANCELLED AT 2026-11-23T06:00:02 DUE TO TIME LIMIT ***"  # noqa: E501
        a = run(text)
        assert (a.category, a.scheduler_outcome) == (Category.SCHEDULER, "timeout")
        assert default_advice(a).kind == AdviceKind.REQUEUE


class TestFingerprintsAndTopology:
    def test_same_cause_on_other_nodes_has_the_same_fingerprint(self) -> None:
        template = "{r}: [rank{r}]: RuntimeError: CUDA error: uncorrectable ECC error encountered"
        a = run(template.format(r=1), obs=job())
        b = run(template.format(r=0), obs=job())
        assert a.culprit_nodes != b.culprit_nodes
        assert a.fingerprint == b.fingerprint
        assert a.fingerprint.startswith("hardware_gpu:")
        assert fingerprint(Category.HARDWARE_GPU, "k") == fingerprint(Category.HARDWARE_GPU, "k")

    def test_different_causes_have_different_fingerprints(self) -> None:
        a = run("1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered")
        b = run("1: [rank1]: ValueError: bad batch shape")
        assert a.fingerprint != b.fingerprint

    def test_topology_from_labels_stepd_elastic_and_block_layout(self) -> None:
        text = """0: [resurgo-demo] rank=0 world=4 node=node1 pid=1 job=1 restart=0
srun: error: node3: task 2: Exited with exit code 1
1: gpu-x:12:12 [0] NCCL INFO Bootstrap
Root Cause (first observed failure):
[0]:
  host      : node4.cluster.local
  rank      : 3 (local_rank: 0)"""
        topo = learn_topology(lines(text), ["node1", "node2", "node3", "node4"], num_tasks=4)
        assert topo.task_node[0] == "node1" and topo.task_node[2] == "node3"
        assert topo.rank_node[3] == "node4"
        assert topo.node_of(1, None) == "node2"  # block layout: 4 tasks over 4 nodes

    def test_attempt_split_keeps_only_the_last_attempt(self) -> None:
        text = f"""[resurgo-demo] batch job=1 restart=0 nodes=node[1-2]
1: [rank1]: RuntimeError: CUDA error: uncorrectable ECC error encountered
srun: error: node2: task 1: Exited with exit code 1
[resurgo-demo] batch job=1 restart=1 nodes=node[1-2]
{PROGRESS}
0: [resurgo-demo] training complete iteration=30"""
        obs = job("COMPLETED", code=0).model_copy(update={"restarts": 1})
        assert run(text, obs=obs).category == Category.NONE


class TestSchedulerText:
    def test_multiline_records_sacct_and_sinfo(self) -> None:
        text = """JobId=5150 JobName=train
   UserId=alice(1001) GroupId=alice(1001) MCS_label=N/A
   JobState=CANCELLED Reason=None Dependency=(null)
   NodeList=node[1-2] BatchHost=node1
   NumNodes=2 NumCPUs=128 NumTasks=8 CPUs/Task=8
NodeName=node2 Arch=x86_64 CoresPerSocket=32
   State=DOWN+NOT_RESPONDING ThreadsPerCore=2
   Reason=Not responding [slurm@2026-11-20T08:39:58]
JobID|JobName|User|State|ExitCode|NodeList
5150|train|alice|CANCELLED by 1001|0:15|node[1-2]
REASON               USER      TIMESTAMP           NODELIST
Not responding       slurm     2026-11-21T02:12:31 node3
[2026-11-21T02:12:31.004] error: Nodes node4 not responding"""
        facts = parse_scheduler(lines(text))
        assert facts.job is not None and facts.job.node_list == ["node1", "node2"]
        assert facts.num_tasks == 8 and facts.owner == ("alice", "1001")
        assert facts.nodes["node2"].state == "DOWN+NOT_RESPONDING"
        assert owner_cancelled(facts) is True
        assert [r.node for r in facts.reasons] == ["node3"]
        assert "node4" in facts.failed_nodes


class TestBundles:
    def test_missing_or_empty_job_log_is_a_clear_error(self, tmp_path: Path) -> None:
        with pytest.raises(BundleError, match=r"no job\.log"):
            load_bundle(tmp_path)
        (tmp_path / "job.log").write_text("\n \n")
        with pytest.raises(BundleError, match="empty"):
            load_bundle(tmp_path)
        with pytest.raises(BundleError, match="no such directory"):
            load_bundle(tmp_path / "nope")

    def test_undecodable_bytes_and_node_files(self, tmp_path: Path) -> None:
        (tmp_path / "job.log").write_bytes(b"\xff\xfe garbage \x1b[31mred\x1b[0m\n0: step 1\n")
        (tmp_path / "journal_gpu-3.cluster.txt").write_text("Nov 29 10:00:00 gpu-3 kernel: ok\n")
        (tmp_path / "notes.txt").write_text("ignored\n")
        bundle = load_bundle(tmp_path)
        assert list(bundle.node_logs) == ["gpu-3.cluster"]
        assert "\x1b" not in bundle.job[0].text
        assert read_lines(tmp_path / "job.log", "job.log")[1].line_no == 2

    def test_metrics_parse_host_labels_and_throttling(self) -> None:
        text = (
            "# TYPE DCGM_FI_DEV_CLOCK_THROTTLE_REASONS gauge\n"
            'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",Hostname="node6"} 96\n'
            'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="0",instance="node7:9400"} 0\n'
            'node_infiniband_state_id{device="mlx5_0",port="1",instance="node7:9100"} 1\n'
        )
        found = {(f.host, f.severity, f.what) for f in findings(lines(text, "metrics.txt"))}
        assert found == {
            ("node6", "degraded", "clock throttled"),
            ("node7", "fatal", "IB port not ACTIVE"),
        }
