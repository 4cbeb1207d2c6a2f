"""Which node ran which task/rank, learned from what the job's output says.

Sources, strongest first: srun's own `srun: error: <node>: task <n>: ...` lines; lines that name
both a rank/task and a known node (`rank=1 ... node=node2`, NCCL's `host:pid:tid [dev]` prefix,
`slurmstepd-<node>:` under a task label); the torchelastic `Root Cause`/`Failures` blocks
(`host : ...` + `rank : ...`); and last Slurm's default block layout of the job's tasks over its
node list. Host names are mapped onto Slurm node names (short name, NodeHostName/NodeAddr).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from resurgo.attribute.rank_layout import RankEvidence, rank_layout
from resurgo.contracts import LogLine
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

SRUN_TASK = re.compile(
    r"srun: error: (?P<node>[\w.\-\[\],]+): tasks? (?P<tasks>[\d,\-]+): (?P<what>.+?)\s*$"
)
# `rank=1 ... node=node2`, `[rank 1/4 host=node2]`, JSON `"rank": 1, ..., "node": "node2"`.
_RANK_NODE = re.compile(
    r"\b(?:global_)?rank\"?[=\s:]+(?P<rank>\d+)\b.{0,120}?"
    r"\b(?:node|host|hostname|nodename)\"?[=\s:]+\"?(?P<node>[A-Za-z0-9][\w.-]*)"
)
_NODE_RANK = re.compile(
    r"\b(?:node|host|hostname|nodename)\"?[=\s:]+\"?(?P<node>[A-Za-z0-9][\w.-]*)\b.{0,120}?"
    r"\b(?:global_)?rank\"?[=\s:]+(?P<rank>\d+)\b"
)
_STEPD = re.compile(r"^slurmstepd(?:-(?P<node>[\w.-]+))?: ")
_ELASTIC_HOST = re.compile(r"^\s*host\s*:\s*(?P<node>[\w.-]+)\s*$")
_ELASTIC_RANK = re.compile(r"^\s*rank\s*:\s*(?P<rank>\d+)")
_HOST_PREFIX = re.compile(r"^(?P<host>[A-Za-z][\w.-]{0,62}): (?=\S)")
_NOT_HOST = re.compile(
    r"(?i)^(?:srun|slurmstepd.*|sbatch|salloc|error|warning|warn|info|debug|fatal|note|"
    r"traceback|nccl|gloo|torch.*|python\d*|bash|sh|rank\d*|node|host|step\d*|iter\w*|epoch\d*|"
    r".*(?:error|exception|warning))$"
)
# A host's own address, as NCCL and launchers print it: `NET/IB : Using ... ; OOB ib0:10.9.0.12<0>`,
# `Bootstrap : Using ib0:10.9.0.12<0>`, DeepSpeed's `Using IP address of 10.9.0.12 for node h`.
_OWN_ADDRESS = re.compile(
    r"(?:\bOOB |Bootstrap ?: Using )\w[\w.-]*:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<"
)
_LAUNCHER_ADDRESS = re.compile(
    r"\bUsing IP address of (?P<ip>\d{1,3}(?:\.\d{1,3}){3}) for node (?P<node>[\w.-]+)"
)
_WORLD = re.compile(r"\b(?:world|world_size|WORLD_SIZE|ntasks|num_tasks)[=:\s]+(?P<n>\d{1,6})\b")


def detect_host_prefixes(lines: Iterable[LogLine], hosts: HostMap) -> frozenset[str]:
    """Host names used as a `host: ` line prefix (pdsh/clush style, or a wrapper's)."""
    counts: dict[str, int] = {}
    for index, entry in enumerate(lines):
        if index > 50_000:
            break
        body = strip_prefixes(entry.text).body
        if ": " in body and (m := _HOST_PREFIX.match(body)):  # (its literal first)
            counts[m.group("host")] = counts.get(m.group("host"), 0) + 1
    out: set[str] = set()
    loose: dict[str, int] = {}
    for host, n in counts.items():
        if _NOT_HOST.match(host):
            continue
        if hosts.nodes:
            if hosts.canonical(host):
                out.add(host)
        elif any(c.isdigit() for c in host):
            loose[host] = n
    # Without a node list, host-like prefixes count when they recur (several hosts, or often).
    if loose and (sum(loose.values()) >= 3 and (len(loose) >= 2 or max(loose.values()) >= 3)):
        out |= set(loose)
    return frozenset(out)


def split_host_prefix(text: str, prefixes: frozenset[str]) -> tuple[str | None, str]:
    """`node2: [rank1]: boom` → ("node2", "[rank1]: boom") when node2 is a known prefix."""
    if not prefixes:
        return None, text
    m = _HOST_PREFIX.match(text)
    if m and m.group("host") in prefixes:
        return m.group("host"), text[m.end() :]
    return None, text


def expand_nodes(expr: str) -> list[str]:
    """A Slurm hostlist (`gpu[001-002],dgx-b-07`) as node names; what is not a valid
    hostlist is kept as one name (minus stray brackets)."""
    expr = expr.strip().strip(":").rstrip(",.")
    if "[" not in expr and "," not in expr:
        return [expr] if expr else []
    try:
        return expand_hostlist(expr)
    except ParseError:
        return [expr.strip("[]")]


def task_nodes(node_expr: str, tasks: list[int]) -> list[tuple[int, str]]:
    """Which node each task of one srun verdict line ran on: `gpu[001-002]: tasks 0-1` names
    two nodes for two tasks (in order); more tasks than nodes fill each node in turn."""
    nodes = expand_nodes(node_expr)
    if not nodes:
        return []
    if len(nodes) == 1 or len(nodes) >= len(tasks):
        return [(t, nodes[min(i, len(nodes) - 1)] if len(nodes) > 1 else nodes[0])
                for i, t in enumerate(tasks)]  # fmt: skip
    per = -(-len(tasks) // len(nodes))
    return [(t, nodes[min(i // per, len(nodes) - 1)]) for i, t in enumerate(tasks)]


def expand_tasks(spec: str) -> list[int]:
    """`0-2,5` → [0, 1, 2, 5]."""
    out: list[int] = []
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit():
            if hi.isdigit() and int(hi) >= int(lo) and int(hi) - int(lo) < 100_000:
                out.extend(range(int(lo), int(hi) + 1))
            else:
                out.append(int(lo))
    return out


@dataclass
class HostMap:
    """Maps host names seen in logs and file names onto the job's Slurm node names."""

    nodes: list[str] = field(default_factory=list)
    aliases: dict[str, str] = field(default_factory=dict)

    def canonical(self, host: str | None) -> str | None:
        """The Slurm node name for `host`, or None if it is not one of the job's nodes.

        Without a node list every plausible host name is accepted as it is.
        """
        if not host:
            return None
        host = host.strip().strip("[]:")
        if not host or host in ("localhost", "127.0.0.1"):
            return None
        if not self.nodes:
            if host in self.aliases:
                return self.aliases[host]
            if re.fullmatch(r"[\d.]+", host):
                return host
            return host.split(".", 1)[0]
        if host in self.nodes:
            return host
        lowered = host.lower()
        for name in self.nodes:
            if name.lower() == lowered:
                return name
        short = lowered.split(".", 1)[0]
        for name in self.nodes:
            if name.lower().split(".", 1)[0] == short:
                return name
        alias = self.aliases.get(host) or self.aliases.get(short)
        return alias if alias in self.nodes else None


@dataclass
class Topology:
    task_node: dict[int, str] = field(default_factory=dict)
    rank_node: dict[int, str] = field(default_factory=dict)
    tasks_seen: set[int] = field(default_factory=set)
    ranks_seen: set[int] = field(default_factory=set)
    hosts_seen: set[str] = field(default_factory=set)
    host_prefixes: frozenset[str] = frozenset()
    labelled: bool = False
    """Whether the output carries srun -l task labels."""
    rank_is_task: bool = False
    """No labels, one process per srun task: a rank prefix names the srun task too."""
    ranks_are_tasks: bool = False
    """Nothing says a launcher runs several ranks per srun task (torchrun/accelerate/DeepSpeed
    under one task per node): a global rank may be looked up as a task index."""
    world: int | None = None
    hosts: HostMap = field(default_factory=HostMap)

    def node_of(self, task: int | None, rank: int | None) -> str | None:
        if task is not None and task in self.task_node:
            return self.task_node[task]
        if rank is not None and rank in self.rank_node:
            return self.rank_node[rank]
        if (
            task is None
            and rank is not None
            and self.ranks_are_tasks
            and rank in self.task_node
            and not self.rank_node
        ):
            return self.task_node[rank]  # srun without labels: rank == task
        return None

    def actors(self) -> set[str]:
        """Every process the log shows (srun tasks if labelled, else ranks)."""
        if self.tasks_seen:
            return {f"t{t}" for t in self.tasks_seen}
        if self.ranks_seen:
            return {f"r{r}" for r in self.ranks_seen}
        return {f"h{h}" for h in self.hosts_seen}

    def world_size(self) -> int | None:
        seen = len(self.tasks_seen) or len(self.ranks_seen) or len(self.hosts_seen)
        if self.world:
            return max(self.world, seen)
        return seen or None


def learn_topology(
    lines: Iterable[LogLine],
    node_list: list[str],
    *,
    num_tasks: int | None = None,
    aliases: Mapping[str, str] | None = None,
) -> Topology:
    hosts = HostMap(list(node_list), dict(aliases or {}))
    topo = Topology(hosts=hosts)
    strong: dict[int, str] = {}
    weak_task: dict[int, str] = {}
    weak_rank: dict[int, str] = {}
    worlds: list[int] = []
    pending_host: str | None = None
    evidence = RankEvidence()
    lines = list(lines)
    topo.host_prefixes = detect_host_prefixes(lines, hosts)
    host_prefixes = topo.host_prefixes
    for entry in lines:
        text, prefix_host = entry.text, None
        if host_prefixes:
            prefix_host, text = split_host_prefix(text, host_prefixes)
        pre = strip_prefixes(text)
        task, rank, body = pre.task, pre.rank, pre.body
        if (
            prefix_host is None
            and pre.host is not None
            and (not hosts.nodes or hosts.canonical(pre.host))
        ):
            prefix_host = pre.host
        if prefix_host is not None:
            topo.hosts_seen.add(prefix_host)
            node = hosts.canonical(prefix_host)
            if node and task is not None:
                weak_task.setdefault(task, node)
            elif node and rank is not None:
                weak_rank.setdefault(rank, node)
        if task is not None:
            topo.tasks_seen.add(task)
            topo.labelled = True
        if rank is not None:
            topo.ranks_seen.add(rank)
        evidence.read(body, rank, pre.local_rank)
        if "srun: error" in body and (m := SRUN_TASK.search(body)):
            for t, name in task_nodes(m.group("node"), expand_tasks(m.group("tasks"))):
                topo.tasks_seen.add(t)
                if node := hosts.canonical(name):
                    strong.setdefault(t, node)
            continue
        if (
            task is not None
            and body.startswith("slurmstepd")
            and (m := _STEPD.match(body))
            and m.group("node")
        ):
            node = hosts.canonical(m.group("node"))
            if node:
                weak_task.setdefault(task, node)
            continue
        nccl = parse_nccl_prefix(text)
        if nccl is not None:
            node = hosts.canonical(nccl.host)
            if node:
                if task is not None:
                    weak_task.setdefault(task, node)
                elif rank is not None:
                    weak_rank.setdefault(rank, node)
                if (own := _OWN_ADDRESS.search(nccl.rest)) is not None:
                    hosts.aliases.setdefault(own.group("ip"), node)
        elif (
            "IP address" in body
            and (m1 := _LAUNCHER_ADDRESS.search(body))
            and (node := hosts.canonical(m1.group("node"))) is not None
        ):
            hosts.aliases.setdefault(m1.group("ip"), node)
        lowered = body.lower()
        m2 = None
        if "rank" in lowered and ("node" in lowered or "host" in lowered):
            m2 = _RANK_NODE.search(body) or _NODE_RANK.search(body)
        if m2:
            node = hosts.canonical(m2.group("node"))
            if node:
                said = int(m2.group("rank"))
                weak_rank.setdefault(said, node)
                topo.ranks_seen.add(said)
                if task is not None:
                    weak_task.setdefault(task, node)
        if ("world" in lowered or "tasks" in lowered) and (w := _WORLD.search(body)):
            worlds.append(int(w.group("n")))
        if "host" in body and (m3 := _ELASTIC_HOST.match(body)):
            pending_host = hosts.canonical(m3.group("node"))
        elif pending_host and (m4 := _ELASTIC_RANK.match(body)):
            weak_rank.setdefault(int(m4.group("rank")), pending_host)
            pending_host = None
    for said, host in evidence.mapped.items():
        if (node := hosts.canonical(host)) is not None:
            weak_rank.setdefault(said, node)
    topo.task_node = {**weak_task, **strong}
    topo.rank_node = weak_rank
    several = _several_ranks_per_task(topo, evidence, num_tasks)
    if not topo.labelled and topo.ranks_seen and topo.tasks_seen and not several:
        # srun verdicts without labels: ranks are tasks when the counts agree.
        tasks = num_tasks or (max(topo.tasks_seen) + 1)
        topo.rank_is_task = (
            max(topo.ranks_seen) < tasks
            and (num_tasks is None or num_tasks >= len(topo.ranks_seen))
            and len(topo.tasks_seen) > 1
        )
        if topo.rank_is_task:
            for rank, node in weak_rank.items():
                topo.task_node.setdefault(rank, node)
            topo.tasks_seen |= topo.ranks_seen
    topo.ranks_are_tasks = not several
    if several:
        # Ranks are not tasks: place them by their own layout when it is certain, else not at all.
        placed = rank_layout(evidence, node_list, weak_rank, topo.ranks_seen, num_tasks)
        for said, node in placed.items():
            topo.rank_node.setdefault(said, node)
    if num_tasks:
        topo.world = num_tasks
    elif worlds:
        topo.world = max(worlds)
    _block_layout(topo, node_list)
    return topo


def _several_ranks_per_task(topo: Topology, evidence: RankEvidence, num_tasks: int | None) -> bool:
    """Whether the log shows more ranks than srun tasks (a launcher per node under srun)."""
    tasks = num_tasks or (max(topo.tasks_seen) + 1 if topo.tasks_seen else None)
    if evidence.several_per_task(tasks, len(topo.hosts.nodes)):
        return True
    if not tasks:
        return False
    if topo.ranks_seen and max(topo.ranks_seen) >= tasks:
        return True
    return any(w > tasks for w in evidence.world) if num_tasks else False


def _block_layout(topo: Topology, node_list: list[str]) -> None:
    """Slurm's default distribution: consecutive tasks fill one node before the next."""
    if not node_list:
        return
    total = topo.world or (max(topo.tasks_seen) + 1 if topo.tasks_seen else 0)
    if total <= 0:
        return
    if len(node_list) == 1:
        per_node = total
    elif total % len(node_list) == 0:
        per_node = total // len(node_list)
    else:
        per_node = -(-total // len(node_list))
    # Known placements must agree with the layout, or it is not the layout in use.
    for task, node in topo.task_node.items():
        index = task // max(per_node, 1)
        if index >= len(node_list) or node_list[index] != node:
            return
    for task in topo.tasks_seen | set(range(total)):
        index = task // max(per_node, 1)
        if index < len(node_list):
            topo.task_node.setdefault(task, node_list[index])


# A node's own addresses as its own files show them: `ip addr`'s `inet 10.1.4.43/24`, Ray's
# processes started with `--node_ip_address=10.1.4.43` (ray start; raylet's command line in
# `ps`). Ray prefixes its workers' lines with only the address (`(WorkerDict pid=1, ip=...)`).
_FILE_OWN_ADDRESS = re.compile(
    r"\binet (?P<ip>\d{1,3}(?:\.\d{1,3}){3})/\d{1,2}\b|--node[-_]ip[-_]address[= ]"
    r"(?P<ray>\d{1,3}(?:\.\d{1,3}){3})\b"
)
MAX_ADDRESS_LINES = 2000


def addresses_in_node_files(node_logs: Mapping[str, list[LogLine]]) -> dict[str, str]:
    """Address -> host, from the addresses each host's own files say it has (an address two
    hosts claim is left out: a file quoting another host's command line)."""
    seen: dict[str, set[str]] = {}
    for host, lines in node_logs.items():
        for entry in lines[:MAX_ADDRESS_LINES]:
            if "inet " not in entry.text and "ip_address" not in entry.text.replace("-", "_"):
                continue
            for m in _FILE_OWN_ADDRESS.finditer(entry.text):
                ip = m.group("ip") or m.group("ray")
                if ip and not ip.startswith("127."):
                    seen.setdefault(ip, set()).add(host)
    return {ip: next(iter(hosts)) for ip, hosts in seen.items() if len(hosts) == 1}
