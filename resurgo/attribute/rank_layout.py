"""How a job's global ranks sit on its nodes when a launcher starts several per srun task.

torchrun, accelerate and DeepSpeed start one launcher per node (one srun task) and N worker
processes under it, so with NumTasks=4 the ranks run 0..31 and rank 3 is on the first node,
not on srun task 3's. What the output can tell us, read here:

- torchrun's `--nproc_per_node=8` / `--nproc-per-node 8` and the elastic agent's launch config
  (`nproc_per_node    : 8`, torch/distributed/launcher/api.py); DeepSpeed's launcher
  `nnodes=4, num_local_procs=8, node_rank=0` and its
  `global_rank_mapping=defaultdict(<class 'list'>, {'node1': [0, 1], ...})` (deepspeed/launcher/
  launch.py); accelerate's `--num_processes 32 --num_machines 4` (accelerate/commands/launch.py);
- a local rank next to a global rank (`rank : 11 (local_rank: 3)` in the elastic agent's
  `Root Cause` block, `LOCAL_RANK=3 ... RANK=11`, torchrun's `[default3]:` label under a
  `[rank11]:` one): above 0 with one srun task per node, ranks are not tasks; and a block
  layout must put rank 11 at local slot 3;
- the world size the processes print (`WORLD_SIZE=32`, `world_size=32`) over the node count.

Ranks are placed by the block layout (ranks_per_node consecutive ranks per node, in node-list
order) only when the per-node count is known and every placement the log proves agrees with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_NPROC = re.compile(r"\bnproc[_-]per[_-]node\"?[=\s:]+\"?(?P<n>\d{1,4})\b")
_DS_LOCAL = re.compile(r"\bnum_local_procs=(?P<n>\d{1,4})\b")
_ACC_PROCS = re.compile(r"--num[_-]processes[=\s]+(?P<n>\d{1,6})\b")
_ACC_MACHINES = re.compile(r"--num[_-]machines[=\s]+(?P<n>\d{1,5})\b")
_RANK_WORLD = re.compile(r"\b(?:WORLD_SIZE|world_size|world size)\"?[=\s:]+\"?(?P<n>\d{1,6})\b")
# `rank : 11 (local_rank: 3)`, `RANK=11 LOCAL_RANK=3`, `local_rank=3 ... rank=11`.
_RANK_THEN_LOCAL = re.compile(
    r"(?<![_\w])(?:global_)?rank\"?\s*[=:]\s*(?P<rank>\d{1,7})\b.{0,80}?"
    r"\blocal[_ ]rank\"?\s*[=:]\s*(?P<local>\d{1,5})\b",
    re.IGNORECASE,
)
_LOCAL_THEN_RANK = re.compile(
    r"\blocal[_ ]rank\"?\s*[=:]\s*(?P<local>\d{1,5})\b.{0,80}?"
    r"(?<![_\w])(?:global_)?rank\"?\s*[=:]\s*(?P<rank>\d{1,7})\b",
    re.IGNORECASE,
)
# `mpirun -np 16 -H gpu-m01:8,gpu-m02:8` / `horovodrun -np 8 -H a:4,b:4`: with slots given for
# every host, ranks fill each host's slots in order (Open MPI mpirun(1) "--map-by slot"
# default across nodes; Horovod's running guide).
_MPI_HOSTS = re.compile(
    r"\b(?:mpirun|mpiexec|horovodrun)\b.*?(?:-H|--host)[=\s]+(?P<hosts>[\w.-]+:\d{1,4}"
    r"(?:,[\w.-]+:\d{1,4})*)(?![\w.:,-])"
)
# More ranks than any job runs: a host list claiming them is not a launch line to map.
MAX_MAPPED_RANKS = 65536
_DS_MAPPING = re.compile(r"\bglobal_rank_mapping=defaultdict\(<class 'list'>, \{(?P<body>.*)\}\)")
_DS_HOST_RANKS = re.compile(r"'(?P<host>[^']+)': \[(?P<ranks>[\d, ]*)\]")


@dataclass
class RankEvidence:
    """What the output says about ranks per node, gathered line by line."""

    per_node: set[int] = field(default_factory=set)
    world: set[int] = field(default_factory=set)
    local_of: dict[int, int] = field(default_factory=dict)
    max_local: int = -1
    mapped: dict[int, str] = field(default_factory=dict)
    """Rank → host as the launcher printed it (DeepSpeed's global_rank_mapping)."""

    def read(self, body: str, rank: int | None, local: int | None) -> None:
        """One line's body, with the rank and `[defaultN]` local rank its prefixes gave."""
        if local is not None:
            self.max_local = max(self.max_local, local)
            if rank is not None:
                self.local_of.setdefault(rank, local)
        if "proc" in body:
            if (m := _NPROC.search(body)) or (m := _DS_LOCAL.search(body)):
                self.per_node.add(int(m["n"]))
            if (p := _ACC_PROCS.search(body)) and (q := _ACC_MACHINES.search(body)):
                procs, machines = int(p["n"]), int(q["n"])
                if machines > 0 and procs % machines == 0:
                    self.per_node.add(procs // machines)
        if ("WORLD" in body or "world" in body) and (w := _RANK_WORLD.search(body)):
            self.world.add(int(w["n"]))
        lowered = body.lower()
        if "local" in lowered and "rank" in lowered:
            m2 = _RANK_THEN_LOCAL.search(body) or _LOCAL_THEN_RANK.search(body)
            if m2:
                self.local_of.setdefault(int(m2["rank"]), int(m2["local"]))
                self.max_local = max(self.max_local, int(m2["local"]))
        if ("-H" in body or "--host" in body) and (m4 := _MPI_HOSTS.search(body)):
            placed = [
                (h, int(n)) for h, _, n in (x.rpartition(":") for x in m4["hosts"].split(","))
            ]
            if sum(n for _h, n in placed) <= MAX_MAPPED_RANKS:  # (a line is the job user's text)
                rank = 0
                for host, slots in placed:
                    for _slot in range(slots):
                        self.mapped.setdefault(rank, host)
                        rank += 1
        if "global_rank_mapping" in body and (m3 := _DS_MAPPING.search(body)):
            for pair in _DS_HOST_RANKS.finditer(m3["body"]):
                for r in pair["ranks"].split(","):
                    if r.strip().isdigit():
                        self.mapped.setdefault(int(r), pair["host"])

    def several_per_task(self, tasks: int | None, nodes: int) -> bool:
        """The log proves more than one rank per srun task (so a rank is not a task): a
        launcher's per-node count above 1, or a local rank above 0 with one task per node
        (under `srun --ntasks-per-node=8` LOCAL_RANK is SLURM_LOCALID and ranks are tasks)."""
        if any(n > 1 for n in self.per_node):
            return True
        return self.max_local > 0 and tasks is not None and nodes > 0 and tasks <= nodes

    def ranks_per_node(self, nodes: int, num_tasks: int | None) -> int | None:
        """Consecutive ranks per node, when the output makes it certain; else None."""
        if len(self.per_node) == 1:
            return next(iter(self.per_node))
        if self.per_node or nodes <= 0 or len(self.world) != 1:
            return None
        world = next(iter(self.world))
        if world % nodes or (num_tasks and world <= num_tasks):
            return None
        return world // nodes


def rank_layout(
    evidence: RankEvidence,
    node_list: list[str],
    known: dict[int, str],
    ranks: set[int],
    num_tasks: int | None,
) -> dict[int, str]:
    """Each rank's node by the block layout, or {} when the layout is not certain or the
    placements the log proves (`known`, local ranks) disagree with it."""
    per = evidence.ranks_per_node(len(node_list), num_tasks)
    if not per or len(node_list) < 2:
        return {}
    for rank, node in known.items():
        index = rank // per
        if index >= len(node_list) or node_list[index] != node:
            return {}
    for rank, local in evidence.local_of.items():
        if rank % per != local:
            return {}
    world = next(iter(evidence.world)) if len(evidence.world) == 1 else per * len(node_list)
    if ranks and max(ranks) >= per * len(node_list):
        return {}
    return {r: node_list[r // per] for r in ranks | set(range(world)) if r // per < len(node_list)}
