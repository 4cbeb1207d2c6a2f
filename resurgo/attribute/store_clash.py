"""Several of the job's own processes each trying to be the rendezvous store's server.

A correct launch starts the c10d TCPStore once: torchrun's agent on the node of rank 0 (or rank
0 itself when every task calls `init_process_group` under `srun`) binds MASTER_PORT, everyone
else connects. A port already taken by another job or a leftover process makes that one
process fail (`[E socket.cpp:...] [c10d] The server socket has failed to listen on any local
network address.`, then `DistNetworkError`/`RuntimeError: ... EADDRINUSE` or, before torch 2.0,
`RuntimeError: Address already in use`): the node's state (catalogue entry `address_in_use`).

When two or more processes of one job fail so on one port, the job started the server more than
once: several launchers per node (`#SBATCH --ntasks-per-node=8` with `srun torchrun
--nproc_per_node 8`, NVIDIA/Megatron-LM#1371; NeMo's Slurm example with a task per GPU getting
"already in use errors on all processes except one", NVIDIA/NeMo#5819; yolov5#12429, the second
task on the master node), or a DeepSpeed launch that makes every task host the store
(EleutherAI/gpt-neox#768, #849). They collide with each other on every node and every retry:
the job's launch (attribution-labels.md: wrong launch scripts are `application`).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import strip_prefixes

# c10d's last word before it raises (torch/csrc/distributed/c10d/socket.cpp), once per process.
_LISTEN_FAILED = "failed to listen on any local network address"
# The exception it raises (its message names the error), or torch < 2.0's bare RuntimeError.
_RAISED = re.compile(
    r"^(?:[\w.]+\.)?\w*(?:Error|Exception): .{0,300}?(?:Address already in use|EADDRINUSE)"
)
_PORT = re.compile(r"(?:\]:|\bport: )(?P<port>\d{2,5})\b")
# Other failures the clash itself brings: the launchers that could not start the store, and the
# clients left waiting on (or reset by) the one that did.
_OWN_FAMILY = frozenset(
    {
        "address_in_use",
        "rendezvous_error",
        "dist_store_timeout",
        "store_connect_failed",
        "store_peer_lost",
    }
)


def _reports(a: Analysis) -> tuple[int, list[LogLine], set[str]]:
    """Processes that failed to start the store (counted as the output allows), their lines,
    and the ports they name."""
    who: set[str] = set()
    listen, raised = 0, 0
    ports: set[str] = set()
    last_raised = -10
    evidence: list[LogLine] = []
    for i, entry in enumerate(a.lines):
        text = entry.text
        if "in use" not in text and "EADDRINUSE" not in text and _LISTEN_FAILED not in text:
            continue
        pre = strip_prefixes(text)
        body = pre.body
        if _RAISED.search(body):
            raised += i - last_raised > 2  # (a chained exception's second line is one process)
            last_raised = i
        elif _LISTEN_FAILED in body:
            listen += 1
        elif "Address already in use" not in body:
            continue
        ports.update(m["port"] for m in _PORT.finditer(body[:2000]))
        # (one label per process: an srun task's lines may add `[rankN]:` to some of them)
        if pre.task is not None:
            who.add(f"task {pre.task}")
        elif pre.rank is not None or pre.host is not None:
            who.add(f"rank {pre.rank}" if pre.rank is not None else f"host {pre.host}")
        if len(evidence) < 3:
            evidence.append(entry)
    # Labelled output tells the processes apart; unlabelled, each prints one of each line.
    return (len(who) if who else max(listen, raised)), evidence, ports


def store_started_twice(a: Analysis) -> Verdict | None:
    """Two or more of the job's processes each failed to bind the one store port, and nothing
    else failed first: the launch starts the store's server more than once."""
    roots = [e for e in a.events if e.root and e.serious and e.origin == "job"]
    if not roots or any(e.match.id not in _OWN_FAMILY for e in roots):
        return None  # another failure of the job's: not this rule's
    # (Without EADDRINUSE, c10d's `failed to listen` from several processes says the same:
    # `errno: 99 - Cannot assign requested address` is a process binding the master's address
    # on another node, one more server than the launch should start.)
    count, evidence, ports = _reports(a)
    if count == 1 and (launch := _launchers_per_node(a)) is not None:
        # (One process's report shown, but the job's own launch line starts several per-node
        # launchers on each node: they all bind the one port.)
        count, evidence = launch[0], [launch[1], *evidence]
    if count < 2 or len(ports) > 1:
        return None  # one process (a port another job holds), or different ports
    port = f"port {ports.pop()}" if ports else "one port"
    return Verdict(
        Category.APPLICATION, "launch|store_started_twice",
        f"{count} of the job's own processes each tried to start the rendezvous store on {port} "
        "(several launchers per node, every task hosting the store, or a machine rank the same "
        "on every node): the job's launch, not the node", 0.85,
        evidence=evidence, kind=AnomalyKind.CRASH,
    )  # fmt: skip


# The job's launch as its trace or a note quotes it: srun starting several tasks per node, each
# a launcher that spawns the node's workers itself (torchrun, torch.distributed.launch/run,
# accelerate launch, the deepspeed launcher).
_SRUN_PER_NODE = re.compile(r"\bsrun\b[^\n]{0,300}?--ntasks-per-node[= ](?P<n>\d{1,3})\b")
_NODE_LAUNCHER = re.compile(
    r"\b(?:torchrun|torch\.distributed\.(?:run|launch)|accelerate launch|deepspeed)\b"
)


def _launchers_per_node(a: Analysis) -> tuple[int, LogLine] | None:
    """(launchers per node, the launch line) where the job's launch starts more than one."""
    for entry in [*a.header, *a.lines[:200]]:
        text = entry.text[:2000]
        if "srun" not in text or "--ntasks-per-node" not in text:
            continue
        m = _SRUN_PER_NODE.search(text)
        if m is not None and int(m["n"]) > 1 and _NODE_LAUNCHER.search(text, m.end()):
            return int(m["n"]), entry
    return None


# c10d's own words (torch/csrc/distributed/c10d/socket.cpp): the store's server listening, and a
# client dialling it: `The server socket has started to listen on [::]:29517.`, `The client
# socket has timed out after 900s while trying to connect to (gn-0411, 29517).`, `... has
# failed to connect to [gn-0411]:29517 (errno: ...)`.
_LISTENING = re.compile(r"\bThe server socket has started to listen on \S*?:(?P<port>\d{2,5})\b")
_DIALLED = re.compile(
    r"\bThe client socket has (?:timed out after \d+s while trying to connect to \((?P<h1>[^,\s]+),"
    r" (?P<p1>\d{2,5})\)|failed to connect to \[(?P<h2>[^\]\s]+)\]:(?P<p2>\d{2,5}))"
)


def store_on_two_hosts(a: Analysis) -> Verdict | None:
    """The store's server started on a node of the job while its clients dialled another node
    on the same port: the job's processes disagree on which of them is the master (a node rank
    or machine rank that came out the same on every node, `--machine_rank $SLURM_PROCID`
    expanded once in the batch shell), so each side waits for a world that never forms. The
    job's launch (attribution-labels.md: wrong launch scripts are `application`)."""
    listening: dict[str, tuple[str, LogLine]] = {}  # port → (host, line)
    dialled: dict[str, tuple[str, LogLine]] = {}
    for entry in a.lines:
        text = entry.text
        if "socket has" not in text:
            continue
        if (m := _LISTENING.search(text)) is not None:
            host = strip_prefixes(text).host
            if host is not None and a.in_job(host):
                listening.setdefault(m["port"], (host, entry))
        elif (m := _DIALLED.search(text)) is not None:
            target = m["h1"] or m["h2"]
            if a.in_job(target):
                dialled.setdefault(m["p1"] or m["p2"], (target, entry))
    for port, (host, line) in listening.items():
        target, dial = dialled.get(port, (host, line))
        if target != host:
            return Verdict(
                Category.APPLICATION, "launch|store_on_two_hosts",
                f"the rendezvous store started on {host} while the job's clients dialled "
                f"{target} on port {port}: its processes disagree on which node is the master "
                "(a node or machine rank the same on every node), the job's launch", 0.8,
                evidence=[dial, line], kind=AnomalyKind.CRASH,
            )  # fmt: skip
    return None
