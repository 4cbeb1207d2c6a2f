"""How a job ended, read against what its output shows before the end.

- A cancel (its owner's or an admin's) long after the job's progress stopped ended a hang
  (attribution-labels.md: a hang, however it ended: ... a cancel); the hang decides the action.
- A cancel of a job whose output carries no dates stays its owner's: a progress format not read
  here would pass for a run without a step.
- squeue's CG (COMPLETING) says the job ended; sacct's row says how.
- Training that said it finished, then a task's exit code with no message, is the launcher's
  teardown: the work is done.
- nvidia-smi's ERR! across one GPU's fan, temperature and performance state is the board.
- A native crash in a one-node job, with nothing else, supports no cause.

Lines as the tools print them (mmdet 2.x, NeMo, slurmstepd, sacct, squeue, nvidia-smi, bash).
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_lines import bundle_verdict

MMDET = "".join(
    f"2022-06-28 09:{17 + i}:13,881 - mmdet - INFO - Epoch [1][{50 * (i + 1)}/1563]\tlr: 1.500e-02, "
    f"eta: 7 days, 21:04:33, time: 1.862, data_time: 0.020, memory: 10231, loss_cls: 6.0411\n"
    for i in range(3)
)
CANCEL = "slurmstepd: error: *** JOB 771203 ON rtx-n12 CANCELLED AT {at} ***\n"
SACCT = (
    "JobID           JobName    Partition  NNodes  NodeList   State       ExitCode  Start                End                  Elapsed\n"
    "771203          insloc     gpu        1       rtx-n12    CANCELLED   0:0      2022-06-28T09:13:51  {at}  {elapsed}\n"
)


def test_a_cancel_hours_after_progress_stopped_ended_a_hang(tmp_path: Path) -> None:
    at = "2022-06-28T13:40:11"
    got = bundle_verdict(
        tmp_path, MMDET + CANCEL.format(at=at), SACCT.format(at=at, elapsed="04:26:20")
    )
    assert got[0] == "hang"
    assert got[3] == "requeue"  # (the hang's action, not the cancel's `none`)


def test_a_cancel_soon_after_the_last_step_is_the_owners(tmp_path: Path) -> None:
    at = "2022-06-28T09:21:00"
    got = bundle_verdict(
        tmp_path, MMDET + CANCEL.format(at=at), SACCT.format(at=at, elapsed="00:07:09")
    )
    assert got == ("crash", "scheduler", [], "none")


def test_a_cancel_of_output_without_dates_is_the_owners(tmp_path: Path) -> None:
    # A simulation's thermo table (LAMMPS): no step read, no date; the cancel came when its
    # owner chose, and squeue, still showing it CG, does not make it running.
    job = "Step Temp E_pair TotEng Press\n" + "".join(
        f"  {1840000 + 10000 * i}    310.02   -48211.3   -41102.9    12.81\n" for i in range(3)
    )
    job += "slurmstepd: error: *** JOB 56365 ON c024 CANCELLED AT 2021-11-06T11:25:00 ***\n"
    scheduler = (
        "JobID           JobName    Partition  State         ExitCode  Elapsed     NNodes NodeList\n"
        "--------------- ---------- ---------- ------------- -------- ----------- ------ --------\n"
        "56365           hydrogel   gpu        CANCELLED by 1202 0:15     05:10:00    1      c024\n"
        "$ squeue -j 56365\n"
        "             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)\n"
        "             56365       gpu hydrogel mingzeya CG    5:10:00      1 c024\n"
    )
    assert bundle_verdict(tmp_path, job, scheduler) == ("crash", "scheduler", [], "none")


NEMO = "".join(
    f"[NeMo I 2025-10-21 01:0{i}:00 nemo_logging:393]  step {20 * (i + 1)}/100 | reduced_train_loss: 7.100 | train_step_timing in s: 1.41\n"
    for i in range(5)
) + (
    "[NeMo I 2025-10-21 01:05:10 nemo_logging:393]  Training finished: reached max_steps=100\n"
    "[NeMo I 2025-10-21 01:05:22 nemo_logging:393]  Saved checkpoint to /results/ckpt/iter_0000100\n"
)
FAILED = (
    "JobID           JobName    Partition  State         ExitCode  Elapsed     NNodes NodeList\n"
    "4418820         pretrain   batch      FAILED        1:0      00:05:40    2      dgx-b200-[011-012]\n"
)


def test_an_exit_code_after_training_finished_is_the_teardowns(tmp_path: Path) -> None:
    job = NEMO + "srun: error: dgx-b200-012: task 1: Exited with exit code 1\n"
    assert bundle_verdict(tmp_path, job, FAILED) == ("none", "none", [], "none")


def test_an_error_after_training_finished_is_not_teardown(tmp_path: Path) -> None:
    job = NEMO + (
        "Traceback (most recent call last):\n"
        '  File "/opt/export.py", line 12, in <module>\n'
        "    export(cfg)\n"
        "KeyError: 'tokenizer'\n"
        "srun: error: dgx-b200-012: task 1: Exited with exit code 1\n"
    )
    assert bundle_verdict(tmp_path, job, FAILED)[0] == "crash"


def test_a_gpu_nvidia_smi_cannot_read_is_the_board(tmp_path: Path) -> None:
    job = (
        "slurmstepd: error: pyxis:     [ERROR] /etc/enroot/hooks.d/98-nvidia.sh exited with return code 1\n"
        "slurmstepd: error: pyxis: couldn't start container\n"
        "srun: error: a100x06: task 1: Exited with exit code 1\n"
    )
    smi = (
        "|   7  NVIDIA A100 80G...  On   | 00000000:D6:00.0 Off |                 ERR! |\n"
        "|ERR!  ERR! ERR!      1W /  N/A |      0MiB / 80994MiB |    ERR!      Default |\n"
    )
    fine = "| N/A   29C    P0   ERR! / 250W |    593MiB / 16160MiB |      0%      Default |\n"
    got = bundle_verdict(
        tmp_path, job, "JobId=90214 JobState=FAILED NodeList=a100x[05-06]\n",
        node_a100x06=smi, node_a100x05=fine,
    )  # fmt: skip
    assert got[1:] == ("hardware_gpu", ["a100x06"], "requeue_excluding_nodes")


def test_a_lone_bus_error_in_a_one_node_job_names_no_cause(tmp_path: Path) -> None:
    job = (
        "Epoch: [11][ 500/1251]  Time  0.411 ( 0.417)  Data  0.030 ( 0.032)  Loss 2.2836e+00 (2.3335e+00)\n"
        "/var/spool/slurmd/job77310/slurm_script: line 24: 18822 Bus error               (core dumped) python -m torch.distributed.launch --nproc_per_node=8 train.py\n"
        "srun: error: dgj324: task 0: Bus error (core dumped)\n"
    )
    got = bundle_verdict(tmp_path, job, "JobId=77310 JobState=FAILED NodeList=dgj324\n")
    assert got == ("crash", "unknown", [], "requeue")


@pytest.mark.parametrize(("silence", "kind"), [("40 minutes", "hang"), ("5 minutes", "crash")])
def test_an_operators_note_of_silence_before_an_admins_cancel(
    tmp_path: Path, silence: str, kind: str
) -> None:
    # nccl-tests' table header, then nothing; the note is an operator's statement of fact.
    job = (
        "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "         128            32     float     sum      -1\n"
        f"# note: no further output for {silence}; GPUs at 100% util, no NCCL WARN on any rank\n"
        "slurmstepd: error: *** JOB 24017 ON hgx-012 CANCELLED AT 2024-10-06T10:55:00 ***\n"
    )
    scheduler = (
        "JobID           JobName    Partition  State         ExitCode  Elapsed     NNodes NodeList\n"
        "24017           ncclperf   hgx        CANCELLED by 0 0:15     00:45:00    2      hgx-[012,020]\n"
    )
    assert bundle_verdict(tmp_path, job, scheduler)[0] == kind
