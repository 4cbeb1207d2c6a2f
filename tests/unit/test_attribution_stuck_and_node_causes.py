"""Classes the blind sets 32-34 exposed, each with the real line shapes that carry it.

- PyTorch's OOM accounting (CUDACachingAllocator.cpp since 2.1) counts the failing process's
  whole use, so a third of the GPU held by nobody in the job is another process's (tie-breaker
  4: a leftover allocation is system_software, the node excluded).
- NHC's `check_fs_mount: /x not mounted` (mej/nhc scripts/ww_fs.nhc) on the one node whose
  ranks could not find their files: that node's mount, not the job's path.
- A job Slurm ended NODE_FAIL without saying which node: the one whose kernel panicked.
- A time limit long after the last tqdm bar's own clock (the bar prints its elapsed time).
- A job that printed its error and then sat silent until a cancel: a hang (labels, kind).
- Megatron's straggler report naming a different slowest rank each time, all on one node
  whose own nvidia-smi shows a foreign process: that node; without such a diagnosis, one
  node's ranks being slowest is a pipeline's heavier last stage (the application's).
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category, LogLine
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(
    job: str, nodes: list[str], node_logs: dict[str, str] | None = None, scheduler: str = ""
) -> Attribution:
    logs = {h: _lines(t, f"node_{h}.txt") for h, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job), None, [], nodes, node_logs=logs,
        scheduler_lines=_lines(scheduler, "scheduler.txt") if scheduler else None,
    )  # fmt: skip


# ---------------------------------------------------------------- OOM: whose memory
OOM = (
    "2: [rank19]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 3 "
    "has a total capacity of 79.15 GiB of which {free} is free. Including non-PyTorch memory, this "
    "process has {own} memory in use. Of the allocated memory 39.20 GiB is allocated by PyTorch, "
    "and 512.00 MiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is "
    "large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.\n"
    "srun: error: dgx-3: task 2: Exited with exit code 1\n"
)
SMI = (
    "$ nvidia-smi --query-compute-apps=gpu_bus_id,pid,process_name,used_memory --format=csv\n"
    "00000000:4E:00.0, 72210, python, 41790 MiB\n"
    "00000000:4E:00.0, 190533, python, 37968 MiB\n"
)


def test_an_oom_with_a_third_of_the_gpu_held_by_another_process_is_the_nodes() -> None:
    # 79.15 total - 0.41 free - 40.81 this process = 37.9 GiB (48 %) held by someone else.
    a = _run(OOM.format(free="412.69 MiB", own="40.81 GiB"), ["dgx-1", "dgx-2", "dgx-3"],
             {"dgx-3": SMI})  # fmt: skip
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["dgx-3"]
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_an_oom_where_the_process_holds_nearly_all_of_the_gpu_is_the_jobs() -> None:
    # 79.15 - 0.41 - 76.9 = 1.8 GiB beside it: the CUDA context and libraries, not a leftover.
    a = _run(OOM.format(free="412.69 MiB", own="76.90 GiB"), ["dgx-1", "dgx-2", "dgx-3"])
    assert a.category == Category.APPLICATION
    assert default_advice(a).kind == AdviceKind.STOP


# ---------------------------------------------------------------- NHC: a mount missing
MISSING = (
    "[gpfs-cn12] 2025-11-18 07:00:04 starting 2-node job\n"
    "[gpfs-cn14] Traceback (most recent call last):\n"
    '[gpfs-cn14]   File "/gpfs/projects/geo/src/train.py", line 58, in build_dataset\n'
    "[gpfs-cn14] FileNotFoundError: [Errno 2] No such file or directory: '/gpfs/projects/geo/data/shards/shard-00017.tar'\n"
    "srun: error: gpfs-cn14: task 1: Exited with exit code 1\n"
)


def test_a_file_missing_on_the_node_whose_health_check_finds_its_mount_missing() -> None:
    nhc = "ERROR:  nhc:  Health check failed:  check_fs_mount:  /gpfs/projects not mounted\n"
    a = _run(MISSING, ["gpfs-cn12", "gpfs-cn14"],
             {"gpfs-cn14": nhc, "gpfs-cn12": "(nhc: all checks passed)\n"})  # fmt: skip
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["gpfs-cn14"]
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_same_missing_file_with_healthy_mounts_is_the_jobs_path() -> None:
    a = _run(MISSING, ["gpfs-cn12", "gpfs-cn14"], {"gpfs-cn14": "(nhc: all checks passed)\n"})
    assert a.category == Category.APPLICATION


# ---------------------------------------------------------------- NODE_FAIL: which node
NODE_FAIL_JOB = (
    "0: [rank0]:[E321 02:07:08.173731275 ProcessGroupNCCL.cpp:607] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000)\n"
    "srun: error: node-12: task 0: Exited with exit code 1\n"
    "srun: error: node-13: task 1: Killed\n"
)
NODE_FAIL_SCHED = (
    "JobId=91822 JobName=sft\n   JobState=NODE_FAIL Reason=None\n"
    "   StartTime=2025-03-20T21:44:02 EndTime=2025-03-21T02:27:30\n   NodeList=node-[12-13]\n"
)


def test_node_fail_without_a_node_names_the_one_whose_kernel_panicked() -> None:
    panic = (
        "[Fri Mar 21 01:56:58 2025] mce: [Hardware Error]: Machine check: Processor context corrupt\n"
        "[Fri Mar 21 01:56:58 2025] Kernel panic - not syncing: Fatal machine check\n"
    )
    a = _run(NODE_FAIL_JOB, ["node-12", "node-13"],
             {"node-13": panic, "node-12": "(no kernel messages in the job window)\n"},
             NODE_FAIL_SCHED)  # fmt: skip
    assert a.category == Category.HARDWARE_HOST
    assert a.culprit_nodes == ["node-13"]


def test_node_fail_with_clean_kernels_names_no_node() -> None:
    a = _run(NODE_FAIL_JOB, ["node-12", "node-13"], {"node-13": "(clean)\n"}, NODE_FAIL_SCHED)
    assert a.category == Category.SCHEDULER
    assert a.culprit_nodes == []


# ---------------------------------------------------------------- time limit: the bar's clock
TIMEOUT_SCHED = (
    "JobId=771245 JobName=sft\n   JobState=TIMEOUT Reason=TimeLimit\n"
    "   RunTime=04:00:00 TimeLimit=04:00:00\n"
    "   StartTime=2024-11-03T08:00:11 EndTime=2024-11-03T12:00:11\n   NodeList=node-[12-13]\n"
)
TIMEOUT_KILL = (
    "slurmstepd: error: *** JOB 771245 ON node-12 CANCELLED AT 2024-11-03T12:00:11 DUE TO TIME LIMIT ***\n"
    "srun: error: node-13: task 1: Terminated\nsrun: error: node-12: task 0: Terminated\n"
)


def _bars(last_elapsed: str) -> str:
    return (
        "0: {'loss': 1.8032, 'grad_norm': 0.7770, 'learning_rate': 1.6918e-05, 'epoch': 0.31}\n"
        "0:  15%|███                 | 1486/9408 [2:51:58<15:25:38, 7.01s/it]\n"
        f"0:  15%|███                 | 1487/9408 [{last_elapsed}<15:25:31, 7.01s/it]\n"
    )


def test_a_time_limit_an_hour_after_the_bars_clock_stopped_is_a_hang() -> None:
    a = _run(_bars("2:52:05") + TIMEOUT_KILL, ["node-12", "node-13"], scheduler=TIMEOUT_SCHED)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)


def test_a_time_limit_while_the_bar_still_counts_is_the_schedulers() -> None:
    a = _run(_bars("3:49:55") + TIMEOUT_KILL, ["node-12", "node-13"], scheduler=TIMEOUT_SCHED)
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.SCHEDULER)


# ---------------------------------------------------------------- an error, then silence
MISMATCH = (
    "0: 2026-02-02 10:05:00 step 100 loss 2.80\n"
    "0: 2026-02-02 10:10:00 step 200 loss 2.60\n"
    "0: 2026-02-02 10:12:30 step 250: entering eval\n"
    "2: [rank9]: RuntimeError: Detected mismatch between collectives on ranks. Rank 9 is running collective: CollectiveFingerPrint(SequenceNumber=2711, OpType=ALLREDUCE, TensorShape=[1], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype=float, device=cuda)), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=2711, OpType=BARRIER).\n"
    "slurmstepd: error: *** JOB 611290 ON a100-5 CANCELLED AT {kill} ***\n"
)


def test_an_error_followed_by_silence_until_a_cancel_is_a_hang() -> None:
    a = _run(MISMATCH.format(kill="2026-02-02T11:40:03"), ["a100-5", "a100-6"])
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)


def test_an_error_moments_before_the_cancel_stays_a_crash() -> None:
    a = _run(MISMATCH.format(kill="2026-02-02T10:13:03"), ["a100-5", "a100-6"])
    assert (a.kind, a.category) == (AnomalyKind.CRASH, Category.APPLICATION)


# ---------------------------------------------------------------- rotating slowest rank
def _megatron_reports(slowest: list[int]) -> str:
    out = ["# 8 GPUs per node; --log-straggler; job still running when collected"]
    for i, rank in enumerate(slowest):
        t = f"2025-12-01 08:{5 + 2 * i:02d}:41"
        out.append(
            f"0: [{t}] iteration {20 * (i + 1):8d}/   50000 | consumed samples: {15360 * (i + 1)} | "
            "elapsed time per iteration (ms): 5090.8 | learning rate: 1.000E-04 | lm loss: 2.1E+00 |"
        )
        out.append(
            f"0: INFO:megatron.core.utils:[{t}] | MnRtt/Rnk: 3391.24ms/{(rank + 11) % 24} | "
            f"MxRtt/Rnk: 5080.78ms/{rank} | MnPwr/Rnk: 287000W/47 | MxPwr/Rnk: 690112W/0 | "
            "MnTmp/Rnk: 50C/5 | MxTmp/Rnk: 66C/15 |"
        )
    return "\n".join(out) + "\n"


NODES6 = [f"gpu-n{i}" for i in range(1, 7)]
RUNNING = "JobId=5 JobName=gpt\n   JobState=RUNNING Reason=None\n   NodeList=gpu-n[1-6]\n"
BURN = (
    "|    0   N/A  N/A    118220      C   python                                      61234MiB |\n"
    "|    0   N/A  N/A     40021      C   /opt/burnin/gpu_burn                         9120MiB |\n"
)
ROTATING_ON_N4 = [28, 25, 30, 26, 24, 30, 29, 27, 31, 24, 26, 28]


def test_a_rotating_slowest_rank_on_one_node_with_a_foreign_process_is_that_node() -> None:
    a = _run(_megatron_reports(ROTATING_ON_N4), NODES6, {"gpu-n4": "$ nvidia-smi\n" + BURN},
             RUNNING)  # fmt: skip
    assert a.kind == AnomalyKind.STRAGGLER
    assert a.culprit_nodes == ["gpu-n4"]


def test_a_rotating_slowest_rank_on_one_node_without_a_diagnosis_names_no_node() -> None:
    # One node's ranks, none of them for long: a pipeline's last stage looks the same.
    a = _run(_megatron_reports(ROTATING_ON_N4), NODES6, None, RUNNING)
    assert a.kind == AnomalyKind.STRAGGLER
    assert a.culprit_nodes == []


def test_a_slowest_rank_rotating_across_nodes_names_no_node() -> None:
    rotating = [3, 28, 41, 12, 19, 44, 7, 33, 22, 15, 38, 1]
    a = _run(_megatron_reports(rotating), NODES6, {"gpu-n4": "$ nvidia-smi\n" + BURN}, RUNNING)
    assert a.culprit_nodes == []


# ---------------------------------------------------------------- a lease moved an address
def test_peers_failing_towards_an_address_dhcp_moved_to_another_subnet_name_its_node() -> None:
    # NetworkManager's newer lease line (`state changed new lease, address=`), a new /24.
    job = (
        "1: kp-1:3479:3901 [4] transport/net_ib.cc:73 NCCL WARN NET/IB : Got async event : GID table change\n"
        "0: kp-0:3468:3905 [4] ib_plugin.c:1615 NCCL WARN NET/IB : Got completion from peer 10.216.210.237<54862> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid fd00:1148:9000:5000:4:200:3:ff22 remoteGids\n"
        "0: [rank4]:[E114 05:41:02.118822301 ProcessGroupNCCL.cpp:1595] [PG 0 Rank 4] Process group watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error, NCCL version 2.20.5\n"
        "srun: error: kp-0: task 0: Exited with exit code 1\nsrun: error: kp-1: task 1: Exited with exit code 1\n"
    )
    journal = (
        "Jan 14 05:40:51 kp-1 NetworkManager[1811]: <info>  [1736833251.0221] dhcp4 (ens1f0np0): state changed new lease, address=10.216.211.19\n"
        "Jan 14 05:40:51 kp-1 NetworkManager[1811]: <info>  [1736833251.0235] device (ens1f0np0): DHCPv4: address 10.216.210.237 expired, replaced by 10.216.211.19\n"
    )
    a = _run(job, ["kp-0", "kp-1"], {"kp-1": journal, "kp-0": "(no kernel messages)\n"})
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["kp-1"]


def test_every_peer_failing_towards_the_moved_address_names_the_moved_node_not_the_peers() -> None:
    # Three peers report completion errors towards the address DHCP moved: they are its
    # victims, the node whose lease changed is the one to leave out.
    nodes = ["rc-01", "rc-02", "rc-03", "rc-04"]
    job = "".join(
        f"{t}: [rank{t * 8}]:{n}:2048{t}:2056{t} [0] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 192.168.60.104<56643> with status=12 opcode=32616 len=0 vendor err 129 (Recv) localGid ::ffff:192.168.60.10{t + 1} remoteGids::ffff:192.168.60.104\n"
        for t, n in enumerate(nodes[:3])
    ) + "".join(
        f"srun: error: {n}: task {t}: Exited with exit code 1\n" for t, n in enumerate(nodes)
    )
    journal = "Nov 19 03:59:58 rc-04 NetworkManager[1650]: <info>  [1731988798.1127] dhcp4 (ens8f0np0): state changed new lease, address=192.168.61.141\n"
    a = _run(job, nodes, {"rc-04": journal})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["rc-04"])


# ---------------------------------------------------------------- what a PCIe device is
def test_a_fatal_aer_received_from_an_hca_is_the_network() -> None:
    # Newer kernels: `AER: Uncorrected (Fatal) error message received from BDF`.
    dmesg = (
        "[Tue Jan 21 16:15:48 2025] pcieport 0000:40:01.1: AER: Uncorrected (Fatal) error message received from 0000:41:00.0\n"
        "[Tue Jan 21 16:15:48 2025] mlx5_core 0000:41:00.0:   device [15b3:1021] error status/mask=00040000/00000000\n"
        "[Tue Jan 21 16:15:50 2025] mlx5_core 0000:41:00.0 mlx5_1: Port: 1 Link DOWN\n"
    )
    job = (
        "0: ib-h03:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.44.1.4<3312> with error 12, opcode 0, len 0, vendor err 129 (Send)\n"
        "srun: error: ib-h03: task 0: Exited with exit code 1\n"
    )
    a = _run(
        job,
        ["ib-h03", "ib-h04"],
        {"ib-h04": dmesg, "ib-h03": "(no kernel messages in the job window)\n"},
    )
    assert a.category == Category.HARDWARE_NETWORK
    assert a.culprit_nodes == ["ib-h04"]


# ---------------------------------------------------------------- an abridged output
def test_ranks_left_out_of_an_abridged_output_are_not_silent() -> None:
    timeout = "{t}: [rank{r}]:[E210 05:05:42.31000 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=188201, OpType=REDUCE_SCATTER, NumelIn=1048576, NumelOut=1048576, Timeout(ms)=1800000) ran for 1800004 milliseconds before timing out.\n"
    shown = "".join(timeout.format(t=t, r=r) for t, r in ((0, 0), (2, 37), (5, 88)))
    setup = "".join(f"{t}: [rank{r}]: starting\n" for t, r in ((0, 0), (1, 20), (2, 37), (5, 88)))
    nodes = [f"gnode{i}" for i in range(10, 16)]
    bare = _run(setup + shown, nodes)
    noted = _run(
        "# every task reported the same watchdog; 250 copies omitted\n" + setup + shown, nodes
    )
    assert bare.culprit_nodes != []  # (the control: the rank that did not report is suspect)
    assert noted.culprit_nodes == []


# ---------------------------------------------------------------- a quiet kernel, other files
def test_a_node_whose_kernel_log_is_clean_is_not_named_for_a_lone_cuda_error() -> None:
    job = (
        "3: [rank29]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21\n"
        "3: ncclUnhandledCudaError: Call to CUDA function failed.\n3: Last error:\n3: Cuda failure 999 'unknown error'\n"
        "srun: error: node04: task 3: Exited with exit code 1\n"
    )
    logs = {
        "node04": [
            LogLine(
                source="dmesg_node04.txt", line_no=1, text="(no kernel messages in the job window)"
            ),
            LogLine(
                source="node_node04.txt", line_no=1, text="# dcgmi diag -r 2 (node04, after job)"
            ),
            LogLine(
                source="node_node04.txt", line_no=2, text="| Memory                    | Pass |"
            ),
        ]
    }
    a = attribute(
        Registry.default(), None, _lines(job), None, [], ["node01", "node04"], node_logs=logs
    )
    assert a.category == Category.UNKNOWN
    assert a.culprit_nodes == []


# ---------------------------------------------------------------- a container image path
def test_an_image_path_missing_on_every_node_is_the_jobs() -> None:
    line = "{t}: FATAL:   could not open image /scratch/q/imgs/train_v3.sif: failed to retrieve path for /scratch/q/imgs/train_v3.sif: lstat /scratch/q/imgs/train_v3.sif: no such file or directory\n"
    job = (
        line.format(t=0)
        + line.format(t=1)
        + (
            "srun: error: osc-a101: task 0: Exited with exit code 255\n"
            "srun: error: osc-a102: task 1: Exited with exit code 255\n"
        )
    )
    a = _run(job, ["osc-a101", "osc-a102"])
    assert a.category == Category.APPLICATION
    assert default_advice(a).kind == AdviceKind.STOP


# ---------------------------------------------------------------- pairwise figures labelled
def test_pairwise_results_with_a_labelled_figure_single_out_the_slow_node() -> None:
    job = (
        "0: [2026-07-13 18:13:33,449] [INFO] [logging.py:96:log_dist] [Rank 0] step=130, skipped=0, lr=[0.00029]\n"
        "0: [2026-07-13 18:14:24,507] [INFO] [logging.py:96:log_dist] [Rank 0] step=140, skipped=0, lr=[0.00029]\n"
        "# operator: job running; nccl-tests all_reduce_perf between pairs:\n"
        "# dgx-b-01<->dgx-b-02 busbw 181.2 GB/s ; dgx-b-01<->dgx-b-04 busbw 180.7 GB/s ; "
        "dgx-b-03<->dgx-b-01 busbw 48.9 GB/s ; dgx-b-03<->dgx-b-04 busbw 49.3 GB/s\n"
    )
    sched = "JobId=9 JobName=ds\n   JobState=RUNNING Reason=None\n   NodeList=dgx-b-[01-04]\n"
    a = _run(job, [f"dgx-b-0{i}" for i in range(1, 5)], None, sched)
    assert a.kind == AnomalyKind.STRAGGLER
    assert a.culprit_nodes == ["dgx-b-03"]


def test_sacct_elapsed_is_the_run_time_the_bars_clock_is_read_against() -> None:
    sacct = (
        "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n"
        "771245|sft|gpu|ml|64|TIMEOUT|0:0|2024-11-03T08:00:11|2024-11-03T12:00:11|04:00:00|2|node-[12-13]\n"
    )
    a = _run(_bars("2:52:05") + TIMEOUT_KILL, ["node-12", "node-13"], scheduler=sacct)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)


# ---------------------------------------------------------------- preempted, requeued, ran again
PREEMPTED_THEN = (
    "0: [rank0]:[titan] 2025-09-14 19:01:10,000 - root - INFO - step: 3300  loss:  3.9782\n"
    "slurmstepd: error: *** JOB 3390021 ON gpu101 CANCELLED AT 2025-09-14T19:02:10 DUE TO PREEMPTION ***\n"
    "srun: error: gpu101: task 0: Terminated\n"
    "pyxis: importing docker image: nvcr.io#nvidia/pytorch:25.08-py3\n"
    "slurmstepd: error: pyxis: child 91003 failed with error code: 1\n"
    "slurmstepd: error: pyxis: failed to import docker image\n"
    "slurmstepd: error: pyxis:     [ERROR] URL https://nvcr.io/proxy_auth?scope=repository:nvidia/pytorch:pull returned error code: 503 Service Unavailable\n"
    "slurmstepd: error: pyxis: couldn't start container\n"
    "srun: error: gpu101: task 0: Exited with exit code 1\n"
)


def _sacct_state(state: str) -> str:
    return (
        "JobID|JobName|Partition|Account|AllocCPUS|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n"
        f"3390021|llama3|gpu|ml|96|{state}|1:0|2025-09-14T19:05:31|2025-09-14T19:05:49|00:00:18|1|gpu101\n"
    )


def test_a_run_after_a_preemption_in_the_same_output_is_the_attempt_slurm_ended() -> None:
    a = _run(PREEMPTED_THEN, ["gpu101"], scheduler=_sacct_state("FAILED"))
    assert a.category == Category.SYSTEM_SOFTWARE  # the registry's 503, not the preemption
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_job_slurm_says_was_preempted_is_the_preemption() -> None:
    a = _run(PREEMPTED_THEN.split("pyxis: importing")[0], ["gpu101"],
             scheduler=_sacct_state("PREEMPTED"))  # fmt: skip
    assert a.category == Category.SCHEDULER


# ---------------------------------------------------------------- one agent never came up
def test_agents_rendezvousing_until_the_time_limit_name_the_node_whose_agent_never_spoke() -> None:
    # torch/distributed/elastic/agent/server/api.py `_rendezvous`: `[default] Rendezvous'ing
    # worker group`; task 2's agent printed nothing; sacct gives the only clock (Elapsed).
    job = "".join(
        f"{t}: I0302 21:15:1{t}.900200 140211 torch/distributed/elastic/agent/server/api.py:677] [default] Rendezvous'ing worker group\n"
        for t in (0, 1, 3)
    ) + (
        "slurmstepd: error: *** JOB 23340 ON sdf-gpu03 CANCELLED AT 2025-03-02T23:15:02 DUE TO TIME LIMIT ***\n"
        "srun: error: sdf-gpu05: task 2: Terminated\n"
    )
    sacct = (
        "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n"
        "23340|mae|ampere|okim|TIMEOUT|0:0|2025-03-02T21:15:02|2025-03-02T23:15:02|02:00:00|4|sdf-gpu[03-06]\n"
    )
    a = _run(job, [f"sdf-gpu0{i}" for i in range(3, 7)], scheduler=sacct)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.UNKNOWN)
    assert a.culprit_nodes == ["sdf-gpu05"]


def test_a_task_that_spoke_in_an_earlier_step_but_not_the_last_is_the_silent_one() -> None:
    # The script's first step (staging data, `srun -l bash stage.sh`) labels its tasks as the
    # training step does: only the last step's lines say whose agent never started.
    staging = "+ srun -l --ntasks-per-node=1 bash stage_to_nvme.sh /lustre/c4 /nvme/c4\n" + "".join(
        f"{t}: staged 1024 shards to /nvme/c4\n" for t in range(4)
    )
    training = (
        "+ srun -l --ntasks-per-node=1 torchrun --nnodes=4 --rdzv-endpoint=sdf-gpu03:29400 train.py\n"
        + "".join(
            f"{t}: I0302 21:15:1{t}.900200 140211 torch/distributed/elastic/agent/server/api.py:677] [default] Rendezvous'ing worker group\n"
            for t in (0, 1, 3)
        )
    )
    job = (
        staging
        + training
        + (
            "slurmstepd: error: *** JOB 23340 ON sdf-gpu03 CANCELLED AT 2025-03-02T23:15:02 DUE TO TIME LIMIT ***\n"
        )
    )
    sacct = (
        "JobID|JobName|Partition|User|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n"
        "23340|mae|ampere|okim|TIMEOUT|0:0|2025-03-02T21:15:02|2025-03-02T23:15:02|02:00:00|4|sdf-gpu[03-06]\n"
    )
    a = _run(job, [f"sdf-gpu0{i}" for i in range(3, 7)], scheduler=sacct)
    assert a.culprit_nodes == ["sdf-gpu05"]


# ---------------------------------------------------------------- one node without the plugin
def _plugin_job(third: str) -> str:
    return (
        "0: hgx-04:589474:589541 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)\n"
        "0: hgx-04:589474:589541 [0] NCCL INFO P2P plugin IBext_v8\n"
        "1: hgx-05:411020:411088 [0] NCCL INFO NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)\n"
        f"2: hgx-11:18226:18274 [5] NCCL INFO {third}\n"
        "0: #       size         count      type   redop    root     time   algbw   busbw #wrong\n"
        "slurmstepd: error: *** JOB 1634 ON hgx-04 CANCELLED AT 2025-03-09T06:00:03 DUE TO TIME LIMIT ***\n"
    )


PLUGIN_SACCT = (
    "JobID|JobName|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n"
    "1634|nccl-tests|TIMEOUT|0:0|2025-03-09T04:00:01|2025-03-09T06:00:03|02:00:02|3|hgx-[04-05],hgx-11\n"
)


def test_the_one_node_on_nccls_internal_transport_is_named() -> None:
    a = _run(_plugin_job("NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."),
             ["hgx-04", "hgx-05", "hgx-11"], scheduler=PLUGIN_SACCT)  # fmt: skip
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.SYSTEM_SOFTWARE)
    assert a.culprit_nodes == ["hgx-11"]


def test_every_node_on_the_same_plugin_names_none() -> None:
    a = _run(_plugin_job("NET/Plugin: Loaded net plugin NCCL RDMA Plugin v8 (v8)"),
             ["hgx-04", "hgx-05", "hgx-11"], scheduler=PLUGIN_SACCT)  # fmt: skip
    assert a.culprit_nodes == []


# ---------------------------------------------------------------- Lightning's older wording
def test_lightning_members_of_a_world_never_filled_under_the_older_wording() -> None:
    # PyTorch Lightning before 1.6: `initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8`.
    job = (
        "#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=1\n"
        "srun python train.py --num_nodes 2 --devices 4\n"
        + "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8\n" for r in range(4))
        + "slurmstepd: error: *** JOB 42859712 ON m9g-1-3 CANCELLED AT 2025-08-03T16:25:19 DUE TO TIME LIMIT ***\n"
    )
    sched = (
        "JobId=42859712 JobName=job.sh\n   JobState=TIMEOUT Reason=TimeLimit\n   RunTime=04:00:02\n"
        "   StartTime=2025-08-03T12:25:17 EndTime=2025-08-03T16:25:19\n"
        "   NodeList=m9g-1-[3-4]\n   NumNodes=2 NumCPUs=192 NumTasks=2\n"
    )
    a = _run(job, ["m9g-1-3", "m9g-1-4"], scheduler=sched)
    assert (a.kind, a.category) == (AnomalyKind.HANG, Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


# ---------------------------------------------------------------- an array task by its node
XID_48 = "[Sun Oct 20 06:44:02 2024] NVRM: Xid (PCI:0000:41:00): 48, pid=8812, name=python, An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 3, subpartition 0.\n"


def _array_sacct(*rows: tuple[int, str, str, str]) -> str:
    """sacct -P rows of array 810200's tasks: (task, state, exit code, node)."""
    return "JobID|JobName|State|ExitCode|Start|End|Elapsed|NNodes|NodeList\n" + "".join(
        f"810200_{t}|sweep|{state}|{code}|2024-10-20T06:00:00|2024-10-20T07:50:00|01:50:00|1|{node}\n"
        for t, state, code, node in rows
    )


def test_an_array_tasks_output_is_matched_to_its_row_by_the_node_slurm_names() -> None:
    job = (
        "[sweep] 06:43:00 step 860 loss 1.570\n"
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
        "srun: error: gpu-c12: task 0: Exited with exit code 1\n"
    )
    sacct = _array_sacct(
        (0, "COMPLETED", "0:0", "gpu-c09"), (1, "COMPLETED", "0:0", "gpu-c10"),
        (4, "FAILED", "1:0", "gpu-c12"), (5, "COMPLETED", "0:0", "gpu-c09"),
    )  # fmt: skip
    a = _run(job, [], {"gpu-c12": XID_48}, sacct)
    assert a.category == Category.HARDWARE_GPU
    assert a.culprit_nodes == ["gpu-c12"]


def test_an_array_tasks_output_stating_its_task_as_a_and_a_is_matched_to_its_row() -> None:
    # No srun line names a node (torchrun --standalone): the job's own banner names its task
    # the way sbatch's `%A_%a` filename pattern does.
    job = (
        "array task 810200_4 (SLURM_JOB_ID=810206) lr=2e-5 on gpu-c12\n"
        "[sweep] 06:43:00 step 860 loss 1.570\n"
        "RuntimeError: CUDA error: uncorrectable ECC error encountered\n"
    )
    sacct = _array_sacct((0, "COMPLETED", "0:0", "gpu-c09"), (4, "FAILED", "1:0", "gpu-c12"))
    a = _run(job, [], {"gpu-c12": XID_48}, sacct)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu-c12"])


# ---------------------------------------------------------------- a node failure, requeued
def test_a_run_after_a_node_failure_kill_that_still_trains_is_healthy() -> None:
    job = (
        "[2024-07-09 02:10:10] step 13950 loss 1.1000\n"
        "slurmstepd: error: *** JOB 2240098 ON gpu21 CANCELLED AT 2024-07-09T02:14:41 DUE TO NODE FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***\n"
        "[2024-07-09 02:31:50] resume from /ckpt/llava/step_14000\n"
        + "".join(
            f"[2024-07-09 07:{m:02d}:10] step {21000 + m * 25} loss 1.0793\n"
            for m in range(0, 40, 2)
        )
    )
    sched = (
        "JobId=2240098 JobName=llava-ft\n   JobState=RUNNING Reason=None\n   Restarts=1\n"
        "   RunTime=05:01:00\n   StartTime=2024-07-09T02:31:10\n   NodeList=gpu[21-23,25-29]\n"
        "$ date\n2024-07-09T07:40:00\n"
    )
    a = _run(job, [f"gpu{i}" for i in (21, 22, 23, 25, 26, 27, 28, 29)], scheduler=sched)
    assert a.kind == "none"


# ---------------------------------------------------------------- a per-epoch bar's clock
def test_lightnings_per_epoch_bar_clock_is_not_the_runs() -> None:
    bars = "".join(
        f"Epoch {e}: 100%|██████████| 1563/1563 [19:38<00:00,  1.33it/s, v_num=0, train_loss=1.379]\n"
        for e in (76, 77, 78)
    )
    sched = "JobId=1447702 JobName=byol\n   JobState=RUNNING Reason=None\n   RunTime=02:02:00\n   NodeList=gpu[101-102]\n"
    a = _run("# operator note: job still running at the time of collection\n" + bars,
             ["gpu101", "gpu102"], scheduler=sched)  # fmt: skip
    assert a.kind == "none"


# ---------------------------------------------------------------- two ranks on one GPU
def _duplicate(nodes_saying: list[str]) -> str:
    out = []
    for i, node in enumerate(nodes_saying):
        r = 8 * i
        out.append(
            f"{r}: {node}:61224:61301 [0] init.cc:1062 NCCL WARN Duplicate GPU detected : rank {r} and rank {r + 1} both on CUDA device 41000"
        )
        out.append(
            f"{r}: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.21.5"
        )
        out.append(f"srun: error: {node}: tasks {r}-{r + 7}: Exited with exit code 1")
    return "\n".join(out) + "\n"


def test_two_ranks_on_one_gpu_on_one_node_only_is_that_nodes_assignment() -> None:
    a = _run(_duplicate(["gpu-d03"]), ["gpu-d01", "gpu-d02", "gpu-d03", "gpu-d04"])
    assert a.category == Category.SYSTEM_SOFTWARE
    assert a.culprit_nodes == ["gpu-d03"]


def test_two_ranks_on_one_gpu_on_every_node_is_the_jobs_mapping() -> None:
    a = _run(_duplicate(["gpu-d01", "gpu-d02"]), ["gpu-d01", "gpu-d02"])
    assert a.category == Category.APPLICATION
    assert default_advice(a).kind == AdviceKind.STOP
