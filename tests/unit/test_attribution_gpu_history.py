"""A GPU's own history: who holds its memory when a rank runs out, and an Xid it showed before.

PyTorch's OOM message accounts for the GPU's memory (c10/cuda/CUDACachingAllocator.cpp): what is
neither free nor held by the process that ran out belongs to other processes on that GPU, a
leftover of an earlier job (attribution-labels.md tie-breaker 4). An operator's note that an
earlier attempt saw an Xid on the same node's same PCI address, with this attempt's Xid there,
is the same physical GPU failing across restarts (tie-breaker 3).
"""

# ruff: noqa: E501  (real lines are long)
from __future__ import annotations

from pathlib import Path

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.job_log import split_attempt
from resurgo.attribute.rules import attribute
from resurgo.attribute.scheduler import parse_scheduler
from resurgo.attribute.stages_application import _accounting
from resurgo.contracts import Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import bundle_verdict
from tests.log_lines import log_lines as _lines

NODES = ["gpu-c01", "gpu-c02"]


def _run(job: str, node_logs: dict[str, list[LogLine]] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES, node_logs=node_logs,
        scheduler_lines=[],
    )  # fmt: skip


# pytorch/pytorch#40863 (a maintainer: "something else is hanging on to the memory").
HELD_BEFORE_2_1 = "RuntimeError: CUDA out of memory. Tried to allocate 60.00 MiB (GPU 0; 11.17 GiB total capacity; 505.96 MiB already allocated; 12.50 MiB free; 530.00 MiB reserved in total by PyTorch)"
# awslabs/keys_values#92: the process that ran out holds almost all of it (its own model).
OWN_2_1 = "[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 572.00 MiB. GPU 0 has a total capacity of 39.49 GiB of which 321.31 MiB is free. Process 3721648 has 414.00 MiB memory in use. Including non-PyTorch memory, this process has 37.46 GiB memory in use. Process 1374765 has 414.00 MiB memory in use. Of the allocated memory 36.04 GiB is allocated by PyTorch, and 321.37 MiB is reserved by PyTorch but unallocated."
# The 2.1+ wording (same allocator message) where the failing process holds little.
HELD_2_1 = "[rank1]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.90 GiB. GPU 2 has a total capacity of 79.11 GiB of which 1.06 GiB is free. Including non-PyTorch memory, this process has 3.12 GiB memory in use. Of the allocated memory 2.51 GiB is allocated by PyTorch, and 113.00 MiB is reserved by PyTorch but unallocated."
EXITS = "srun: error: gpu-c02: task 1: Exited with exit code 1\nsrun: error: gpu-c01: task 0: Exited with exit code 1\n"


def test_the_oom_messages_accounting_is_read_in_both_wordings() -> None:
    old = _accounting(HELD_BEFORE_2_1)
    assert old is not None and old[0] == "0" and round(old[1], 2) == 11.17
    assert round(old[3] * 1024, 1) == 530.0  # reserved by PyTorch, in MiB
    new = _accounting(OWN_2_1)
    assert new is not None and (new[0], round(new[3], 2)) == ("0", 37.46)


def test_memory_held_outside_the_failing_process_is_the_nodes_state() -> None:
    a = _run(HELD_2_1 + "\n" + EXITS)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c02"])
    b = _run("1: " + HELD_BEFORE_2_1 + "\n" + EXITS)
    assert b.category == Category.SYSTEM_SOFTWARE


def test_memory_the_failing_process_holds_is_the_jobs() -> None:
    a = _run(OWN_2_1.replace("[rank0]", "[rank1]") + "\n" + EXITS)
    assert a.category == Category.APPLICATION


def test_two_ranks_of_one_node_out_of_memory_on_one_gpu_is_the_jobs_mapping() -> None:
    # Both ranks of gpu-c02 ran out on GPU 2: the job put them on one GPU, not a leftover.
    twice = f"1: {HELD_2_1}\n1: {HELD_2_1.replace('[rank1]', '[rank3]')}\n"
    a = _run(twice + EXITS)
    assert a.category == Category.APPLICATION


# NVIDIA's Xid catalogue (Xid 13, Graphics Engine Exception), as a driver prints it.
XID13 = "[Sat Dec  5 01:28:03 2026] NVRM: Xid (PCI:0000:ca:00): 13, pid=118822, name=python, Graphics SM Warp Exception on (GPC 4, TPC 1, SM 0): Out Of Range Address\n"
IMA = (
    "[rank6]: RuntimeError: CUDA error: an illegal memory access was encountered\n"
    "[rank6]: CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.\n"
    "srun: error: gpu-c01: task 0: Exited with exit code 1\n"
    "srun: error: gpu-c02: task 1: Aborted (core dumped)\n"
)


def test_an_xid_noted_on_the_same_gpu_in_an_earlier_attempt_is_the_gpu() -> None:
    note = "# attempt 1 ran on gpu-c01: rank 14 died the same way; gpu-c01 dmesg then showed Xid 13 on PCI:0000:ca:00\n"
    logs = {"gpu-c01": _lines(XID13, "dmesg_gpu-c01.txt")}
    a = _run(note + IMA, logs)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c01"])
    # A note about another GPU (or another node) is no history of this one.
    other = note.replace("ca:00", "3b:00")
    assert _run(other + IMA, logs).category != Category.HARDWARE_GPU


def test_the_same_xid_on_the_same_gpu_in_an_earlier_runs_kernel_log_is_the_gpu(
    tmp_path: Path,
) -> None:
    """A `journalctl -k --since ...` the operator pasted: the same Xid 13 on the same GPU hit
    an earlier run's process (another pid) hours before this job's own Xid."""
    now = "[Mon Aug 11 20:59:23 2025] NVRM: Xid (PCI:0008:01:00): 13, pid=2847731, name=python3, Graphics SM Warp Exception on (GPC 5, TPC 3, SM 1): Illegal Instruction Encoding\n"
    earlier = (
        "$ journalctl -k --since '2025-08-10 00:00' | grep -E 'Xid'\n"
        "Aug 11 02:31:44 gpu-c01 kernel: NVRM: Xid (PCI:0008:01:00): 13, pid=2614409, name=python3, Graphics SM Warp Exception on (GPC 5, TPC 3, SM 1): Illegal Instr\n"
        "Aug 11 20:59:23 gpu-c01 kernel: NVRM: Xid (PCI:0008:01:00): 13, pid=2847731, name=python3, Graphics SM Warp Exception on (GPC 5, TPC 3, SM 1): Illegal Instr\n"
    )
    job = (
        "13: jax.errors.JaxRuntimeError: INTERNAL: CUDA error: Could not synchronize CUDA stream: CUDA_ERROR_ILLEGAL_INSTRUCTION: an illegal instruction was encountered\n"
        "srun: error: gpu-c01: task 13: Exited with exit code 1\n"
    )

    scontrol = (
        "JobId=884213 JobName=grug JobState=FAILED Reason=NonZeroExitCode ExitCode=134:0 "
        "StartTime=2025-08-11T19:58:07 EndTime=2025-08-11T21:04:34 NodeList=gpu-c[01-02]\n"
    )

    def run(history: str) -> tuple[str, str, list[str], str]:
        return bundle_verdict(
            tmp_path, job, scontrol, **{"dmesg_gpu-c01": now, "node_gpu-c01": history}
        )

    assert run(earlier)[1:3] == ("hardware_gpu", ["gpu-c01"])
    assert run(earlier.replace("pid=2614409", "pid=2847731"))[1] != "hardware_gpu"


# pdsh's report of a remote command's non-zero exit (as in Cray's CSM docs: `pdsh@ncn-m001:
# ncn-w001: ssh exited with exit code 255`), after DeepSpeed's ranks lost their peers.
PDSH_ENDED = (
    "gpu-c02: [rank9]:ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "gpu-c01: [rank1]:ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    "pdsh@gpu-c01: gpu-c02: ssh exited with exit code 255\n"
    "pdsh@gpu-c01: gpu-c01: ssh exited with exit code 255\n"
)


def test_pdsh_reporting_the_nodes_commands_ended_means_the_job_is_not_running() -> None:
    def running(text: str) -> bool:
        facts = parse_scheduler([], None)
        return Analysis(Registry.default(), _lines(text), facts, NODES, {}, []).running

    assert not running(PDSH_ENDED)
    assert running(PDSH_ENDED.split("pdsh@")[0])  # the same errors without pdsh's word
    assert _run(PDSH_ENDED).kind == "crash"


def test_submitits_signal_note_after_a_requeue_is_the_ended_runs_teardown() -> None:
    # submitit/core/job_environment.py: `self._logger.warning(f"Bypassing signal {name}")`.
    lines = _lines(
        "submitit INFO (2026-11-28 04:22:39,000) - Job has been preempted\n"
        "slurmstepd: error: *** JOB 55120_3 ON node1 CANCELLED AT 2026-11-28T04:22:40 DUE TO JOB REQUEUE ***\n"
        "submitit WARNING (2026-11-28 04:22:40,000) - Bypassing signal SIGTERM\n"
        "srun: error: node1: tasks 0-7: Exited with exit code 1\n"
    )
    assert split_attempt(lines, None) == lines
    # The next run's own output after the requeue starts a new attempt.
    started = [*lines, LogLine(source="job.log", line_no=5, text="submitit INFO - Starting")]
    assert split_attempt(started, None) == started[2:]
