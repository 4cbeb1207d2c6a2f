"""A node failure Slurm reports without naming the node (sacct NODE_FAIL): the node slurmctld's
own reason says it lost (`sinfo -R`), or the job's only node. Lines as sacct, sinfo and the job
print them."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action

STEPS = "".join(f"epoch 3 step {s} loss {2.0 - s / 1000:.3f}\n" for s in range(100, 700, 100))
SACCT = """\
$ sacct -j 1207 --format=JobID,State,ExitCode,Elapsed,NodeList
1207          NODE_FAIL      0:0   01:54:58 {nodes}
1207.batch    CANCELLED     0:15   01:54:58 {first}
"""
SINFO = """\
$ sinfo -R
REASON               USER      TIMESTAMP           NODELIST
{reason} root      2021-03-05T11:35:16 {node}
"""


def test_the_only_node_of_a_node_failure_is_named_and_left_out() -> None:
    a = attribute_text(STEPS, ["eureka"], scheduler=SACCT.format(nodes="eureka", first="eureka"))
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, ["eureka"]), a.summary
    assert first_action(a) == "requeue_excluding_nodes"


def test_slurms_reason_names_which_of_several_nodes_it_lost() -> None:
    sched = SACCT.format(nodes="gpu[1-2]", first="gpu1") + SINFO.format(
        reason="Node unexpectedly re", node="gpu2"
    )
    a = attribute_text(STEPS, ["gpu1", "gpu2"], scheduler=sched)
    assert a.culprit_nodes == ["gpu2"], a.summary


def test_an_operators_reason_is_no_loss_and_several_nodes_stay_unnamed() -> None:
    sched = SACCT.format(nodes="gpu[1-2]", first="gpu1") + SINFO.format(
        reason="rack move          ", node="gpu2"
    )
    a = attribute_text(STEPS, ["gpu1", "gpu2"], scheduler=sched)
    assert a.culprit_nodes == [], a.summary


def test_a_reboot_slurm_reports_on_many_nodes_beyond_the_job_is_a_shared_loss() -> None:
    sched = SACCT.format(nodes="c015", first="c015") + (
        "$ sinfo -R\n"
        "REASON               USER      TIMESTAMP           NODELIST\n"
        "Node unexpectedly re slurm     2022-07-23T15:27:10 c015\n"
        "Node unexpectedly re slurm     2022-07-23T15:31:00 d[001-002,004-024],f[002-010]\n"
    )
    a = attribute_text(STEPS, ["c015"], scheduler=sched)
    assert (a.category, a.culprit_nodes) == (Category.SCHEDULER, []), a.summary
    assert first_action(a) == "requeue"
    # (a handful of other nodes down for it is no room-wide event)
    few = sched.replace("d[001-002,004-024],f[002-010]", "d[001-003]")
    assert attribute_text(STEPS, ["c015"], scheduler=few).culprit_nodes == ["c015"]


# A job squeue still lists as completing (CG) after Slurm's own kill line: it ended as that
# line says (Slurm 17.11's stuck-CG bug left one so for days).
CG = """\
$ squeue -j 2977957
             JOBID PARTITION     NAME     USER ST       TIME  NODES NODELIST(REASON)
           2977957       gpu  train.sh mkphuth CG 1-00:51:20      1 c024
"""


def test_a_job_completing_after_its_cancel_line_was_cancelled() -> None:
    job = (
        STEPS + "slurmstepd: error: *** JOB 2977957 ON c024 CANCELLED AT 2021-07-10T15:20:35 ***\n"
    )
    a = attribute_text(job, ["c024"], scheduler=CG)
    assert (a.kind, a.category) == ("crash", Category.SCHEDULER), a.summary
    assert first_action(a) == "none"
    limit = job.replace(" ***", " DUE TO TIME LIMIT ***")
    assert attribute_text(limit, ["c024"], scheduler=CG).scheduler_outcome is not None


def test_a_job_completing_with_no_kill_line_is_still_ending_its_run() -> None:
    a = attribute_text(STEPS, ["c024"], scheduler=CG)
    assert a.scheduler_outcome is None, a.summary


# Requeued after its preemption (sacct shows it PENDING again): slurmctld's own line says why
# the attempt ended; submitit's handler saw SIGUSR1.
PREEMPTED = """\
$ sacct -j 39025082 --format=JobID,Partition,Elapsed,State,Restarts
       JobID  Partition    Elapsed      State Restarts
------------ ---------- ---------- ---------- --------
39025082        learnfair   01:00:38    PENDING        1
$ grep 39025082 /var/log/slurm/slurmctld.log
[2021-04-01T02:26:27.412] preempted JobId=39025082 has been requeued to reclaim resources for JobId=39025317
"""
SUBMITIT = STEPS + (
    "submitit WARNING (2021-04-01 02:26:27,644) - Caught signal SIGUSR1 on lf-gpu4096: this job is preempted.\n"
    "slurmstepd: error: *** STEP 39025082.0 ON lf-gpu4096 CANCELLED AT 2021-04-01T02:26:27 ***\n"
)


def test_a_job_pending_again_after_slurm_requeued_it_for_another_was_preempted() -> None:
    a = attribute_text(SUBMITIT, ["lf-gpu4096"], scheduler=PREEMPTED)
    assert (a.kind, a.category, a.scheduler_outcome) == ("crash", Category.SCHEDULER, "preempted")
    assert first_action(a) == "requeue"


def test_another_jobs_preemption_says_nothing_of_this_one() -> None:
    other = PREEMPTED.replace("preempted JobId=39025082", "preempted JobId=39025001")
    a = attribute_text(SUBMITIT, ["lf-gpu4096"], scheduler=other)
    assert a.scheduler_outcome != "preempted", a.summary
