"""A job whose own launch cannot work on any nodes: application, stop on the first occurrence.

- Open MPI started by srun without a PMI it can use prints its direct-launch help text on every
  rank (open-mpi/ompi#3778, quoted in open-mpi/ompi#10940): srun's --mpi or the job's MPI.
- A coordinator named by a loopback address in a job of several nodes (jax-ml/jax#19821;
  `--coordinator_address=localhost:12345`): every other node dials itself.
- JAX's start-up barrier timing out for tasks still busy in the job's own set-up (the
  coordination service's "scheduling delays ... Consider setting a longer initialization
  timeout"): the job's preparation outlasts its own timeout.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Attribution, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["j-01", "j-02", "j-03", "j-04"]


def _run(job: str, nodes: list[str] | None = None) -> Attribution:
    return attribute(
        Registry.default(), None, _lines(job), None, [], NODES if nodes is None else nodes,
        node_logs={}, scheduler_lines=[],
    )  # fmt: skip


def _exits(n: int) -> str:
    exit_line = "srun: error: j-0{n}: task {t}: Exited with exit code 1\n"
    return "".join(exit_line.format(n=t + 1, t=t) for t in range(n))


def test_open_mpi_direct_launched_without_pmi_on_every_rank_stops() -> None:
    job = "".join(
        f"{t}: [j-0{t + 1}:9181{t}] OPAL ERROR: Unreachable in file pmix3x_client.c at line 112\n"
        f'{t}: The application appears to have been direct launched using "srun",\n'
        f"{t}: but OMPI was not built with SLURM's PMI support and therefore cannot\n"
        f"{t}: *** An error occurred in MPI_Init_thread\n"
        for t in range(4)
    ) + _exits(4)
    a = _run(job)
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


REFUSED = (
    "{t}: I1201 09:14:12.131102   48840 coordination_service_agent.cc:236] Failed to connect to "
    "coordination service. Retrying: UNAVAILABLE: failed to connect to all addresses; last "
    "error: UNKNOWN: ipv4:127.0.0.1:12345: Failed to connect to remote host: Connection refused\n"
)
BARRIER = (
    "0: Original error: DEADLINE_EXCEEDED: Barrier timed out. Id: "
    "[Init]Wait_for_all_tasks_to_register::0. This usually happens because a task triggered the "
    "barrier too early or too slowly.\n"
)


def _loopback_job(coordinator: str, tasks: int) -> str:
    head = "".join(
        f"{t}: [launcher] host=j-0{t + 1} SLURM_PROCID={t} coordinator={coordinator}\n"
        for t in range(tasks)
    )
    refused = "".join(REFUSED.format(t=t) for t in range(1, tasks))
    return head + refused + BARRIER + _exits(tasks)


def test_a_loopback_coordinator_in_a_job_of_several_nodes_stops() -> None:
    a = _run(_loopback_job("localhost:12345", 4))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert "loopback" in a.summary
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_coordinator_on_another_node_is_not_called_loopback() -> None:
    a = _run(_loopback_job("j-01:12345", 4))
    assert "loopback" not in a.summary


def test_a_loopback_coordinator_on_one_node_is_fine() -> None:
    a = _run(_loopback_job("localhost:12345", 1).replace("j-02", "j-01"), nodes=["j-01"])
    assert "loopback" not in a.summary


def _late(still_busy: bool) -> str:
    setup = "".join(f"{t}: uv sync: resolved 212 packages in 1.2s\n" for t in range(4))
    connect = "".join(
        f"{t}: INFO jax._src.distributed: Connecting to JAX distributed service on j-01:8476\n"
        for t in range(3)
    )
    busy = "3: uv sync: building wheel for flash-attn ... still running\n" if still_busy else ""
    barrier = "".join(
        f"{t}: jaxlib.xla_extension.XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: "
        "PjRT_Client_Connect. # of tasks that reached the barrier: 3/4. The first task at the "
        "barrier: /job:jax_worker/replica:0/task:0. Some timed out task names: "
        "/job:jax_worker/replica:0/task:3\n"
        for t in range(3)
    )
    return setup + connect + busy + barrier + _exits(4)


def test_a_task_still_in_the_jobs_own_setup_at_the_barrier_timeout_is_the_job() -> None:
    a = _run(_late(still_busy=True))
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_a_task_silent_since_its_setup_is_not_called_late() -> None:
    a = _run(_late(still_busy=False))
    assert "set-up" not in a.summary
    assert default_advice(a).kind != AdviceKind.STOP


def test_lightning_members_of_a_larger_world_than_the_tasks_per_node_started() -> None:
    # Lightning's `Initializing distributed: GLOBAL_RANK: 8, MEMBER: 9/16` (lightning_fabric
    # utilities/distributed.py) under `--ntasks-per-node=1` on 2 nodes, until the time limit.
    job = (
        "# sbatch header: #SBATCH --nodes=2  #SBATCH --ntasks-per-node=1  #SBATCH --gres=gpu:8\n"
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16\n"
        "Initializing distributed: GLOBAL_RANK: 8, MEMBER: 9/16\n"
        "slurmstepd: error: *** JOB 9102445 ON j-01 CANCELLED AT 2026-11-18T17:44:12 DUE TO "
        "TIME LIMIT ***\n"
    )
    a = _run(job, nodes=["j-01", "j-02"])
    assert (a.category, a.culprit_nodes) == (Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_as_many_members_as_the_world_is_no_launch_mismatch() -> None:
    job = (
        "# sbatch header: #SBATCH --nodes=2  #SBATCH --ntasks-per-node=8\n"
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16\n"
        "Initializing distributed: GLOBAL_RANK: 8, MEMBER: 9/16\n"
        "slurmstepd: error: *** JOB 9102445 ON j-01 CANCELLED AT 2026-11-18T17:44:12 DUE TO "
        "TIME LIMIT ***\n"
    )
    a = _run(job, nodes=["j-01", "j-02"])
    assert "world" not in a.summary


def test_torchrun_waiting_past_the_time_limit_for_nodes_never_allocated() -> None:
    # `--rdzv_conf=timeout=86400` keeps c10d's rendezvous quiet until Slurm's time limit.
    job = (
        "+ srun -l torchrun --nnodes=8 --nproc_per_node=8 --rdzv_backend=c10d "
        "--rdzv_endpoint=j-01:29500 --rdzv_conf=timeout=86400 train.py\n"
        "0:   min_nodes        : 8\n"
        "slurmstepd: error: *** JOB 884122 ON j-01 CANCELLED AT 2026-11-20T12:00:00 DUE TO "
        "TIME LIMIT ***\n"
        + "".join(f"srun: error: j-0{t + 1}: task {t}: Terminated\n" for t in range(4))
    )
    a = _run(job)
    assert (a.kind, a.category, a.culprit_nodes) == ("hang", Category.APPLICATION, [])
    assert default_advice(a).kind == AdviceKind.STOP


def test_torchrun_asking_for_the_nodes_it_has_is_a_plain_time_limit() -> None:
    job = (
        "+ srun -l torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend=c10d "
        "--rdzv_endpoint=j-01:29500 train.py\n"
        "slurmstepd: error: *** JOB 884122 ON j-01 CANCELLED AT 2026-11-20T12:00:00 DUE TO "
        "TIME LIMIT ***\n"
        + "".join(f"srun: error: j-0{t + 1}: task {t}: Terminated\n" for t in range(4))
    )
    a = _run(job)
    assert a.category == Category.SCHEDULER
