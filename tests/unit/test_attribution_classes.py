"""Classes of failure the independent corpora showed: each rule with a real message format."""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu01", "gpu02"]


def _run(job: str, nodes: list[str] | None = None) -> Attribution:
    return attribute(Registry.default(), None, _lines(job), None, [], nodes or NODES)


# Megatron's dataset builder (megatron/core/datasets/indexed_dataset.py) opens the .idx file
# on rank 0 first; CPython's FileNotFoundError message.
MISSING_IDX = (
    "0: [rank0]: FileNotFoundError: [Errno 2] No such file or directory: "
    "'/lustre/data/pile/pile_text_documnet.idx'\n"
    "srun: error: gpu01: task 0: Exited with exit code 1\n"
)


def test_a_file_only_rank_0_reads_missing_is_the_jobs_configuration() -> None:
    a = _run(MISSING_IDX)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_file_missing_for_every_rank_of_one_node_is_not_stopped() -> None:
    # A mount missing on one node fails every rank there: retry (elsewhere), do not stop.
    job = "".join(
        f"1: [rank{r}]: FileNotFoundError: [Errno 2] No such file or directory: "
        f"'/lustre/data/shard-{r}.tar'\n"
        for r in (8, 9, 10, 11)
    )
    a = _run(job + "srun: error: gpu02: task 1: Exited with exit code 1\n")
    assert default_advice(a).kind != AdviceKind.STOP


def test_a_node_fault_that_hung_the_job_until_its_time_limit_excludes_the_node() -> None:
    # Progress, then silence; the kernel of gpu02 logged Xid 79 (NVIDIA Xid catalogue) and
    # Slurm's time limit ended the job much later (slurmstepd's kill line).
    job = (
        "".join(
            f"0: [2025-03-01 10:{m:02d}:00] iteration {m * 10} | elapsed time per iteration (ms): "
            f"6000.0\n"
            for m in range(10)
        )
        + "slurmstepd: error: *** JOB 4242 ON gpu01 CANCELLED AT 2025-03-01T14:00:00 DUE TO "
        "TIME LIMIT ***\n"
    )
    dmesg = {
        "gpu02": _lines(
            "[Sat Mar  1 10:09:30 2025] NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has "
            "fallen off the bus.",
            "dmesg_gpu02.txt",
        )
    }
    a = attribute(Registry.default(), None, _lines(job), None, [], NODES, node_logs=dmesg)
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu02"])
    # (The attempt made progress: a time limit alone would be a free requeue.)
    assert default_advice(a, max_iteration=90).kind == AdviceKind.REQUEUE_EXCLUDING


def test_the_node_whose_launcher_never_started_is_named_while_the_others_wait() -> None:
    # torchrun's agents (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py) on tasks
    # 0-2 join and time out; task 3 never prints a line; srun reports it killed.
    nodes = ["gx-d01", "gx-d02", "gx-d03", "gx-d04"]
    job = "".join(
        f"{t}: I1208 12:00:09.120000 8811 torch/distributed/elastic/rendezvous/"
        f"dynamic_rendezvous.py:1093] The node '{nodes[t]}_8811_0' attempts to join the next "
        f"round of the rendezvous '1187730'.\n"
        for t in range(3)
    )
    job += "".join(
        f"{t}: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n" for t in range(3)
    )
    job += "".join(
        f"srun: error: {nodes[t]}: task {t}: Exited with exit code 1\n" for t in range(3)
    )
    job += "srun: error: gx-d04: task 3: Killed\n"
    a = _run(job, nodes)
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.UNKNOWN, ["gx-d04"])


def test_a_rendezvous_timeout_where_every_node_spoke_names_no_one() -> None:
    nodes = ["gx-d01", "gx-d02"]
    job = "".join(
        f"{t}: torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError\n" for t in range(2)
    )
    assert _run(job, nodes).culprit_nodes == []


XID13 = (
    "[{when}] NVRM: Xid (PCI:0000:{bus}:00): 13, pid={pid}, name=python, Graphics SM Warp "
    "Exception on (GPC 5, TPC 3, SM 1): Illegal Instruction Encoding"
)
ILLEGAL = (
    "1: [rank9]: RuntimeError: CUDA error: an illegal instruction was encountered\n"
    "srun: error: gpu02: task 1: Exited with exit code 1\n"
)


def _xid_run(kernel: dict[str, str]) -> Attribution:
    logs = {h: _lines(t, f"dmesg_{h}.txt") for h, t in kernel.items()}
    return attribute(Registry.default(), None, _lines(ILLEGAL), None, [], NODES, node_logs=logs)


def test_xid_13_on_the_same_gpu_in_separate_failures_is_the_gpu() -> None:
    # NVSentinel's health-events analyzer: the same Xid 13 again on one GPU is hardware.
    dmesg = "\n".join([
        XID13.format(when="Mon Dec 22 18:40:12 2025", bus="9d", pid=41220),
        XID13.format(when="Wed Dec 24 07:58:43 2025", bus="9d", pid=60171),
    ])  # fmt: skip
    a = _xid_run({"gpu02": dmesg})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["gpu02"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_xid_13_once_or_on_different_gpus_is_not_blamed_on_a_gpu() -> None:
    once = _xid_run({"gpu02": XID13.format(when="Wed Dec 24 07:58:43 2025", bus="9d", pid=1)})
    assert once.category != Category.HARDWARE_GPU
    spread = _xid_run({
        "gpu01": XID13.format(when="Mon Dec 22 18:40:12 2025", bus="3b", pid=41220),
        "gpu02": XID13.format(when="Wed Dec 24 07:58:43 2025", bus="9d", pid=60171),
    })  # fmt: skip
    assert spread.category != Category.HARDWARE_GPU


def test_a_task_launch_refused_by_one_node_names_that_node() -> None:
    # srun (src/srun/launch) reports the node that refused the step's credential.
    nodes = ["cn129", "cn130", "cn131", "cn132"]
    job = (
        "srun: error: Task launch for StepId=1772009.0 failed on node cn131: Job credential "
        "expired\n"
        "srun: error: Application launch failed: Job credential expired\n"
        "srun: error: cn129: task 0: Killed\n"
    )
    a = _run(job, nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["cn131"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_a_node_slurm_lost_because_its_software_broke_is_system_software() -> None:
    nodes = ["gpu-b-13", "gpu-b-14"]
    job = (
        "srun: error: Task launch for StepId=1002231.0 failed on node gpu-b-14: Protocol "
        "authentication error\n"
    )
    ctld = _lines("[2025-02-11T15:06:41.002] error: Nodes gpu-b-14 not responding", "sched")
    a = attribute(Registry.default(), None, _lines(job), None, [], nodes, scheduler_lines=ctld)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-b-14"])


def test_a_node_whose_docker_has_no_gpu_runtime_is_named() -> None:
    # moby's error for --gpus without the NVIDIA runtime (NVIDIA/nvidia-docker#1352); the
    # other node's rank times out waiting in the TCPStore.
    job = (
        '[gpu02] docker: Error response from daemon: could not select device driver "" with '
        "capabilities: [[gpu]].\n"
        "[gpu01] [rank0] torch.distributed.DistStoreError: Timed out after 901 seconds waiting "
        "for clients. 8/16 clients joined.\n"
        "srun: error: gpu02: task 1: Exited with exit code 125\n"
        "srun: error: gpu01: task 0: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])


def test_cuda_busy_or_unavailable_as_the_runtime_spells_it_is_the_nodes_state() -> None:
    # cudaErrorDevicesUnavailable's message reads "is/are" (CUDA runtime API error strings).
    job = (
        "[gpu02] RuntimeError: CUDA error: CUDA-capable device(s) is/are busy or unavailable\n"
        "srun: error: gpu02: task 1: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])


STEPS = "".join(
    f"0: [rank0]: 2025-05-07 22:{m:02d}:00 INFO step={8600 + 50 * m} loss=2.21\n" for m in range(12)
)


def test_a_running_note_at_the_head_of_the_log_survives_an_elastic_restart() -> None:
    # torchelastic restarted the workers after a transient error; training resumed.
    job = (
        "# job still running at collection time\n"
        "1: [rank13]: OSError: [Errno 116] Stale file handle: '/mnt/weka/shards/part-03117.bin'\n"
        "0: I0507 22:24:10.000000 811 torch/distributed/elastic/agent/server/api.py:680] "
        "[default] Worker group FAILED. 3/3 attempts left; will restart worker group\n"
    ) + STEPS
    a = _run(job)
    assert a.kind == "none"


def test_a_preemption_of_an_earlier_run_does_not_end_the_running_one() -> None:
    job = (
        "slurmstepd: error: *** JOB 7810220 ON gpu01 CANCELLED AT 2025-05-07T20:00:00 DUE TO "
        "PREEMPTION ***\n" + STEPS + "# job still running at 2025-05-07 22:12:00\n"
    )
    a = _run(job)
    assert a.kind == "none"
    assert default_advice(a).kind == AdviceKind.NONE


def test_one_node_every_peer_gets_no_route_to_host_from_is_that_nodes_firewall() -> None:
    # c10d's client socket warning (torch/csrc/distributed/c10d/socket.cpp) on the other nodes.
    nodes = ["node17", "node18", "node19"]
    job = "".join(
        f"{t}: [W812 23:11:0{t}.118205101 70111 socket.cpp:752] [c10d] The client socket has "
        f"failed to connect to [node17]:29400 (errno: 113 - No route to host).\n"
        for t in (1, 2)
    )
    job += "1: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients.\n"
    a = _run(job, nodes)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["node17"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_no_route_to_an_address_outside_the_job_names_no_node() -> None:
    job = (
        "0: [W812 23:11:01.118205101 70111 socket.cpp:752] [c10d] The client socket has failed "
        "to connect to [store-01]:29400 (errno: 113 - No route to host).\n"
    )
    assert _run(job, ["node17", "node18"]).culprit_nodes == []


NO_IFACE = "".join(
    f"{t}: gpu0{t + 1}:5112{t}:5112{t} [0] misc/socket.cc:603 NCCL WARN Bootstrap : no socket "
    f"interface found\n"
    for t in range(2)
)


def test_an_nccl_setting_the_job_script_exports_is_the_jobs_configuration() -> None:
    # NCCL's bootstrap warning (src/misc/socket.cc); bash -x traces the script's export.
    a = _run("+ export NCCL_SOCKET_IFNAME=eth2\n" + NO_IFACE)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_the_same_nccl_error_without_the_job_setting_it_is_not_the_applications() -> None:
    assert _run(NO_IFACE).category == Category.SYSTEM_SOFTWARE


def test_nvidia_smi_without_a_loaded_driver_is_the_nodes_software() -> None:
    # NVML_ERROR_DRIVER_NOT_LOADED as nvidia-smi prints it (a kernel updated without the
    # driver module rebuilt); a lost GPU reads 'GPU is lost' instead.
    line = (
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make "
        "sure that the latest NVIDIA driver is installed and running."
    )
    logs = {"gpu02": _lines(line, "node_gpu02.txt")}
    job = "srun: error: gpu02: task 1: Exited with exit code 1\n"
    a = attribute(Registry.default(), None, _lines(job), None, [], NODES, node_logs=logs)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])


def test_a_time_limit_hours_after_the_output_was_last_written_is_a_hang() -> None:
    # tqdm bars carry no clock time; `stat -c '%y %n'` of the output file (coreutils) does.
    bars = "".join(
        f"Epoch 7:  43%|████      | {600 + 10 * i}/1604 [21:30<28:29,  0.53it/s, "
        f"train_loss=0.392]\n"
        for i in range(10)
    )
    job = bars + (
        "slurmstepd: error: *** JOB 77120 ON gpu01 CANCELLED AT 2024-10-02T23:00:14 DUE TO "
        "TIME LIMIT ***\n"
    )
    sched = _lines(
        "$ stat -c '%y %n' /scratch/u/logs/77120.out\n"
        "2024-10-02 17:41:09.000000000 +0000 /scratch/u/logs/77120.out",
        "scheduler.txt",
    )
    a = attribute(Registry.default(), None, _lines(job), None, [], NODES, scheduler_lines=sched)
    assert (a.kind, a.category) == ("hang", Category.UNKNOWN)


def test_a_leftover_breakpoint_that_quit_at_eof_is_a_crash_of_the_application() -> None:
    # pdb's prompt (CPython Lib/pdb.py), then BdbQuit (Lib/bdb.py) as pdb reads end of input.
    job = "".join(f"{t}: [rank{t}]: (Pdb) \n" for t in range(2)) + "".join(
        f"{t}: [rank{t}]: bdb.BdbQuit\n" for t in range(2)
    )
    a = _run(job)
    assert (a.kind, a.category) == ("crash", Category.APPLICATION)
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_pdb_prompt_with_nothing_after_it_is_a_hang() -> None:
    a = _run("".join(f"{t}: [rank{t}]: (Pdb) \n" for t in range(2)))
    assert (a.kind, a.category) == ("hang", Category.APPLICATION)


def test_a_lone_cuda_unknown_error_with_no_node_evidence_names_no_node() -> None:
    # The c10d watchdog's abort message for a CUDA error of no known class.
    job = (
        "1: [rank11]: terminate called after throwing an instance of 'c10::Error'\n"
        "1: [rank11]:   what():  CUDA error: unknown error\n"
        "srun: error: gpu02: task 1: Aborted (core dumped)\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.UNKNOWN, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_an_unlabelled_container_failure_is_the_node_whose_task_failed_not_the_one_killed() -> None:
    # pyxis's errors carry no node; srun reports which task exited with an error and which it
    # killed after aborting the step (Slurm's srun messages).
    job = (
        "slurmstepd: error: pyxis: container start failed with error code: 1\n"
        "slurmstepd: error: pyxis:     enroot-nsenter: failed to create user namespace: No "
        "space left on device\n"
        "srun: error: gpu02: task 1: Exited with exit code 1\n"
        "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.\n"
        "srun: error: gpu01: task 0: Killed\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu02"])
