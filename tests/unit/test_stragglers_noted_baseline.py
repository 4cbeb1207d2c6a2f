"""A running job slow from its first step, known only from an operator's note giving the rate of
the same model or configuration elsewhere, and the job's own settings that explain it.

Line shapes: Lightning's DataLoader warning (lightning/pytorch/trainer/connectors/
data_connector.py), NCCL failing to load the RDMA userspace in a container
(`misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]`, then `Using network Socket`),
a traced `source` of the user's env file, ibstat's port block, tqdm progress bars and Tutel's
`[Summary] step = N, step_time = ...` lines.

Knowledge (attribution-labels.md): a job-wide slowdown is a straggler; a setting the job owns
that slows every step makes it an application straggler, left running (action none); with no
cause found it stays unknown.
"""
# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from pathlib import Path

import pytest

from tests.log_lines import bundle_verdict

NOTE_SAME = "# job 61377 still running at collection (2024-09-23 15:10); same model/config with num_workers=8 (job 60812, same nodes, last week) ran at 3.9-4.1 it/s\n"
NOTE_RUNNING = "# job 61377 still running at collection (2024-09-23 15:10)\n"
FEW_WORKERS = "0: /opt/conda/lib/python3.11/site-packages/lightning/pytorch/trainer/connectors/data_connector.py:424: The 'train_dataloader' does not have many workers which may be a bottleneck. Consider increasing the value of the `num_workers` argument` to `num_workers=27` in the `DataLoader` to improve performance.\n"
SQUEUE = "$ squeue -j 61377\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 61377 gpu fit carol R 1:02:10 4 g4n[01-04]\n"
IBSTAT = "CA 'mlx5_0'\n\tCA type: MT4123\n\tNumber of ports: 1\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n\t\tRate: 100\n\t\tLink layer: InfiniBand\n"


def verdict(
    tmp_path: Path, job_log: str, scheduler: str = SQUEUE, **files: str
) -> tuple[str, str, list[str], str]:
    return bundle_verdict(tmp_path, job_log, scheduler, **files)


def _bars(rate: float = 1.01) -> list[str]:
    return [
        f"0: Epoch 0:  {k:2d}%|          | {k * 100}/8800 [{k:02d}:39<02:23:53, {rate + (k % 3) * 0.01:.2f}it/s, v_num=5, train_loss=0.{900 - k}]\n"
        for k in range(1, 30)
    ]


def _lightning(note: str, *, warn: bool) -> str:
    head = [note, "+ srun python fit.py --config cfg/vit_l.yaml\n"]
    return "".join(head + ([FEW_WORKERS] if warn else []) + _bars())


def test_a_noted_faster_rate_of_the_same_config_and_lightnings_worker_warning_make_an_application_straggler(
    tmp_path: Path,
) -> None:
    assert verdict(tmp_path, _lightning(NOTE_SAME, warn=True)) == (
        "straggler",
        "application",
        [],
        "none",
    )


def test_without_the_jobs_own_cause_the_noted_slowdown_is_a_straggler_of_unknown_cause(
    tmp_path: Path,
) -> None:
    kind, category, culprits, _ = verdict(tmp_path, _lightning(NOTE_SAME, warn=False))
    assert (kind, category, culprits) == ("straggler", "unknown", [])


def test_without_a_noted_rate_a_steady_running_job_is_healthy_even_with_the_warning(
    tmp_path: Path,
) -> None:
    kind, category, _, action = verdict(tmp_path, _lightning(NOTE_RUNNING, warn=True))
    assert (kind, category, action) == ("none", "none", "none")


def test_a_rate_in_a_note_about_another_model_is_no_baseline(tmp_path: Path) -> None:
    other = "# job 61377 still running at collection; the ResNet-50 benchmark on these nodes ran at 3.9-4.1 it/s\n"
    kind, _, _, _ = verdict(tmp_path, _lightning(other, warn=True))
    assert kind == "none"


TUTEL_NOTE = "# job still running; the same example on one node (a100-31, 8 GPUs) reports step_time = 0.012315\n"
TUTEL = [
    "# job runs in the user's image tutel-cu113-torch111.sqsh (pyxis); 4 nodes x 8 A100\n",
    "+ srun --ntasks-per-node=1 --container-image=/home/a157/images/tutel-cu113-torch111.sqsh torchrun --nnodes 4 --nproc_per_node 8 --rdzv_backend c10d --rdzv_endpoint a100-31:29500 -m tutel.examples.helloworld_ddp --batch_size=16\n",
    *[
        line
        for t, host in enumerate(["a100-31", "a100-32", "a100-33", "a100-34"])
        for line in (
            f"{t}: {host}:21{t}:21{t} [0] misc/ibvwrap.cc:63 NCCL WARN Failed to open libibverbs.so[.1]\n",
            f"{t}: {host}:21{t}:21{t} [0] NCCL INFO NET/Socket : Using [0]ib0:10.0.0.{31 + t}<0>\n",
            f"{t}: {host}:21{t}:21{t} [0] NCCL INFO Using network Socket\n",
        )
    ],
    *[
        f"0: [Summary] step = {s}, step_time = 1.0{s % 7}7011, loss = 4.{5609 - s}\n"
        for s in range(1, 40)
    ],
]
TUTEL_SQUEUE = "$ squeue -u a157 -o '%i %j %T %M %D %R'\nJOBID NAME STATE TIME NODES NODELIST(REASON)\n150332 tutel-ddp RUNNING 2:04 4 a100-[31-34]\n"


def test_nccl_over_sockets_because_the_jobs_container_lacks_libibverbs_on_ib_nodes_is_the_jobs(
    tmp_path: Path,
) -> None:
    got = verdict(
        tmp_path, "".join([*TUTEL, TUTEL_NOTE]), TUTEL_SQUEUE, **{"ibstat_a100-31": IBSTAT}
    )
    assert got == ("straggler", "application", [], "none")


def test_with_no_infiniband_in_evidence_sockets_are_no_cause_of_the_jobs(tmp_path: Path) -> None:
    kind, category, _, _ = verdict(tmp_path, "".join([*TUTEL, TUTEL_NOTE]), TUTEL_SQUEUE)
    assert (kind, category) == ("straggler", "unknown")


SOURCED = [
    "# operator: job still running (squeue R 3:02:44). Same model/config ran last week as job 880412 on gpu[101-104] at ~410 samples/s.\n",
    "+ source ~/jobs/env_debug.sh   # user's file: export NCCL_DEBUG=INFO NCCL_IB_DISABLE=1 NCCL_P2P_LEVEL=NVL (written for a single-node debug run)\n",
    "+ srun deepspeed train.py --deepspeed ds_config.json\n",
    *[
        f"{host}: {host}:3100{k}:3100{k} [0] NCCL INFO NET/Socket : Using [0]ib0:10.61.9.9{k}<0> [1]enp170s0f0np0:10.70.9.9{k}<0>\n"
        for k, host in enumerate(["gpu291", "gpu292"], start=1)
    ],
    *[
        f"{host}: {host}:3100{k}:3100{k} [0] NCCL INFO Using network Socket\n"
        for k, host in enumerate(["gpu291", "gpu292"], start=1)
    ],
    *[
        f"gpu291: [2026-11-23 {14 + (10 + s * 4) // 60}:{(10 + s * 4) % 60:02d}:13,297] [INFO] [timer.py:264:stop] epoch=0/micro_step={s * 10}/global_step={s * 10}, RunningAvgSamplesPerSec=120.61, CurrSamplesPerSec=12{s % 4}.63, MemAllocated=21.3GB, MaxMemAllocated=38.9GB\n"
        for s in range(1, 40)
    ],
]
SOURCED_SQUEUE = "$ squeue -j 881907\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 881907 gpu sft dave R 2:48:02 2 gpu[291-292]\n"


def test_a_traced_source_of_the_users_env_file_that_disables_ib_is_the_jobs_own_slowdown(
    tmp_path: Path,
) -> None:
    got = verdict(
        tmp_path,
        "".join(SOURCED),
        SOURCED_SQUEUE,
        **{
            "node_gpu291": "Infiniband controller: Mellanox Technologies MT28908 Family [ConnectX-6]\n"
        },
    )
    assert got[:2] == ("straggler", "application")
    assert got[3] == "none"


# NCCL before 2.5 (`NET/Socket : 1 interfaces found`, `NET : Using interface ib0:...`) under a
# job script that exports NCCL_IB_DISABLE=1; maskrcnn-benchmark's `time:` per iteration.
OLD_NCCL = [
    "# job still running at collection time\n",
    "# same config on one node (4 GPUs, NVLink): time 0.61 s/iter; with 2 nodes expected <= 0.65\n",
    "+ export NCCL_SOCKET_IFNAME=ib0 NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO\n",
    "+ srun python -m torch.distributed.launch --nnodes 2 --nproc_per_node 4 tools/train_net.py\n",
    "NCCL version 2.4.2+cuda10.0\n",
    *[
        line
        for host in ("v100-a07", "v100-a08")
        for line in (
            f"{host}:21500:21500 [0] NCCL INFO NET : Using interface ib0:192.168.30.7<0>\n",
            f"{host}:21500:21500 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.\n",
            f"{host}:21500:21500 [0] NCCL INFO NET/Socket : 1 interfaces found\n",
        )
    ],
    *[
        f"2019-04-19 09:{43 + k // 3:02d}:{k % 3 * 20:02d},517 maskrcnn_benchmark.trainer INFO: eta: 3 days, 12:30:22  iter: {20 * k}  loss: 1.8920  time: 1.03{k % 9} (1.020)  data: 0.020  lr: 0.020000  max mem: 4981\n"
        for k in range(1, 30)
    ],
]
IB_ON_BUS = "Infiniband controller: Mellanox Technologies MT28908 Family [ConnectX-6]\n"
OLD_SQUEUE = "$ squeue -j 10422\n JOBID PARTITION NAME USER ST TIME NODES NODELIST(REASON)\n 10422 v100 maskrcnn lau R 9:52 2 v100-a[07-08]\n"


def test_old_nccls_sockets_under_the_jobs_ib_disable_and_a_noted_s_per_iter_are_the_jobs(
    tmp_path: Path,
) -> None:
    got = verdict(tmp_path, "".join(OLD_NCCL), OLD_SQUEUE)
    assert got == ("straggler", "application", [], "none")


# The job script's exports quoted as a block of notes under a heading that says whose they are,
# the setting after another on its line (ms-swift ZeRO-3 over six nodes, NCCL 2.x's own lines).
QUOTED_BLOCK = [
    "# job script exports (from run_sft_ds3.sh):\n",
    "#   NCCL_DEBUG=INFO NCCL_IB_DISABLE=1 NCCL_P2P_DISABLE=1 NCCL_SOCKET_IFNAME=bond0\n",
    "# the same script on 2 nodes (job 3370455) ran at train_speed(iter/s) 0.031\n",
    *OLD_NCCL[3:-29],
    *[
        f"0: {{'loss': 1.06, 'train_speed(iter/s)': 0.0117, 'global_step/max_steps': '{10 * k}/2340'}}\n"
        for k in range(1, 12)
    ],
]


@pytest.mark.parametrize("exports", ["#   NCCL_IB_DISABLE=1 NCCL_DEBUG=INFO", None])
def test_a_quoted_block_of_the_job_scripts_exports_owns_the_setting_wherever_it_sits_on_its_line(
    tmp_path: Path, exports: str | None
) -> None:
    lines = list(QUOTED_BLOCK)
    if exports is not None:
        lines[1] = exports + "\n"
    got = verdict(tmp_path, "".join(lines), OLD_SQUEUE, **{"node_v100-a07": IB_ON_BUS})
    assert got == ("straggler", "application", [], "none")


def test_the_same_exports_under_a_heading_naming_the_site_stay_no_cause_of_the_jobs(
    tmp_path: Path,
) -> None:
    lines = ["# site module nccl/2.4 exports:\n", *QUOTED_BLOCK[1:]]
    got = verdict(tmp_path, "".join(lines), OLD_SQUEUE, **{"node_v100-a07": IB_ON_BUS})
    assert got[:2] == ("straggler", "unknown")


def test_a_few_percent_below_a_noted_reference_in_tflops_is_a_jobwide_straggler(
    tmp_path: Path,
) -> None:
    """Megatron's `throughput per GPU (TFLOP/s/GPU): 127.3` against `# reference: the same
    code/config on this partition ran at 133-135 TFLOP/s/GPU last week`."""
    head = [
        "# job still running at collection time\n",
        "# reference: the same code/config on this partition ran at 133-135 TFLOP/s/GPU last week (job 3301877, 12 nodes)\n",
    ]
    lines = [
        f"95: [2024-05-21 {10 + k // 2:02d}:{k % 2 * 30:02d}:18] iteration    {16680 + 20 * k}/   200000 | consumed samples:     70456320 | elapsed time per iteration (ms): 93017.9 | throughput per GPU (TFLOP/s/GPU): 127.{k % 4} | learning rate: 6.000000E-05 |\n"
        for k in range(12)
    ]
    kind, category, culprits, action = verdict(tmp_path, "".join(head + lines))
    assert (kind, category, culprits, action) == ("straggler", "unknown", [], "none")
    same = head[1].replace("133-135", "126-128")
    assert verdict(tmp_path, "".join([head[0], same, *lines]))[0] == "none"


def test_cuda_launch_blocking_in_the_jobs_environment_is_its_own_slowdown(tmp_path: Path) -> None:
    """torchtitan's step line (`tps: 1047`) against an operator's note of the same toml's
    `tps ~3,300`; the job's `env` printout shows CUDA_LAUNCH_BLOCKING=1 (CUDA docs: for
    debugging only, every launch synchronous)."""
    head = [
        "# NOTE (operator): job RUNNING at 12:05; user asked why throughput is ~3x lower than last week\n",
        "# operator: 6633102 (same toml, same data, same image) logged tps ~3,300 / mfu ~17.5% throughout\n",
        "+ env | grep -E '^(CUDA|NCCL)_' | sort\n",
        "CUDA_DEVICE_MAX_CONNECTIONS=1\n",
        "CUDA_LAUNCH_BLOCKING=1\n",
    ]
    steps = [
        f"0: [rank0]:[titan] 2026-03-03 {10 + k // 6:02d}:{k % 6 * 10:02d}:47,367 - root - INFO - step: {100 * k:5d}  loss: 3.{k:04d}  memory: 42.18GiB(44.40%)  tps: 10{40 + k % 9}  tflops: 54.8  mfu: 5.6%\n"
        for k in range(1, 13)
    ]
    got = verdict(tmp_path, "".join(head + steps), SQUEUE)
    assert got == ("straggler", "application", [], "none")
    unset = "".join(h.replace("CUDA_LAUNCH_BLOCKING=1", "CUDA_MODULE_LOADING=LAZY") for h in head)
    assert verdict(tmp_path, unset + "".join(steps), SQUEUE)[:2] == ("straggler", "unknown")


# Rates spelled with the unit before the number, and a smaller run quoted as the baseline:
# DiT/LlamaGen's `(step=0000300) Train Loss: 7.33, Train Steps/Sec: 2.36` (facebookresearch/DiT
# train.py), ms-swift's `'train_speed(iter/s)': 0.1133`, DETR's MetricLogger `time: 1.7311`.
DIT = "".join(
    f"0: [2024-12-29 10:0{k}:43] (step={300 + 100 * k:07d}) Train Loss: 7.33, Train Steps/Sec: 2.35\n"
    for k in range(6)
)
SWIFT = "".join(
    f"2025-05-21T03:4{k}:40.269246Z {{'loss': 0.3798, 'grad_norm': 5.2, 'train_speed(iter/s)': 0.1133, 'global_step/max_steps': '{50 + k}/4491'}}\n"
    for k in range(6)
)
DETR = "".join(
    f"0: Epoch: [0]  [ {200 + 100 * k}/7329]  eta: 3:27:41  lr: 0.000100  loss: 28.7710  time: 1.7311  data: 0.0119  max mem: 4802\n"
    for k in range(6)
)


# Megatron's iteration line; Composer's console logger (`Train throughput/batches_per_sec`);
# gpt-neox's `approx flops per GPU: 48.3TFLOPS`.
MEGATRON = "".join(
    f"0:  iteration      {390 + 10 * k}/   50000 | consumed samples:       199680 | elapsed time per iteration (ms): 9167.6 | learning rate: 2.000000E-04 | lm loss: 2.610000E+00 |\n"
    for k in range(6)
)
COMPOSER = "".join(
    f"0: [batch={100 + k}/20000]:\n0: \t Train throughput/batches_per_sec: 0.0642\n"
    for k in range(6)
)
HVD = "".join(
    f"[1,0]<stdout>:[2026-12-04 09:{40 + k}:02] step {2400 + 400 * k} | img/s 5231 | step 0.587s\n"
    for k in range(6)
)
NEOX = "".join(
    f"0:  samples/sec: 41.230 | iteration {1340 + 10 * k}/  320000 | elapsed time per iteration (ms): 5976.7 | approx flops per GPU: 48.3TFLOPS | lm_loss: 2.730000E+00 |\n"
    for k in range(6)
)


@pytest.mark.parametrize(
    ("note", "job"),
    [
        ("# 1-node run of the same config (job 661204): Train Steps/Sec: 2.94", DIT),
        ("# same config on 1 node (job 301177): train_speed(iter/s) 0.194", SWIFT),
        ("# single-node 8-GPU run (job 30114): time: 0.2441 per iter", DETR),
        (
            "# previous run of the same config (job 801190): elapsed time per iteration (ms): 4480",
            MEGATRON,
        ),
        ("# reference: the same yaml on one node runs at 0.49 batches_per_sec", COMPOSER),
        ("# single-node baseline with same config: ~120 TFLOPs/GPU", NEOX),
        ("# reference: the same script last week ran at 0.29 s/step (10,600 img/s)", HVD),
    ],
)
def test_a_noted_faster_rate_spelled_as_the_trainer_prints_it(
    tmp_path: Path, note: str, job: str
) -> None:
    kind, _, culprits, action = verdict(tmp_path, f"{note}\n# job still running\n{job}")
    assert (kind, culprits, action) == ("straggler", [], "none")


def test_the_same_rate_noted_is_no_slowdown(tmp_path: Path) -> None:
    note = "# 1-node run of the same config (job 661204): Train Steps/Sec: 2.35"
    assert verdict(tmp_path, f"{note}\n# job still running\n{DIT}")[0] == "none"


# fairchem/OCP prints no rate, only its step under a time stamp (`... step: 2.0000e+03`): the
# steps per second between dated progress lines stand against a noted `~4 steps/s`.
FAIRCHEM = "".join(
    f"2022-11-16 10:{30 + k:02d}:{(40 * k) % 60:02d} (INFO): energy_mae: 3.2000e-01, loss: 1.64e+01, lr: 5.00e-04, step: {1.5e3 + 100 * k:.4e}\n"
    for k in range(6)
)


@pytest.mark.parametrize(("noted", "kind"), [("~4 steps/s", "straggler"), ("~1 steps/s", "none")])
def test_a_noted_rate_against_the_steps_the_dated_progress_lines_make(
    tmp_path: Path, noted: str, kind: str
) -> None:
    note = f"# same config on 1 node x 8 GPUs: {noted}\n# job still running at collection time\n"
    assert verdict(tmp_path, note + FAIRCHEM)[0] == kind


@pytest.mark.parametrize(("drop", "kind"), [("18%", "straggler"), ("3%", "none")])
def test_a_note_stating_the_drop_against_the_same_config(
    tmp_path: Path, drop: str, kind: str
) -> None:
    note = (
        f"# job still running; throughput {drop} below the same config last week on sc-b[21-28]\n"
    )
    assert verdict(tmp_path, note + DIT)[0] == kind
