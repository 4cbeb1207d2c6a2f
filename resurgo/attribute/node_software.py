"""The node whose own software state broke the job, where a stage named none or the wrong one.

attribution-labels.md: system_software covers full local disks and NCCL/network
misconfiguration (SOCKET_IFNAME, a RoCE GID changed by DHCP); culprit_nodes are the hosts
whose hardware or node-local software state caused the failure. Four joins:

- a full node-local disk (ENOSPC on /tmp & co.): the node whose own `df` shows that mount at
  100%, else the one node whose tasks srun saw fail (`name_full_disk`);
- NCCL's bootstrap advertising, on one node, an interface none of the others uses (a libvirt
  bridge `virbr0`, a docker bridge): every failing connect goes to that node's address, so it
  is that node's interface setup, not the network of the node that reported it
  (`odd_bootstrap_interface`; NCCL picks the first non-loopback, non-docker interface unless
  NCCL_SOCKET_IFNAME says otherwise);
- peers' verbs errors towards one node whose own logs show its address replaced by DHCP just
  before (its RoCE GID derives from the address): that node's configuration, not a link
  (`gid_changed_by_dhcp`);
- a GPU fault pasted into the job's output by an operator (`# ... NVRM: Xid ...`) without a
  host: the host whose process id the Xid names (NCCL's `host:pid:tid` prefix), or the host the
  note says the kernel log is from (`name_pasted_gpu_fault`).

Before them, `site_software` decides whose software failed on every node: the job's own
container (application) or the site's image (every node named, no retry helps).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.leftover_gpu_processes import leftover_gpu_processes
from resurgo.attribute.name_resolution import odd_name_resolution
from resurgo.attribute.net_plugin import odd_net_plugin
from resurgo.attribute.odd_transport import (
    bootstrap_on_a_bridge,
    gid_changed_under_slowdown,
    mtu_below_peers,
    node_without_ib,
)
from resurgo.attribute.package_versions import odd_nccl_package
from resurgo.attribute.shm_size import shm_too_small
from resurgo.attribute.site_software import (
    container_without_gpus,
    jobs_own_container,
    site_software_everywhere,
)
from resurgo.attribute.stages_common import NETWORKISH
from resurgo.attribute.unroutable_address import VIRTUAL_INTERFACE, unroutable_advertised
from resurgo.contracts import Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix

_LOCAL_MOUNT = re.compile(
    r"^(?:/tmp|/var/tmp|/dev/shm|/local|/localscratch|/local_scratch|/scratch/local|/raid|"
    r"/nvme|/mnt/local|"
    r"/lscratch|/ssd)\b"
)
# `df -h` rows: `/dev/nvme0n1p3  100G  100G     0 100% /tmp`.
_DF_FULL = re.compile(r"^\S+\s+\S+\s+\S+\s+\S+\s+(?:99|100)%\s+(?P<mount>/\S*)\s*$")
_DF_ROW = re.compile(r"^\S+\s+\S+\s+\S+\s+\S+\s+\d{1,3}%\s+(?P<mount>/\S*)\s*$")
# NCCL's `Bootstrap : Using ib0:10.12.7.7<0>` and `NET/Socket : Using [0]eth0:10.0.0.1<0>`.
_BOOTSTRAP = re.compile(
    r"\bBootstrap ?: Using (?:\[\d+\])?(?P<ifname>[\w.@-]+):(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<"
)
_CONNECT_TO = re.compile(
    r"\b(?:socketStartConnect|socketConnect|socketPollConnect): Connect to "
    r"(?P<ip>\d{1,3}(?:\.\d{1,3}){3})<\d+> failed"
)
_XID_PID = re.compile(r"\bNVRM: Xid \([^)]*\): \d+, pid=(?P<pid>\d+)")
_NOTE_HOST = re.compile(
    r"^#\s*(?:kernel log|dmesg|journal|syslog|console)\b.{0,20}?\bof\s+(?P<host>[\w.-]+)", re.I
)
_REMOVED_IP = re.compile(r"\baddress (?P<ip>\d{1,3}(?:\.\d{1,3}){3}) (?:removed|lease expired)")
DHCP_IDS = frozenset({"dhcp_address_changed"})
_DHCP_RECORD = re.compile(r"(?i)\bdhcp|\blease\b")
# A lease a node's DHCP client took (dhclient `DHCPACK of IP` / `bound to IP`, NetworkManager
# `dhcp4 (IF): address IP`): by itself a routine renewal, so no catalogue entry; it says the
# address changed only when peers' failing connections go to another address of that subnet
# that no node of the job holds.
# Newer NetworkManager prints the lease with its state change (`dhcp4 (eth0): state changed
# extended -> extended, address=192.168.1.50`, home-assistant/operating-system#2341),
# systemd-networkd `eth0: DHCPv4 address 10.193.102.105/24, gateway ... acquired from`
# (systemd/systemd#16071).
_LEASE = re.compile(
    r"\b(?:(?:DHCPACK of|bound to|dhcp4 \(\S+\): address|DHCPv4 address) "
    r"|dhcp4 \(\S+\): state changed [\w >-]{1,40}, address=)(?P<ip>\d{1,3}(?:\.\d{1,3}){3})\b"
)
_FAILED_TOWARDS = re.compile(
    r"(?:remote ?Gids?:? ?::ffff:|peer )(?P<ip>\d{1,3}(?:\.\d{1,3}){3})\b", re.I
)


def node_software(a: Analysis, v: Verdict) -> Verdict:
    """`v` with the node (and category) its own software state says, where one does."""
    for join in (jobs_own_container, container_without_gpus, site_software_everywhere,
                 shm_too_small, name_full_disk, odd_bootstrap_interface, gid_changed_by_dhcp,
                 name_pasted_gpu_fault, odd_net_plugin, odd_name_resolution,
                 gid_index_not_roce_v2_ipv4, device_broken_under_the_error,
                 odd_nccl_package, node_without_ib, gid_changed_under_slowdown,
                 mtu_below_peers, bootstrap_on_a_bridge, unroutable_advertised,
                 leftover_gpu_processes):  # fmt: skip
        v = join(a, v)
    return v


def _fits(a: Analysis, nodes: list[str]) -> bool:
    known = a.job_nodes()
    return bool(nodes) and all(a.in_job(n) for n in nodes) and (
        len(known) < 2 or set(nodes) < set(known)
    )  # fmt: skip


# A write the job's checkpointing or output failed (the catalogue's entries for it).
# (ENOSPC itself too: a local disk full shows in its node's own df, which decides below)
WRITE_FAILURES = frozenset({"checkpoint_write_failed", "fs_no_space"})


def name_full_disk(a: Analysis, v: Verdict) -> Verdict:
    if v.category != Category.SYSTEM_SOFTWARE or v.culprits:
        return v
    if (local := _write_failed_on_full_local_disk(a, v)) is not None:
        return local
    shown = {(x.source, x.line_no) for x in v.evidence}
    full = [
        e for e in a.events
        if e.match.id == "fs_no_space" and (e.line.source, e.line.line_no) in shown
        and re.search(r"['\"\s](?:/tmp|/var/tmp|/dev/shm|/local|/raid|/nvme|/ssd)\b", e.message)
    ]  # fmt: skip
    if not full or any(e.checkpoint_save for e in full):
        # (A checkpoint only the saving rank writes says nothing about whose disk is full.)
        return v
    nodes = _full_local_disks(a)
    why = "its own df shows the local disk full"
    if not nodes:
        failed = {
            x.node: x.line for x in a.scan.exit_order
            if x.node and x.status == "exit" and x.code and not x.after_termination
        }  # fmt: skip
        nodes, why = (failed, "the only node whose tasks failed") if len(failed) == 1 else ({}, "")
    if not _fits(a, sorted(nodes)):
        return v
    v.culprits = sorted(nodes)
    v.summary = f"{v.summary} ({', '.join(v.culprits)}: {why})"
    v.evidence = [*nodes.values(), *v.evidence]
    v.confidence = max(v.confidence, 0.8)
    return v


def _full_local_disks(a: Analysis) -> dict[str, LogLine]:
    """Node → its first `df` row showing a node-local mount full, from its own files."""
    return a.once("local_disks", lambda: _local_disks(a))[0]


def _checked_local_disks(a: Analysis) -> set[str]:
    """Nodes whose own files show a `df` row of a node-local mount, full or not."""
    return a.once("local_disks", lambda: _local_disks(a))[1]


def _local_disks(a: Analysis) -> tuple[dict[str, LogLine], set[str]]:
    """One pass over the node files' `df` rows of node-local mounts: each node's first full
    one, and every node that showed any."""
    full: dict[str, LogLine] = {}
    checked: set[str] = set()
    for host, lines in a.node_logs.items():
        if (node := a.topo.hosts.canonical(host)) is None:
            continue
        for entry in lines:
            m = _DF_ROW.match(entry.text.strip())
            if m and _LOCAL_MOUNT.match(m["mount"]):
                checked.add(node)
                if _DF_FULL.match(entry.text.strip()):
                    full.setdefault(node, entry)
    return full, checked


def _write_failed_on_full_local_disk(a: Analysis, v: Verdict) -> Verdict | None:
    """A write that failed on one node's ranks only, where that node's own `df` shows a
    node-local disk full and no other node's does: that node's disk (an earlier job's leftovers,
    a failed epilogue cleanup), not the shared file system."""
    failed = {e.node for e in a.events if e.match.id in WRITE_FAILURES and e.root and e.node}
    full = _full_local_disks(a)
    # Or several nodes print the error (a coordinator re-raises its peers' failures, as
    # torch.distributed.checkpoint's rank 0 does), while the df of every node checked shows
    # only one of them full.
    if len(full) != 1 or not set(full) <= failed or not _fits(a, sorted(full)):
        return None
    if len(failed) > 1 and len(_checked_local_disks(a)) < 2:
        return None
    (node,) = full
    return Verdict(
        Category.SYSTEM_SOFTWARE, v.key, f"{v.summary} ({node}: its own df shows a node-local "
        "disk full)", max(v.confidence, 0.8), culprits=[node], ranks=v.ranks,
        evidence=[full[node], *v.evidence], kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


def odd_bootstrap_interface(a: Analysis, v: Verdict) -> Verdict:
    if v.category not in NETWORKISH:
        return v
    used: dict[str, tuple[str, str, LogLine]] = {}  # host -> (interface, address, line)
    targets: dict[str, LogLine] = {}
    for entry in a.lines:
        if "Connect to" in entry.text and (c := _CONNECT_TO.search(entry.text)):
            targets.setdefault(c["ip"], entry)
        if "Bootstrap" not in entry.text or (m := _BOOTSTRAP.search(entry.text)) is None:
            continue
        nccl = parse_nccl_prefix(entry.text)
        node = a.topo.hosts.canonical(nccl.host) if nccl is not None else None
        if node is not None:
            used.setdefault(node, (m["ifname"], m["ip"], entry))
    if len(targets) != 1 or len(used) < 3:
        return v
    ip = next(iter(targets))
    owners = [n for n, (_i, addr, _l) in used.items() if addr == ip]
    if not owners:
        return _unannounced_address(a, v, ip, used, targets[ip])
    if len(owners) != 1:
        return v
    owner = owners[0]
    ifname = used[owner][0]
    others = {i for n, (i, _a, _l) in used.items() if n != owner}
    if ifname in others or not (VIRTUAL_INTERFACE.match(ifname) or len(others) == 1):
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_bootstrap_interface|odd_one",
        f"NCCL on {owner} bootstraps over {ifname} ({ip}), an interface no other node uses; "
        f"every failing connect goes to it: {owner}'s network setup", 0.8,
        culprits=[owner], ranks=v.ranks, evidence=[used[owner][2], targets[ip], *v.evidence],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip


# A node's own address in its diagnostics (`ip route`'s `src IP`, `ip addr`'s `inet IP/24`).
_LOCAL_ADDRESS = r"(?:\bsrc|\binet) {ip}(?![\d.])"


def _unannounced_address(
    a: Analysis, v: Verdict, ip: str, used: dict[str, tuple[str, str, LogLine]], connect: LogLine
) -> Verdict:
    """Every failing connect goes to an address that is one node's own (its routing table or
    interface list shows it) but not the one its NCCL bootstrap announced: that node's routes
    hand its peers an address on another interface (NVIDIA/nccl#1515; nccl#1782: two NICs in one
    subnet, the unreachable one listed first), the node's network configuration."""
    local = re.compile(_LOCAL_ADDRESS.format(ip=re.escape(ip)))
    holders: dict[str, LogLine] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        hit = next((e for e in lines if local.search(e.text)), None)
        if node is not None and hit is not None and a.in_job(node):
            holders[node] = hit
    if len(holders) != 1:
        return v
    ((node, shown),) = holders.items()
    if node not in used or used[node][1] == ip:
        return v
    if any(x.hardware and x.root and x.serious for x in a.node_events if x.node == node):
        return v  # (its own link failed: the hardware it is)
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_bootstrap_interface|unannounced_address",
        f"peers' connects go to {ip}, an address of {node} on another interface than the "
        f"{used[node][1]} its NCCL bootstrap announced: {node}'s routing", 0.75,
        culprits=[node], ranks=v.ranks, evidence=[shown, connect, *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def gid_changed_by_dhcp(a: Analysis, v: Verdict) -> Verdict:
    """Peers' failing connections all go to the address a node's own logs say DHCP took
    away from it (`ipv4 address 10.40.3.57 removed`)."""
    # (however many nodes the verdict named: the peers that report losing the moved address
    # are its victims, and its own logs or the lease say which node moved)
    if v.category not in NETWORKISH:
        return v
    for e in a.node_events:
        if e.match.id not in DHCP_IDS or e.node is None or not a.in_job(e.node):
            continue
        if (m := _REMOVED_IP.search(e.line.text)) is None:
            continue
        if any(x.hardware and x.root and x.serious for x in a.node_events if x.node == e.node):
            continue  # (its own link or HCA failed: the hardware it is)
        towards = re.compile(rf"(?:remote ?Gids?:? ?::ffff:|peer ){re.escape(m['ip'])}\b", re.I)
        lines = [
            x.line for x in a.events
            if x.origin == "job" and (x.root or x.cascade) and towards.search(x.line.text)
            and x.node != e.node
        ]  # fmt: skip
        if not lines:
            continue
        return Verdict(
            Category.SYSTEM_SOFTWARE, e.key, f"peers' connections to {m['ip']} failed: DHCP "
            f"replaced {e.node}'s address just before (its RoCE GID with it), the node's "
            "configuration", 0.8, culprits=[e.node], ranks=v.ranks,
            evidence=[e.line, *lines[:4], *v.evidence], kind=v.kind, outcome=v.outcome,
        )  # fmt: skip
    return _renewed_to_another_address(a, v)


def _renewed_to_another_address(a: Analysis, v: Verdict) -> Verdict:
    """Peers' failing connections all go to one address no node of the job holds any more,
    and one node's DHCP client took a different address of the same subnet during the job:
    the lease moved that node's address (and its RoCE GID) from under its peers."""
    towards: dict[str, list[LogLine]] = {}
    reporters: dict[str, set[str | None]] = {}
    for x in a.events:
        if x.origin != "job" or not (x.root or x.cascade):
            continue
        if (m := _FAILED_TOWARDS.search(x.line.text)) is not None:
            towards.setdefault(m["ip"], []).append(x.line)
            reporters.setdefault(m["ip"], set()).add(event_node(a, x))
    # The address most of the job's nodes failed towards (the moved node itself fails towards
    # whichever peer it was talking to).
    ranked = sorted(towards, key=lambda ip: len(reporters[ip]), reverse=True)
    if not ranked or (len(ranked) > 1 and len(reporters[ranked[0]]) <= len(reporters[ranked[1]])):
        return v
    gone, lines = ranked[0], towards[ranked[0]]
    token = re.compile(rf"(?<![\d.]){re.escape(gone)}(?![\d.])")
    if any(
        token.search(e.text) and not _DHCP_RECORD.search(e.text)
        for node_lines in a.node_logs.values()
        for e in node_lines
    ):
        return v  # a node still shows that address: not taken away (a DHCP client's record
        # of the lease naming it, `address X expired, replaced by Y`, says the opposite)
    # (The same /16: site fabrics hand out /23 and wider, and the new lease's line is a
    # node of this job whose failing address nobody holds any more.)
    subnet = ".".join(gone.split(".")[:2]) + "."
    leased: dict[str, LogLine] = {}
    for host, node_lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        if node is None or not a.in_job(node):
            continue
        for e in node_lines:
            if (m := _LEASE.search(e.text)) and m["ip"] != gone and m["ip"].startswith(subnet):
                leased.setdefault(node, e)
    if len(leased) != 1:
        return v
    ((node, lease),) = leased.items()
    if any(x.hardware and x.root and x.serious for x in a.node_events if x.node == node):
        return v  # (its own link or HCA failed: the hardware it is)
    return Verdict(
        Category.SYSTEM_SOFTWARE, "dhcp_address_changed", f"peers' connections to {gone} "
        f"failed; no node holds that address any more and DHCP gave {node} another address of "
        "its subnet during the job (its RoCE GID with it): the node's configuration", 0.75,
        culprits=[node], ranks=v.ranks, evidence=[lease, *lines[:4], *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def name_pasted_gpu_fault(a: Analysis, v: Verdict) -> Verdict:
    if v.category != Category.HARDWARE_GPU or v.culprits:
        return v
    noted = [x for x in v.evidence if x.source == "job.log" and x.text.lstrip().startswith("#")]
    pids = {m["pid"] for x in noted if (m := _XID_PID.search(x.text))}
    if not noted:
        return v
    hosts: set[str] = set()
    for entry in a.lines:
        nccl = parse_nccl_prefix(entry.text) if pids and "NCCL" in entry.text else None
        node = a.topo.hosts.canonical(nccl.host) if nccl and str(nccl.pid) in pids else None
        if node is not None:
            hosts.add(node)
    if not hosts:
        first = min(x.line_no for x in noted)
        header = [x for x in a.lines if x.line_no < first and x.text.lstrip().startswith("#")]
        for x in reversed(header[-3:]):
            if (m := _NOTE_HOST.match(x.text.strip())) and (
                node := a.topo.hosts.canonical(m["host"])
            ) is not None:  # fmt: skip
                hosts.add(node)
                break
    if len(hosts) != 1:
        return v
    v.culprits = sorted(hosts)
    node = v.culprits[0]
    v.summary = f"{v.summary.replace('an unidentified node', node)} (the kernel log is {node}'s)"
    v.confidence = max(v.confidence, 0.8)
    return v


# The GID index the job pins (`NCCL INFO NCCL_IB_GID_INDEX set by environment to 3.`, or its
# script's `export NCCL_IB_GID_INDEX=3`), and Mellanox's show_gids rows (DEV PORT INDEX GID IPv4
# VER DEV: `mlx5_3  1  3  0000:...:ffff:0a14:0169  10.20.1.105  v2  ens1f1np1`).
_PINNED_GID = re.compile(
    r"\bNCCL_IB_GID_INDEX set by environment to (\d{1,3})\b|\bexport [^\n]{0,200}?"
    r"\bNCCL_IB_GID_INDEX=(\d{1,3})\b"
)
_GID_ROW = re.compile(
    r"^\s*(?P<dev>[\w.-]{1,32})\s+\d{1,3}\s+(?P<idx>\d{1,3})\s+[0-9a-fA-F:]{15,45}\s+"
    r"(?:(?P<ip>\d{1,3}(?:\.\d{1,3}){3})\s+)?(?P<ver>v[12])\s+\S+\s*$"
)


def gid_index_not_roce_v2_ipv4(a: Analysis, v: Verdict) -> Verdict:
    """The node(s) whose own GID table no longer holds a RoCE v2 IPv4 GID at the index the job
    pins (an IPv6 address or a DHCP event reshuffled it; NCCL environment docs: the GID index
    must name the RoCE v2 IPv4 entry on every node): their queue pairs address a GID the peers
    cannot route, so every connection to them fails; the nodes' configuration, not a link."""
    if v.category not in NETWORKISH:
        return v
    pinned = next((m[1] or m[2] for e in a.lines[:400] if "GID_INDEX" in e.text
                   and (m := _PINNED_GID.search(e.text))), None)  # fmt: skip
    if pinned is None:
        return v
    shown: dict[str, bool] = {}
    said: dict[str, LogLine] = {}
    for host, lines in a.node_logs.items():
        node = a.topo.hosts.canonical(host)
        rows = [(e, m) for e in lines if (m := _GID_ROW.match(e.text)) is not None]
        if node is None or not rows:
            continue
        at = [(e, m) for e, m in rows if m["idx"] == pinned]
        good = bool(at) and all(m["ip"] and m["ver"] == "v2" for _e, m in at)
        shown[node] = good
        if not good:
            said[node] = at[0][0] if at else rows[0][0]
    bad = sorted(n for n, ok in shown.items() if not ok)
    if not bad or not _fits(a, bad) or (v.culprits and not set(v.culprits) <= set(bad)):
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "node_config|gid_index",
        f"{v.summary}: GID index {pinned}, which the job pins, is not a RoCE v2 IPv4 GID on "
        f"{', '.join(bad)} (its own show_gids): those nodes' RoCE configuration", 0.8,
        culprits=bad, ranks=v.ranks, evidence=[*said.values(), *v.evidence], kind=v.kind,
        outcome=v.outcome,
    )  # fmt: skip


def device_broken_under_the_error(a: Analysis, v: Verdict) -> Verdict:
    """An error that looks like the job's, raised only on one node of a multi-node job whose
    own files show its GPU stack broken (`Failed to initialize NVML: Driver/library version
    mismatch`, a GPU lost): the job's code runs unchanged on the other nodes, so that node's
    state made it fail (TensorFlow, finding no device, cannot place its ops; attribution-
    labels.md: node-local software is the node's, excluded)."""
    if v.category != Category.APPLICATION or v.culprits or len(a.job_nodes()) < 2:
        return v
    raised = [e for e in a.events if e.origin == "job" and e.root and e.serious]
    nodes = {e.node for e in raised}
    node = nodes.pop() if len(nodes) == 1 else None
    if node is None:
        return v
    broken = [
        e for e in a.node_events
        if e.node == node and e.root and e.match.severity == "fatal"
        and e.category in (Category.SYSTEM_SOFTWARE, Category.HARDWARE_GPU)
    ]  # fmt: skip
    if not broken or not _fits(a, [node]):
        return v
    return Verdict(
        broken[0].category, f"{broken[0].key}|under_app_error",
        f"{v.summary}: only on {node}, whose own files show {broken[0].match.id}", 0.8,
        culprits=[node], ranks=v.ranks, evidence=[broken[0].line, *v.evidence[:3]],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
