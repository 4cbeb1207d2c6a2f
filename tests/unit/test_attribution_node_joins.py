"""Joining node-side files and Slurm's text to the job's failure.

An AER report whose failing PCI function is a GPU is the GPU's fault (Linux
drivers/pci/pcie/aer.c prints the port's `error received: BDF` and the device's own driver
prefix); hardware symptoms printed after Slurm began killing the job are teardown; a node's
fault that left the job silent until its time limit is a hang; a grep'd `scontrol show job`
still tells the job's state.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry

NODES = ["gpu-c01", "gpu-c02", "gpu-c03"]


def _lines(text: str, source: str = "job.log") -> list[LogLine]:
    return [LogLine(source=source, line_no=i + 1, text=t) for i, t in enumerate(text.splitlines())]


def _run(
    job: str,
    node_logs: dict[str, list[LogLine]] | None = None,
    scheduler: str = "",
    nodes: list[str] | None = None,
) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES if nodes is None else nodes,
        node_logs=node_logs, scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


STALLED = (
    "0: 2025-06-02 18:47:02 | INFO | epoch 4 | step 18325 | loss 0.8212\n"
    "0: 2025-06-02 18:47:39 | INFO | epoch 4 | step 18350 | loss 0.8192\n"
    "0: [rank0]:[E0602 18:58:23.123456 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=729101, OpType=ALLREDUCE, NumelIn=25165824, "
    "NumelOut=25165824, Timeout(ms)=600000) ran for 600062 milliseconds before timing out.\n"
    "1: [rank4]:[E0602 18:58:24.123456 ProcessGroupNCCL.cpp:632] [Rank 4] Watchdog caught "
    "collective operation timeout: WorkNCCL(SeqNum=729101, OpType=ALLREDUCE, NumelIn=25165824, "
    "NumelOut=25165824, Timeout(ms)=600000) ran for 600066 milliseconds before timing out.\n"
    "srun: error: gpu-c01: task 0: Aborted (core dumped)\n"
    "srun: error: gpu-c02: task 1: Aborted (core dumped)\n"
    "srun: error: gpu-c03: task 2: Killed\n"
)
# The shape of the kernel's AER report (drivers/pci/pcie/aer.c), as in NVIDIA/NVSentinel#155.
AER_ON = (
    "[Mon Jun  2 18:47:47 2025] pcieport 0000:00:03.0: AER: Uncorrected (Fatal) error received: "
    "0000:{bdf}\n"
    "[Mon Jun  2 18:47:47 2025] {driver} 0000:{bdf}: PCIe Bus Error: severity=Uncorrected "
    "(Fatal), type=Transaction Layer, (Requester ID)\n"
    "[Mon Jun  2 18:47:47 2025] {driver} 0000:{bdf}:   device [{vendor}] error "
    "status/mask=00004000/00000000\n"
)


def test_fatal_aer_on_a_gpu_function_is_the_gpu() -> None:
    dmesg = AER_ON.format(bdf="03:00.0", driver="nvidia", vendor="10de:26b9")
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c03"])


def test_fatal_aer_on_another_device_stays_the_host() -> None:
    dmesg = AER_ON.format(bdf="5e:00.0", driver="megaraid_sas", vendor="1000:10e2")
    a = _run(STALLED, {"gpu-c03": _lines(dmesg, "dmesg_gpu-c03.txt")})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_HOST, ["gpu-c03"])


PREEMPTED = (
    "0: [rank0]: step: 3330  loss:  3.4067\n"
    "slurmstepd: error: *** STEP 140771.0 ON gpu-c01 CANCELLED AT 2026-05-27T02:21:30 DUE TO "
    "PREEMPTION ***\n"
    "1: gpu-c02:39123:39980 [3] transport/net_ib.cc:2213 NCCL WARN NET/IB : Got completion from "
    "peer 10.3.0.11<43122> with status=IBV_WC_WR_FLUSH_ERR(5) opcode=IBV_WC_SEND(0) reqSize=0 "
    "vendor_err=249 req_type=Send localGid ::ffff:10.3.0.12 remoteGids::ffff:10.3.0.11 hca "
    "mlx5_1\n"
    "slurmstepd: error: *** JOB 140771 ON gpu-c01 CANCELLED AT 2026-05-27T02:21:30 DUE TO "
    "PREEMPTION ***\n"
)


def test_queue_pair_flushes_after_a_preemption_are_teardown() -> None:
    sacct = "JobID           JobName  Partition      State ExitCode\n" + (
        "------------ ---------- ---------- ---------- --------\n"
        "140771         pretrain       spot  PREEMPTED      0:0\n"
    )
    a = _run(PREEMPTED, scheduler=sacct)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_link_lost_then_silence_until_the_time_limit_is_a_hang() -> None:
    job = (
        "0: [2025-10-31 02:07:30] epoch 9 iter 3300/8000 loss 0.434\n"
        "slurmstepd: error: *** JOB 3019928 ON gpu-c01 CANCELLED AT 2025-10-31T06:00:21 DUE TO "
        "TIME LIMIT ***\n"
        "srun: error: gpu-c01: task 0: Terminated\n"
        "srun: error: gpu-c02: task 1: Killed\n"
    )
    journal = "Oct 31 02:07:50 gpu-c02 kernel: ice 0000:31:00.0 ens2f0: NIC Link is Down\n"
    a = _run(job, {"gpu-c02": _lines(journal, "journal_gpu-c02.txt")})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.HARDWARE_NETWORK, ["gpu-c02"],
    )  # fmt: skip


def test_a_grepped_scontrol_record_says_the_job_is_pending_again() -> None:
    # slurmctld's requeue RPC (src/slurmctld/proc_req.c) and the state a grep kept.
    job = (
        '0: {"step": 44250, "loss": 1.6070}\n'
        "slurmstepd: error: *** STEP 5521901.0 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 ***\n"
        "slurmstepd: error: *** JOB 5521901 ON gpu-c01 CANCELLED AT 2026-08-30T14:36:40 DUE TO "
        "JOB REQUEUE ***\n"
    )
    scheduler = (
        "[2026-08-30T14:36:40.118] _slurm_rpc_requeue: Requeue of JobId=5521901 returned "
        "Success uid 0\n"
        "$ scontrol show job 5521901 | grep -E 'JobState|Restarts'\n"
        "   JobState=PENDING Reason=BeginTime Dependency=(null)\n"
        "   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0\n"
    )
    a = _run(job, scheduler=scheduler)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert default_advice(a).kind == AdviceKind.REQUEUE
