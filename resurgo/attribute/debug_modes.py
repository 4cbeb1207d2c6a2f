"""A running job slowed by a debugging or profiling mode its own code switched on.

Some debugging aids slow every step by design, and say so when they are switched on. PyTorch's
autograd anomaly detection (`torch.autograd.set_detect_anomaly(True)` or `detect_anomaly()`,
torch/autograd/anomaly_mode.py) warns `UserWarning: Anomaly Detection has been enabled. This
mode will increase the runtime and should only be enabled for debugging.` at every rank's
start; it records a traceback for every operation of the forward pass and checks every
backward result. A job still stepping with it on runs slower than it should because of its own
configuration: an application straggler, with nothing to retry (attribution-labels.md:
application-level stragglers; a running application straggler's action is none). PyTorch's own
tracing turns it on with the warning silenced, so the warning in a job's output is the job's.

NCCL's `NCCL_IB_DISABLE=1` is the network's equivalent: NCCL then moves every inter-node
collective over TCP sockets (`NCCL INFO Using network Socket`; NCCL environment variables
documentation: "prevent the IB/RoCE transport from being used ... fall back to using IP
sockets"), an order of magnitude below what the nodes' InfiniBand adapters carry. Set by the
job's own script (a debugging leftover) on nodes whose adapters are there (their InfiniBand
counters, `NET/IB` lines), every step of a multi-node job is slower by the job's own choice.
`NCCL_NET=Socket` forces the same transport by name (NCCL confirms `NCCL_NET set by
environment to Socket`); on nodes with InfiniBand, or where NCCL's sockets themselves ride a
Slingshot interface (`NET/Socket : Using [0]hsn0`: HPE names its high-speed NICs hsnN, whose
own transport is the OFI plugin), it is the same choice by the job. So is running NCCL on
Slingshot without that plugin at all: NCCL says it found no network plugin (`NET/Plugin: Could
not find: libnccl-net.so`, `No plugin found (libnccl-net.so)`) and opens its sockets on the hsnN
interfaces. Sites with Slingshot document the plugin as the job's to load (CSCS's Alps NCCL
page: "the aws-ofi-nccl plugin must be used", with `NCCL_NET` set by the job or its container
hook), so a multi-node job stepping over those sockets is slowed by its own environment.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import strip_prefixes

MIN_TRACES = 3  # (fewer traces are a measurement, however close together)

# (NCCL before 2.5 says it as `NET/Socket : 1 interfaces found` and `NET : Using interface
# ib0:192.168.30.7<0>`.)
_SOCKET_TRANSPORT = re.compile(
    r"\bNCCL INFO Using network Socket\b|\bNCCL INFO NET/Socket : \d+ interfaces? found\b"
)
# The nodes' InfiniBand adapters, where the bundle shows them: node_exporter's infiniband
# collector, NCCL's own IB transport in use, ibstat's port state, lspci's controllers.
_IB_PRESENT = re.compile(
    r"\bnode_infiniband_\w+\{|\bNET/IB : Using\b|^\s*State:\s*Active\s*$"
    r"|\bInfiniband controller: Mellanox\b"
)
# The HCAs themselves, on the PCI bus (lspci), whatever their driver state.
# NCCL's sockets on a high-speed network's own interface (HPE Slingshot's hsnN, IPoIB's ibN).
_FABRIC_SOCKET = re.compile(
    r"\bNET/Socket : Using (?:\[\d+\])?(?:hsn|ib)\d|\bNET : Using interface (?:hsn|ib)\d"
)
# The job's traced script turning the fabric off: `+ export NCCL_IB_DISABLE=1` or
# `export NCCL_NET=Socket NCCL_SOCKET_IFNAME=hsn0` (one export may set several).
# (A traced `source` of the user's own env file, its comment quoting the export, says so too.)
_SCRIPT_EXPORT = re.compile(r"^(?:\++ ?)?export |^\++ ?(?:source|\.) \S+\s+#.*\bexport\b")
_SOCKETS_CHOSEN = re.compile(r"(?:^|\s)(?:NCCL_IB_DISABLE=[\"']?1\b|NCCL_NET=[\"']?Socket\b)")
# NCCL loading no network plugin (src/plugin/net.cc, its spellings across 2.x releases).
_NO_NET_PLUGIN = re.compile(
    r"\bNET/Plugin ?: (?:Could not find: libnccl-net|No plugin found \(libnccl-net"
    r"|Plugin load \(libnccl-net\.so\) returned)"
)
_SLINGSHOT_SOCKET = re.compile(
    r"\bNET/Socket : Using (?:\[\d+\])?hsn\d|\bNET : Using interface hsn\d"
)
_HCA_ON_BUS = re.compile(r"\bInfiniband controller: |\bEthernet controller: Mellanox\b")
# NCCL finding no RDMA device to use (src/transport/net_ib.cc).
_NO_IB_DEVICE = re.compile(r"\bNCCL INFO NET/IB : No device found\b")

# A profiler trace written out (torchtitan `Dumping profiler traces at step 200`, PyTorch's
# `export_chrome_trace`): one every few hundred steps is a measurement; one at (nearly) every
# logged step is a job slowed down by its own profiling (torchtitan `profiling.profile_freq`).
_TRACE_DUMP = re.compile(
    r"(?i)\bdumping profiler traces? at step|(?<!finished )\b(?:export|dump|sav|writ)\w* (?:the )?"
    r"(?:profiler|chrome|kineto) traces?\b"
)
_SLOW_MODE = re.compile(
    r"\bAnomaly Detection has been enabled\. This mode will increase the runtime\b"
)


def slow_debug_mode(a: Analysis) -> Verdict | None:
    """A still-progressing job whose output shows a step-slowing debug mode switched on."""
    from resurgo.attribute.liveness import still_progressing  # (liveness reads stragglers)

    if not a.running:
        return None
    said = [e for e in a.lines if "Anomaly Detection" in e.text and _SLOW_MODE.search(e.text)]
    if not said:
        return _sockets_by_choice(a) if still_progressing(a) else None
    if not still_progressing(a):
        return None
    return Verdict(
        Category.APPLICATION, "straggler|application|debug_mode",
        "straggler in the application: the job runs with autograd anomaly detection on, "
        "which slows every step (PyTorch warns it should only be enabled for debugging)", 0.6,
        evidence=said[:2], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def profiling_every_step(a: Analysis) -> Verdict | None:
    """Profiler traces written at half or more of the logged steps, three times at least."""
    dumps = [e for e in a.lines if "trace" in e.text and _TRACE_DUMP.search(e.text)]
    advances = a.scan.advances
    if len(dumps) < MIN_TRACES or not advances:
        return None
    # The logged steps from the one the first trace belongs to (printed before it).
    first = dumps[0].line_no
    before = [o for o in advances if a.lines[o].line_no < first]
    start = before[-1] if before else advances[0]
    logged = sum(1 for o in advances if o >= start)
    if len(dumps) * 2 < logged:
        return None
    said = {strip_prefixes(e.text).rank for e in dumps}
    ranks = [r for r in said if r is not None] if len(said) == 1 else []
    return Verdict(
        Category.APPLICATION, "straggler|application",
        f"straggler in the application (a profiler trace is written at {len(dumps)} of "
        f"{logged} logged steps)", 0.6,
        ranks=ranks, evidence=dumps[-2:], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _sockets_by_choice(a: Analysis) -> Verdict | None:
    """A multi-node job whose NCCL runs over sockets because its own script disabled
    InfiniBand, on nodes that have it."""
    from resurgo.attribute.stages_common import noted_as_the_jobs

    if max(len(a.job_nodes()), len(a.topo.hosts_seen)) < 2:
        return None  # (one node: no inter-node traffic to slow)
    using = next((e for e in a.lines if "Socket" in e.text and _SOCKET_TRANSPORT.search(e.text)),
                 None)  # fmt: skip
    if using is None:
        return None
    owned = next(
        (e for e in [*a.header, *a.lines[:200]]
         if _SCRIPT_EXPORT.match(e.text) and _SOCKETS_CHOSEN.search(e.text)),
        None,
    )  # fmt: skip
    owned = owned or noted_as_the_jobs(a.header, "NCCL_IB_DISABLE")
    if owned is None or not _SOCKETS_CHOSEN.search(owned.text.lstrip("# ")):
        return _no_plugin_on_slingshot(a, using) or _no_rdma_stack(a, using)
    files = [a.metric_lines, *a.node_logs.values()]
    fabric = any(_IB_PRESENT.search(e.text) for lines in files for e in lines) or any(
        "NET" in e.text and _FABRIC_SOCKET.search(e.text) for e in a.lines[:2000]
    )
    if not fabric:
        return None
    setting = "NCCL_NET=Socket" if "NCCL_NET=" in owned.text else "NCCL_IB_DISABLE=1"
    return Verdict(
        Category.APPLICATION, "straggler|application|ib_disabled",
        f"straggler in the application: the job's script sets {setting}, so NCCL runs its "
        "collectives over TCP sockets on nodes that have a faster fabric", 0.65,
        evidence=[owned, using], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _no_rdma_stack(a: Analysis, using: LogLine) -> Verdict | None:
    """NCCL found no RDMA device and runs over sockets on nodes whose own PCI bus shows their
    HCAs (the job did not disable InfiniBand): the nodes' RDMA stack is not loaded (mlx5_ib,
    ib_uverbs, openibd): their software, every such node named."""
    said = [e for e in a.lines if "No device" in e.text and _NO_IB_DEVICE.search(e.text)]
    if not said:
        return None
    nodes = sorted(
        node for host, lines in a.node_logs.items()
        if (node := a.topo.hosts.canonical(host)) is not None and a.in_job(node)
        and any(_HCA_ON_BUS.search(e.text) for e in lines)
    )  # fmt: skip
    if not nodes:
        return None
    return Verdict(
        Category.SYSTEM_SOFTWARE, "straggler|rdma_stack_missing",
        f"straggler: NCCL finds no RDMA device and runs over TCP sockets although "
        f"{', '.join(nodes)} carry HCAs on their PCI bus: their RDMA stack is not loaded", 0.7,
        culprits=nodes, evidence=[said[0], using], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip


def _no_plugin_on_slingshot(a: Analysis, using: LogLine) -> Verdict | None:
    """NCCL loaded no network plugin and opened its sockets on Slingshot's hsnN interfaces:
    the job's environment lacks the OFI plugin the site documents as its to load."""
    head = a.lines[:2000]
    missing = next((e for e in head if "NET/Plugin" in e.text and _NO_NET_PLUGIN.search(e.text)),
                   None)  # fmt: skip
    on_hsn = next((e for e in head if "hsn" in e.text and _SLINGSHOT_SOCKET.search(e.text)), None)
    if missing is None or on_hsn is None:
        return None
    return Verdict(
        Category.APPLICATION, "straggler|application|no_net_plugin",
        "straggler in the application: NCCL loads no network plugin and runs its collectives "
        "over TCP sockets on the Slingshot interfaces (the job's environment lacks the OFI "
        "plugin)", 0.6,
        evidence=[missing, on_hsn, using], kind=AnomalyKind.STRAGGLER,
    )  # fmt: skip
