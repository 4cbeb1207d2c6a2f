"""Shared-service outages name no node, node-local software names its own node, and the crash /
hang boundary follows attribution-labels.md (`kind`, tie-breaker 5).

Lines in the formats enroot's importer (src/docker.sh), the Linux errno strings, Lustre's
client (ptlrpc import.c), NCCL (bootstrap.cc, misc/socket.cc, transport/net_ib.cc), NVIDIA's
NVRM Xid, NetworkManager, coreutils df and slurmctld/slurmd print.
"""

# ruff: noqa: E501  (real log lines are long)
from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

CLEAN = "(no kernel messages in the job window)\n"


def _run(
    job: str, nodes: list[str], node_logs: dict[str, str] | None = None, scheduler: str = ""
) -> Attribution:
    logs = {n: _lines(t, f"dmesg_{n}.txt") for n, t in (node_logs or {}).items()}
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], nodes, node_logs=logs,
        scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


def test_a_registry_server_error_is_the_registrys_outage_not_the_first_node() -> None:
    job = (
        "pyxis: importing docker image: registry.example.org#ml/train:24.07\n"
        "slurmstepd: error: pyxis: child 4410 failed with error code: 1\n"
        "slurmstepd: error: pyxis: failed to import docker image\n"
        "slurmstepd: error: pyxis: printing enroot log file:\n"
        "slurmstepd: error: pyxis:     [INFO] Querying registry for permission grant\n"
        "slurmstepd: error: pyxis:     [ERROR] URL https://registry.example.org/v2/ml/train/manifests/24.07 returned error code: 503 Service Unavailable\n"
        "slurmstepd: error: pyxis: couldn't start container\n"
        "srun: error: gpu31: task 0: Exited with exit code 1\n"
        "srun: error: gpu32: task 1: Exited with exit code 1\n"
    )
    a = _run(job, ["gpu31", "gpu32"])
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.CRASH,
        Category.SYSTEM_SOFTWARE,
        [],
    )
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_file_system_lost_by_ranks_on_several_nodes_is_the_file_systems() -> None:
    # Four nodes, eight ranks each (torchrun prefixes, no srun labels): the ranks span them all;
    # rank 2 is not task 2 (ranks beyond the task count run several to a node).
    job = (
        "2026-03-01T10:00:00Z [rank0] step 500 loss=2.11 (1.10 s/it)\n"
        "2026-03-01T10:00:01Z [rank0] step 501 loss=2.10 (1.10 s/it)\n"
        "2026-03-01T10:01:05Z [rank2] OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/data/shard-0041.bin'\n"
        "2026-03-01T10:01:05Z [rank14] OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/data/shard-0900.bin'\n"
        "2026-03-01T10:01:06Z [rank25] OSError: [Errno 5] Input/output error: '/lustre/data/shard-0777.bin'\n"
        "2026-03-01T10:01:06Z [rank30] OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/lustre/data/shard-1377.bin'\n"
        "srun: error: cn11: task 0: Exited with exit code 1\n"
        "srun: error: cn12: task 1: Exited with exit code 1\n"
        "srun: error: cn13: task 2: Exited with exit code 1\n"
        "srun: error: cn14: task 3: Exited with exit code 1\n"
    )
    a = _run(job, ["cn11", "cn12", "cn13", "cn14"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


LUSTRE_LOST = (
    "[Mon Mar  2 09:40:02 2026] Lustre: scratch-OST0003-osc-ffff9a51c2a4b000: Connection to scratch-OST0003 "
    "(at 10.9.8.3@o2ib) was lost; in progress operations using this service will wait for recovery to complete\n"
)


def test_a_job_stuck_while_its_file_system_is_lost_everywhere_is_a_shared_hang() -> None:
    steps = "".join(
        f"[host=g01] 2026-03-02 09:{m:02d}:00 | step {m * 10} | loss 2.0 | 1.2 s/it\n"
        for m in range(30, 40)
    )
    job = steps + (
        "[host=g02] [rank9]:[E302 10:39:55.411020 ProcessGroupNCCL.cpp:616] [Rank 9] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9001, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=3600000) ran for 3600070 milliseconds before timing out.\n"
        "slurmstepd: error: *** JOB 4401 ON g01 CANCELLED AT 2026-03-02T10:41:00 ***\n"
    )
    a = _run(
        job,
        ["g01", "g02"],
        {"g01": LUSTRE_LOST, "g02": LUSTRE_LOST},
        "4401|train|CANCELLED by 5001|0:0|2026-03-02T10:41:00|g[01-02]\n",
    )
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.SYSTEM_SOFTWARE, [])
    assert default_advice(a).kind == AdviceKind.REQUEUE


def test_a_job_still_stepping_while_its_file_system_drops_and_returns_is_slowed_not_hung() -> None:
    # The job's steps go on (slower) through Lustre's lost and restored connections: no
    # collective timed out, nothing ended; the service slows it.
    steps = "".join(
        f"[host=g01] 2026-03-02 09:{m:02d}:00 | step {m * 10} | loss 2.0 | {1.2 if m < 42 else 2.6} s/it\n"
        for m in range(30, 59)
    )
    a = _run(
        steps,
        ["g01", "g02"],
        {"g01": LUSTRE_LOST, "g02": LUSTRE_LOST.replace("Mar  2 09:40:02", "Mar  2 09:41:12")},
        "4402|train|RUNNING|0:0|Unknown|g[01-02]\n",
    )
    assert (a.kind, a.category, a.culprit_nodes) == (
        AnomalyKind.STRAGGLER, Category.SYSTEM_SOFTWARE, [],
    )  # fmt: skip


def test_enospc_on_node_local_tmp_names_the_node_whose_df_shows_it_full() -> None:
    job = (
        "[default2]:[rank10]: OSError: [Errno 28] No space left on device: '/tmp/triton_cache/AB12/tmp.pid_1_2/kernel.cubin'\n"
        "[default4]:[rank12]: OSError: [Errno 28] No space left on device: '/tmp/torchinductor_u/fx_graph_cache/tmpab12'\n"
        "srun: error: a102: task 1: Exited with exit code 1\n"
        "slurmstepd: error: *** STEP 77.0 ON a101 CANCELLED AT 2026-03-03T04:12:11 ***\n"
    )
    df = "$ df -h /tmp\nFilesystem      Size  Used Avail Use% Mounted on\n/dev/nvme0n1p3  100G  100G     0 100% /tmp\n"
    logs = {"a102": df}
    a = attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], ["a101", "a102"],
        node_logs={"a102": _lines(logs["a102"], "node_a102.txt")},
    )  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["a102"])
    assert default_advice(a).kind == AdviceKind.REQUEUE_EXCLUDING


def test_nccl_bootstrapping_over_a_bridge_on_one_node_is_that_nodes_setup() -> None:
    job = (
        "n1:100:100 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.1<0>\n"
        "n2:200:200 [0] NCCL INFO Bootstrap : Using virbr0:192.168.122.1<0>\n"
        "n3:300:300 [0] NCCL INFO Bootstrap : Using ib0:10.1.0.3<0>\n"
        "n1:100:140 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 192.168.122.1<40111> failed : Software caused connection abort\n"
        "n3:300:340 [0] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to 192.168.122.1<40111> failed : No route to host\n"
        "[rank0]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:2027, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5\n"
        "srun: error: n1: task 0: Exited with exit code 1\n"
    )
    a = _run(job, ["n1", "n2", "n3"])
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["n2"])


def test_peers_losing_the_address_dhcp_took_from_a_node_is_its_configuration() -> None:
    job = (
        "r1:500:510 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.5.0.3<50418> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=524288 vendor_err=129 req_type=Send localGid ::ffff:10.5.0.1 remoteGids::ffff:10.5.0.3 hca mlx5_3\n"
        "r2:600:610 [3] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion from peer 10.5.0.3<50418> with status=IBV_WC_RETRY_EXC_ERR(12) opcode=IBV_WC_SEND(0) reqSize=524288 vendor_err=129 req_type=Send localGid ::ffff:10.5.0.2 remoteGids::ffff:10.5.0.3 hca mlx5_3\n"
        "srun: error: r1: task 0: Aborted\n"
    )
    journal = "Mar 04 10:12:49 r3 NetworkManager[1533]: <info>  [1762423969.2214] device (ens3f3np3): ipv4 address 10.5.0.3 removed\n"
    a = _run(job, ["r1", "r2", "r3", "r4"], {"r3": journal})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["r3"])


def test_a_pasted_nvlink_xid_names_the_host_whose_process_it_names() -> None:
    job = (
        "# kernel log pasted by the site admin:\n"
        "# [Wed Mar  4 11:02:40 2026] NVRM: Xid (PCI:0000:4e:00): 74, pid=7711, name=python, NVLink: fatal error detected on link 7(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)\n"
        "h2: [2026-03-04 11:02:29] iter  9030 | loss 2.231\n"
        "h2: h2:7711:7790 [2] NCCL INFO [Service thread] Connection closed by localRank 2\n"
        "h2: [rank10]: ncclUnhandledCudaError: Call to CUDA function failed.\n"
    )
    a = _run(job, ["h1", "h2"])
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_GPU, ["h2"])


def test_an_error_within_one_step_of_progress_is_a_crash_not_a_hang() -> None:
    steps = "".join(f"m1: 2026-03-05T12:{m:02d}:00 step {m} loss 5.1\n" for m in range(0, 8, 2))
    job = steps + (
        "m3: [W0305 12:06:40.118000 socket.cpp:428] [c10d] The client socket has timed out after 60000ms while trying to connect to (m1, 29500).\n"
        "m2: [rank12]: torch.distributed.DistStoreError: Socket Timeout\n"
        "m3: [E0305 12:06:40.904000 TCPStore.cpp:455] [c10d] Connection reset by peer\n"
        "srun: error: m2: task 1: Exited with exit code 1\n"
    )
    journal = "Mar 05 12:05:25 m1 kernel: NETDEV WATCHDOG: eno1 (bnxt_en): transmit queue 2 timed out 5008 ms\n"
    a = _run(job, ["m1", "m2", "m3"], {"m1": journal})
    assert a.kind == AnomalyKind.CRASH


def test_a_prolog_failure_before_launch_is_a_crash() -> None:
    job = (
        "srun: error: Unable to create step for job 51: Job/step already completing or completed\n"
    )
    scheduler = (
        "[2026-03-06T07:41:33.880] error: prolog_complete: JobId=51 prolog failed status=1:0 on node p3\n"
        "[2026-03-06T07:41:33.902] Requeuing JobId=51\n"
        "JobId=51 JobState=PENDING Reason=launch_failed_requeued_held Requeue=1 Restarts=1\n"
    )
    journal = "Mar 06 06:59:40 p3 mount[2210]: modprobe: FATAL: Module lustre not found in directory /lib/modules/5.14.0-427.el9.x86_64\n"
    a = _run(job, ["p1", "p2", "p3"], {"p3": journal}, scheduler)
    assert a.kind == AnomalyKind.CRASH


def test_a_time_limit_of_a_job_still_advancing_is_the_schedulers_despite_an_old_flap() -> None:
    steps = "".join(
        f"0: 2026-03-07T{h:02d}:01:00 iteration {h * 950}/200000 | lm loss 2.6 | 0.93s/it\n"
        for h in range(1, 12)
    )
    job = steps + (
        "0: 2026-03-07T11:59:30 iteration 11400/200000 | lm loss 2.57 | 0.93s/it\n"
        "slurmstepd: error: *** JOB 90 ON t1 CANCELLED AT 2026-03-07T12:00:00 DUE TO TIME LIMIT ***\n"
    )
    journal = (
        "Mar 07 04:00:17 t3 kernel: mlx5_core 0000:3b:00.0 mlx5_1: Port: 1 Link DOWN\n"
        "Mar 07 04:00:19 t3 kernel: mlx5_core 0000:3b:00.0 mlx5_1: Port: 1 Link ACTIVE\n"
    )
    a = _run(
        job,
        ["t1", "t2", "t3"],
        {"t3": journal},
        "sacct: 90 TIMEOUT 0:0 Elapsed=12:00:00 Timelimit=12:00:00\n",
    )
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.CRASH, Category.SCHEDULER, [])
