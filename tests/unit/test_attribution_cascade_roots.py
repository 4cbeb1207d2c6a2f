"""Root failures a cascade hides (`cascade_roots`): a rank's own exception printed after its
peers' watchdog timeouts, torchrun's failure record carrying the child's exception, and
PyTorch's collective fingerprint check reporting a mismatch after the timeouts.

Lines in the formats PyTorch prints: ProcessGroupNCCL's watchdog (ProcessGroupNCCL.cpp),
torchrun's ChildFailedError summary (torch/distributed/elastic/multiprocessing/errors/
__init__.py, `_FAILURE_FORMAT_TEMPLATE`), ProcessGroupWrapper's fingerprint check
(TORCH_DISTRIBUTED_DEBUG=DETAIL, docs/source/distributed.rst).
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu21", "gpu22"]
CLEAN = "(no kernel messages in the job window)\n"


def _run(job: str, node_logs: dict[str, str] | None = None) -> Attribution:
    logs = {n: _lines(t, f"dmesg_{n}.txt") for n, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], NODES, node_logs=logs
    )


def _watchdog(rank: int, task: int, seq: int = 2233) -> str:
    return (
        f"{task}: [rank{rank}]:[E1203 04:12:55.100000 ProcessGroupNCCL.cpp:616] [Rank {rank}] "
        f"Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, "
        "NumelIn=16777216, NumelOut=16777216, Timeout(ms)=600000) ran for 600010 milliseconds "
        "before timing out.\n"
    )


PROGRESS = "".join(f"0: iter {i} | loss 3.1 | 812 ms/step\n" for i in range(0, 400, 50))
TRACEBACK = (
    "0: [rank3]: Traceback (most recent call last):\n"
    '0: [rank3]:   File "/home/u/proj/data/loader.py", line 88, in __getitem__\n'
    '0: [rank3]:     sample = self.index[key]["tokens"]\n'
    "0: [rank3]: KeyError: 'tokens'\n"
)
EXITS = (
    "srun: error: gpu21: task 0: Exited with exit code 1\n"
    "srun: error: gpu22: task 1: Exited with exit code 1\n"
)


def test_a_silent_ranks_own_exception_after_its_peers_timeouts_is_the_root() -> None:
    # torchrun, 4 ranks per srun task: task 0's first line is rank 0's timeout, but rank 3
    # never timed out and raised in the job's own code.
    timeouts = "".join(_watchdog(r, 0 if r < 4 else 1) for r in range(8) if r != 3)
    a = _run(PROGRESS + timeouts + TRACEBACK + EXITS, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.CRASH, Category.APPLICATION, [])
    assert a.culprit_ranks == [3]
    assert default_advice(a).kind == AdviceKind.STOP


def test_an_exception_of_a_rank_that_timed_out_itself_is_no_hidden_root() -> None:
    timeouts = "".join(_watchdog(r, 0 if r < 4 else 1) for r in range(8))
    a = _run(PROGRESS + timeouts + TRACEBACK + EXITS, {n: CLEAN for n in NODES})
    assert a.category != Category.APPLICATION
    assert default_advice(a).kind != AdviceKind.STOP


def _child_failed(traceback: str) -> str:
    return (
        "[gpu22] torch.distributed.elastic.multiprocessing.errors.ChildFailedError:\n"
        "[gpu22] ============================================================\n"
        "[gpu22] train.py FAILED\n"
        "[gpu22] ------------------------------------------------------------\n"
        "[gpu22] Failures:\n"
        "[gpu22]   <NO_OTHER_FAILURES>\n"
        "[gpu22] ------------------------------------------------------------\n"
        "[gpu22] Root Cause (first observed failure):\n"
        "[gpu22] [0]:\n"
        "[gpu22]   time      : 2024-03-02_17:44:02\n"
        "[gpu22]   host      : gpu22\n"
        "[gpu22]   rank      : 12 (local_rank: 4)\n"
        "[gpu22]   exitcode  : 1 (pid: 7720)\n"
        "[gpu22]   error_file: /tmp/torchelastic_x/none_y/attempt_0/4/error.json\n"
        f"{traceback}"
        "[gpu22] ============================================================\n"
    )


SIGTERMED = (
    "[gpu21] W0302 17:44:03 torch.distributed.elastic.multiprocessing.api: Sending process 7611 closing signal SIGTERM\n"
    "[gpu21] torch.distributed.elastic.multiprocessing.api.SignalException: Process 7611 got signal: 15\n"
)


def test_torchruns_record_of_the_childs_own_exception_is_the_root() -> None:
    # With @record the field holds the child's callstack, indented below it.
    record = (
        "[gpu22]   traceback : Traceback (most recent call last):\n"
        '[gpu22]     File "/opt/conda/lib/python3.10/site-packages/torch/distributed/elastic/multiprocessing/errors/__init__.py", line 346, in wrapper\n'
        "[gpu22]       return f(*args, **kwargs)\n"
        '[gpu22]     File "/home/u/proj/train.py", line 88, in main\n'
        "[gpu22]       assert mask.shape == x.shape, f'attention mask shape {mask.shape}'\n"
        "[gpu22]   AssertionError: attention mask shape (8, 4096) != (8, 8192)\n"
    )
    a = _run(SIGTERMED + _child_failed(record), {"gpu22": CLEAN})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.CRASH, Category.APPLICATION, [])
    assert a.culprit_ranks == [12]
    assert default_advice(a).kind == AdviceKind.STOP


def test_torchruns_record_without_the_childs_exception_names_no_application_error() -> None:
    for field in (
        "[gpu22]   traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html\n",
        "[gpu22]   traceback : Signal 9 (SIGKILL) received by PID 7720\n",
    ):
        a = _run(SIGTERMED + _child_failed(field))
        assert a.category != Category.APPLICATION


MISMATCH = (
    "[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running "
    "collective: CollectiveFingerPrint(SequenceNumber=880, OpType=BROADCAST, TensorShape=[1]), "
    "but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=880, "
    "OpType=ALLREDUCE, TensorShape=[16777216])\n"
)


def test_a_fingerprint_mismatch_reported_after_the_timeouts_is_the_jobs_hang() -> None:
    timeouts = "".join(_watchdog(r, 0).split(": ", 1)[1] for r in range(4))
    a = _run(timeouts + MISMATCH, {n: CLEAN for n in NODES})
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_fingerprint_mismatch_with_no_timeout_before_it_is_a_crash() -> None:
    a = _run(MISMATCH + "srun: error: gpu21: task 0: Exited with exit code 1\n")
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.APPLICATION)


ABORTED = (
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    "0: torch.distributed.elastic.multiprocessing.api.SignalException: Process 110 got signal: 15\n"
    "slurmstepd: error: *** STEP 7712.0 ON gpu21 CANCELLED AT 2026-12-02T12:00:33 ***\n"
    "srun: error: gpu21: task 0: Terminated\n"
    "1: FileNotFoundError: [Errno 2] No such file or directory: '/datasets/c4/en/train-0000-of-01024.jsonl'\n"
    "srun: error: gpu22: task 1: Exited with exit code 1\n"
)


def test_a_missing_file_under_the_data_path_the_job_passes_is_its_argument() -> None:
    # The other task was terminated before it could read its shard: one task's error says
    # nothing of a mount when the path is the job's own argument.
    for given in (
        "+ srun -l python train.py --data /datasets/c4/en --seq-length 4096\n",
        "# job script passes --data /datasets/c4/en\n",
        "DATA_PATH='0.7 /datasets/c4/en/train 0.3 /datasets/code/train'\n",
    ):
        a = _run(given + ABORTED)
        assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), given
        assert default_advice(a).kind == AdviceKind.STOP, given


def test_a_missing_file_elsewhere_than_the_jobs_data_path_is_retried() -> None:
    a = _run("+ srun -l python train.py --data /lustre/proj/c4 --seq-length 4096\n" + ABORTED)
    assert default_advice(a).kind != AdviceKind.STOP


TRAINING = "".join(f"  {i} | loss 2.{i // 250:02d} | 812 ms\n" for i in range(0, 5000, 250))
SAVE = "saving checkpoint at iteration 5000 to /gpfs/proj/ckpt/iter_0005000\n"
FAILED_TRY = (
    "WARNING: checkpoint write failed (attempt {k}/5): OSError: [Errno 5] Input/output error: "
    "'/gpfs/proj/ckpt/iter_0005000/mp_rank_00/model_optim_rng.pt'\n"
)
RUNNING = "# job still running at time of collection\n"


def test_an_error_the_jobs_retry_got_past_leaves_a_running_job_healthy() -> None:
    job = (
        TRAINING + SAVE + FAILED_TRY.format(k=1)
        + "  successfully saved checkpoint at iteration 5000 (attempt 2/5)\n"
        + "  5000 | loss 2.20 | 829 ms\n" + RUNNING
    )  # fmt: skip
    a = _run(job)
    assert (a.kind, a.category) == ("none", Category.NONE)


def test_a_retry_that_never_succeeded_is_still_a_failure() -> None:
    last_try = (
        TRAINING + SAVE + FAILED_TRY.format(k=5)
        + "  successfully saved tokenizer files\n" + "  5000 | loss 2.20 | 829 ms\n" + RUNNING
    )  # fmt: skip
    gave_up = (
        TRAINING + SAVE + FAILED_TRY.format(k=1)
        + "ERROR: checkpoint write failed, giving up after 2 attempts\n"
        + "  saved optimizer state separately\n" + RUNNING
    )  # fmt: skip
    for job in (last_try, gave_up):
        assert _run(job).category != Category.NONE


def _megatron(iteration: int, grad_norm: str) -> str:
    # megatron/training/training.py training_log (a NaN loss is left out of the line).
    loss = "" if grad_norm == "nan" else " lm loss: 7.334521E-01 |"
    return (
        f" iteration     {iteration}/    8000 | consumed samples:       {iteration * 64} | "
        "elapsed time per iteration (ms): 7613.1 | learning rate: 6.680E-06 | global batch "
        f"size:    64 |{loss} loss scale: 1.0 | grad norm: {grad_norm} | number of skipped "
        "iterations:   0 | number of nan iterations:   0 |\n"
    )


CANCELLED = (
    "scancel: Terminating job 88213\n"
    "slurmstepd: error: *** JOB 88213 ON c4-n01 CANCELLED AT 2023-08-15T14:22:10 ***\n"
)


def test_a_run_cancelled_after_its_loss_diverged_is_the_applications() -> None:
    job = _megatron(3383, "0.752") + _megatron(3384, "0.741") + _megatron(3385, "nan")
    a = _run(job + _megatron(3386, "nan") + CANCELLED)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_cancel_after_a_spike_training_recovered_from_is_the_owners() -> None:
    job = _megatron(3383, "0.752") + _megatron(3384, "nan") + _megatron(3385, "0.741")
    a = _run(job + _megatron(3386, "0.733") + CANCELLED)
    assert a.category == Category.SCHEDULER
    assert default_advice(a).kind == AdviceKind.NONE


def _with_record(job: str, record: str) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], NODES,
        scheduler_lines=_lines(record, "scheduler.txt"),
    )  # fmt: skip


TEARDOWN = (
    PROGRESS
    + "slurmstepd: error: *** STEP 55120.0 ON gpu21 CANCELLED AT 2026-12-02T22:01:40 ***\n"
    + "1: torch.distributed.elastic.multiprocessing.api: [WARNING] Received Signals.SIGTERM death signal, shutting down workers\n"
    + "1: [rank9]:[E1202 22:01:41 ProcessGroupNCCL.cpp:1785] [PG 0 Rank 9] Exception (either an error or timeout) detected by watchdog at work: 5401\n"
    + "0: torch.distributed.elastic.multiprocessing.api.SignalException: Process 8812 got signal: 15\n"
    + "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
    + "srun: error: gpu22: task 1: Terminated\n"
)


def test_slurms_record_of_who_cancelled_decides_a_job_with_no_state() -> None:
    # sacct -p (JobID|State|ExitCode): the job's output shows only its step being cancelled.
    owner = _with_record(TEARDOWN, "55120|CANCELLED by 31007|0:15\n")
    assert (owner.kind, owner.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert default_advice(owner).kind == AdviceKind.NONE
    admin = _with_record(TEARDOWN, "55120|CANCELLED by 0|0:15\n")
    assert admin.category == Category.SCHEDULER
    assert default_advice(admin).kind == AdviceKind.REQUEUE
