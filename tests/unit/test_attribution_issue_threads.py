"""Classes from real issue-thread logs (blind set s56): one rank's own work outlasting the others'
collective timeout (a dataset preprocessed on rank 0 only, a rank-0-only evaluation logged as
`Rank 0:`), a job autotuning kernels until its time limit, a preempted job pending again, and
the RDMA memory-lock limit of every node.

Real formats: ProcessGroupNCCL's watchdog report, HF datasets' map progress bar, Inductor's
`SingleProcess AUTOTUNE benchmarking takes ...` (torch/_inductor/select_algorithm.py), sacct -D,
scontrol's PreemptTime, UCX's log prefix and memlock message (hiyouga/LlamaFactory#2424,
jpata/particleflow#390, NVlabs/LongLive#75, EveryVoiceTTS/EveryVoice#183, ai4d-iasc/trixie#81)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

WATCHDOGS = "".join(
    f"[E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800422 milliseconds before timing out.\n"
    for r in (2, 1, 3)
) + (
    "[E ProcessGroupNCCL.cpp:495] To avoid data inconsistency, we are taking the entire process down.\n"
    "[2024-02-26 07:32:48,902] [ERROR] [launch.py:321:sigkill_handler] ['/opt/venv/bin/python', '-u', 'src/train_bash.py', '--local_rank=3'] exits with return code = -6\n"
)


def _preprocessing(last_percent: int) -> str:
    return (
        "Converting format of dataset: 100%|##########| 2969526/2969526 [01:51<00:00, 26671.88 examples/s]\n"
        + "".join(
            f"Running tokenizer on dataset:   {p}%|#| {p * 30000}/2969526 [{p * 3:02d}:12<4:44:24, 155.57 examples/s]\n"
            for p in range(1, last_percent + 1)
        )
        + WATCHDOGS
    )


def test_a_dataset_preprocessed_on_rank_0_past_the_others_timeout_is_the_jobs() -> None:
    a = attribute_text(_preprocessing(8), ["gpu-a01"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "preprocessing" in a.summary and first_action(a) == "stop"


def test_timeouts_after_finished_preprocessing_are_not_the_preprocessing() -> None:
    finished = _preprocessing(8).replace(
        "Running tokenizer on dataset:   8%", "Running tokenizer on dataset: 100%"
    )
    assert "preprocessing" not in attribute_text(finished, ["gpu-a01"]).summary


EVALUATING = "".join(
    f"[rank{r}]:[E0122 17:41:55.339732083 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=6411, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800089 milliseconds before timing out.\n"
    for r in (1, 2, 3)
) + (
    "[2025-01-22 17:42:02,511] INFO: Rank 0: run_predictions 31450/60000 events\n"
    "srun: error: workergpu094: task 0: Aborted (core dumped)\n"
)


def test_rank_0_logging_its_own_evaluation_after_the_others_time_out_is_the_jobs() -> None:
    # No node file at all: rank 0 printing its own progress after the others' timeouts says it
    # was alive and busy in the job's code.
    a = attribute_text("[rank0]: epoch 1 done\n" + EVALUATING, ["workergpu094"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "rank 0 went on with its own work" in a.summary


def _autotuning(shapes: int) -> str:
    return (
        "".join(
            f"AUTOTUNE flex_attention(1x24x{32760 + 1560 * i}x128, 1x24x{32760 + 1560 * i}x128)\n"
            f"  triton_flex_attention_{800 + i} 2.8452 ms 100.0% BLOCK_M=128, BLOCK_N=64, num_stages=3, num_warps=4\n"
            f"SingleProcess AUTOTUNE benchmarking takes 42.2412 seconds and 315.0994 seconds precompiling for 40 choices\n"
            for i in range(shapes)
        )
        + "slurmstepd: error: *** JOB 302217 ON a100-g08 CANCELLED AT 2026-07-17T04:01:41 DUE TO TIME LIMIT ***\n"
    )


def test_autotuning_new_shapes_until_the_time_limit_is_the_jobs_compile_mode() -> None:
    a = attribute_text(_autotuning(12), ["a100-g08"])
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert first_action(a) == "stop"


def test_a_few_autotuned_shapes_before_a_time_limit_are_the_scheduler() -> None:
    assert attribute_text(_autotuning(2), ["a100-g08"]).category == Category.SCHEDULER


PREEMPTED = """\
Epoch 191: 100%|##########| 316/316 [02:41<00:00,  1.96it/s, v_num=4, train_loss=0.512]
slurmstepd: error: *** STEP 4714782.0 ON ib12gpu-001 CANCELLED AT 2023-11-29T15:47:21 ***
[rank: 0] Received SIGTERM: 15
"""
PREEMPTED_SCHED = """\
$ scontrol show job -d 4714782
JobId=4714782 JobName=fs2-base
   JobState=PENDING Reason=BeginTime Dependency=(null)
   Requeue=1 Restarts=1 BatchFlag=1 Reboot=0 ExitCode=0:0
   PreemptEligibleTime=2023-11-29T11:28:31 PreemptTime=2023-11-29T15:47:22

$ sacct -j 4714782 --duplicates --format=JobID,JobName,Partition,State,ExitCode,Start,End,NodeList
JobID           JobName  Partition      State ExitCode               Start                 End        NodeList
------------ ---------- ---------- ---------- -------- ------------------- ------------------- ---------------
4714782        fs2-base   gpu_a100  PREEMPTED      0:0 2023-11-29T10:58:31 2023-11-29T15:47:22     ib12gpu-001
4714782.0    everyvoice             CANCELLED     0:15 2023-11-29T10:58:35 2023-11-29T15:47:22     ib12gpu-001
4714782        fs2-base   gpu_a100    PENDING      0:0             Unknown             Unknown   None assigned
"""


def test_a_preempted_job_pending_again_is_not_running_fine() -> None:
    a = attribute_text(PREEMPTED, ["ib12gpu-001"], scheduler=PREEMPTED_SCHED)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)
    assert first_action(a) == "requeue"


def test_memlock_too_low_on_every_node_names_them_all_and_stops() -> None:
    job = "".join(
        f"[16534880{n}1.109170] [cn10{n}:4821{n}:0]        ib_iface.c:968  UCX  ERROR ibv_create_cq(cqe=4096) failed: Cannot allocate memory : Please set max locked memory (ulimit -l) to 'unlimited' (current: 64 kbytes)\n"
        for n in (1, 2, 3, 4)
    ) + "".join(
        f"srun: error: cn10{n}: task {n - 1}: Exited with exit code 1\n" for n in (1, 2, 3, 4)
    )
    nodes = ["cn101", "cn102", "cn103", "cn104"]
    a = attribute_text(job, nodes)
    assert (a.category, sorted(a.culprit_nodes)) == (Category.SYSTEM_SOFTWARE, nodes)
    assert first_action(a) == "stop"
    one = job.splitlines()[0] + "\nsrun: error: cn101: task 0: Exited with exit code 1\n"
    a = attribute_text(one, nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["cn101"])


ROCE_JOB = "".join(
    f"{t}: gpu-r10{t + 1}:40211:40899 [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.20.1.105<51234> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid ::ffff:10.20.1.10{t + 1} remoteGidsfe80::a288:c2ff:fe31:5e81\n"
    for t in (0, 1, 2)
) + (
    "0: gpu-r101:40211:40211 [0] NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.\n"
    "srun: error: gpu-r101: task 0: Exited with exit code 1\n"
)
SHOW_GIDS = """\
$ show_gids mlx5_3
DEV	PORT	INDEX	GID					IPv4  		VER	DEV
---	----	-----	---					------------  	---	---
mlx5_3	1	2	fdc4:21aa:0000:0105:a288:c2ff:fe31:5e81			v1	ens1f1np1
mlx5_3	1	3	{gid3}	{ip3}	v2	ens1f1np1
"""


def test_a_pinned_gid_index_that_is_no_longer_roce_v2_ipv4_on_one_node_is_its_config() -> None:
    bad = SHOW_GIDS.format(gid3="fdc4:21aa:0000:0105:a288:c2ff:fe31:5e81", ip3="")
    good = SHOW_GIDS.format(gid3="0000:0000:0000:0000:0000:ffff:0a14:0166", ip3="10.20.1.102")
    nodes = [f"gpu-r10{i}" for i in range(1, 9)]
    a = attribute_text(ROCE_JOB, nodes, {"node_gpu-r105": bad, "node_gpu-r102": good})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-r105"])
    a = attribute_text(ROCE_JOB, nodes, {"node_gpu-r105": good, "node_gpu-r102": good})
    assert a.category != Category.SYSTEM_SOFTWARE


def test_a_fatal_aer_on_a_port_whose_gpu_cannot_recover_is_the_gpu() -> None:
    job = "".join(
        f"{r}: [rank{r}]:[E120 19:09:49.332 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=8410, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600122 milliseconds before timing out.\n"
        for r in (1, 2, 3)
    )
    dmesg = (
        "[Sat Jan 20 18:59:48 2024] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0\n"
        "[Sat Jan 20 18:59:48 2024] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)\n"
        "[Sat Jan 20 18:59:48 2024] pcieport 0000:00:03.0:    [14] CmpltTO                (First)\n"
        "[Sat Jan 20 18:59:48 2024] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)\n"
        "[Sat Jan 20 18:59:49 2024] pcieport 0000:00:03.0: AER: device recovery failed\n"
    )
    a = attribute_text(job, ["cn-241"], {"dmesg_cn-241": dmesg})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["cn-241"])
    nic = dmesg.replace("nvidia 0000:03:00.0", "snd_hda_intel 0000:03:00.1")
    assert attribute_text(job, ["cn-241"], {"dmesg_cn-241": nic}).category == Category.HARDWARE_HOST


def test_two_of_the_jobs_own_ray_actors_on_one_gpu_is_its_placement() -> None:
    job = (
        "(ActorModelRayActor pid=112311, ip=10.9.3.5) dgx-c05:112311:113002 [0] init.cc:869 NCCL WARN Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 1b000\n"
        "(LLMRayActor pid=112084, ip=10.9.3.5) dgx-c05:112084:113010 [0] init.cc:869 NCCL WARN Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1b000\n"
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/NCCLUtils.hpp:317, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5\n"
    )
    a = attribute_text(job, ["dgx-c05", "dgx-c06"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


SOCKETS_JOB = """\
+ export NCCL_DEBUG=INFO NCCL_IB_DISABLE=0 NCCL_SOCKET_IFNAME=bond0
0: h800-a11:51221:51870 [0] NCCL INFO NET/IB : No device found.
0: h800-a11:51221:51870 [0] NCCL INFO NET/Socket : Using [0]bond0:10.31.0.11<0>
0: h800-a11:51221:51870 [0] NCCL INFO Using network Socket
0: {'loss': 1.912, 'learning_rate': 9.8e-05, 'epoch': 0.12}
0: {'loss': 1.874, 'learning_rate': 9.6e-05, 'epoch': 0.14}
# job still running at collection time
"""
LSPCI = "$ lspci | grep -i mellanox | head -4\n1a:00.0 Infiniband controller: Mellanox Technologies MT2910 Family [ConnectX-7]\n$ ibv_devinfo\nNo IB devices found\n"


def test_sockets_on_nodes_whose_hcas_have_no_rdma_stack_are_the_nodes_software() -> None:
    nodes = ["h800-a11", "h800-a12"]
    a = attribute_text(SOCKETS_JOB, nodes, {"node_h800-a11": LSPCI, "node_h800-a12": LSPCI})
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER,
        Category.SYSTEM_SOFTWARE,
        nodes,
    )
    assert attribute_text(SOCKETS_JOB, nodes).category != Category.SYSTEM_SOFTWARE
