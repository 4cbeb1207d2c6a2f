"""A switch port going down, joined through LLDP or the port table to the job's node.

Line formats are SONiC's (orchagent `updatePortOperStatus`, lldpd `removing remote port`) and
its `show interfaces description` table.
"""

from __future__ import annotations

from resurgo.attribute.offline import default_advice
from resurgo.attribute.rules import attribute
from resurgo.contracts import AdviceKind, Category
from resurgo.detect.registry import Registry
from tests.log_lines import log_lines as _lines

NODES = ["gpu-c115", "gpu-c116", "gpu-c117"]
TIMEOUTS = "".join(
    f"{t}: [rank{t * 8}]:[E0821 04:14:50.013512932 ProcessGroupNCCL.cpp:563] [Rank 0] Watchdog "
    "caught collective operation timeout: WorkNCCL(SeqNum=1741125, OpType=_REDUCE_SCATTER_BASE, "
    "NumelIn=134217728, NumelOut=33554432, Timeout(ms)=120000) ran for 120072 milliseconds "
    "before timing out.\n"
    for t in range(3)
)
SWITCH_LOG = (
    "Aug 21 04:12:49.815070 leaf-r3-07 NOTICE swss#orchagent: :- updatePortOperStatus: Port "
    "Ethernet68 oper state set from up to down\n"
    "Aug 21 04:13:20.148487 leaf-r3-07 INFO lldp#lldpd[27]: removing remote port Ethernet68 "
    "(neighbor {host} ens9np0) due to TTL expiry\n"
)


def _run(switch_log: str) -> tuple[Category, list[str], AdviceKind]:
    a = attribute(
        Registry.default(), None, _lines(TIMEOUTS, "job.log"), None, [], NODES,
        node_logs={"leaf-r3-07": _lines(switch_log, "syslog_leaf-r3-07.txt")},
    )  # fmt: skip
    return a.category, a.culprit_nodes, default_advice(a).kind


def test_the_job_node_behind_a_switch_port_that_went_down_is_the_culprit() -> None:
    assert _run(SWITCH_LOG.format(host="gpu-c117")) == (
        Category.HARDWARE_NETWORK, ["gpu-c117"], AdviceKind.REQUEUE_EXCLUDING,
    )  # fmt: skip


def test_a_port_of_another_node_going_down_names_no_one() -> None:
    category, culprits, _ = _run(SWITCH_LOG.format(host="gpu-c201"))
    assert culprits == []
    assert category != Category.HARDWARE_NETWORK


def test_the_port_table_maps_a_port_to_its_node() -> None:
    table = (
        "  Interface    Oper    Admin    Alias    Description\n"
        " Ethernet68    down       up   etp18   gpu-c116:ens9np0\n"
    )
    down = SWITCH_LOG.splitlines()[0] + "\n"
    assert _run(table + down)[:2] == (Category.HARDWARE_NETWORK, ["gpu-c116"])
