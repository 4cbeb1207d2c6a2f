"""How a job's own log says it ended or went quiet: Kaldi/ESPnet's slurm.pl footer, and the last
line of output before an operator's note under a time-limit kill. Lines as slurm.pl, ESPnet,
nnU-Net and slurmstepd print them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

ESPNET = """\
# Running on lamia
# Started at Thu Mar 21 10:02:44 JST 2019
# SLURM_JOB_ID=411823
# SLURM_JOB_NODELIST=lamia
# asr_train.py --ngpu 2 --backend pytorch --outdir exp/train_nodev/results
2019-03-21 10:03:31,025 (asr_train:228) INFO: backend = pytorch
2019-03-21 10:03:37,902 (asr:344) INFO: batch size is automatically increased (15 -> 30)
2019-03-21 11:48:09,377 (asr:574) INFO: save the snapshot: snapshot.ep.20
# Accounting: time=6329 threads=1
# Ended (code {code}) at Thu Mar 21 11:48:13 JST 2019, elapsed time 6329 seconds
"""


def test_slurm_pl_footer_with_code_0_is_a_finished_run() -> None:
    a = attribute_text(ESPNET.format(code=0), ["lamia"])
    assert (a.kind, a.category) == ("none", Category.NONE), a.summary


def test_slurm_pl_footer_with_a_failing_code_is_no_running_job() -> None:
    a = attribute_text(ESPNET.format(code=1), ["lamia"])
    assert a.kind == AnomalyKind.CRASH, a.summary


NNUNET = """\
epoch:  998
2021-11-05 13:25:22.952007: train loss : -0.9311
2021-11-05 13:26:40.525670: This epoch took 77.868647 s
epoch:  999
2021-11-05 13:27:58.114022: train loss : -0.9312
2021-11-05 13:29:16.525670: This epoch took 77.911421 s
2021-11-05 13:31:52.777114: finished prediction
2021-11-05 13:32:07.114580: determining postprocessing
{note}slurmstepd: error: *** JOB 8811470 ON gpu-c2-11 CANCELLED AT 2021-11-06T11:55:40 DUE TO TIME LIMIT ***
"""
SACCT = "JobID State ExitCode Elapsed NodeList\n8811470 TIMEOUT 0:0 3-00:00:11 gpu-c2-11\n"


@pytest.mark.parametrize(
    "note", ["", "# 13:33 onward: python process still present in state Sl, 0 % GPU utilisation\n"]
)
def test_output_silent_for_a_day_before_the_time_limit_is_a_hang_whatever_note_follows(
    note: str,
) -> None:
    a = attribute_text(NNUNET.format(note=note), ["gpu-c2-11"], scheduler=SACCT)
    assert a.kind == AnomalyKind.HANG, a.summary
    assert "silent" in a.summary and first_action(a) == "requeue"


RETURNN = """\
RETURNN starting up, version 1.20231219.101537
ep 3 train, step 2301, ce 1.142, fer 0.297, num_seqs 12, max_size:time 61440, mem_usage:cuda:0 9.8GB, 0.712 sec/step
ep 3 train, step 2302, ce 1.139, fer 0.296, num_seqs 12, max_size:time 61440, mem_usage:cuda:0 9.8GB, 0.709 sec/step
# no output after 09:11:52; the step was still alive at 12:40 (no CPU use, GPUs idle)
slurmstepd: error: *** JOB 3368164 ON cn-507 CANCELLED AT 2023-12-21T06:02:40 DUE TO TIME LIMIT ***
"""
RSACCT = "JobID State ExitCode Elapsed NodeList\n3368164 TIMEOUT 0:0 1-00:00:11 cn-507\n"
HUNG = """\
[Wed Dec 20 09:14:03 2023] INFO: task python3.11:20941 blocked for more than 120 seconds.
[Wed Dec 20 09:14:03 2023]       Tainted: P           OE     5.15.0-91-generic #101-Ubuntu
[Wed Dec 20 09:14:03 2023]  uvm_ioctl+0x1b3/0x1c20 [nvidia_uvm]
"""


def test_a_noted_clock_time_the_output_stopped_at_dates_the_silence_before_the_kill() -> None:
    a = attribute_text(RETURNN, ["cn-507"], scheduler=RSACCT)
    assert a.kind == AnomalyKind.HANG and "20.9 h" in a.summary, a.summary
    # (an hour before the kill is no more than a collective's timeout would wait)
    late = RETURNN.replace("no output after 09:11:52", "no output after 05:58")
    assert "printed nothing" not in attribute_text(late, ["cn-507"], scheduler=RSACCT).summary


def test_a_hang_on_the_node_whose_kernel_reports_the_task_blocked_excludes_it() -> None:
    a = attribute_text(RETURNN, ["cn-507"], {"dmesg_cn-507": HUNG}, scheduler=RSACCT)
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.HANG, Category.SYSTEM_SOFTWARE, ["cn-507"],
    ), a.summary  # fmt: skip
    assert first_action(a) == "requeue_excluding_nodes"


def test_tasks_blocked_only_after_the_kill_are_its_teardown() -> None:
    after = HUNG.replace("Wed Dec 20 09:14:03 2023", "Thu Dec 21 06:09:03 2023")
    a = attribute_text(RETURNN, ["cn-507"], {"dmesg_cn-507": after}, scheduler=RSACCT)
    assert a.culprit_nodes == [], a.summary


# An owner's cancel after a stall an operator's note describes, in the job's output or beside
# sacct's row (a stuck DataLoader, py-spy showing it in `_try_get_data`).
EPOCHS = "".join(
    f" | Epoch: [1][{k}/10010]    Time 3.370  Data 3.228  Err 6.5334  top1  98.438\n"
    for k in range(680, 689)
)
CANCEL = "slurmstepd: error: *** JOB 77215 ON titanx-05 CANCELLED AT 2016-05-13T09:40:17 ***\n"
CANCELLED = "$ sacct -j 77215 --format=JobID,State,ExitCode,Elapsed,NodeList\n77215      CANCELLED+     0:0   10:41:12 titanx-05\n"


@pytest.mark.parametrize(
    ("note", "where"),
    [
        (
            "# operator note: no output after iteration 201 for 4 h; py-spy: dataloader.py _try_get_data",
            "job",
        ),
        (
            "# operator note: the owner cancelled the job after it had printed nothing for ~20 minutes past the end of epoch 1",
            "scheduler",
        ),
        (
            "# operator note: no further output; the process is still alive but makes no progress; cancelled by the user",
            "job",
        ),
        (
            "# operator note: no iteration was ever logged; py-spy on rank 0 shows it waiting for the next batch",
            "job",
        ),
    ],
)
def test_a_note_of_a_stall_before_the_owners_cancel_makes_a_hang(note: str, where: str) -> None:
    job = EPOCHS + (note + "\n" if where == "job" else "") + CANCEL
    scheduler = CANCELLED + (note + "\n" if where == "scheduler" else "")
    a = attribute_text(job, ["titanx-05"], scheduler=scheduler)
    assert a.kind == AnomalyKind.HANG, a.summary
    assert first_action(a) == "requeue"


def test_a_cancel_with_no_note_of_a_stall_stays_the_owners() -> None:
    a = attribute_text(EPOCHS + CANCEL, ["titanx-05"], scheduler=CANCELLED)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER), a.summary
    # (nor does a short pause an operator noted)
    note = "# operator note: printed nothing for 5 minutes, then the owner cancelled\n"
    assert (
        attribute_text(EPOCHS + note + CANCEL, ["titanx-05"], scheduler=CANCELLED).kind
        != AnomalyKind.HANG
    )
