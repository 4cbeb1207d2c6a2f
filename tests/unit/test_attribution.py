"""Attribution rules on focused cases, in the real formats of srun, torch, NCCL, gloo, kernel.

The corpus test (test_attribution_corpus.py) covers whole runs; these pin down single rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from resurgo.attribute.analysis import fingerprint
from resurgo.attribute.bundle import BundleError, load_bundle, read_lines
from resurgo.attribute.metrics import findings
from resurgo.attribute.offline import analyse_bundle, default_advice
from resurgo.attribute.rules import attribute
from resurgo.attribute.scheduler import owner_cancelled, parse_scheduler
from resurgo.attribute.topology import learn_topology
from resurgo.contracts import (
    AdviceKind,
    Anomaly,
    AnomalyKind,
    Category,
    JobObservation,
    LogLine,
    NodeObservation,
)
from resurgo.detect.registry import Registry

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

    def test_an_exception_on_one_rank_is_the_applications_and_stops(self) -> None:
        # attribution-labels.md: every application failure stops on its first occurrence.
        text = f"""{PROGRESS}
1: [rank1]: ValueError: bad batch shape at iteration 12
0: [rank0]: {GLOO_CLOSED}
srun: error: node2: task 1: Exited with exit code 1
srun: error: node1: task 0: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert a.culprit_ranks == [1]
        assert default_advice(a).kind == AdviceKind.STOP

    def test_nan_loss_on_every_rank_stops(self) -> None:
        # NaN on every rank is the model's or the data's (attribution-labels.md): stop.
        text = f"""{PROGRESS}
0: [rank0]: RuntimeError: Loss is NaN at iteration 12
1: [rank1]: RuntimeError: Loss is NaN at iteration 12"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION
        assert default_advice(a).kind == AdviceKind.STOP

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
        # Known only from Slurm: a scheduler event, the node still excluded (labels spec).
        assert (a.category, a.culprit_nodes, a.scheduler_outcome) == (
            Category.SCHEDULER, ["node2"], "node_fail",
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
        # Progress stopped, then silence: the scheduler's record (`date` printed with it) is
        # hours after the last time-stamped step. (Without any measure of the silence a running
        # job ending in steady progress is `none`: tests/unit/test_liveness.py.)
        stamped = "\n".join(
            f"0: [2026-11-20 08:00:{i:02d}] {line[3:]}" for i, line in enumerate(
                PROGRESS.splitlines(), 1)
        )  # fmt: skip
        a = run(stamped, obs=job("RUNNING", code=0), scheduler="2026-11-20T11:00:00+00:00")
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
        # A node file saved without its extension is still that node's.
        (tmp_path / "dmesg_nid001423").write_text("[Tue Mar  4 10:00:00 2025] amdgpu: ok\n")
        assert sorted(load_bundle(tmp_path).node_logs) == ["gpu-3.cluster", "nid001423"]
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


class TestRulesFromTheBlindCorpus:
    """Rules added after the first blind corpus (tests/corpus_blind) showed them missing."""

    def test_ib_errors_from_several_hosts_naming_one_peer_blame_the_peer(self) -> None:
        nccl = "NCCL WARN NET/IB : Got completion from peer 10.9.0.3<39000> with error 12, opcode 1"
        text = """
h1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.0.1<0>
h2:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.0.2<0>
h3:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.0.3<0>
""" + "\n".join(f"h{n}:100:201 [0] {nccl}" for n in (1, 2))
        a = run(text, obs=job(nodes=["h1", "h2", "h3"]))
        assert a.category == Category.HARDWARE_NETWORK
        assert a.culprit_nodes == ["h3"]

    def test_one_host_naming_a_peer_does_not_move_the_blame(self) -> None:
        text = """
h1:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.0.1<0>
h3:100:200 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ib0:10.9.0.3<0>
h1:100:201 [0] NCCL WARN NET/IB : Got completion from peer 10.9.0.3<39000> with error 12"""
        a = run(text, obs=job(nodes=["h1", "h2", "h3"]))
        assert a.culprit_nodes == ["h1"]

    def test_a_missing_data_file_on_every_node_is_the_jobs_configuration(self) -> None:
        err = "FileNotFoundError: [Errno 2] No such file or directory: '/home/u/data/train.bin'"
        text = (
            "\n".join(f"cn{n}: {err}" for n in (1, 2) for _ in range(2))
            + """
srun: error: cn2: tasks 2-3: Exited with exit code 1
srun: error: cn1: tasks 0-1: Exited with exit code 1"""
        )
        a = run(text, obs=job(nodes=["cn1", "cn2"]))
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert default_advice(a).kind == AdviceKind.STOP

    def test_a_missing_file_on_one_node_is_not_a_stop(self) -> None:
        err = "FileNotFoundError: [Errno 2] No such file or directory: '/scratch/data/train.bin'"
        text = f"""1: [rank1]: {err}
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert default_advice(a).kind != AdviceKind.STOP

    def test_the_cause_under_a_wrapper_exception_is_the_root(self) -> None:
        text = """
3: [rank3]: OSError: Caught OSError in DataLoader worker process 3.
3: [rank3]: Original Traceback (most recent call last):
3: [rank3]:   File "/app/data.py", line 40, in read
3: [rank3]:     return f.read()
3: [rank3]: OSError: [Errno 5] Input/output error: '/lustre/fs1/shard.17713'
srun: error: node2: task 3: Exited with exit code 1"""
        a = run(text, obs=job(), node_logs={"node2": "LustreError: 167-0: This client was evicted"})
        assert a.category == Category.SYSTEM_SOFTWARE
        assert a.culprit_nodes == ["node2"]

    def test_an_import_error_on_one_nodes_ranks_only_is_that_nodes_image(self) -> None:
        err = "ImportError: libcudnn.so.9: cannot open shared object file: No such file"
        text = f"""0: [rank0]: step 1 loss 2.0
1: [rank1]: {err}
0: [rank0]:[E412 09:12:24.5 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective \
operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600001 ms
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["node2"]
        assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING

    def test_the_same_import_error_everywhere_is_the_application(self) -> None:
        err = "ModuleNotFoundError: No module named 'flash_attn'"
        text = f"""0: [rank0]: {err}
1: [rank1]: {err}
srun: error: node1: task 0: Exited with exit code 1
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []

    def test_a_running_job_that_trained_past_a_handled_error_is_healthy(self) -> None:
        text = "\n".join(
            [f"2024-09-25 12:{m:02d}:00 step {m * 10} loss 1.5" for m in range(0, 30)]
            + ["2024-09-25 12:30:01 ERROR metrics push failed",
               "Traceback (most recent call last):", '  File "/app/push.py", line 9, in push',
               "ConnectionRefusedError: [Errno 111] Connection refused"]
            + [f"2024-09-25 12:{m:02d}:00 step {m * 10} loss 1.4" for m in range(31, 39)]
        )  # fmt: skip
        sched = "JobId=42 JobState=RUNNING StartTime=2024-09-25T12:00:00 RunTime=00:39:30"
        a = run(text, scheduler=sched)
        assert a.kind == "none" and a.category == Category.NONE

    def test_progress_that_stopped_long_before_slurm_was_asked_is_a_hang(self) -> None:
        text = "\n".join(f"2024-08-28 02:{m:02d}:00 step {m * 10} loss 1.6" for m in range(0, 14))
        sched = "JobId=42 JobState=RUNNING StartTime=2024-08-28T02:00:00 RunTime=03:41:09"
        a = run(text, scheduler=sched)
        assert a.kind == AnomalyKind.HANG

    def test_squeue_time_counts_from_the_logs_first_time_stamp(self) -> None:
        text = "[launch] 2024-07-02T08:00:07 job 7 on gpu-dd[01-02]\n" + "\n".join(
            f"[2024-07-02 10:{m:02d}:00] it {m * 25} | loss 2.2" for m in range(0, 29)
        )
        sched = """JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
7       gpu   mm-13b  akumar  R    2:27:51      2 gpu-dd[01-02]"""
        a = run(text, scheduler=sched)
        assert a.kind == "none"

    def test_timer_summaries_naming_one_node_again_and_again_are_a_straggler(self) -> None:
        summary = (
            "timers step {s}: fwd_bwd_compute min 0.912s (rank 3) median 0.921s "
            "max 1.676s (rank 34 on gpu-x05) | data_wait max 0.004s"
        )
        text = "\n".join(summary.format(s=s) for s in range(7300, 8000, 200))
        a = run(text, obs=job("RUNNING", nodes=[f"gpu-x0{n}" for n in range(1, 7)]))
        assert a.kind == AnomalyKind.STRAGGLER and a.culprit_nodes == ["gpu-x05"]

    @staticmethod
    def per_rank_times(seconds: Callable[[int, int], float]):  # type: ignore[no-untyped-def]
        """Four ranks on n1..n4 each printing their own step time; seconds(rank, iteration)."""
        text = "\n".join(
            f"{r}: [rank{r}] iter {i} | loss 2.1 | iter_time {seconds(r, i):.2f}s"
            for i in range(1, 9) for r in range(4)
        )  # fmt: skip
        return run(text, obs=job("RUNNING", nodes=["n1", "n2", "n3", "n4"]))

    def test_per_rank_step_times_in_any_format_show_the_slow_node(self) -> None:
        a = self.per_rank_times(lambda r, i: 1.84 if r == 3 else 1.01)
        assert a.kind == AnomalyKind.STRAGGLER and a.culprit_nodes == ["n4"]
        assert a.culprit_ranks == [3]
        assert any("iter_time 1.84s" in e.text for e in a.evidence)

    def test_even_per_rank_step_times_are_no_straggler(self) -> None:
        a = self.per_rank_times(lambda r, i: 1.0 + 0.03 * ((r + i) % 3))
        assert a.kind != AnomalyKind.STRAGGLER

    def test_one_slow_timer_summary_is_noise(self) -> None:
        slow = "timers: compute median 0.92s max 1.70s (rank 34 on gpu-x05)"
        fast = "timers: compute median 0.92s max 0.95s (rank 12 on gpu-x02)"
        text = "\n".join([fast, slow, fast, fast])
        a = run(text, obs=job("RUNNING", nodes=[f"gpu-x0{n}" for n in range(1, 7)]))
        assert a.kind != AnomalyKind.STRAGGLER

    def test_srun_task_numbers_are_not_ranks_that_kept_quiet(self) -> None:
        timeout = (
            "[rank{r}]:[E305 23:46:41.4 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=5, OpType=SEND, Timeout(ms)=600000) "
            "ran for 600100 milliseconds before timing out."
        )
        text = (
            "\n".join(f"b{r // 2 + 1}: " + timeout.format(r=r) for r in range(6))
            + "\n"
            + (
                "\n".join(
                    f"srun: error: b{t + 1}: task {t}: Exited with exit code 1" for t in range(3)
                )
            )
        )
        a = run(text, obs=job(nodes=["b1", "b2", "b3"]))
        assert a.kind == AnomalyKind.HANG and a.culprit_nodes == []

    def test_a_hang_whose_cause_is_only_in_a_kernel_log_is_still_a_hang(self) -> None:
        timeout = (
            "[rank{r}]:[E305 23:46:41.4 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)="
            "600000) ran for 600100 milliseconds before timing out."
        )
        text = "\n".join(timeout.format(r=0) for _ in range(1)) + (
            "\nsrun: error: node1: task 0: Exited with exit code 1"
            "\nsrun: error: node2: task 1: Killed"
        )
        xid = "NVRM: Xid (PCI:0000:3b:00): 119, pid=1, name=python, Timeout after 6s of RPC"
        a = run(text, obs=job(), node_logs={"node2": xid})
        assert a.category == Category.HARDWARE_GPU and a.culprit_nodes == ["node2"]
        assert a.kind == AnomalyKind.HANG


class TestSchedulerTables:
    def test_sacct_fixed_width_exit_code_is_not_the_elapsed_time(self) -> None:
        facts = parse_scheduler(
            lines("""
JobID           JobName      State ExitCode    Elapsed        NodeList
------------ ---------- ---------- -------- ---------- ---------------
190022       rn152-3ep  COMPLETED      0:0   01:34:12 vm-gpu-[0007-0008]
""")
        )
        assert facts.job is not None and facts.job.state == "COMPLETED"
        assert (facts.job.exit_code, facts.job.exit_signal) == (0, 0)

    def test_sacct_derived_exit_code_column_is_told_apart(self) -> None:
        facts = parse_scheduler(
            lines("""
JobID           State DerivedExitCode ExitCode    Elapsed
------------ -------- --------------- -------- ----------
77             FAILED             0:0      1:0   00:10:00
""")
        )
        assert facts.job is not None and (facts.job.exit_code, facts.job.exit_signal) == (1, 0)

    def test_squeue_row_gives_state_nodes_and_run_time(self) -> None:
        facts = parse_scheduler(
            lines("""
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
           7040112       gpu   mm-13b  akumar  R 1-02:27:51      8 gpu-dd[01-08]
""")
        )
        assert facts.job is not None and facts.job.state == "RUNNING"
        assert facts.job.node_list[0] == "gpu-dd01" and len(facts.job.node_list) == 8
        assert facts.run_time() == timedelta(days=1, hours=2, minutes=27, seconds=51)


class TestRulesFromTheSecondBlindSets:
    """Rules added after blind set 2 and the foreign-trainer runs (tests/corpus_blind)."""

    def test_the_node_with_the_odd_nccl_version_is_named_not_the_application(self) -> None:
        warn = "NCCL WARN Mismatched NCCL version detected : rank 0 version 22105 rank {r} version 21805"  # noqa: E501
        text = "\n".join(
            [f"n{n}: n{n}:100:200 [0] NCCL INFO NCCL version {'2.18.5' if n == 3 else '2.21.5'}"
             for n in (1, 2, 3)]
            + [f"n3: [rank{r}]: n3:100:20{r} [0] init.cc:563 " + warn.format(r=r) for r in (4, 5)]
            + [f"n{r // 2 + 1}: [rank{r}]: torch.distributed.DistBackendError: NCCL error in: "
               "ProcessGroupNCCL.cpp:1970, invalid usage" for r in range(6)]
        )  # fmt: skip
        a = run(text, obs=job(nodes=["n1", "n2", "n3"]))
        assert a.category == Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["n3"]
        assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING

    def test_the_earliest_torchelastic_root_cause_across_agents_wins(self) -> None:
        block = """Root Cause (first observed failure):
[0]:
  time      : 2025-03-02_06:27:{s}
  host      : {host}.cl.example.net
  rank      : {rank} (local_rank: 0)
  exitcode  : {code} (pid: 5501)
  error_file: <N/A>
  traceback : Signal {sig} received by PID 5501
============================================================"""
        text = "\n".join([
            block.format(s=53, host="n1", rank=0, code=-6, sig="6 (SIGABRT)"),
            block.format(s=51, host="n2", rank=1, code=-9, sig="9 (SIGKILL)"),
            "srun: error: n1: task 0: Exited with exit code 1",
            "srun: error: n2: task 1: Exited with exit code 1",
        ])  # fmt: skip
        a = run(text, obs=job(nodes=["n1", "n2"]))
        assert a.culprit_nodes == ["n2"] and a.category == Category.UNKNOWN

    @pytest.mark.parametrize(
        ("exception", "stop"),
        [
            ("yaml.scanner.ScannerError: mapping values are not allowed here", True),
            ("jinja2.exceptions.TemplateError: Conversation roles must alternate", True),
            ("requests.exceptions.ConnectionError: HTTPSConnectionPool(host='hub')", False),
            ("huggingface_hub.errors.HfHubHTTPError: 503 Server Error", False),
        ],
    )
    def test_an_unknown_exception_on_every_rank_stops_unless_it_is_about_reaching_something(
        self, exception: str, stop: bool
    ) -> None:
        text = (
            "\n".join(
                f"{t}: Traceback (most recent call last):\n"
                f'{t}:   File "/app/train.py", line 3, in <module>\n'
                f"{t}:     main()\n{t}: {exception}"
                for t in (0, 1)
            )
            + "\nsrun: error: node1: task 0: Exited with exit code 1"
        )
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert (default_advice(a).kind == AdviceKind.STOP) == stop

    def test_a_launchers_child_failed_error_is_not_an_exception_of_its_own(self) -> None:
        text = """Traceback (most recent call last):
  File "/usr/local/bin/torchrun", line 8, in <module>
    sys.exit(main())
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2025-03-02_06:27:51
  host      : node2
  rank      : 1 (local_rank: 0)
  exitcode  : -9 (pid: 5512)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 5512
============================================================
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.UNKNOWN and a.culprit_nodes == ["node2"]

    def test_a_port_held_on_the_rendezvous_host_names_that_host(self) -> None:
        text = """[W915 06:00:04.1 socket.cpp:752] [c10d] The server socket has failed to bind \
to [::]:29500 (errno: 98 - Address already in use).
torch.distributed.DistNetworkError: The server socket has failed to listen on any local network \
address. port: 29500, code: -98, name: EADDRINUSE, message: address already in use
srun: error: node1: task 0: Exited with exit code 1
[W915 06:02:39.9 socket.cpp:697] [c10d] The client socket has failed to connect to \
[node1]:29500 (errno: 111 - Connection refused).
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["node1"]
        assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING

    def test_json_lines_with_a_slow_part_of_the_step_show_the_straggler(self) -> None:
        starts = [
            f'{{"ts": 1.0, "rank": {r}, "event": "start", "node": "node{r + 1}"}}' for r in (0, 1)
        ]
        steps = [
            f'{{"ts": 2.0, "rank": {r}, "step": {i}, "step_time_s": 0.50, '
            f'"data_time_s": {0.35 if r == 1 else 0.0002}}}'
            for i in range(1, 8) for r in (0, 1)
        ]  # fmt: skip
        a = run("\n".join(starts + steps), obs=job("RUNNING"))
        assert a.kind == AnomalyKind.STRAGGLER and a.culprit_nodes == ["node2"]


class TestWithoutSchedulerFacts:
    """Bundles may come with the job's output only: the output must say enough."""

    @pytest.mark.parametrize(
        "last",
        [
            "`Trainer.fit` stopped: `max_epochs=16` reached.",
            "[2024-04-30 00:47:50] reached max_steps=200000, saving final checkpoint",
            "Training time 1:33:41",
            "[after training is done] datetime: 2024-05-01 10:00:00",
        ],
    )
    def test_frameworks_last_words_mean_completed(self, last: str) -> None:
        teardown = (
            "[rank1]:[W430 02:32:51.1 TCPStore.cpp:131] [c10d] recvValue failed on "
            "SocketImpl(fd=44): Connection reset by peer"
        )
        a = run(f"{PROGRESS}\n{last}\n{teardown}")
        assert a.kind == "none" and a.category == Category.NONE

    def test_a_start_up_warning_training_went_on_past_is_not_the_failure(self) -> None:
        refused = (
            "8: [W socket.cpp:663] [c10d] The client socket has failed to connect to "
            "[vm-gpu-0007]:29500 (errno: 111 - Connection refused)."
        )
        text = f"{refused}\n{PROGRESS}\nsrun: error: node2: task 1: Killed"
        a = run(text, obs=job())
        assert a.category == Category.UNKNOWN and a.culprit_nodes == ["node2"]

    def test_one_progress_line_after_a_fatal_error_does_not_hide_it(self) -> None:
        text = (
            "0:  iteration        5/      30 | elapsed time per iteration (ms): 2.0 |\n"
            "1: [rank1]: ValueError: bad batch shape at iteration 6\n"
            "0:  iteration        6/      30 | elapsed time per iteration (ms): 2.0 |\n"
            "srun: error: node2: task 1: Exited with exit code 1"
        )
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION


class TestRulesFromTheForeignTrainerRuns:
    """Rules added after set 4 (a second foreign trainer's real runs, tests/corpus_blind)."""

    def test_monitored_barrier_names_the_rank_that_never_arrived(self) -> None:
        text = """[2026-11-29 21:38:33] startup rank=0/4 node=node1
[2026-11-29 21:38:33] startup rank=3/4 node=node2
[rank0]:[E1129 21:39:03.3 ProcessGroupGloo.cpp:2901] [Rank 0]: Rank 3 failed to pass \
monitoredBarrier in 20000 ms
[rank0]: RuntimeError: [Rank 0]: Ranks 3 failed to pass monitoredBarrier in 20000 ms
[rank1]: RuntimeError: Rank 1 successfully reached monitoredBarrier, but received errors while \
waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank."""
        a = run(text, obs=job())
        assert a.kind == AnomalyKind.HANG and a.culprit_nodes == ["node2"]
        assert a.culprit_ranks == [3]

    @pytest.mark.parametrize(("tasks", "stop"), [((1,), True), ((0, 1), True)])
    def test_an_exception_the_jobs_own_code_raised_is_the_application(
        self, tasks: tuple[int, ...], stop: bool
    ) -> None:
        text = (
            "\n".join(
                f"{t}: [rank{t}]: Traceback (most recent call last):\n"
                f'{t}: [rank{t}]:   File "/home/u/proj/train.py", line 131, in main\n'
                f'{t}: [rank{t}]:     raise RuntimeError(f"shard index {{i}} out of range")\n'
                f"{t}: [rank{t}]: RuntimeError: shard index 8793 out of range for dataset of 4096"
                for t in tasks
            )
            + "\nsrun: error: node2: task 1: Exited with exit code 1"
        )
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION and a.culprit_nodes == []
        assert (default_advice(a).kind == AdviceKind.STOP) == stop

    def test_an_exception_raised_inside_a_library_stays_of_unknown_cause(self) -> None:
        text = """1: [rank1]: Traceback (most recent call last):
1: [rank1]:   File "/opt/venv/lib/python3.11/site-packages/somelib/io.py", line 9, in read
1: [rank1]:     raise RuntimeError("unexpected state 7")
1: [rank1]: RuntimeError: unexpected state 7
srun: error: node2: task 1: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.UNKNOWN

    def test_a_checkpoint_path_torch_cannot_open_is_the_jobs_configuration(self) -> None:
        text = f"""{PROGRESS}
0: [rank0]: RuntimeError: [enforce fail at inline_container.cc:747] . open file failed with \
strerror: Permission denied
srun: error: node1: task 0: Exited with exit code 1"""
        a = run(text, obs=job())
        assert a.category == Category.APPLICATION

    def test_forward_time_fields_show_the_straggler_the_whole_step_hides(self) -> None:
        text = "\n".join(
            f"{r}: [2026-11-29 21:37:2{i}] R{r} it={i} loss=2.3 "
            f"t_fwd={308.0 if r == 1 else 9.0}ms t_bwd={8.0 if r == 1 else 305.0}ms"
            for i in range(1, 7) for r in range(3)
        )  # fmt: skip
        a = run(text, obs=job("RUNNING", nodes=["node1", "node2", "node3"]))
        assert a.kind == AnomalyKind.STRAGGLER and a.culprit_nodes == ["node2"]


class TestRulesFromTheFifthBlindSet:
    """Rules added after set 5 (tests/corpus_blind/s5-*)."""

    def test_a_link_flap_training_went_on_past_leaves_a_running_job_healthy(self) -> None:
        text = "\n".join(
            [f"0: [2026-12-14 15:{m:02d}:00] step {m * 10} loss 2.30" for m in range(0, 12)]
            + ["19: g2:771044:772101 [3] transport/net_ib.cc:97 NCCL WARN NET/IB : mlx5_3:1 "
               "Got async event : port error",
               "19: g2:771044:772101 [3] transport/net_ib.cc:97 NCCL WARN NET/IB : mlx5_3:1 "
               "Got async event : port active"]
            + [f"0: [2026-12-14 15:{m:02d}:00] step {m * 10} loss 2.29" for m in range(12, 21)]
        )  # fmt: skip
        sched = """$ date -Is
2026-12-14T15:21:58+00:00
     JOBID PARTITION   NAME   USER ST    TIME  TIME_LIMIT NODES NODELIST(REASON)
   1772940  ai2-h100   olmo dgroen  R 0:21:47  2-00:00:00     2 g[1-2]"""
        a = run(text, scheduler=sched)
        assert a.kind == "none" and a.culprit_nodes == []

    def test_a_failed_software_health_check_is_not_hardware(self) -> None:
        journal = "Mar 20 02:01:09 node2 nhc[91]: Health check failed:  check_dcgm_hostengine:  " \
            "nv-hostengine not responding"  # fmt: skip
        text = "srun: error: node2: task 1: Exited with exit code 3"
        a = run(text, obs=job(), node_logs={"node2": journal})
        assert a.category == Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["node2"]

    def test_a_failed_hardware_health_check_is(self) -> None:
        journal = "ERROR:  nhc:  Health check failed:  check_hw_ib:  No IB port mlx5_0:1 ACTIVE"
        text = "srun: error: node2: task 1: Exited with exit code 3"
        a = run(text, obs=job(), node_logs={"node2": journal})
        assert a.category == Category.HARDWARE_HOST and a.culprit_nodes == ["node2"]

    def test_a_soft_lockup_without_a_hardware_error_is_the_nodes_software(self) -> None:
        console = "[2025-02-18 11:20:14] watchdog: BUG: soft lockup - CPU#71 stuck for 26s! [w:1]"
        text = "srun: error: node2: tasks 1: Killed"
        a = run(text, obs=job(), node_logs={"node2": console})
        assert a.category == Category.SYSTEM_SOFTWARE and a.culprit_nodes == ["node2"]

    @pytest.mark.parametrize(
        ("sacct_user", "by", "owner"),
        [("bchen", "0", False), ("mkowal", "52011", True), ("root", "0", True)],
    )
    def test_who_cancelled_from_sacct_names_and_uids(
        self, sacct_user: str, by: str, owner: bool
    ) -> None:
        facts = parse_scheduler(
            lines(f"""
JobID             User      State ExitCode    Elapsed        NodeList
------------ --------- ---------- -------- ---------- ---------------
77            {sacct_user}  CANCELLED by {by}      0:0   06:30:58 n[1-2]
$ id {sacct_user}
uid={52011 if sacct_user == "mkowal" else 0 if sacct_user == "root" else 63011}({sacct_user})
""")
        )
        assert owner_cancelled(facts) is owner
