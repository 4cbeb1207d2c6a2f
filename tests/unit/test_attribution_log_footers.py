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
