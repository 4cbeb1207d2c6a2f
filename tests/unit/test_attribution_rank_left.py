"""A rank whose program exited while the others still needed it: they lose the TCPStore it
hosted, with no exception anywhere first. The job's control flow (habitat-baselines DDPPO,
falcon: rank 0 leaves the loop before the last update). Lines as PyTorch 2.x prints them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

from tests.log_lines import bundle_verdict

PROGRESS = "2025-07-24 19:26:02,711 update: 1464\tenv-time: 31602.335s\tpth-time: 18813.114s\tframes: 1499136\n"
LEFT = "[rank0]:[W724 19:26:06.079439421 ProcessGroupNCCL.cpp:1479] Warning: WARNING: destroy_process_group() was not called before program exit, which can leak resources. For more info, please see https://pytorch.org/docs/stable/distributed.html#shutdown (function operator())\n"
LOST = (
    "[rank1]:[W724 19:26:07.130163445 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=30, addr=[::ffff:127.0.0.1]:54736, remote=[::ffff:127.0.0.1]:8738): failed to recv, got 0 bytes\n"
    "Exception raised from recvBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:678 (most recent call first):\n"
)
EXITS = "srun: error: gpu-f04: tasks 1-3: Exited with exit code 1\n"
SACCT = "JobID|JobName|State|ExitCode|NodeList\n730455|falcon|FAILED|1:0|gpu-f04\n"


def test_the_others_losing_the_store_after_rank_0_exited_is_the_applications(
    tmp_path: Path,
) -> None:
    got = bundle_verdict(tmp_path, PROGRESS + LEFT + LOST + EXITS, SACCT)
    assert got == ("crash", "application", [], "stop")


def test_the_store_lost_before_any_rank_exited_is_not_a_rank_leaving(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, PROGRESS + LOST + LEFT + EXITS, SACCT)
    assert got[1] != "application"


def test_a_rank_killed_by_a_signal_is_no_rank_that_left(tmp_path: Path) -> None:
    killed = "srun: error: gpu-f04: task 0: Killed\n"
    got = bundle_verdict(tmp_path, PROGRESS + LEFT + LOST + killed + EXITS, SACCT)
    assert got[1] != "application"


def test_the_warning_alone_at_a_clean_end_is_a_healthy_run(tmp_path: Path) -> None:
    done = SACCT.replace("FAILED|1:0", "COMPLETED|0:0")
    got = bundle_verdict(tmp_path, PROGRESS + LEFT, done)
    assert got == ("none", "none", [], "none")


WATCHDOG = (
    "[rank3]:[E910 18:46:37.102 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=412, OpType=_ALLGATHER_BASE, NumelIn=1, NumelOut=8, Timeout(ms)=1800000) ran for 1800471 milliseconds before timing out.\n"
    "[rank3]:[E910 18:46:37.103 ProcessGroupNCCL.cpp:1664] [PG 0 Rank 3] Timeout at NCCL work: 412, last enqueued NCCL work: 412, last completed NCCL work: 411.\n"
)
ABORTED = "srun: error: gpu-a100-14: task 0: Aborted (core dumped)\n"
NODES_SACCT = "JobID|JobName|State|ExitCode|NodeList\n55101|olmo|FAILED|134:0|gpu-a100-[13-14]\n"


def test_the_watchdogs_abort_after_collective_timeouts_names_no_node(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, PROGRESS + WATCHDOG + ABORTED, NODES_SACCT)
    assert got == ("hang", "unknown", [], "requeue")


def test_an_abort_with_no_timeout_before_it_is_still_a_native_crash(tmp_path: Path) -> None:
    got = bundle_verdict(tmp_path, PROGRESS + ABORTED, NODES_SACCT)
    assert got[0] == "crash" and got[1] != "unknown", got
