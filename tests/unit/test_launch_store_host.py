"""A rendezvous store the job's launch points outside its own allocation.

Line formats (public sources): torch/csrc/distributed/c10d socket.cpp `[E socket.cpp:957] [c10d]
The client socket has timed out after 60s while trying to connect to (HOST, PORT).` and
torch.distributed.elastic's `RendezvousConnectionError: The connection to the C10d store has
failed.` (pytorch/pytorch#79388, #107021). torchrun's c10d and static rendezvous serve the store
from the agent on the endpoint's host, so a host outside the job never answers: the job's
launch arguments (attribution-labels.md tie-breaker 6), stop.
"""

from __future__ import annotations

from resurgo.attribute.log_header import nodes_in_log
from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

HEAD = "SLURM_JOB_NODELIST=gpu-bm-[13-14]\n"
LAUNCH = "+ srun torchrun --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint={host}:29500 train.py\n"
FAILURE = """\
{t}: [E socket.cpp:957] [c10d] The client socket has timed out after 60s while trying to connect \
to ({host}, 29500).
{t}: torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the \
C10d store has failed. See inner exception for details.
"""
EXITS = """\
srun: error: gpu-bm-13: task 0: Exited with exit code 1
srun: error: gpu-bm-14: task 1: Exited with exit code 1
"""


def _job(launch_host: str, failed_host: str, head: str = HEAD) -> str:
    fails = "".join(FAILURE.format(t=t, host=failed_host) for t in (0, 1))
    return head + LAUNCH.format(host=launch_host) + fails + EXITS


def _run(job: str) -> Attribution:
    lines = _lines(job)
    return attribute(Registry.default(), None, lines, None, [], nodes_in_log(lines))


def test_slurms_own_node_list_stands_whatever_the_launch_points_at() -> None:
    assert nodes_in_log(_lines(_job("login02", "login02"))) == ["gpu-bm-13", "gpu-bm-14"]


def test_a_store_endpoint_outside_the_allocation_is_the_jobs_launch_and_stops() -> None:
    a = _run(_job("login02", "login02"))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_store_on_one_of_the_jobs_nodes_is_not_the_launch() -> None:
    a = _run(_job("gpu-bm-13", "gpu-bm-13"))
    assert a.category != Category.APPLICATION


def test_the_store_under_another_name_of_a_job_node_is_not_the_launch() -> None:
    a = _run(_job("gpu-bm-13-ib", "gpu-bm-13-ib"))
    assert a.category != Category.APPLICATION


def test_a_store_host_the_job_never_chose_is_not_the_launch() -> None:
    job = _job("login02", "login02").replace(LAUNCH.format(host="login02"), "")
    a = _run(job)
    assert a.category != Category.APPLICATION


def test_newer_pytorchs_timeout_in_milliseconds_is_read_the_same() -> None:
    # Newer c10d prints the duration with its unit: `timed out after 60000ms while trying to
    # connect to (gpu017, 29400)`.
    job = _job("login02", "login02").replace("timed out after 60s", "timed out after 60000ms")
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP
