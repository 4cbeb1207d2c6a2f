"""Multi-node launch and fabric evidence: store addresses the launch computed wrong, a node's
own name service or firewall, NIC faults named by their driver, a switch an operator power-cycled,
and torchrun's failure summary read as the launcher's (not a rank's) output.

Real formats: c10d's socket.cpp client errors, MPICH hydra's proxy connect error, getent(1),
systemctl(1) is-active, Linux AER (drivers/pci/pcie/aer.c) under the efa driver, HPE Slingshot's
cxi_core `CXI_EVENT_LINK_DOWN`, Intel's `NIC Link is Down`, torchrun's ChildFailedError summary
(torch/distributed/elastic/multiprocessing/errors), NCCL's `Using network Socket`."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

NODES4 = ["gpu-h11", "gpu-h12", "gpu-h13", "gpu-h14"]
SACCT4 = """\
JobID|State|ExitCode|Elapsed|NodeList
5501|FAILED|1:0|00:15:30|gpu-h[11-14]
5501.0|FAILED|1:0|00:15:28|gpu-h[11-14]
"""


# --- the store's address set per node: every node dials itself ----------------------------
def _dialling(targets: list[str]) -> str:
    return (
        "".join(
            f"{t}: [W903 13:00:2{t}.293842269 socket.cpp:752] [c10d] The client socket has failed to connect to [{host}]:29500 (errno: 111 - Connection refused).\n"
            f"{t}: [E903 13:15:1{t}.221575987 socket.cpp:1023] [c10d] The client socket has timed out after 900s while trying to connect to ({host}, 29500).\n"
            f"{t}: torch.distributed.DistNetworkError: The client socket has timed out after 900s while trying to connect to ({host}, 29500).\n"
            for t, host in enumerate(targets, start=1)
        )
        + "srun: error: gpu-h12: task 1: Exited with exit code 1\n"
    )


def test_every_nodes_store_client_dialling_its_own_node_is_the_launch() -> None:
    a = attribute_text(_dialling(["gpu-h12", "gpu-h13", "gpu-h14"]), NODES4, scheduler=SACCT4)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "each dial their own node" in a.summary
    assert first_action(a) == "stop"


def test_clients_dialling_one_other_node_are_not_dialling_themselves() -> None:
    a = attribute_text(_dialling(["gpu-h11", "gpu-h11", "gpu-h11"]), NODES4, scheduler=SACCT4)
    assert "each dial their own node" not in a.summary


# --- a hostlist expression taken for the store's host --------------------------------------
HOSTLIST_JOB = """\
+ srun -l torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend=c10d --rdzv_endpoint=gpu-b[12-15]:29500 run_clm.py
0: [W506 11:40:06.592357498 socket.cpp:755] [c10d] The IPv4 network addresses of (gpu-b[12-15], 29500) cannot be retrieved (gai error: -2 - Name or service not known).
1: [E506 11:41:07.888267693 socket.cpp:1023] [c10d] The client socket has timed out after 60s while trying to connect to (gpu-b[12-15], 29500).
1: torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.
srun: error: gpu-b13: task 1: Exited with exit code 1
"""


def test_a_store_host_written_as_a_hostlist_is_the_launch() -> None:
    a = attribute_text(HOSTLIST_JOB, ["gpu-b12", "gpu-b13", "gpu-b14", "gpu-b15"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "gpu-b[12-15]" in a.summary and first_action(a) == "stop"


def test_a_plain_store_host_that_times_out_is_not_a_hostlist() -> None:
    plain = HOSTLIST_JOB.replace("gpu-b[12-15]", "gpu-b12")
    a = attribute_text(plain, ["gpu-b12", "gpu-b13", "gpu-b14", "gpu-b15"])
    assert "hostlist" not in a.summary


# --- one node resolving a peer's name to another address -----------------------------------
HYDRA_JOB = """\
+ mpiexec -launcher slurm -np 32 -ppn 4 python train_mpi.py --backend nccl
[proxy:0:6@gpu-c07] HYDU_sock_connect (lib/utils/sock.c:140): unable to connect from "gpu-c07" to "gpu-c01" (No route to host)
[proxy:0:6@gpu-c07] main (proxy/pmip.c:105): unable to connect to server gpu-c01 at port 43377 (check for firewalls!)
srun: error: gpu-c07: task 6: Exited with exit code 5
[mpiexec@gpu-c01] HYDT_bscu_wait_for_completion (lib/tools/bootstrap/utils/bscu_wait.c:76): one of the processes terminated badly; aborting
srun: error: gpu-c02: task 1: Killed
srun: error: gpu-c05: task 4: Killed
"""
C_NODES = [f"gpu-c0{i}" for i in range(1, 9)]


def test_the_node_resolving_a_peer_to_another_address_is_its_own_name_service() -> None:
    files = {
        "node_gpu-c07": "$ getent hosts gpu-c01\n10.1.0.21       gpu-c01\n",
        "node_gpu-c02": "$ getent hosts gpu-c01\n10.1.0.121      gpu-c01.cluster gpu-c01\n",
    }
    a = attribute_text(HYDRA_JOB, C_NODES, files)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-c07"])
    assert first_action(a) == "requeue_excluding_nodes"


def test_nodes_resolving_alike_name_nobody() -> None:
    same = "$ getent hosts gpu-c01\n10.1.0.121      gpu-c01.cluster gpu-c01\n"
    a = attribute_text(HYDRA_JOB, C_NODES, {"node_gpu-c07": same, "node_gpu-c02": same})
    assert "resolves" not in a.summary


# --- the one node whose firewall service runs ----------------------------------------------
FW_JOB = """\
0: gpu-f05:6703:6936 [3] misc/socket.cc:538 NCCL WARN socketStartConnect: Connect to 10.9.1.10<41544> failed : No route to host
3: [rank24]: torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.20.5
3: [rank24]: ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error.
3: [rank24]: socketStartConnect: Connect to 10.9.1.10<44327> failed : No route to host
srun: error: gpu-f08: task 3: Exited with exit code 1
"""
F_NODES = [f"gpu-f{i:02d}" for i in range(5, 13)]
ACTIVE = "$ systemctl is-active firewalld; systemctl is-enabled firewalld\nactive\nenabled\n"


def test_the_only_node_running_a_firewall_is_the_nodes_software() -> None:
    inactive = ACTIVE.replace("\nactive\nenabled", "\ninactive\ndisabled")
    a = attribute_text(FW_JOB, F_NODES, {"node_gpu-f09": ACTIVE, "node_gpu-f08": inactive})
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu-f09"])


def test_the_firewalls_state_as_systemctl_status_and_ufw_print_it() -> None:
    status = (
        "$ systemctl status firewalld\n"
        "● firewalld.service - firewalld - dynamic firewall daemon\n"
        "     Loaded: loaded (/usr/lib/systemd/system/firewalld.service; enabled; preset: enabled)\n"
        "     Active: {state} since Tue 2024-06-18 04:02:15 UTC; 5h 29min ago\n"
    )
    running = status.format(state="active (running)")
    dead = status.format(state="inactive (dead)")
    a = attribute_text(FW_JOB, F_NODES, {"node_gpu-f09": running, "node_gpu-f08": dead})
    assert a.culprit_nodes == ["gpu-f09"]
    ufw = "$ ufw status\nStatus: {state}\n"
    files = {
        "node_gpu-f09": ufw.format(state="active"),
        "node_gpu-f08": ufw.format(state="inactive"),
    }
    assert attribute_text(FW_JOB, F_NODES, files).culprit_nodes == ["gpu-f09"]


def test_a_firewall_running_on_every_node_shown_is_the_sites_profile() -> None:
    a = attribute_text(FW_JOB, F_NODES, {"node_gpu-f09": ACTIVE, "node_gpu-f08": ACTIVE})
    assert a.culprit_nodes != ["gpu-f09"]


# --- a NIC's fatal AER, named by its driver ------------------------------------------------
EFA_JOB = """\
42: gpu-st-p548xlarge-6:1213:1290 [2] NCCL WARN NET/OFI Request completed with error. RC: 5. Error: 5 (Input/output error)
42: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.
srun: error: gpu-st-p548xlarge-6: task 5: Exited with exit code 1
"""
EFA_DMESG = """\
[Tue Sep 17 16:11:41 2024] pcieport 0000:a0:01.1: AER: Uncorrected (Fatal) error message received from 0000:a2:00.0
[Tue Sep 17 16:11:41 2024] efa 0000:a2:00.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)
[Tue Sep 17 16:11:43 2024] efa 0000:a2:00.0: Failed to reset device
"""


def test_a_fatal_aer_of_an_efa_adapter_is_the_network() -> None:
    nodes = [f"gpu-st-p548xlarge-{i}" for i in range(1, 9)]
    a = attribute_text(EFA_JOB, nodes, {"dmesg_gpu-st-p548xlarge-6": EFA_DMESG})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["gpu-st-p548xlarge-6"])


# --- NIC link down in the cxi and Ethernet drivers' words ----------------------------------
SS_JOB = """\
53: nid001286:81274:81953 [5] nccl_ofi_rdma.c:1652 NCCL WARN NET/OFI Request 0x851127471a6e completed with error. RC: 113. Error: 113 (No route to host). Completed length: 0, Request: { dev: 1, size: 0, state: CREATED, type: SEND }
53: MPIDI_OFI_handle_cq_error(1062): OFI poll failed (ofi_events.c:1064:MPIDI_OFI_handle_cq_error:Input/output error - UNDELIVERABLE)
srun: error: nid001286: task 53: Exited with exit code 255
"""
NIDS = [f"nid00{n}" for n in range(1280, 1288)]


def test_a_slingshot_nic_link_down_names_its_node() -> None:
    down = (
        "Oct  8 03:53:14 nid001287 kernel: cxi_core 0000:c1:00.0: cxi0[hsn0] CXI_EVENT_LINK_DOWN\n"
    )
    a = attribute_text(SS_JOB, NIDS, {"node_nid001287": down})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["nid001287"])


def test_a_link_that_came_back_long_before_the_failure_is_history() -> None:
    flap = (
        "[Tue Oct  8 01:10:02 2024] cxi_core 0000:c1:00.0: cxi0[hsn0] CXI_EVENT_LINK_DOWN\n"
        "[Tue Oct  8 01:10:09 2024] cxi_core 0000:c1:00.0: cxi0[hsn0] CXI_EVENT_LINK_UP\n"
    )
    job = (
        SS_JOB
        + "slurmstepd: error: *** STEP 1893345.0 ON nid001280 CANCELLED AT 2024-10-08T03:53:22 ***\n"
    )
    a = attribute_text(job, NIDS, {"dmesg_nid001287": flap})
    assert a.culprit_nodes != ["nid001287"]
    # Still down at the failure: the node.
    a = attribute_text(job, NIDS, {"dmesg_nid001287": flap.splitlines()[0] + "\n"})
    assert a.culprit_nodes == ["nid001287"]


def test_an_ethernet_link_that_came_back_long_before_the_failure_is_history() -> None:
    flap = (
        "[Tue Oct  8 01:10:02 2024] ice 0000:31:00.0 ens1f0: NIC Link is Down\n"
        "[Tue Oct  8 01:10:05 2024] ice 0000:31:00.0 ens1f0: NIC Link is Up, 100 Gbps Full Duplex, FEC: RS-FEC, Autoneg Advertised: On\n"
    )
    job = (
        SS_JOB
        + "slurmstepd: error: *** STEP 1893345.0 ON nid001280 CANCELLED AT 2024-10-08T03:53:22 ***\n"
    )
    assert attribute_text(job, NIDS, {"dmesg_nid001287": flap}).culprit_nodes != ["nid001287"]
    down = flap.splitlines()[0] + "\n"
    a = attribute_text(job, NIDS, {"dmesg_nid001287": down})
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, ["nid001287"])


# --- a switch an operator says was power-cycled --------------------------------------------
def test_a_spine_power_cycled_during_the_failure_excludes_nobody() -> None:
    job = (
        "".join(
            f"{t}: {h}:61977:62757 [2] transport/net_ib.cc:1706 NCCL WARN NET/IB : Got completion from peer 10.50.1.{t + 3}<40067> with status=12 opcode=0 len=0 vendor err 129 (Send) localGid fe80::946d:ae03:31:47b0\n"
            for t, h in ((25, "r06n10"), (9, "r05n10"), (18, "r06n03"))
        )
        + "srun: error: r06n10: task 25: Exited with exit code 1\n"
    )
    note = "# fabric ops: spine switch ib-spine-03 was power-cycled by mistake during PDU work at 20:52:27 and rejoined the fabric at 20:58:50\n"
    nodes = [f"r0{r}n{n:02d}" for r in (5, 6) for n in range(1, 17)]
    clean = "(no kernel messages in the job window)\n"
    a = attribute_text(job, nodes, {"dmesg_r06n10": clean, "dmesg_r05n10": clean},
                       scheduler=note)  # fmt: skip
    assert (a.category, a.culprit_nodes) == (Category.HARDWARE_NETWORK, [])
    assert first_action(a) == "requeue"


# --- torchrun's failure summary is the launcher's output, not a rank's work ----------------
def test_torchruns_failure_summary_after_the_timeouts_is_not_a_rank_busy_elsewhere() -> None:
    waits = "".join(
        f"{t}: [rank{r}]:[E1113 03:42:25.663972019 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=98211, OpType=ALLTOALL, NumelIn=4194304, NumelOut=4194304, Timeout(ms)=1800000) ran for 1800021 milliseconds before timing out.\n"
        for t, r in ((0, 3), (1, 11), (2, 19), (3, 27))
    )
    summary = """\
0: Traceback (most recent call last):
0:   File "/usr/local/lib/python3.10/dist-packages/torch/distributed/launcher/api.py", line 269, in launch_agent
0:     raise ChildFailedError(
0: torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
0: ============================================================
0: train.py FAILED
0: ------------------------------------------------------------
0: Failures:
0:   <NO_OTHER_FAILURES>
0: ------------------------------------------------------------
0: Root Cause (first observed failure):
0: [0]:
0:   time      : 2024-11-13_03:42:28
0:   host      : gpu-b025
0:   rank      : 3 (local_rank: 3)
0:   exitcode  : -6 (pid: 9004)
0:   error_file: <N/A>
0:   traceback : Signal 6 (SIGABRT) received by PID 9004
0: ============================================================
srun: error: gpu-b025: task 0: Exited with exit code 1
"""
    nodes = ["gpu-b025", "gpu-b026", "gpu-b027", "gpu-b028"]
    clean = "(no kernel messages in the job window)\n"
    a = attribute_text(waits + summary, nodes, {"dmesg_gpu-b025": clean})
    assert a.kind == AnomalyKind.HANG and a.category != Category.APPLICATION, a.summary


# --- InfiniBand switched off by the job's own script ---------------------------------------
IB_OFF_JOB = """\
+ export NCCL_IB_DISABLE=1
+ srun -l torchrun --nnodes=2 --nproc-per-node=8 train_gpt.py
0: gpu-s01:2001:2001 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
0: gpu-s01:2001:2001 [0] NCCL INFO Using network Socket
0: iter   570 | loss 2.7929 | 13.85 s/iter | tokens/s 37,991 | MFU 3.8%
0: iter   580 | loss 2.7671 | 13.58 s/iter | tokens/s 37,991 | MFU 3.8%
0: iter   590 | loss 2.7351 | 13.98 s/iter | tokens/s 37,991 | MFU 4.0%
# job still running at collection time
"""
IB_STAT = "$ ibstat mlx5_0\nCA 'mlx5_0'\n\tPort 1:\n\t\tState: Active\n\t\tPhysical state: LinkUp\n"


def test_infiniband_disabled_by_the_jobs_script_is_an_application_straggler() -> None:
    a = attribute_text(IB_OFF_JOB, ["gpu-s01", "gpu-s02"], {"node_gpu-s01": IB_STAT})
    assert (a.kind, a.category) == (AnomalyKind.STRAGGLER, Category.APPLICATION)
    assert "NCCL_IB_DISABLE=1" in a.summary and first_action(a) == "none"


def test_sockets_on_nodes_without_infiniband_are_not_a_choice() -> None:
    a = attribute_text(IB_OFF_JOB, ["gpu-s01", "gpu-s02"])
    assert a.kind != AnomalyKind.STRAGGLER


# NCCL_NET=Socket names the transport outright; RCCL's socket transport on Slingshot's hsn0
# (HPE's high-speed NIC, whose own transport is the OFI plugin) shows the fabric was there.
SOCKET_BY_NAME_JOB = """\
+ export NCCL_NET=Socket NCCL_SOCKET_IFNAME=hsn0
+ srun -l -N 8 -n 64 --ntasks-per-node=8 python train_esm.py
0: nid003300:33101:33101 [0] NCCL INFO NCCL_NET set by environment to Socket
0: nid003300:33101:33101 [0] NCCL INFO NET/Socket : Using [0]hsn0:10.128.3.11<0>
0: nid003300:33101:33244 [0] NCCL INFO Using network Socket
0: step   100 | loss 2.3911 | 12.17 s/step | comm 8.57 s | compute 3.71 s
0: step   200 | loss 2.3836 | 12.15 s/step | comm 8.66 s | compute 3.86 s
0: step   300 | loss 2.3757 | 12.19 s/step | comm 8.49 s | compute 3.82 s
# job still running at collection time
"""


def test_nccl_net_socket_set_by_the_job_on_a_slingshot_fabric_is_an_application_straggler() -> None:
    nodes = [f"nid0033{i:02d}" for i in range(8)]
    a = attribute_text(SOCKET_BY_NAME_JOB, nodes)
    assert (a.kind, a.category) == (AnomalyKind.STRAGGLER, Category.APPLICATION), a.summary
    assert "NCCL_NET=Socket" in a.summary and first_action(a) == "none"


def test_nccl_net_socket_over_plain_ethernet_is_not_a_choice_against_a_fabric() -> None:
    job = SOCKET_BY_NAME_JOB.replace("hsn0", "eth0")
    a = attribute_text(job, [f"nid0033{i:02d}" for i in range(8)])
    assert a.kind != AnomalyKind.STRAGGLER


# No plugin at all on Slingshot: NCCL 2.22 says it found none and opens sockets on hsn0-3 (a
# uenv without the aws-ofi-nccl plugin, GH200 nodes).
NO_PLUGIN_JOB = (
    """\
SLURM_JOB_NODELIST=nid00[5121-5122]
nid005121:211477:211477 [0] NCCL INFO Bootstrap : Using hsn0:172.28.30.21<0>
nid005121:211477:211477 [0] NCCL INFO NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.
nid005121:211477:211611 [0] NCCL INFO NET/Socket : Using [0]hsn0:172.28.30.21<0> [1]hsn1:172.28.30.22<0>
nid005121:211477:211611 [0] NCCL INFO Using network Socket
nid005122:98113:98240 [0] NCCL INFO Using network Socket
"""
    + "".join(
        f"[rank0] step {s} loss {2.4 - s / 1000:.3f} samples/s 1357.{s % 7}\n"
        for s in range(10, 130, 10)
    )
    + "# job still running at collection time\n"
)


@pytest.mark.parametrize(
    ("plugin", "iface", "straggler"),
    [
        ("NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.", "hsn0", True),
        (
            "NET/Plugin : No plugin found (libnccl-net.so), using internal implementation",
            "hsn0",
            True,
        ),
        # (NCCL's IB transport needs no plugin; without Slingshot there is nothing missing)
        ("NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.", "eth0", False),
        ("NET/Plugin: Loaded net plugin Libfabric (v8)", "hsn0", False),
    ],
)
def test_no_network_plugin_on_slingshot_is_the_jobs_slowdown(
    plugin: str, iface: str, straggler: bool
) -> None:
    job = (
        NO_PLUGIN_JOB.replace(
            "NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin.", plugin
        )
        .replace("hsn0", iface)
        .replace("hsn1", iface.replace("0", "1"))
    )
    a = attribute_text(job, ["nid005121", "nid005122"])
    got = (a.kind, a.category) == (AnomalyKind.STRAGGLER, Category.APPLICATION)
    assert got == straggler, a.summary
    if straggler:
        assert "plugin" in a.summary and first_action(a) == "none"
