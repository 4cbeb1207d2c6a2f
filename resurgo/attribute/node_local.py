"""Which node's own state a node-software failure comes from, when its peers printed it.

A setting, version or process that differs on one node breaks the job for everybody talking to
that node, and the failing lines are often printed by the peers (attribution-labels.md:
system_software covers a RoCE GID changed by DHCP, mixed NCCL versions, leftover processes of
earlier jobs; a node whose local state caused the failure is named). Once a stage has settled on
`system_software` without naming a node, these joins look for the odd node:

- the common end of the failing connections: every failing queue pair or socket names one
  peer (its GID or address), reported from two or more other nodes (NCCL's `ibv_modify_qp ...
  local GID ..., remote GID ...`, `Got completion from peer`);
- the one node loading a different NCCL than the rest of the job (each host's `NCCL version`);
- the node whose own diagnostics list the process an OOM message names as holding the GPU's
  memory (PyTorch's `Process 48812 has 36.02 GiB memory in use`, `nvidia-smi
  --query-compute-apps`, `ps`);
- the node(s) whose own files show a node-scoped software fault (a DHCP lease lost, a missing
  kernel module) while the others' are clean.

Never all of the job's nodes: the same state on every node leaves nothing to exclude.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.causes import LIBRARY_BUGS, _version_drift
from resurgo.attribute.events import _CORRECTED
from resurgo.attribute.gpu_count import fewer_gpus_than_peers
from resurgo.attribute.setting_owner import GENERIC_NCCL_IDS, job_owned_transport
from resurgo.attribute.silent_until_end import killed_at
from resurgo.attribute.topology import split_host_prefix
from resurgo.contracts import HARDWARE_CATEGORIES, AnomalyKind, Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix
from resurgo.policy.decide import NO_RETRY_HELPS_KEY

# NCCL's verbs errors name both ends of a queue pair: `local GID ::ffff:10.60.2.12, remote GID
# fe80::9a03:9bff:fe5c:21f0` (misc/ibvwrap.cc) and `localGid ::ffff:10.3.0.12
# remoteGids::ffff:10.3.0.11` (transport/net_ib.cc).
_GID_PAIR = re.compile(
    r"\blocal ?Gid:? ?(?P<local>[0-9a-fA-F:.]{3,45})\b,? "
    r"remote ?Gids?:? ?(?P<remote>[0-9a-fA-F:.]{3,45})",
    re.IGNORECASE,
)
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_MAPPED_V4 = re.compile(r"^::ffff:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})$", re.IGNORECASE)
# Peers a node names in a failing connection (`NCCL WARN ... from peer 10.3.0.11<43122>`,
# `Connection closed by remote peer gpu-x03<56718>`).
_PEER = re.compile(r"\b(?:from|by remote|by) peer (?P<peer>[\w.:-]+?)<\d+>")
# A failure to reach another end (a queue pair that timed out, a peer named): the reporter is
# not shown to be the node at fault, so its own ranks reporting it name no node by themselves.
_REACHING_PEER = re.compile(
    r"\bremote ?Gids?\b|\bpeer [\w.:-]+<\d+>|failed with (?:error )?(?:110\b|Connection timed out)",
    re.IGNORECASE,
)
_OOM_HOLDER = re.compile(r"\bProcess (?P<pid>\d+) has (?P<gib>\d+(?:\.\d+)?) GiB memory in use")
MIN_HELD_GIB = 1.0
HARDWARE = frozenset(HARDWARE_CATEGORIES)
_NCCL_EVENT = re.compile(r"(?i)\bnccl")


def name_node_local(a: Analysis, v: Verdict) -> Verdict:
    """`v` naming the node whose own state explains a node-software failure, where one does;
    else, a generic NCCL setup failure about a setting the job's own script sets is the job's
    (`setting_owner`)."""
    return job_owned_transport(a, _name_node_local(a, _drifted_nccl(a, v)))


def _drifted_nccl(a: Analysis, v: Verdict) -> Verdict:
    """NCCL's generic `unhandled system error` (filed under the network for want of a better
    guess) while one node loads a different NCCL than the rest: that node's software (NCCL
    versions must match across nodes, NVIDIA/nccl#286; attribution-labels.md lists mixed NCCL
    versions under system_software)."""
    if v.category != Category.HARDWARE_NETWORK or v.culprits:
        return v
    if v.key.split("|", 1)[0] not in GENERIC_NCCL_IDS:
        return v
    if any(e.hardware and e.root and e.serious for e in a.node_events):
        return v  # (a node's own link or HCA failed: the hardware it is)
    found = _nccl_drift(a, v)
    if found is None or not _named_fairly(a, found[0]):
        return v
    v.category = Category.SYSTEM_SOFTWARE
    return v


def _known_nodes(a: Analysis) -> set[str]:
    """The job's nodes: Slurm's list, else the nodes srun reported on, the job's own output
    names as reporters and the bundle holds files of."""
    if a.node_list:
        return set(a.node_list)
    known = {x.node for x in a.scan.exit_order if x.node}
    known |= {n for h in a.node_logs if (n := a.topo.hosts.canonical(h)) is not None}
    return known | {n for e in a.events if e.origin == "job" and (n := e.node) is not None}


def _named_fairly(a: Analysis, nodes: list[str]) -> bool:
    """Some of the job's nodes, never all of them (the same state everywhere leaves nothing
    to exclude)."""
    named = {n for n in nodes if a.in_job(n)}
    known = _known_nodes(a)
    return bool(named) and not (len(known) >= 2 and named >= known)


def _name_node_local(a: Analysis, v: Verdict) -> Verdict:
    if v.category != Category.SYSTEM_SOFTWARE or v.key == NO_RETRY_HELPS_KEY:
        return v
    if v.key.startswith("oom|held_by_other") and _memory_holder(a, v) is not None:
        # The node that lists the process holding the memory is direct evidence; where srun's
        # exit order guessed another node, this wins.
        v.culprits = []
    if v.culprits:
        return v
    if v.key.startswith("shared|"):
        return v  # a shared service failed for several nodes: no node to blame
    finders: list[Callable[[Analysis, Verdict], tuple[list[str], str, list[LogLine]] | None]] = [
        _common_peer,
        _nccl_drift,
        _memory_holder,
        _node_files,
        _odd_node_error,
    ]
    for find in finders:
        found = find(a, v)
        if found is None:
            continue
        nodes, why, evidence = found
        nodes = sorted({n for n in nodes if a.in_job(n)})
        # (Without Slurm's node list, the nodes srun reported on stand for the job's.)
        known = set(a.job_nodes())
        if not nodes or (len(known) >= 2 and set(nodes) >= known):
            continue
        if find is _odd_node_error and not _named_fairly(a, nodes):
            continue
        v.culprits = nodes
        v.summary = f"{v.summary} ({why})"
        v.evidence = [*evidence, *v.evidence]
        v.confidence = max(v.confidence, 0.8)
        return v
    return v


def _owner(a: Analysis, gid: str, own: dict[str, str]) -> str | None:
    if gid in own:
        return own[gid]
    m = _MAPPED_V4.match(gid)
    return a.topo.hosts.canonical(m["ip"]) if m is not None else None


def _reporter(a: Analysis, entry: LogLine) -> str | None:
    host, text = split_host_prefix(entry.text, a.topo.host_prefixes)
    nccl = parse_nccl_prefix(text)
    return a.topo.hosts.canonical(nccl.host if nccl is not None else host)


def _common_peer(a: Analysis, v: Verdict) -> tuple[list[str], str, list[LogLine]] | None:
    """One end common to every failing connection, named from two or more other nodes."""
    pairs: list[tuple[str, str, str, LogLine]] = []  # (reporter, local id, remote id, line)
    own: dict[str, str] = {}
    for e in a.events:
        if not (e.root or e.cascade) or e.origin != "job":
            continue
        reporter = event_node(a, e) or _reporter(a, e.line)
        if reporter is None:
            continue
        if (m := _GID_PAIR.search(e.line.text)) is not None:
            local, remote = m["local"].lower(), m["remote"].lower()
            own.setdefault(local, reporter)
            pairs.append((reporter, local, remote, e.line))
        elif (p := _PEER.search(e.line.text)) is not None:
            pairs.append((reporter, f"host:{reporter}", p["peer"].lower(), e.line))
    if len(pairs) < 2:
        return None
    named: dict[str, set[str]] = {}
    for reporter, _local, remote, _line in pairs:
        named.setdefault(remote, set()).add(reporter)
    for remote, reporters in sorted(named.items(), key=lambda kv: -len(kv[1])):
        owner = _owner(a, remote, own) or a.topo.hosts.canonical(remote)
        if owner is None and _IPV4.fullmatch(ip := remote.removeprefix("::ffff:")):
            owner = ip  # (an address no node name maps: whose files hold it, below)
        if owner is not None and _IPV4.fullmatch(owner):
            owner = _address_holder(a, owner)  # an address is never a node to exclude
        if owner is None:
            continue
        others = reporters - {owner}
        if len(others) < 2:
            continue
        # Every failing connection has this end (or is the owner's own failing side).
        ids = {remote, *(k for k, n in own.items() if n == owner)}
        if all(local in ids or r in ids or rep == owner for rep, local, r, _ in pairs):
            lines = [line for _rep, _l, r, line in pairs if r == remote][:4]
            return [owner], f"every failing connection ends at {owner}", lines
    return None


def _address_holder(a: Analysis, ip: str) -> str | None:
    """The one node whose own files (`ip addr`, `show_gids`, its NetworkManager journal) carry
    `ip`, when no node list maps addresses to names; None when none or several do."""
    token = re.compile(rf"(?<![\d.]){re.escape(ip)}(?![\d.])")
    holders = {
        node
        for host, lines in a.node_logs.items()
        if (node := a.topo.hosts.canonical(host)) is not None
        and any(token.search(line.text) for line in lines)
    }
    return holders.pop() if len(holders) == 1 else None


def _nccl_drift(a: Analysis, v: Verdict) -> tuple[list[str], str, list[LogLine]] | None:
    """An NCCL failure while one node loads a different NCCL than the rest of the job."""
    if not any(
        e.serious and (e.root or e.cascade) and _NCCL_EVENT.search(e.match.id + " " + e.message)
        for e in a.events
    ):
        return None
    odd = _version_drift(a)
    if not odd:
        return None
    return odd, f"NCCL version differs on {', '.join(odd)}", []


def _odd_node_error(a: Analysis, v: Verdict) -> tuple[list[str], str, list[LogLine]] | None:
    """The node(s) whose own ranks print a node-scoped software error that recurs (the CUDA
    driver too old for the runtime, a module missing from the image) while the job's other
    nodes print none of their own, only what follows from it (the store they wait on):
    that node's image differs from its peers' (attribution-labels.md: a driver/library
    mismatch is system_software; a node whose local state caused the failure is named)."""
    own: dict[str, LogLine] = {}
    others: set[str] = set()
    for e in a.events:
        if e.origin != "job" or not (e.root and e.serious) or _REACHING_PEER.search(e.line.text):
            continue
        if e.match.id in LIBRARY_BUGS:
            continue
        scoped = e.match.id in a.registry and a.registry.get(e.match.id).scope == "node"
        recurs = scoped and a.registry.get(e.match.id).determinism == "recurs"
        if e.node is None:
            if recurs and e.category == Category.SYSTEM_SOFTWARE:
                return None  # (printed by ranks of unknown nodes too: maybe everywhere)
            continue
        if e.category == Category.SYSTEM_SOFTWARE and recurs:
            own.setdefault(e.node, e.line)
        elif scoped:
            others.add(e.node)
    if not own or others - set(own) or len(_known_nodes(a) - set(own)) == 0:
        return None
    nodes = sorted(own)
    return nodes, f"only {', '.join(nodes)}'s own ranks report it", list(own.values())


def _memory_holder(a: Analysis, v: Verdict) -> tuple[list[str], str, list[LogLine]] | None:
    """The node whose own diagnostics list the process an OOM says holds the GPU's memory."""
    pids = {
        m["pid"]
        for e in a.events
        if e.match.id == "cuda_oom"
        for m in _OOM_HOLDER.finditer(e.line.text)
        if float(m["gib"]) >= MIN_HELD_GIB
    }
    if not pids:
        return None
    found: dict[str, LogLine] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None:
            continue
        for entry in lines:
            if any(re.search(rf"(?<![\w.:/-]){pid}(?![\w.:/-])", entry.text) for pid in pids):
                found.setdefault(node, entry)
                break
    if len(found) != 1:
        return None
    node, line = next(iter(found.items()))
    return [node], f"{node} lists the process holding the GPU's memory", [line]


def _node_files(a: Analysis, v: Verdict) -> tuple[list[str], str, list[LogLine]] | None:
    """Nodes whose own files show a node-scoped software fault the job's output does not."""
    # A node's copy of the failure the job's output shows (slurmstepd's pyxis error in the
    # node's journal) says nothing about which node differs.
    in_job_log: dict[str, set[str | None]] = {}
    for e in a.events:
        if e.origin == "job":
            in_job_log.setdefault(e.match.id, set()).add(event_node(a, e))
    hit: dict[str, LogLine] = {}
    for e in a.node_events:
        # (A node-scoped fault the job's output shows without a node, or on this node only,
        # is placed by the one node whose own logs carry it.)
        placed = in_job_log.get(e.match.id)
        scope = a.registry.get(e.match.id).scope if e.match.id in a.registry else ""
        if placed is not None and (scope != "node" or bool(placed - {None, e.node})):
            continue
        if not (e.root and e.serious and e.category == Category.SYSTEM_SOFTWARE):
            continue
        if e.node is None or not a.in_job(e.node):
            continue
        # (Signatures only node-side files carry, such as Fabric Manager's systemd unit
        # failing, are about the node that logged them.)
        if e.match.id in a.registry and a.registry.get(e.match.id).scope != "node":
            continue
        hit.setdefault(e.node, e.line)
    if not hit:
        return None
    nodes = sorted(hit)
    return (
        nodes,
        f"{', '.join(nodes)}'s own logs show {', '.join(nodes)} broken",
        list(hit.values()),
    )


# A drain reason about the node's software (NHC's non-hardware checks, a mount, a daemon).
_SOFTWARE_DRAIN = re.compile(
    r"(?i)\bcheck_(?!hw_)\w+|\bnot mounted\b|\bmount\b|\bdaemon\b|\bnot running\b|"
    r"\bhostengine\b|\bslurmd\b|\bmunge\b|\bfilesystem\b|\bfile system\b"
)


def explain_unknown(a: Analysis, v: Verdict) -> Verdict:
    """An `unknown` verdict that names a node (the first to die, the silent one) made specific
    by that node's own state: a hardware Xid in its files that is no failure by itself (Xid 63
    row-remap pending, Xid 92 single-bit error rate; attribution-labels.md lists 63 under
    hardware_gpu), or a drain for a software reason (NHC's non-hardware checks)."""
    if v.category == Category.UNKNOWN and a.state == "OUT_OF_MEMORY":
        # Slurm's own verdict: a step exceeded its memory cgroup (sacct OUT_OF_MEMORY, shown
        # truncated as OUT_OF_ME+), the job's memory use like the oom_kill event it stands for.
        return Verdict(
            Category.APPLICATION, "oom|slurm_state", f"{v.summary}: Slurm ended the job "
            "OUT_OF_MEMORY (a step exceeded its memory limit)", 0.85,
            ranks=v.ranks, evidence=v.evidence, kind=v.kind, outcome=v.outcome,
        )  # fmt: skip
    if v.category == Category.UNKNOWN and not v.culprits and v.kind == AnomalyKind.HANG:
        # A hang with no node named, until Slurm or its owner ended it: one of the job's nodes
        # whose kernel reports its task blocked (D state in a driver's call, hung_task) is
        # where it stuck, its software (the catalogue's category for hung_task).
        # (Tasks blocked only after Slurm's kill are its teardown: processes slow to die.)
        end = _killed_at(a)
        blocked = [e for e in a.node_events
                   if e.match.id in _BLOCKED_TASK and e.node is not None and a.in_job(e.node)
                   and not (end is not None and e.when is not None and e.when > end)]  # fmt: skip
        if len({e.node for e in blocked}) == 1 and (node := blocked[0].node) is not None:
            return Verdict(
                Category.SYSTEM_SOFTWARE, f"{v.key}|blocked_task", f"{v.summary}; {node}'s "
                "kernel reports the job's task blocked (hung_task)", max(v.confidence, 0.6),
                culprits=[node], evidence=[blocked[0].line, *v.evidence],
                kind=v.kind,  # (the node, not the limit or the cancel, decides: no outcome)
            )  # fmt: skip
    if v.category != Category.UNKNOWN or len(v.culprits) != 1:
        return v
    node = v.culprits[0]
    if (listing := fewer_gpus_than_peers(a, node)) is not None:
        v.category = Category.HARDWARE_GPU
        v.summary = f"{v.summary}; {node} lists fewer GPUs than the job's other nodes"
        v.evidence = [listing, *v.evidence]
        return v
    for host, lines in a.node_logs.items():
        if a.topo.hosts.canonical(host) != node:
            continue
        for entry in lines:
            for m in a.registry.scan(entry.text):
                # (An Xid the catalogue files under hardware but not as a failure by itself;
                # NVRM's `GPU at PCI:` banner and corrected errors say nothing.)
                if (
                    m.category in HARDWARE
                    and m.groups.get("xid")
                    and not _CORRECTED.search(entry.text)
                ):
                    v.category = m.category
                    v.summary = f"{v.summary}; {node}'s own logs show {m.id}"
                    v.evidence = [entry, *v.evidence]
                    return v
    for e in a.node_events:
        node_scoped = e.match.id not in a.registry or a.registry.get(e.match.id).scope == "node"
        if (
            e.node == node and e.root and e.serious and node_scoped
            and e.category == Category.SYSTEM_SOFTWARE
        ):  # fmt: skip
            # (The node's own software broke: a service it needs failed, its driver.)
            v.category = Category.SYSTEM_SOFTWARE
            v.summary = f"{v.summary}; {node}'s own logs show {e.match.id}"
            v.evidence = [e.line, *v.evidence]
            return v
    for name, record in a.facts.nodes.items():
        if a.topo.hosts.canonical(name) == node and _SOFTWARE_DRAIN.search(record.reason or ""):
            return _software(v, node, record.reason)
    for r in a.facts.reasons:
        if a.topo.hosts.canonical(r.node) == node and _SOFTWARE_DRAIN.search(r.reason):
            return _software(v, node, r.reason)
    return v


def first_exit_unnamed(v: Verdict) -> Verdict:
    """The first task to exit without a word stays `unknown` when nothing on its node explained
    it: being first is no evidence against the node, so none is excluded (attribution-labels.md
    names nodes without a known cause only for a NODE_FAIL node and an agent that never
    started). Its task and line stay in the record; the stages before read the node to look
    for such an explanation."""
    if v.category == Category.UNKNOWN and v.key.startswith("exit|"):
        v.culprits = []
    return v


def _killed_at(a: Analysis) -> datetime | None:
    """When Slurm's kill line says it ended the job (naive, as node events are dated)."""
    said = killed_at([a.lines[a.kill_order]]) if a.kill_order is not None else None
    return datetime.fromisoformat(said) if said is not None else None


# The kernel's hung-task watchdog (kernel/hung_task.c: `INFO: task python3:20941 blocked for
# more than 120 seconds.`).
_BLOCKED_TASK = frozenset({"kernel_hung_task"})


def _software(v: Verdict, node: str, reason: str) -> Verdict:
    v.category = Category.SYSTEM_SOFTWARE
    v.summary = f"{v.summary}; {node} was drained: {reason[:120]}"
    v.confidence = max(v.confidence, 0.7)
    return v


# Path errors a lost file-system client produces (attribution-labels.md: filesystem outages are
# system_software), and the client faults that explain them in a node's own logs.
PATH_ERRORS = frozenset({"file_not_found", "permission_denied", "container_image_file_missing"})
FS_CLIENT_FAULTS = frozenset(
    {
        "lustre_error",
        "lustre_connection_lost",
        "nfs_not_responding",
        "fs_stale_handle",
        "fs_transport_shutdown",
        "fs_io_error",
        "nhc_fs_not_mounted",
        "fs_mount_failed",
    }
)


def path_error_after_fs_loss(a: Analysis, v: Verdict) -> Verdict:
    """A path the job reads missing or forbidden on nodes whose own logs show their file-system
    client losing its servers just before: the file system, not the job's configuration (an
    evicted Lustre client or a hung NFS mount answers ENOENT/EACCES/EIO). One such node is that
    node's client (excluded); several are the file system's outage (no culprit)."""
    if v.category != Category.APPLICATION:
        return v
    shown = {(x.source, x.line_no) for x in v.evidence}
    failed = [
        e for e in a.events
        if e.match.id in PATH_ERRORS and (e.line.source, e.line.line_no) in shown
    ]  # fmt: skip
    nodes = {n for e in failed if (n := event_node(a, e)) is not None}
    if not failed or not nodes:
        return v
    lost = {
        e.node: e for e in a.node_events
        if e.match.id in FS_CLIENT_FAULTS and e.node in nodes and e.root
    }  # fmt: skip
    if set(lost) != nodes:
        return v
    culprits = sorted(nodes) if len(nodes) == 1 and len(a.node_list) != 1 else []
    first = next(iter(lost.values()))
    return Verdict(
        Category.SYSTEM_SOFTWARE, f"fs_client|{first.match.id}",
        f"{v.summary}: {', '.join(sorted(nodes))}'s file-system client lost its servers "
        f"({first.match.id})", 0.75, culprits=culprits, ranks=v.ranks,
        evidence=[e.line for e in lost.values()] + v.evidence, kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
