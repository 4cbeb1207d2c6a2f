"""Global ranks vs srun tasks: torchrun/accelerate/DeepSpeed run several ranks under one srun
task per node, so rank 3 of 32 is on the first node, not on srun task 3's node."""

from __future__ import annotations

from resurgo.attribute.topology import learn_topology
from resurgo.contracts import LogLine

NODES = ["cn-0411", "cn-0412", "cn-0413", "cn-0414"]


def lines(text: str) -> list[LogLine]:
    return [
        LogLine(source="job.log", line_no=n, text=t)
        for n, t in enumerate(text.strip("\n").split("\n"), 1)
    ]


# Unlabelled PyTorch `[rankN]:` lines from 32 ranks, srun's verdict per node (one task each).
FAILURES = """[rank12] OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/x'
[rank3] OSError: [Errno 108] Cannot send after transport endpoint shutdown: '/y'
[rank27] OSError: [Errno 5] Input/output error: '/z'
srun: error: cn-0412: task 1: Exited with exit code 1
srun: error: cn-0411: task 0: Exited with exit code 1
srun: error: cn-0414: task 3: Exited with exit code 1
srun: error: cn-0413: task 2: Exited with exit code 1"""


def test_more_ranks_than_tasks_without_a_layout_names_no_node() -> None:
    topo = learn_topology(lines(FAILURES), NODES)
    assert topo.node_of(None, 3) is None  # not srun task 3's node (cn-0414)
    assert topo.node_of(None, 27) is None
    assert topo.node_of(3, None) == "cn-0414"  # srun's own task 3 still is


def test_torchrun_nproc_per_node_places_ranks_by_block_layout() -> None:
    # torch/distributed/run.py command line as a batch script echoes it (`set -x`).
    text = (
        "+ srun torchrun --nnodes=4 --nproc_per_node=8 --rdzv_backend=c10d "
        "--rdzv_endpoint=cn-0411:29500 train.py\n" + FAILURES
    )
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 3) == "cn-0411"
    assert topo.node_of(None, 12) == "cn-0412"
    assert topo.node_of(None, 27) == "cn-0414"


def test_elastic_launch_config_nproc_per_node() -> None:
    # torch/distributed/launcher/api.py logs its LaunchConfig before starting the workers.
    config = """  entrypoint       : train.py
  min_nodes        : 4
  max_nodes        : 4
  nproc_per_node   : 8
  run_id           : 4242
  rdzv_backend     : c10d
"""
    head = (
        "[2024-05-01 10:00:00,000] torch.distributed.launcher.api: [INFO] "
        "Starting elastic_operator with launch configs:\n"
    )
    text = head + config + FAILURES
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 3) == "cn-0411"
    assert topo.node_of(None, 20) == "cn-0413"


def test_world_size_over_nodes_is_the_layout() -> None:
    text = "[rank0] MASTER_ADDR=cn-0411 MASTER_PORT=29500 WORLD_SIZE=32 RANK=0\n" + FAILURES
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 3) == "cn-0411"
    assert topo.node_of(None, 12) == "cn-0412"


def test_root_cause_that_contradicts_the_block_layout_stops_it() -> None:
    # c10d rendezvous may give node ranks in any order: the agent's summary is the truth.
    text = (
        "+ srun torchrun --nnodes=4 --nproc_per_node=8 train.py\n"
        + FAILURES
        + """
Root Cause (first observed failure):
[0]:
  time      : 2024-10-22_06:18:55
  host      : cn-0413
  rank      : 11 (local_rank: 3)
  exitcode  : 1 (pid: 4220)
  error_file: <N/A>"""
    )
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 11) == "cn-0413"
    assert topo.node_of(None, 3) is None  # the layout would say cn-0411: not certain


def test_local_rank_above_zero_with_one_task_per_node_means_ranks_are_not_tasks() -> None:
    text = """Root Cause (first observed failure):
[0]:
  host      : cn-0412
  rank      : 11 (local_rank: 3)
  exitcode  : 1 (pid: 37881)
[rank3] RuntimeError: NCCL communicator was aborted"""
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 11) == "cn-0412"
    assert topo.node_of(None, 3) is None


def test_torchrun_default_label_under_a_host_prefix() -> None:
    # `--tee 3` labels each local rank `[defaultN]:`; a pdsh-style wrapper adds the host.
    text = """cn-0412: [default3]:[rank11]: RuntimeError: CUDA error: an illegal memory access was encountered
cn-0412: [default0]:[rank8]: step 10
cn-0411: [default0]:[rank0]: step 10
[rank3] RuntimeError: NCCL communicator was aborted"""  # noqa: E501
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 11) == "cn-0412"
    assert topo.node_of(None, 3) is None  # not task 3's cn-0414


def test_deepspeed_global_rank_mapping() -> None:
    # deepspeed/launcher/launch.py prints the rank of every process per host.
    text = """[2023-11-29 02:47:32,331] [INFO] [launch.py:145:main] WORLD INFO DICT: {'cn-0411': [0, 1], 'cn-0412': [0, 1]}
[2023-11-29 02:47:32,331] [INFO] [launch.py:151:main] nnodes=2, num_local_procs=2, node_rank=0
[2023-11-29 02:47:32,332] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, {'cn-0411': [0, 1], 'cn-0412': [2, 3]})
[rank1] RuntimeError: CUDA error: an illegal memory access was encountered"""  # noqa: E501
    topo = learn_topology(lines(text), NODES[:2], num_tasks=2)
    assert topo.node_of(None, 1) == "cn-0411"
    assert topo.node_of(None, 3) == "cn-0412"


def test_accelerate_processes_over_machines() -> None:
    text = (
        "+ srun accelerate launch --num_processes 32 --num_machines 4 --machine_rank 0 "
        "--main_process_ip cn-0411 --main_process_port 29500 train.py\n" + FAILURES
    )
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 27) == "cn-0414"
    assert topo.node_of(None, 3) == "cn-0411"


def test_one_rank_per_task_still_maps_rank_to_task() -> None:
    text = """[rank3] RuntimeError: CUDA error: uncorrectable ECC error encountered
srun: error: cn-0414: task 3: Exited with exit code 1
srun: error: cn-0411: task 0: Exited with exit code 1"""
    topo = learn_topology(lines(text), NODES, num_tasks=4)
    assert topo.node_of(None, 3) == "cn-0414"


def test_srun_ntasks_per_node_local_rank_is_slurm_localid() -> None:
    # 8 tasks per node: LOCAL_RANK above 0 does not mean a launcher per node.
    text = """[rank11] LOCAL_RANK=3 RANK=11 WORLD_SIZE=32
[rank11] RuntimeError: CUDA error: uncorrectable ECC error encountered"""
    topo = learn_topology(lines(text), NODES, num_tasks=32)
    assert topo.node_of(None, 11) == "cn-0412"


def test_mpirun_host_slots_place_ranks_and_an_absurd_list_is_not_expanded() -> None:
    # Open MPI `-H host:slots` fills each host's slots in order; the line is the job user's
    # text, so a host list claiming millions of slots is read as no placement at all.
    from resurgo.attribute.rank_layout import RankEvidence

    ev = RankEvidence()
    ev.read("+ mpirun -np 16 -H gpu-m01:8,gpu-m02:8 python train.py", None, None)
    assert (ev.mapped[7], ev.mapped[8], len(ev.mapped)) == ("gpu-m01", "gpu-m02", 16)
    hostile = RankEvidence()
    hosts = ",".join(f"h{i}:9999" for i in range(200))
    hostile.read(f"+ mpirun -H {hosts} python x.py", None, None)
    assert hostile.mapped == {}
