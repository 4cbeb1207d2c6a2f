"""The one node at the common end of the failing connections.

A bad link (an HCA, its cable, the switch port it plugs into) shows up as transport errors on
both ends of every connection that crosses it: the node behind it reports failures talking to
several peers, and those peers report failures talking to it. Whoever reports, that node is an
end of every failing pair while the other ends vary, so it is the culprit (NCCL's troubleshooting
guide: `IBV_WC_RETRY_EXC_ERR` names the remote peer; look for the host common to the errors).

Peers are named by address (`Got completion from peer 10.60.1.111<44120>`); where the job's
output never says which node owns an address, a numbering convention shared by every address
and node of the job (10.60.1.111 ↔ gpu-c-111) is accepted only when it is one-to-one and no
host would name itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_IPV4 = re.compile(r"^\d{1,3}\.\d{1,3}\.\d{1,3}\.(?P<last>\d{1,3})$")
_TRAILING_NUMBER = re.compile(r"(\d+)$")
# Distinct far ends the common node must have: with one, either end could be at fault.
MIN_COUNTERPARTS = 2


def numbered_owners(
    addresses: Iterable[str], hosts: Iterable[str], reporters: dict[str, set[str]]
) -> dict[str, str]:
    """Address → host by the last octet equalling the host's trailing number, when that is a
    one-to-one mapping for every address and never maps an address to a host that reported
    a failure reaching it (nobody names itself as its peer)."""
    by_number: dict[int, list[str]] = {}
    for host in set(hosts):
        if (m := _TRAILING_NUMBER.search(host)) is not None:
            by_number.setdefault(int(m.group(1)), []).append(host)
    out: dict[str, str] = {}
    for address in set(addresses):
        m = _IPV4.match(address)
        if m is None:
            return {}
        owners = by_number.get(int(m["last"]), [])
        if len(owners) != 1 or owners[0] in reporters.get(address, set()):
            return {}
        out[address] = owners[0]
    if len(set(out.values())) != len(out):
        return {}
    return out


def common_end(pairs: list[tuple[str, str]]) -> str | None:
    """The one node that is an end of every (reporter, peer) pair, with two or more distinct
    other ends; None when no node or several are."""
    if len(pairs) < MIN_COUNTERPARTS:
        return None
    ends = set(pairs[0])
    for pair in pairs[1:]:
        ends &= set(pair)
    found = []
    for node in ends:
        others = {b if a == node else a for a, b in pairs}
        if len(others - {node}) >= MIN_COUNTERPARTS:
            found.append(node)
    return found[0] if len(found) == 1 else None
