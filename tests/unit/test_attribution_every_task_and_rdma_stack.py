"""An error printed by fewer processes than failed, where srun says every task exited with an
error of its own; a rendezvous endpoint on the loopback (Debian's 127.0.1.1); UCX's mlx5
transport refused by the node's kernel RDMA stack on every node; and the UCX and Open MPI line
prefixes that name the host.

Real formats: Ignite's `_setup_env_in_slurm` RuntimeError (pytorch/ignite
ignite/distributed/comp_models/native.py), srun's `srun: error: host: tasks 0-3: Exited with
exit code 1`, c10d's `The client socket has failed to connect to [127.0.1.1]:29500 (errno: 111
- Connection refused).`, UCX's `[epoch] [host:pid:tid] file:line UCX ERROR ...` (openucx/ucx
src/ucs/debug/log.c) with `mlx5dv_devx_create_event_channel() failed: Protocol not supported`
(openucx/ucx#7229), Open MPI's `[host:pid] ...pml_ucx.c:309 Error: Failed to create UCP
worker`."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from resurgo.detect.lines import strip_prefixes
from tests.log_lines import attribute_text, first_action

IGNITE_TRACE = """\
Traceback (most recent call last):
  File "/work/check_env.py", line 41, in <module>
    with idist.Parallel(backend="nccl") as parallel:
  File "/usr/local/lib/python3.8/dist-packages/ignite/distributed/comp_models/native.py", line 496, in _setup_env_in_slurm
RuntimeError: Defined env variables '['RANK', 'LOCAL_RANK', 'WORLD_SIZE']' should not be specified with SLURM.
"""


def test_an_error_every_task_exited_with_is_everywhere_though_printed_twice() -> None:
    job = IGNITE_TRACE * 2 + (
        "srun: error: s17: tasks 0-3: Exited with exit code 1\n"
        "srun: error: s11: tasks 4-7: Exited with exit code 1\n"
    )
    a = attribute_text(job, ["s17", "s11"])
    assert a.category == Category.APPLICATION
    assert first_action(a) == "stop"


def test_the_same_error_with_other_tasks_terminated_is_not_everywhere() -> None:
    job = IGNITE_TRACE * 2 + (
        "srun: error: s17: task 0: Exited with exit code 1\n"
        "srun: error: s17: tasks 1-3: Terminated\n"
        "srun: error: s11: tasks 4-7: Terminated\n"
    )
    a = attribute_text(job, ["s17", "s11"])
    assert first_action(a) != "stop" or a.confidence < 0.85


LOOPBACK_JOB = """\
+ srun torchrun --nnodes 2 --nproc_per_node 8 --rdzv_id 101 --rdzv_backend c10d --rdzv_endpoint 127.0.1.1:29500 ./train.py
[W124 18:02:10.611203120 socket.cpp:697] [c10d] The client socket has failed to connect to [127.0.1.1]:29500 (errno: 111 - Connection refused).
[W124 18:02:12.612440551 socket.cpp:697] [c10d] The client socket has failed to connect to [127.0.1.1]:29500 (errno: 111 - Connection refused).
torch.distributed.DistNetworkError: The client socket has timed out after 60000ms while trying to connect to (127.0.1.1, 29500).
srun: error: worker-1: task 1: Exited with exit code 1
srun: error: worker-0: task 0: Exited with exit code 1
"""


def test_a_rendezvous_endpoint_anywhere_on_the_loopback_is_the_launch() -> None:
    a = attribute_text(LOOPBACK_JOB, ["worker-0", "worker-1"])
    assert a.category == Category.APPLICATION
    assert first_action(a) == "stop"


UCX_JOB = """\
[1667558352.118402] [gpu07:131398:0]      rc_mlx5_devx.c:99   UCX  ERROR mlx5dv_devx_create_event_channel() failed: Protocol not supported
[1667558352.118977] [gpu08:84411:0]      rc_mlx5_devx.c:99   UCX  ERROR mlx5dv_devx_create_event_channel() failed: Protocol not supported
[gpu07:131398] ../../../../../ompi/mca/pml/ucx/pml_ucx.c:309  Error: Failed to create UCP worker
[gpu08:84411] ../../../../../ompi/mca/pml/ucx/pml_ucx.c:309  Error: Failed to create UCP worker
[1667558352.121001] [gpu07:131398:0]         ucp_worker.c:1446 UCX  ERROR failed to create iface: Input/output error
srun: error: gpu07: task 0: Exited with exit code 1
srun: error: gpu08: task 1: Exited with exit code 1
"""


def test_ucx_refused_by_the_kernel_rdma_stack_on_every_node_is_the_sites_no_retry() -> None:
    a = attribute_text(UCX_JOB, ["gpu07", "gpu08"])
    assert (a.category, sorted(a.culprit_nodes)) == (Category.SYSTEM_SOFTWARE, ["gpu07", "gpu08"])
    assert first_action(a) == "stop"


def test_ucx_refused_on_one_node_of_two_is_that_node() -> None:
    one = "".join(line + "\n" for line in UCX_JOB.splitlines() if "gpu08:84411" not in line)
    a = attribute_text(
        one.replace("task 1: Exited with exit code 1", "task 1: Terminated"), ["gpu07", "gpu08"]
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gpu07"])


def test_ucx_and_open_mpi_prefixes_name_the_host_and_time() -> None:
    ucx = strip_prefixes(
        "[1667558352.118402] [gpu07:131398:0]      rc_mlx5_devx.c:99   UCX  ERROR x"
    )
    assert (ucx.host, ucx.body) == ("gpu07", "rc_mlx5_devx.c:99   UCX  ERROR x")
    assert ucx.time is not None and ucx.time.startswith("2022-11-04T10:39:12")
    ompi = strip_prefixes(
        "[gpu07:131398] ../ompi/mca/pml/ucx/pml_ucx.c:309  Error: Failed to create UCP worker"
    )
    assert (ompi.host, ompi.body) == (
        "gpu07",
        "../ompi/mca/pml/ucx/pml_ucx.c:309  Error: Failed to create UCP worker",
    )
    # a kernel log's uptime and a word in brackets are no host and no epoch
    assert strip_prefixes("[12345.678901] mlx5_core 0000:3b:00.0: link down").host is None
    assert strip_prefixes("[worker:12] text").host is None
