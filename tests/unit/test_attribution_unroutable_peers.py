"""Peers that cannot reach what a node advertised: an address on a host-local bridge or a
link-local interface (that node's interfaces), and `No route to host` from nodes that all run
the site's firewall (the site's rules: every node, no retry).

Real formats: NCCL's interface lists (`NCCL INFO Bootstrap : Using bond0:10.1.0.11<0>`, `NCCL
INFO NET/Socket : Using [0]bond0:... [1]br-<id>:...`), its connect failures (`include/socket.h
NCCL WARN Net : Connect to 172.19.0.1<44181> failed : Connection timed out`, NCCL 2.10;
`misc/socket.cc NCCL WARN socketStartConnect: Connect to 169.254.0.1<40815> failed : Software
caused connection abort`, NCCL 2.19+), c10d's `unhandled system error`, `firewall-cmd --state`
(firewall-cmd(1): `running` / `not running`)."""

# ruff: noqa: E501  (real log lines are long)

from __future__ import annotations

from resurgo.contracts import Category
from tests.log_lines import attribute_text, first_action


def _job(a_ifaces: str, b_ifaces: str, target: str, reason: str) -> str:
    return f"""\
0: gn01:30211:30211 [0] NCCL INFO Bootstrap : Using {a_ifaces.split(" ")[0].removeprefix("[0]")}
0: gn01:30211:30211 [0] NCCL INFO NET/IB : No device found.
0: gn01:30211:30211 [0] NCCL INFO NET/Socket : Using {a_ifaces}
1: gn02:18843:18843 [0] NCCL INFO Bootstrap : Using {b_ifaces.split(" ")[0].removeprefix("[0]")}
1: gn02:18843:18843 [0] NCCL INFO NET/IB : No device found.
1: gn02:18843:18843 [0] NCCL INFO NET/Socket : Using {b_ifaces}
1: gn02:18843:19014 [3] NCCL INFO Call to connect returned {reason}, retrying
1: gn02:18843:19014 [3] include/socket.h:409 NCCL WARN Net : Connect to {target}<44181> failed : {reason}
1: gn02:18843:19014 [3] NCCL INFO transport/net_socket.cc:316 -> 2
1: RuntimeError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:891, unhandled system error, NCCL version 2.10.3
1: ncclSystemError: System call (socket, malloc, munmap, etc) failed.
srun: error: gn02: task 1: Exited with exit code 1
srun: error: gn01: task 0: Terminated
"""


BRIDGED = "[0]bond0:10.1.0.11<0> [1]br-05ab815fa14e:172.19.0.1<0> [2]br-d5d80d7dbbad:172.21.0.1<0>"
PLAIN_A = "[0]bond0:10.1.0.11<0>"
PLAIN_B = "[0]bond0:10.1.0.12<0>"
NODES = ["gn01", "gn02"]


def test_a_connect_to_a_nodes_docker_bridge_address_is_that_nodes_interfaces() -> None:
    a = attribute_text(_job(BRIDGED, PLAIN_B, "172.19.0.1", "Connection timed out"), NODES)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gn01"])
    assert first_action(a) == "requeue_excluding_nodes"


def test_a_connect_to_a_link_local_bootstrap_address_is_that_nodes_interfaces() -> None:
    job = _job("[0]usb0:169.254.0.1<0>", PLAIN_B, "169.254.0.1", "Software caused connection abort")
    a = attribute_text(job, NODES)
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gn01"])


def test_a_connect_to_a_routable_address_is_not_blamed_on_its_interfaces() -> None:
    a = attribute_text(_job(BRIDGED, PLAIN_B, "10.1.0.11", "Connection timed out"), NODES)
    assert a.category != Category.SYSTEM_SOFTWARE or "advertised" not in a.summary


# --- No route to host, and the firewall runs on every node --------------------------------
def _firewall(state: str) -> str:
    return f"$ firewall-cmd --state\n{state}\n$ firewall-cmd --list-ports\n22/tcp 29500/tcp\n"


def test_no_route_to_a_node_when_every_node_runs_the_firewall_is_the_sites_rules() -> None:
    job = _job(PLAIN_A, PLAIN_B, "10.1.0.11", "No route to host")
    a = attribute_text(
        job, NODES, {"node_gn01": _firewall("running"), "node_gn02": _firewall("running")}
    )
    assert (a.category, sorted(a.culprit_nodes)) == (Category.SYSTEM_SOFTWARE, NODES)
    assert first_action(a) == "stop"


def test_no_route_to_the_one_node_running_a_firewall_is_that_node() -> None:
    job = _job(PLAIN_A, PLAIN_B, "10.1.0.11", "No route to host")
    a = attribute_text(
        job, NODES, {"node_gn01": _firewall("running"), "node_gn02": _firewall("not running")}
    )
    assert (a.category, a.culprit_nodes) == (Category.SYSTEM_SOFTWARE, ["gn01"])
    assert first_action(a) == "requeue_excluding_nodes"
