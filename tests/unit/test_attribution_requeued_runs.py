"""How a run ended, across requeues: a requeued job's output appended across runs
(`--open-mode=append`) read against `sacct -D`, which lists every run of the job under its one
id, oldest first (sacct(1): --duplicates); and what torchrun records after Slurm's own kill."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.attribute.scheduler import parse_scheduler
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

RUN_1 = """\
job 731204 restart=0 nodes=gpu[009-016]
0: [rank0] step 1200 loss 2.10
srun: error: Node failure on gpu014
slurmstepd: error: *** JOB 731204 ON gpu009 CANCELLED AT 2024-03-05T03:15:03 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***
"""
RUN_2 = """\
job 731204 restart=1 nodes=gpu[001-008]
0: [rank0] step 1300 loss 2.05
2: [rank19]:   File "/home/u/llm/data/sft_dataset.py", line 88, in __getitem__
2: [rank19]:     text = sample["content"]
2: [rank19]: KeyError: 'content'
srun: error: gpu003: task 2: Exited with exit code 1
"""
SACCT = """\
JobID|State|ExitCode|Start|End|NodeList
731204|NODE_FAIL|0:0|2024-03-04T22:10:00|2024-03-05T03:15:03|gpu[009-016]
731204|FAILED|1:0|2024-03-05T03:32:09|2024-03-05T13:09:32|gpu[001-008]
"""
XID = "[Tue Mar  5 03:14:40 2024] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def _run(job: str, sacct: str, node_logs: dict[str, str] | None = None) -> Attribution:
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job), None, [], [], node_logs=logs,
        scheduler_lines=_lines(sacct, "scheduler.txt"),
    )  # fmt: skip


def test_the_last_run_sacct_lists_is_the_job_the_output_ends_with() -> None:
    facts = parse_scheduler(_lines(SACCT, "scheduler.txt"), 731204, None)
    assert facts.job is not None
    assert (facts.job.state, facts.job.node_list[0]) == ("FAILED", "gpu001")
    assert "gpu014" in facts.earlier_nodes


def test_an_earlier_runs_node_failure_does_not_explain_the_last_runs_error() -> None:
    a = _run(RUN_1 + RUN_2, SACCT, {"gpu014": XID})
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_run_waiting_again_after_its_requeue_leaves_the_ended_run_as_the_job() -> None:
    pending = (
        "JobID|State|ExitCode|Start|End|NodeList\n"
        "731204|NODE_FAIL|0:0|2024-03-04T22:10:00|2024-03-05T03:15:03|gpu[009-016]\n"
        "731204|PENDING|0:0|Unknown|Unknown|None assigned\n"
    )
    facts = parse_scheduler(_lines(pending, "scheduler.txt"), 731204, None)
    assert facts.job is not None
    assert (facts.job.state, len(facts.job.node_list)) == ("NODE_FAIL", 8)


def test_torchruns_record_of_slurms_own_sigterm_after_the_time_limit_is_not_a_failure() -> None:
    # torch/distributed/elastic: the agent gets Slurm's SIGTERM, shuts its workers down and
    # reports them failed with exitcode -15; Slurm's kill came first.
    steps = "".join(
        f"7:  iteration    {i}/  250000 | elapsed time per iteration (ms): 2600.0 | lm loss: 2.6\n"
        for i in range(16480, 16550, 10)
    )
    job = steps + (
        "slurmstepd: error: *** JOB 1290871 ON x1000c0s0b0n0 CANCELLED AT 2025-10-07T00:20:33 DUE TO TIME LIMIT ***\n"
        "0: W1007 00:20:33.641710 352480 torch/distributed/elastic/agent/server/api.py:719] Received 15 death signal, shutting down workers\n"
        "0: torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "0: ============================================================\n"
        "0: Failures:\n"
        "0:   <NO_OTHER_FAILURES>\n"
        "0: ------------------------------------------------------------\n"
        "0: Root Cause (first observed failure):\n"
        "0: [0]:\n"
        "0:   time      : 2025-10-07_00:20:34\n"
        "0:   host      : x1000c0s0b0n0\n"
        "0:   rank      : 0 (local_rank: 0)\n"
        "0:   exitcode  : -15 (pid: 352768)\n"
        "0:   error_file: <N/A>\n"
        "0:   traceback : Signal 15 (SIGTERM) received by PID 352768\n"
        "0: ============================================================\n"
    )
    sacct = "JobID|State|ExitCode|Start|End|NodeList\n1290871|TIMEOUT|0:0|2025-10-06T12:00:00|2025-10-07T00:21:25|x1000c0s[0-1]b0n0\n"
    a = _run(job, sacct)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def _restart(left: int) -> str:
    return "".join(
        f"{t}: I0108 23:05:36.525924 45636{t} torch/distributed/elastic/agent/server/api.py:862] [default] Worker group FAILED. {left}/2 attempts left; will restart worker group\n"
        f"{t}: I0108 23:05:36.525924 45636{t} torch/distributed/elastic/agent/server/api.py:700] [default] Stopping worker group\n"
        for t in (0, 1)
    )


FIRST_RUN = (
    "0: h100-r3-01:456510:457012 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.8.3.2<41822> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.8.3.1 remoteGids::ffff:10.8.3.2\n"
    "1: [rank14]:[E108 23:05:34.410551042 ProcessGroupNCCL.cpp:1595] [PG ID 0 PG GUID 0(default_pg) Rank 14] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.21.5\n"
)
MISMATCH = "0: [rank0]: RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=37, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)), but Rank 5 is running collective: CollectiveFingerPrint(SequenceNumber=37, OpType=BROADCAST, TensorShape=[1], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float (default), device=cuda)).\n"


def test_the_workers_last_run_after_torchruns_restarts_decides_when_it_failed_too() -> None:
    # torch/distributed/elastic/agent/server/api.py restarts the worker group; the first run
    # lost a peer over IB, the restarted runs died of the job's own collective mismatch.
    ended = "0: I0108 23:07:50.425057 456366 torch/distributed/elastic/agent/server/api.py:862] [default] Worker group FAILED. 0/2 attempts left; will not restart\n"
    job = FIRST_RUN + _restart(2) + MISMATCH + _restart(1) + MISMATCH + ended
    sacct = "JobID|State|ExitCode|Start|End|NodeList\n88|FAILED|1:0|2025-01-08T19:00:00|2025-01-08T23:08:00|h100-r3-[01-02]\n"
    a = _run(job, sacct)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
