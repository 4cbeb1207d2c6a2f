"""A multi-node launch whose processes never meet: each node's torchrun agent in a rendezvous of
its own, or processes dialling a container bridge's address. Lines as torch, c10d and Open MPI
print them (pithtrain's launcher falling back to localhost, OpenRLHF's vLLM broadcast group on
docker's bridge, Horovod's hvd.init() under Open MPI's TCP BTL on docker0)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

import pytest

from resurgo.contracts import AnomalyKind, Category
from tests.log_lines import attribute_text, first_action

NODES = ["b200-03", "b200-04"]
TIME_LIMIT = "slurmstepd: error: *** JOB 20871 ON b200-03 CANCELLED AT 2026-09-05T23:40:31 DUE TO TIME LIMIT ***\n"
SACCT = "JobID JobName State ExitCode Elapsed NodeList\n20871 pretrain TIMEOUT 0:0 02:00:22 b200-[03-04]\n"

SEPARATE = """\
SLURM_JOB_NODELIST=b200-[03-04] SLURM_NNODES=2
scripts/launch_pretrain.sh: line 14: scontrol: command not found
+ torchrun --nnodes=2 --node-rank=0 --nproc-per-node=gpu --rdzv-backend=c10d --rdzv-endpoint=localhost:15213 -m pithtrain.pretrain
W0905 21:40:12.221000 66104 torch/distributed/run.py:766] Setting OMP_NUM_THREADS environment variable for each process to be 1 in default
I0905 21:40:12.518000 66104 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1097] The node 'b200-03_66104_0' has joined round 0 of the rendezvous 'none' as rank 0 in a world of size 1.
I0905 21:40:12.601000 51877 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1097] The node 'b200-04_51877_0' has joined round 0 of the rendezvous 'none' as rank 0 in a world of size 1.
[rank0]: pithtrain: waiting for expert-parallel peers (16 expected)
[rank0]: pithtrain: waiting for expert-parallel peers (16 expected)
"""


def test_agents_on_two_hosts_each_rank_0_of_their_rendezvous_are_the_launchs_hang() -> None:
    a = attribute_text(SEPARATE + TIME_LIMIT, NODES, scheduler=SACCT)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert "world of its own" in a.summary and first_action(a) == "stop"


def test_one_rendezvous_giving_its_agents_ranks_0_and_1_is_no_launch_fault() -> None:
    job = SEPARATE.replace(
        "'b200-04_51877_0' has joined round 0 of the rendezvous 'none' as rank 0 in a world of size 1",
        "'b200-04_51877_0' has joined round 0 of the rendezvous 'none' as rank 1 in a world of size 2",
    ).replace("as rank 0 in a world of size 1", "as rank 0 in a world of size 2")
    a = attribute_text(job + TIME_LIMIT, NODES, scheduler=SACCT)
    assert a.category != Category.APPLICATION, a.summary


def test_separate_worlds_that_went_on_to_train_are_not_judged_by_it() -> None:
    steps = "".join(f"[rank0]: step {s} loss 2.{s}\n" for s in range(1, 30))
    a = attribute_text(SEPARATE + steps + TIME_LIMIT, NODES, scheduler=SACCT)
    assert "world of its own" not in a.summary


BRIDGE = """\
(ActorModelRayActor pid=207260, ip=10.0.1.74) init vllm broadcast group: master_address=172.17.0.2 master_port=44737 world_size=5 backend=nccl
(RayWorkerVllm pid=207931, ip=10.0.1.75) [E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.2, 44737).
(RayWorkerVllm pid=208050, ip=10.0.1.75) [E socket.cpp:922] [c10d] The client socket has timed out after 1800s while trying to connect to (172.17.0.2, 44737).
srun: error: b200-04: task 1: Exited with exit code 1
"""
HOROVOD = """\
[1,0]<stdout>:b200-03:311:311 [0] NCCL INFO NET : Using interface enp35s0d1:172.30.160.6<0>
[1,0]<stderr>:[b200-03][[39817,1],2][btl_tcp_endpoint.c:638:mca_btl_tcp_endpoint_recv_connect_ack] received unexpected process identifier [[39817,1],3]
[1,2]<stderr>:[b200-03][[38971,1],2][btl_tcp_endpoint.c:796:mca_btl_tcp_endpoint_complete_connect] connect() to 172.17.0.1 failed: Connection refused (111)
"""


@pytest.mark.parametrize("job", [BRIDGE, HOROVOD + TIME_LIMIT], ids=["c10d", "open-mpi"])
def test_dialling_a_container_bridge_address_is_the_launchs_hang(job: str) -> None:
    a = attribute_text(job, NODES, scheduler=SACCT.replace("TIMEOUT", "FAILED"))
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert "container bridge" in a.summary and first_action(a) == "stop"


def test_a_routable_store_address_timing_out_is_not_a_bridge() -> None:
    job = BRIDGE.replace("172.17.0.2", "10.0.1.74")
    a = attribute_text(job, NODES, scheduler=SACCT.replace("TIMEOUT", "FAILED"))
    assert "container bridge" not in a.summary


def test_one_node_dialling_a_bridge_on_a_single_node_job_is_not_judged_by_it() -> None:
    a = attribute_text(
        BRIDGE.replace("b200-04", "b200-03").replace("10.0.1.75", "10.0.1.74"), ["b200-03"]
    )
    assert "container bridge" not in a.summary
