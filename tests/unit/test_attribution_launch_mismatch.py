"""Failures the job's own launch or code caused, read against what Slurm started: a launch that
waits for more peers than the allocation has, and an exception raised in the job's own code
behind a `[host][rankN]:` prefix. Each rule with a real line."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, AnomalyKind, Attribution, Category
from resurgo.detect.lines import strip_prefixes
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines


def _run(job: str, scheduler: str = "") -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job, "job.log"), None, [], [],
        scheduler_lines=_lines(scheduler, "scheduler.txt"),
    )  # fmt: skip


def _stops(a: Attribution) -> bool:
    return default_advice(a).kind == AdviceKind.STOP


# torchrun --nnodes=4 in a one-node allocation: the c10d rendezvous waits for three agents that
# were never requested (torch/distributed/elastic/rendezvous/dynamic_rendezvous.py;
# pytorch/examples#1279).
TORCHRUN = """\
+ torchrun --nnodes={n} --nproc_per_node=8 --rdzv_id=titan --rdzv_endpoint=gpu-n041:29400 train.py
I1201 13:00:02.902000 7781 torch/distributed/elastic/rendezvous/dynamic_rendezvous.py:1112] \
The node 'gpu-n041_7781_0' attempts to join the next round of the rendezvous 'titan'.
Traceback (most recent call last):
  File "/opt/venv/lib/python3.11/site-packages/torch/distributed/elastic/rendezvous/\
dynamic_rendezvous.py", line 667, in run
    raise RendezvousTimeoutError
torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError
srun: error: gpu-n041: task 0: Exited with exit code 1
"""
ONE_NODE = """\
JobId=912004 JobName=titan JobState=FAILED Reason=NonZeroExitCode ExitCode=1:0
   NodeList=gpu-n041 NumNodes=1 NumTasks=1
"""


def test_torchrun_waiting_for_more_nodes_than_the_allocation_has_is_the_launch() -> None:
    a = _run(TORCHRUN.format(n=4), ONE_NODE)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert _stops(a)
    # --nnodes matching the allocation: the rendezvous timing out is not the arguments'
    b = _run(TORCHRUN.format(n=1), ONE_NODE)
    assert b.category != Category.APPLICATION


# jax.distributed.initialize(num_processes=4) under two Slurm tasks: the coordination
# service's connect barrier times out (xla/pjrt/distributed/client.cc; llama-2-jax#20).
JAX = """\
# launch.sh: jax.distributed.initialize(coordinator_address=f'{{head}}:8476', \
num_processes={n}, process_id=int(os.environ['SLURM_PROCID']))
I1130 15:20:02.118 distributed.py:127] Connecting to JAX distributed service on jx-h001:8476
2026-11-30 15:25:02.337182: E external/xla/xla/pjrt/distributed/client.cc:80] Failed to connect \
to distributed JAX controller: DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect.
jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect.
srun: error: jx-h001: task 0: Exited with exit code 1
srun: error: jx-h002: task 1: Exited with exit code 1
"""
TWO_TASKS = "JobId=4410772 JobState=FAILED\n   NodeList=jx-h[001-002] NumNodes=2 NumTasks=2\n"


def test_jax_num_processes_other_than_the_tasks_slurm_started_is_the_launch() -> None:
    a = _run(JAX.format(n=4), TWO_TASKS)
    assert (a.kind, a.category, a.culprit_nodes) == (AnomalyKind.HANG, Category.APPLICATION, [])
    assert _stops(a)
    assert _run(JAX.format(n=2), TWO_TASKS).category != Category.APPLICATION


# A wrapper that prints the host before PyTorch's own rank label; the KeyError is raised in the
# job's dataset (pytorch/pytorch#116974), torchrun's summary names the host.
KEYERROR = """\
[node-771][rank0] {'loss': 0.9800, 'learning_rate': 2e-05, 'epoch': 0.00}
[node-773][rank13]: Traceback (most recent call last):
[node-773][rank13]:   File "/home/aj/sft/train.py", line 199, in main
[node-773][rank13]:     trainer.train()
[node-773][rank13]:   File "/opt/conda/lib/python3.11/site-packages/torch/utils/data/_utils/\
fetch.py", line 52, in fetch
[node-773][rank13]:     data = [self.dataset[idx] for idx in possibly_batched_index]
[node-773][rank13]:   File "/home/aj/sft/data.py", line 88, in __getitem__
[node-773][rank13]:     prompt = ex["conversations"][0]["value"]
[node-773][rank13]: KeyError: 'conversations'
E1028 13:44:02.118000 5512 torch/distributed/elastic/multiprocessing/api.py:869] failed \
(exitcode: 1) local_rank: 5 (pid: 5518) of binary: /opt/conda/bin/python
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
Root Cause (first observed failure):
[0]:
  time      : 2026-10-28_13:44:01
  host      : node-773
  rank      : 13 (local_rank: 5)
  exitcode  : 1 (pid: 5518)
============================================================
"""


def test_host_then_rank_prefix_is_peeled() -> None:
    p = strip_prefixes("[node-773][rank13]: KeyError: 'conversations'")
    assert (p.host, p.rank, p.body) == ("node-773", 13, "KeyError: 'conversations'")
    # a log level in brackets is no host
    assert strip_prefixes("[INFO][rank0]: x").host is None


def test_exception_in_the_jobs_own_code_behind_a_host_rank_prefix_is_the_application() -> None:
    a = _run(KEYERROR)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert _stops(a)


# `#SBATCH --ntasks-per-node=8` with `srun torchrun --nproc_per_node 8`: eight launchers per node,
# each trying to host the store on MASTER_PORT; all but the first on the master node fail
# (NVIDIA/Megatron-LM#1371). Each failing process prints c10d's bind warnings, its `[E ...]`
# line and its exception (torch/csrc/distributed/c10d/socket.cpp).
def _bind_failure(port: int) -> str:
    return (
        f"[W0131 09:12:40.762564457 socket.cpp:464] [c10d] The server socket has failed to bind to [::]:{port} (errno: 98 - Address already in use).\n"
        f"[W0131 09:12:40.946485262 socket.cpp:464] [c10d] The server socket has failed to bind to 0.0.0.0:{port} (errno: 98 - Address already in use).\n"
        "[E0131 09:12:40.651104046 socket.cpp:500] [c10d] The server socket has failed to listen on any local network address.\n"
    )  # fmt: skip


RAISED = "torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 12341, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use\n"
LAUNCH = "+ srun torchrun --nproc_per_node 8 --nnodes 16 --node_rank $SLURM_PROCID --master_addr pool0-0101 --master_port 12341 pretrain_gpt.py\n"


def test_several_of_the_jobs_processes_failing_to_host_one_store_port_is_its_launch() -> None:
    job = LAUNCH + _bind_failure(12341) * 7 + RAISED
    job += "srun: error: pool0-0101: tasks 1-7: Exited with exit code 1\n"
    a = _run(job)
    assert (a.kind, a.category, a.culprit_nodes) == ("crash", Category.APPLICATION, [])
    assert "7 of the job's own processes" in a.summary and "port 12341" in a.summary
    assert _stops(a)


def test_labelled_tasks_each_raising_address_in_use_are_counted_by_their_task() -> None:
    # NeMo's Slurm example with a task per GPU (NVIDIA/NeMo#5819): every task but one.
    job = (
        "".join(
            f"{t}: Traceback (most recent call last):\n{t}: RuntimeError: Address already in use\n"
            for t in (1, 2, 3)
        )
        + "srun: error: gpu-q-21: tasks 1-3: Exited with exit code 1\n"
    )
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])


def test_one_process_whose_port_another_holds_stays_the_nodes() -> None:
    # One task, its lines labelled both `0:` and `0: [rank0]:`: one process, not two.
    job = "".join(f"0: {line}\n" for line in _bind_failure(29500).splitlines())
    job += f"0: [rank0]: {RAISED}srun: error: node1: task 0: Exited with exit code 1\n"
    a = _run(job)
    assert a.category == Category.SYSTEM_SOFTWARE


def test_processes_failing_on_different_ports_are_not_one_store_started_twice() -> None:
    a = _run(_bind_failure(29500) + _bind_failure(29501))
    assert a.category != Category.APPLICATION


# accelerate launched once per node with `--machine_rank $SLURM_PROCID` expanded in the batch
# shell: both nodes think they are machine 0 (c10d's own lines, torch/csrc/distributed/c10d/
# socket.cpp, behind pdsh-style host prefixes).
TWO_MASTERS = (
    "gn-0412: [I socket.cpp:787] [c10d] The server socket has started to listen on [::]:29517.\n"
    "gn-0411: [W socket.cpp:601] [c10d] The client socket has timed out after 900s while trying to connect to (gn-0411, 29517).\n"
    "gn-0411: RuntimeError: Socket Timeout\n"
    "gn-0412: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 2/4 clients joined.\n"
    "srun: error: gn-0411: task 0: Exited with exit code 1\n"
    "srun: error: gn-0412: task 1: Exited with exit code 1\n"
)


GN = "JobId=88 JobState=FAILED Reason=NonZeroExitCode NodeList=gn-[0411-0412] NumNodes=2\n"


def test_a_store_on_one_node_while_clients_dial_another_is_the_launch() -> None:
    a = _run(TWO_MASTERS, GN)
    assert (a.kind, a.category, a.culprit_nodes) == ("crash", Category.APPLICATION, [])
    assert "gn-0412" in a.summary and "gn-0411" in a.summary
    assert _stops(a)


def test_a_store_where_the_clients_dial_it_is_no_clash() -> None:
    same = TWO_MASTERS.replace("gn-0412: [I socket", "gn-0411: [I socket")
    a = _run(same, GN)
    assert "disagree on which node is the master" not in a.summary


def _not_local(task: int) -> str:
    # c10d on a node that is not MASTER_ADDR trying to host the store there (errno 99,
    # EADDRNOTAVAIL), as each per-node copy of a launcher whose machine rank came out 0 does.
    return (
        f"{task}: [W socket.cpp:464] [c10d] The server socket has failed to bind to [::]:29500 (errno: 99 - Cannot assign requested address).\n"
        f"{task}: [W socket.cpp:464] [c10d] The server socket has failed to bind to sdil-n01:29500 (errno: 99 - Cannot assign requested address).\n"
        f"{task}: [E socket.cpp:500] [c10d] The server socket has failed to listen on any local network address.\n"
    )


def test_several_processes_each_failing_to_host_the_store_on_another_nodes_address() -> None:
    job = (
        "0: [I socket.cpp:480] [c10d] The server socket has started to listen on [::]:29500.\n"
        + "".join(_not_local(t) for t in (1, 2, 3))
        + "0: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/4 clients joined.\n"
        "srun: error: sdil-n01: task 0: Exited with exit code 1\n"
    )
    a = _run(job, "JobId=2816 JobState=FAILED NodeList=sdil-n[01-04] NumNodes=4\n")
    assert (a.kind, a.category, a.culprit_nodes) == ("crash", Category.APPLICATION, [])
    assert "3 of the job's own processes" in a.summary
    assert _stops(a)


# MACE started as `srun --ntasks-per-node=4 torchrun --nproc_per_node=4`: four torchrun agents
# per node, each hosting the store on MASTER_PORT; the collector kept one process's lines.
PER_NODE_LAUNCH = (
    "# srun --ntasks-per-node=4 torchrun --nproc_per_node=4 mace/cli/run_train.py --distributed\n"
)


def test_one_store_bind_failure_under_several_launchers_per_node_is_the_launch() -> None:
    job = PER_NODE_LAUNCH + _bind_failure(12355) + RAISED.replace("12341", "12355")
    job += "srun: error: gpu4-03: task 0: Exited with exit code 1\n"
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, []), a.summary
    assert "4 of the job's own processes" in a.summary and _stops(a)


def test_one_launcher_per_node_leaves_a_lone_bind_failure_the_nodes() -> None:
    job = PER_NODE_LAUNCH.replace("--ntasks-per-node=4", "--ntasks-per-node=1")
    job += _bind_failure(12355) + RAISED.replace("12341", "12355")
    job += "srun: error: gpu4-03: task 0: Exited with exit code 1\n"
    assert _run(job).category == Category.SYSTEM_SOFTWARE
