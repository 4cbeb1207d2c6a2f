"""An owner's cancel of a job that had already failed, and an operator's note that an earlier run
on other nodes failed the same way.

Line shapes: slurmstepd's `*** JOB 4112 ON cn21 CANCELLED AT 2019-07-10T12:41:18 ***` and
sacct's `CANCELLED by 1017` (Slurm); the kernel's `NVRM: Xid (PCI:0000:86:00): 79, pid=...,
GPU has fallen off the bus.` (NVIDIA Xid catalogue); PyTorch's CUDA errors; Horovod's stall
inspector (horovod/common/stall_inspector.cc).

Knowledge (attribution-labels.md): an owner's cancel on purpose needs no action, but a cancel
that ends a run that had already failed is not what happened to it (tie-breaker 1, root over
symptom); the same failure reproduced on other hardware is the application's (tie-breaker 3).
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_lines import bundle_verdict

SACCT = """\
JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList
31766|dnn-2n|gpu|kryc|CANCELLED by 10311|0:0|2020-10-16T09:02:30|2020-10-16T11:40:03|02:37:33|2|cn[110-111]
31766.batch|batch|||CANCELLED|0:15|2020-10-16T09:02:30|2020-10-16T11:40:03|02:37:33|1|cn110
"""
STEPS = "".join(
    f"0: Epoch {e}: 100%|██████████| 412/412 [01:03<00:00,  6.44it/s, loss=0.0{e:02d}]\n"
    for e in range(1, 6)
)
CANCEL = "slurmstepd: error: *** JOB 31766 ON cn110 CANCELLED AT 2020-10-16T11:40:03 ***\n"
CRASH = """\
1: [rank2]: Traceback (most recent call last):
1: [rank2]:   File "/home/kryc/train.py", line 211, in <module>
1: [rank2]:     loss.backward()
1: [rank2]: RuntimeError: CUDA error: unspecified launch failure
"""
XID = "[Fri Oct 16 09:40:11 2020] NVRM: Xid (PCI:0000:86:00): 79, pid=41877, GPU has fallen off the bus.\n"


def verdict(
    tmp_path: Path, job_log: str, scheduler: str = SACCT, **files: str
) -> tuple[str, str, list[str], str]:
    return bundle_verdict(tmp_path, job_log, scheduler, **files)


def test_an_owners_cancel_of_a_healthy_run_needs_nothing(tmp_path: Path) -> None:
    assert verdict(tmp_path, STEPS + CANCEL)[1:] == ("scheduler", [], "none")


def test_an_owners_cancel_after_a_gpu_fell_off_the_bus_is_the_gpus(tmp_path: Path) -> None:
    got = verdict(tmp_path, STEPS + CRASH + CANCEL, dmesg_cn111=XID)
    assert got[1:] == ("hardware_gpu", ["cn111"], "requeue_excluding_nodes")


def test_an_owners_cancel_after_a_ranks_error_is_not_a_cancel_on_purpose(tmp_path: Path) -> None:
    assert verdict(tmp_path, STEPS + CRASH + CANCEL)[3] != "none"


def test_an_error_the_run_got_past_does_not_undo_the_owners_cancel(tmp_path: Path) -> None:
    assert verdict(tmp_path, CRASH + STEPS + CANCEL)[1:] == ("scheduler", [], "none")


STALL = """\
[1,0]<stderr>:[2019-05-15 02:27:40.681015: W horovod/common/operations.cc:588] One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are trying to submit different tensors or that only subset of ranks is submitting tensors, which will cause deadlock.
[1,0]<stderr>:Stalled ops:
[1,0]<stderr>:DistributedAdamOptimizer_Allreduce/HorovodAllreduce_gradients_encoder_layer_23_output_dense_MatMul_grad_MatMul_1_0 [missing ranks: 1]
"""


def test_an_owners_cancel_of_a_stalled_collective_ends_a_hang(tmp_path: Path) -> None:
    assert verdict(tmp_path, STEPS + STALL * 3 + CANCEL)[0] == "hang"


def _rerun_note(
    nodes: str, words: str = "died in the backward pass with the same 'unspecified launch failure'"
) -> str:
    return f"# previous job 31702 on {nodes} {words}\n"


def test_the_same_failure_in_an_earlier_run_on_other_nodes_is_the_applications(
    tmp_path: Path,
) -> None:
    sacct = SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|")
    got = verdict(tmp_path, STEPS + CRASH, sacct + _rerun_note("cn[05-06]"))
    assert got == ("crash", "application", [], "stop")


def test_a_note_that_each_attempt_failed_on_a_different_node_is_the_applications(
    tmp_path: Path,
) -> None:
    sacct = SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|")
    note = "# each attempt hangs right after step 1500 on a different node\n"
    assert verdict(tmp_path, STEPS + CRASH, sacct + note)[1:] == ("application", [], "stop")
    same = "# each attempt ran on the same node, cn110\n"
    assert verdict(tmp_path, STEPS + CRASH, sacct + same)[1] != "application"


def test_a_note_naming_this_runs_node_is_no_reproduction_elsewhere(tmp_path: Path) -> None:
    sacct = SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|")
    assert verdict(tmp_path, STEPS + CRASH, sacct + _rerun_note("cn[110-111]"))[1] != "application"


def test_a_reference_run_with_the_same_config_is_no_failure(tmp_path: Path) -> None:
    sacct = SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|")
    note = "# reference run 31702 on cn[05-06] with the same config: 1.47 s/it\n"
    assert verdict(tmp_path, STEPS + CRASH, sacct + note)[1] != "application"


def test_a_nodes_own_kernel_log_outweighs_the_note(tmp_path: Path) -> None:
    sacct = SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|")
    got = verdict(tmp_path, STEPS + CRASH, sacct + _rerun_note("cn[05-06]"), dmesg_cn111=XID)
    assert got[1:] == ("hardware_gpu", ["cn111"], "requeue_excluding_nodes")


EARLIER = (
    "31702|dnn-2n|gpu|kryc|FAILED|1:0|2020-10-14T09:00:04|2020-10-14T14:21:50|05:21:46|2|cn[05-06]\n"
    "31730|dnn-2n|gpu|kryc|TIMEOUT|0:0|2020-10-15T16:02:00|2020-10-15T21:37:11|05:35:11|2|cn[07-08]\n"
)
BY_ID = "# 31702 and 31730 ran the same recipe; each log stops mid-run without a traceback\n"


def _failed_sacct(earlier: str = EARLIER) -> str:
    return SACCT.replace("CANCELLED by 10311", "FAILED").replace("|0:0|", "|1:0|") + earlier


def test_earlier_runs_named_by_id_that_failed_on_other_nodes_are_the_applications(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, STEPS + CRASH, _failed_sacct() + BY_ID)
    assert got[1:] == ("application", [], "stop")


def test_earlier_runs_named_by_id_on_this_runs_node_or_completed_are_not(tmp_path: Path) -> None:
    here = EARLIER.replace("cn[07-08]", "cn[110-111]")
    assert verdict(tmp_path, STEPS + CRASH, _failed_sacct(here) + BY_ID)[1] != "application"
    done = EARLIER.replace("TIMEOUT", "COMPLETED")
    assert verdict(tmp_path, STEPS + CRASH, _failed_sacct(done) + BY_ID)[1] != "application"
    # (a job id the table does not hold: the note's subject is not shown)
    other = BY_ID.replace("31730", "31799")
    assert verdict(tmp_path, STEPS + CRASH, _failed_sacct() + other)[1] != "application"


@pytest.mark.parametrize(
    "note",
    [
        "# 31702: same nodes and config with pipeline_parallel_degree 1 (DP_shard=4), 200 steps completed\n",
        "# note: the identical job image rebuilt with NCCL 2.4.8 initialises and trains on the same nodes\n",
        "# rerun of the same data with the fixed ms-swift release trains past step 3000 on the same node\n",
        "# note: the same script with NCCL over sockets (no aws-ofi-rccl plugin) trains on both nodes\n",
    ],
)
def test_the_job_changed_in_its_own_setup_running_on_the_same_nodes_is_the_applications(
    tmp_path: Path, note: str
) -> None:
    got = verdict(tmp_path, STEPS + CRASH, _failed_sacct("") + note)
    assert got[1:] == ("application", [], "stop")


@pytest.mark.parametrize(
    "note",
    [
        # (unchanged: the nodes may have changed since)
        "# the same job completed on the same nodes last week\n",
        # (changed, but elsewhere)
        "# with pipeline_parallel_degree 1 it completed on other nodes\n",
        # (changed on the same nodes, and failed too)
        "# with pipeline_parallel_degree 1 on the same nodes it hangs as well\n",
        # (a lower-case key=value is no environment variable of the job's)
        "# the same nodes completed steps=200 last week\n",
    ],
)
def test_notes_short_of_a_changed_job_running_on_these_nodes_leave_the_verdict(
    tmp_path: Path, note: str
) -> None:
    assert verdict(tmp_path, STEPS + CRASH, _failed_sacct("") + note)[1] != "application"


COMPLETED_RUN = "31702|dnn-2n|gpu|kryc|COMPLETED|0:0|2020-10-14T09:00:04|2020-10-14T14:21:50|05:21:46|2|cn[110-111]\n"


@pytest.mark.parametrize(
    "note",
    [
        "# 31702: same nodes and parallel layout with batch_accumulation_per_replica=1 (steps 0-500)\n",
        "# 31702: identical recipe and nodes with container nemo:25.11\n",
    ],
)
def test_a_changed_run_named_by_id_that_sacct_shows_completed_on_the_same_nodes(
    tmp_path: Path, note: str
) -> None:
    got = verdict(tmp_path, STEPS + CRASH, _failed_sacct(COMPLETED_RUN) + note)
    assert got[1:] == ("application", [], "stop")
    failed = COMPLETED_RUN.replace("COMPLETED|0:0", "FAILED|1:0")
    assert verdict(tmp_path, STEPS + CRASH, _failed_sacct(failed) + note)[1] != "application"


def test_a_long_word_after_same_in_a_note_is_read_in_one_pass(tmp_path: Path) -> None:
    # (a note of 590 characters with no blank after `same`: each word before `nodes` ends at a
    # blank, so the reader never tries the ways to cut one word into four)
    note = "# same " + "a" * 583 + "\n"
    got = verdict(tmp_path, STEPS + CRASH, _failed_sacct("") + note)
    assert got[1] != "application"


def test_a_note_that_the_failure_recurred_on_other_providers_is_the_applications(
    tmp_path: Path,
) -> None:
    # (axolotl: the elastic agent's death signal, with no scheduler record naming the nodes)
    job = (
        "{'loss': 0.151, 'grad_norm': 0.0081498883664608, 'epoch': 0.29}\n"
        "W1221 17:13:59.240000 46660 torch/distributed/elastic/agent/server/api.py:704] "
        "Received 1 death signal, shutting down workers\n"
        "W1221 17:13:59.241000 46660 torch/distributed/elastic/multiprocessing/api.py:897] "
        "Sending process 46807 closing signal SIGHUP\n"
    )
    state = "JobID|JobName|State|ExitCode\n4411|train|FAILED|1:0\n"
    note = (
        "# operator note: the same kind of failure happened repeatedly on several different "
        "cloud GPU providers (AWS, RunPod, Lambda) with axolotl 0.6.0 / accelerate 1.2.1\n"
    )
    assert verdict(tmp_path, job, state + note)[1:] == ("application", [], "stop")
    once = "# operator note: the failure happened once, on this cluster\n"
    assert verdict(tmp_path, job, state + once)[1] != "application"


def test_the_job_without_its_new_input_running_fine_on_the_same_nodes_is_the_applications(
    tmp_path: Path,
) -> None:
    # (WarpX on Perlmutter: srun's SIGABRT of one node's tasks, AMReX's own message cut)
    job = "srun: error: nid008415: tasks 12-15: Aborted\n"
    sacct = "JobID|JobName|NodeList|State|ExitCode\n34518820|WarpX|nid[008412-008415]|FAILED|6:0\n"
    note = "# operator note (user): a simple example and the full input WITHOUT the LASY file both run fine on the same nodes; with the LASY file every run fails.\n"
    assert verdict(tmp_path, job + note, sacct)[1:] == ("application", [], "stop")
