"""Time-limit kills of jobs that had stopped long before: read off sacct's fixed-width
Elapsed, year-less glog and vLLM stamps, the last output after the last progress line, and a
slow loop's tqdm bar that is not silent between its iterations.

Real formats: `sacct --format=JobID,JobName,State,ExitCode,Timelimit,Elapsed,NodeList` (its
default fixed-width table), slurmstepd's `*** JOB N ON host CANCELLED AT ... DUE TO TIME
LIMIT ***`, glog/absl prefixes (`I0519 10:54:30.600000 40112 train.py:170]`), vLLM's logger
(`INFO 09-21 06:38:07 [loggers.py:127] ...`, vllm/logger.py `_DATE_FORMAT = "%m-%d %H:%M:%S"`),
tqdm's bar (`3/11 [1:54:03<5:04:00, 2373.00s/it]`)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from datetime import datetime

from resurgo.attribute.yearless_stamps import yearless_time
from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text

# --- no step ever printed, no clock in the output: sacct's Elapsed dates the whole run ----
NEVER_STEPPED = """\
+ srun accelerate launch --num_processes 12 --num_machines 3 --multi_gpu train_network.py --config_file=config.toml
prepare accelerator
loading model for process 0/12
load StableDiffusion checkpoint: /shared/models/sd_xl_base_1.0.safetensors
building U-Net
U-Net: <All keys matched successfully>
slurmstepd: error: *** JOB 540318 ON gpu-21 CANCELLED AT 2024-04-08T23:02:40 DUE TO TIME LIMIT ***
srun: Job step aborted: Waiting up to 32 seconds for job step to finish.
"""
FIXED_WIDTH_SACCT = """\
$ sacct -j 540318 --format=JobID,JobName,State,ExitCode,Timelimit,Elapsed,NodeList
JobID           JobName      State ExitCode  Timelimit    Elapsed        NodeList
------------ ---------- ---------- -------- ---------- ---------- ---------------
540318        multinode    TIMEOUT      0:0   12:00:00   {elapsed}       gpu-[21-23]
540318.batch      batch  CANCELLED     0:15              12:00:09           gpu-21
540318.0     accelerate  CANCELLED     0:15              11:59:58       gpu-[21-23]
"""
NODES = ["gpu-21", "gpu-22", "gpu-23"]


def test_a_run_that_idled_its_whole_time_limit_without_a_step_is_a_hang() -> None:
    a = attribute_text(NEVER_STEPPED, NODES, scheduler=FIXED_WIDTH_SACCT.format(elapsed="12:00:07"))
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)


def test_a_short_run_cut_by_its_limit_while_starting_is_the_schedulers() -> None:
    a = attribute_text(NEVER_STEPPED, NODES, scheduler=FIXED_WIDTH_SACCT.format(elapsed="00:10:07"))
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)


# --- glog-stamped progress, then hours of nothing until the limit -------------------------
GLOG_STEPS = "".join(
    f"I0519 {h:02d}:{m:02d}:42.400000 40112 train.py:170] step {s:5d} loss 1.90 acc 0.61 imgs/s 2231\n"
    for s, (h, m) in enumerate([(9, 20), (9, 27), (9, 34), (9, 41), (9, 48), (9, 55)], start=1)
)
GLOG_JOB = (
    GLOG_STEPS
    + "slurmstepd: error: *** JOB 4412098 ON dgx1-04 CANCELLED AT 2022-05-19T21:14:02 DUE TO TIME LIMIT ***\n"
)
GLOG_SACCT = """\
JobID           JobName      State ExitCode  Timelimit    Elapsed        NodeList
------------ ---------- ---------- -------- ---------- ---------- ---------------
4412098      flax-seg-+    TIMEOUT      0:0   12:00:00   12:00:14         dgx1-04
"""


def test_glog_stamped_progress_that_stopped_hours_before_the_limit_is_a_hang() -> None:
    a = attribute_text(GLOG_JOB, ["dgx1-04"], scheduler=GLOG_SACCT)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)


def test_glog_stamped_progress_up_to_the_limit_is_cut_short() -> None:
    late = GLOG_JOB.replace("T21:14:02", "T09:58:02")
    a = attribute_text(late, ["dgx1-04"], scheduler=GLOG_SACCT.replace("12:00:14", "00:40:14"))
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)


# --- the last output (after the last step) is hours before the kill -----------------------
RL_JOB = "".join(
    f"(TaskRunner pid=40112) step:{s} - global_seqlen/mean:219304 - actor/pg_loss:0.0078 - timing_s/gen:63.2 - timing_s/step:{880 + s}.1\n"
    for s in range(1, 15)
) + (
    "(TaskRunner pid=40112) [colocate_async] draining rollout: 1183 outstanding requests, starting weight sync for step 15\n"
    + "".join(
        f"(vLLMHttpServer pid=41220) INFO 09-21 06:38:{s:02d} [loggers.py:127] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 0.0 tokens/s, Running: 214 reqs, Waiting: 969 reqs, GPU KV cache usage: 31.2%\n"
        for s in (7, 17, 27)
    )
    + "slurmstepd: error: *** JOB 310559 ON b300-n02 CANCELLED AT 2026-09-21T10:00:19 DUE TO TIME LIMIT ***\n"
)
RL_SACCT = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList
310559|grpo|TIMEOUT|0:0|04:00:16|b300-n02
"""


def test_an_idle_engines_zero_throughput_is_no_progress_and_its_stamp_dates_the_silence() -> None:
    a = attribute_text(RL_JOB, ["b300-n02"], scheduler=RL_SACCT)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)
    assert "06:38:27" in a.summary


def test_an_engine_still_generating_until_the_limit_is_not_silent() -> None:
    busy = RL_JOB.replace("06:38:", "09:59:").replace(
        "Avg generation throughput: 0.0", "Avg generation throughput: 812.4"
    )
    a = attribute_text(busy, ["b300-n02"], scheduler=RL_SACCT)
    assert a.kind == AnomalyKind.CRASH and a.category == Category.SCHEDULER


# --- a slow loop's bar: silent one iteration between prints, while it works ---------------
SLOW_BAR_JOB = """\
(ActorModelRayActor pid=31877) Episode [1/1]:   9%|▉         | 1/11 [38:41<6:20:00, 2311.00s/it]
(ActorModelRayActor pid=31877) Episode [1/1]:  18%|█▊        | 2/11 [1:16:22<5:42:00, 2342.00s/it]
(ActorModelRayActor pid=31877) Episode [1/1]:  27%|██▋       | 3/11 [1:54:03<5:04:00, 2373.00s/it]
"""
SLOW_BAR_SQUEUE = """\
JobID|JobName|State|ExitCode|Elapsed|NodeList
448120|ppo_3node|RUNNING|0:0|{elapsed}|gpu-node-[1-3]
"""


def test_a_running_slow_loop_between_two_bar_prints_is_running() -> None:
    # 1:54:03 on the bar's clock, 30 min of start-up, and a 38-minute iteration under way
    a = attribute_text(SLOW_BAR_JOB, ["gpu-node-1", "gpu-node-2", "gpu-node-3"],
                       scheduler=SLOW_BAR_SQUEUE.format(elapsed="02:55:00"))  # fmt: skip
    assert a.kind == "none"


def test_a_slow_loop_silent_far_beyond_one_iteration_is_a_hang() -> None:
    a = attribute_text(SLOW_BAR_JOB, ["gpu-node-1", "gpu-node-2", "gpu-node-3"],
                       scheduler=SLOW_BAR_SQUEUE.format(elapsed="05:30:00"))  # fmt: skip
    assert a.kind == AnomalyKind.HANG


# --- year-less stamps -----------------------------------------------------------------------
def test_glog_and_vllm_stamps_take_the_reference_year() -> None:
    ref = datetime(2022, 5, 19, 21, 14, 2)
    assert yearless_time("I0519 10:54:30.600000 40112 train.py:170] step 5800", ref) == datetime(
        2022, 5, 19, 10, 54, 30
    )
    assert yearless_time(
        "(vLLMHttpServer pid=41220) INFO 05-19 06:38:07 [loggers.py:127] Engine 000", ref
    ) == datetime(2022, 5, 19, 6, 38, 7)


def test_a_stamp_across_new_year_takes_the_nearer_year() -> None:
    assert yearless_time(
        "W1231 23:59:58.000001 7 agent.py:12] x", datetime(2024, 1, 1, 0, 30)
    ) == datetime(2023, 12, 31, 23, 59, 58)
    assert yearless_time(
        "I0101 00:00:03.000001 7 agent.py:12] x", datetime(2023, 12, 31, 22, 0)
    ) == datetime(2024, 1, 1, 0, 0, 3)


def test_words_and_impossible_dates_are_no_stamps() -> None:
    ref = datetime(2023, 3, 1)
    assert yearless_time("E1332 12:00:00.000000 1 x.py:1] month 13", ref) is None
    assert yearless_time("I0230 12:00:00.000000 1 x.py:1] 30 February", ref) is None
    assert yearless_time("FILE0519 10:54:30.6 not a prefix", ref) is None
    assert yearless_time("loss 0.5 at step 10", ref) is None
