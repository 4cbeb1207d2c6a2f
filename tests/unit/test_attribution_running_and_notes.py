"""Running jobs read as running: a finished progress bar is not the training loop's clock, a job
minutes into its start-up is not hung, `samples/s 3853` is the throughput (not the loss printed
before it); and a note quoting the job's script says who set an NCCL variable.

Real formats: tqdm's bar (`23/23 [00:09<00:00, 2.41it/s]`), verl's step line, torchrun's
dynamic rendezvous join, scontrol's RunTime, NCCL's bootstrap failure."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

SQUEUE = """\
$ squeue -j 77120
   JOBID PARTITION           NAME     USER ST       TIME  NODES NODELIST(REASON)
   77120      h100     grpo-qwen7b    lwang  R    {time}      2 sg-[01-02]
"""


def _grpo(steps: int) -> str:
    head = (
        "# job still running (squeue R)\n"
        "0: (WorkerDict pid=51000) Capturing batches (bs=160 avail_mem=17.40 GB): 100%|██████████| 23/23 [00:09<00:00,  2.41it/s]\n"
    )
    return head + "".join(
        f"0: (TaskRunner pid=41210) step:{s} - actor/entropy:0.416 - actor/pg_loss:-0.0047 - timing_s/gen:165.4 - timing_s/step:306.4 - perf/throughput:1525.0\n"
        for s in range(1, steps + 1)
    )


def test_a_finished_setup_bar_does_not_time_the_training_loop() -> None:
    # 36 steps of ~306 s are 3:04 of a 3:12 run: running fine. The CUDA graph capture's
    # finished bar (its clock stopped at 9 s) must not be read as the loop's clock.
    a = attribute_text(_grpo(36), ["sg-01", "sg-02"], scheduler=SQUEUE.format(time="3:12:40"))
    assert a.category == Category.NONE and first_action(a) == "none", a.summary


STARTING = """\
0: I1030 15:01:20.758744 301 torch/distributed/elastic/agent/server/api.py:677] [default] Rendezvous'ing worker group
0: I1030 15:01:20.600000 301 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:688] The node 'gpu-q01_301_0' added itself to the participants of round 0 of the rendezvous '2770914'. Pending sync.
1: I1030 15:01:23.600000 302 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:688] The node 'gpu-q02_302_0' added itself to the participants of round 0 of the rendezvous '2770914'. Pending sync.
"""
SCONTROL = "JobId=2770914 JobName=pt-2409\n   JobState=RUNNING Reason=None Dependency=(null)\n   RunTime={run} TimeLimit=1-00:00:00 TimeMin=N/A\n"


def test_a_job_minutes_into_its_start_up_is_not_hung() -> None:
    a = attribute_text(STARTING, ["gpu-q01", "gpu-q02"], scheduler=SCONTROL.format(run="00:04:07"))
    assert a.category == Category.NONE and first_action(a) == "none", a.summary


def test_a_job_idle_in_its_start_up_for_an_hour_is_still_a_hang() -> None:
    a = attribute_text(STARTING, ["gpu-q01", "gpu-q02"], scheduler=SCONTROL.format(run="01:04:07"))
    assert a.kind.value == "hang"


# (a loss flat for an epoch, then lower: read as throughput it is a 1.09x "slowdown")
LOSSES = [1.9928, 1.9818, 1.9929, 1.9885, 1.9845, 1.9717, 1.9650, 1.9468, 1.9169, 1.9103,
          1.8938, 1.8821, 1.8555, 1.8329, 1.8261, 1.8272, 1.8126, 1.7939, 1.7841, 1.7733,
          1.7686, 1.7584, 1.7769, 1.7313, 1.7460, 1.7175, 1.7060]  # fmt: skip


def test_samples_per_second_is_the_number_after_its_label() -> None:
    # A steady ~3,840 samples/s while the loss printed before the label falls: no slowdown.
    job = (
        "".join(
            f"0: [2024-08-19 {13 + i // 11:02d}:{i % 11 * 5:02d}:20] epoch 0 step {200 * (i + 1)} "
            f"loss {loss:.4f} samples/s {3849 - (i % 3) * 9}\n"
            for i, loss in enumerate(LOSSES)
        )
        + "# job still running at collection time\n"
    )
    sq = SQUEUE.format(time="2:48:40").replace("sg-[01-02]", "gpu-p[01-02]")
    a = attribute_text(job, ["gpu-p01", "gpu-p02"], scheduler=sq)
    assert a.category == Category.NONE, a.summary


NOTED_SCRIPT = """\
# from the user's job script (copied from an older cluster):
#   export NCCL_SOCKET_IFNAME=eth0
#   export NCCL_DEBUG=INFO
+ srun -l python train_lit.py --trainer.num_nodes=2
0: dgx-07:40100:40100 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0
0: dgx-07:40100:40100 [0] bootstrap.cc:61 NCCL WARN Bootstrap : no socket interface found
8: dgx-08:40108:40108 [0] bootstrap.cc:61 NCCL WARN Bootstrap : no socket interface found
0: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, internal error - please report this issue to the NCCL developers, NCCL version 2.21.5
0: ncclInternalError: Internal check failed.
srun: error: dgx-07: task 0: Exited with exit code 1
"""


def test_a_variable_quoted_from_the_jobs_script_in_a_note_is_the_jobs() -> None:
    a = attribute_text(NOTED_SCRIPT, ["dgx-07", "dgx-08"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert first_action(a) == "stop"


def test_a_variable_quoted_from_the_sites_profile_is_not_the_jobs() -> None:
    site = NOTED_SCRIPT.replace("from the user's job script", "from the site's /etc/profile.d")
    assert attribute_text(site, ["dgx-07", "dgx-08"]).category != Category.APPLICATION
