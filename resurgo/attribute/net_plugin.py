"""One node without the NCCL network plugin the rest of the job loads.

NCCL looks for `libnccl-net.so` (NCCL_NET_PLUGIN) at init and logs what it found: a node whose
image lacks the site's plugin (HPC-X's nccl-rdma-sharp-plugins, AWS OFI, a vendor's) says
`NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin.` (or `NET/Plugin:
No plugin found (libnccl-net.so)` then `NET/Plugin: Using internal network plugin.`) while its peers
say `NET/Plugin: Loaded net plugin ...` or name the plugin's transport (`P2P plugin IBext_v8`,
`Using network IBext_v8`). Peers on different transports cannot connect, and the job stalls in
its first collective: the odd node's software (attribution-labels.md: node-local software that
differs from the rest of the job is system_software, the node excluded).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.odd_transport import hosts_saying
from resurgo.contracts import Category

_INTERNAL = re.compile(
    r"\bNET/Plugin ?: (?:Could not find:[^.]{0,80}\.so\. )?Using internal network plugin"
    r"|\bNET/Plugin ?: No plugin found \("
)
_EXTERNAL = re.compile(
    r"\bNET/Plugin ?: Loaded net plugin\b|\bP2P plugin (?!IB\b|Socket\b)\w+|\bUsing network "
    r"(?!IB\b|Socket\b)\w+"
)
_OURS = (Category.UNKNOWN, Category.SYSTEM_SOFTWARE, Category.HARDWARE_NETWORK)


def odd_net_plugin(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the software of the node(s) that found no NCCL net plugin where most of the job's
    nodes loaded one."""
    if v.category not in _OURS or v.culprits or v.kind == "straggler":
        return v
    first, external = hosts_saying(a, "NCCL INFO", _INTERNAL, _EXTERNAL)
    internal = {node: a.lines[order] for node, order in first.items()}
    odd = sorted(set(internal) - external)
    if not odd or not external or len(odd) >= len(external | set(odd)) / 2:
        return v
    return Verdict(
        Category.SYSTEM_SOFTWARE, "nccl_net_plugin_missing", f"{v.summary}: "
        f"{', '.join(odd)} found no NCCL network plugin and fell back to NCCL's internal "
        "transport while the other nodes loaded one (the node's image)", 0.75,
        culprits=odd, ranks=v.ranks, evidence=[*(internal[n] for n in odd), *v.evidence],
        kind=v.kind, outcome=v.outcome,
    )  # fmt: skip
