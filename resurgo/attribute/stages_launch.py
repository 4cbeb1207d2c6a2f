"""Launch failures: a node whose launcher agent never started or never joined the rendezvous.

torchrun's agents wait in the c10d rendezvous (or the TCPStore's client count) for every node;
when one node's task never prints a line (not even the agent's banner) while the others time
out waiting (`RendezvousTimeoutError`, `DistStoreError: ... waiting for clients. 8/16 clients
joined`), that node is where it went wrong. attribution-labels.md names such a node even though
no cause is visible (category unknown): it is the one to exclude.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.firewall import firewalls_running
from resurgo.attribute.liveness import last_progress
from resurgo.attribute.log_header import STORE_HOST
from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.policy.decide import AGENT_NEVER_STARTED_KEY, NO_RETRY_HELPS_KEY

# The catalogue's entries for waiting on peers that never came (patterns.json).
_WAITING = frozenset({"rendezvous_error", "dist_store_timeout"})


# bash -x's trace of the job script starting a job step (`+ srun -l ... torchrun ...`).
_STEP_LAUNCH = re.compile(r"^\++ srun\b")


def _spoke(a: Analysis) -> set[int]:
    """srun task labels (`N:`) that prefixed at least one line of the job's last step: a
    script's earlier steps (staging data with `srun bash stage.sh`) label their tasks alike."""
    starts = [
        i for i, e in enumerate(a.lines) if e.text.startswith("+") and _STEP_LAUNCH.match(e.text)
    ]
    tasks: set[int] = set()
    for entry in a.lines[starts[-1] + 1 if starts else 0 :]:
        if entry.text.startswith(("srun:", "slurmstepd:", "#")):
            continue
        task = strip_prefixes(entry.text).task
        if task is not None:
            tasks.add(task)
    return tasks


# torch.distributed.elastic dynamic_rendezvous.py: `The node '<id>' attempts to join the next
# round of the rendezvous '<run id>'.`, `... added itself to the participants of round 0 of
# the rendezvous '<run id>'. Pending sync.` (or to its wait list), or any other line torch's
# logger prints from that module (`... torch/distributed/elastic/rendezvous/
# dynamic_rendezvous.py:1134] ...`): the agent is in the rendezvous.
_JOINING = re.compile(
    r"attempts to join the next round of the rendezvous"
    r"|added itself to the (?:participants|wait list) of round \d+ of the rendezvous"
    r"|/rendezvous/dynamic_rendezvous\.py:\d+\]"
    # (the agent itself before it joins: agent/server/api.py `_rendezvous` logs
    # `[default] Rendezvous'ing worker group`)
    r"|\[\w+\] Rendezvous'ing worker group\b"
)


def agent_never_started(a: Analysis) -> Verdict | None:
    roots = [e for e in a.events if e.root and e.serious and e.origin == "job"]
    waiting = [
        e for e in roots
        if e.match.id in _WAITING and ("Timeout" in e.message or "imed out" in e.message)
    ]  # fmt: skip
    waited = [(e.line, e.message) for e in waiting]
    how = "timed out waiting for it"
    if not roots and a.scan.max_iteration is None and (a.scheduler_outcome() or "") == "timeout":
        # No timeout raised (a rendezvous timeout longer than the time limit): the agents
        # that started announce joining and wait until Slurm kills the job.
        joined = [e for e in a.lines if "endezvous" in e.text and _JOINING.search(e.text)]
        waited = [(e, strip_prefixes(e.text).body) for e in joined]
        how = "waited for it until the time limit"
    if not waited or (waiting and len(waiting) != len(roots)):
        return None
    spoke = _spoke(a)
    # One task per node: the node list's order, else srun's own lines (`srun: error: gx-d04:
    # task 3: Killed`) say which node each task ran on.
    tasks = set(range(len(a.node_list))) if a.node_list else set(a.topo.tasks_seen)
    if len(tasks) < 2 or not spoke or max(spoke) >= len(tasks):
        return None  # not one task per node: task numbers do not name nodes
    where = {t: a.node_list[t] if a.node_list else a.topo.node_of(t, None) for t in tasks}
    silent = sorted({n for t in tasks - spoke if (n := where[t]) is not None})
    if not silent or len(silent) * 2 > len(tasks) or len(set(where.values())) < len(tasks):
        return None
    names = ", ".join(silent)
    return Verdict(
        Category.UNKNOWN, AGENT_NEVER_STARTED_KEY,
        f"the launcher on {names} never printed a line nor joined; the other nodes {how} "
        f"({waited[0][1][:120]})", 0.6,
        culprits=silent, evidence=[line for line, _ in waited[:4]], kind=AnomalyKind.HANG,
    )  # fmt: skip


# EHOSTUNREACH (errno 113) as NCCL, c10d and Python print it, with the address it could not
# reach. A host whose own firewall rejects (firewalld's default `icmp-host-prohibited`) or
# whose route is gone answers every peer this way, while the fabric still carries the rest.
_NO_ROUTE = re.compile(
    r"(?:Connect to (?P<ip>\d{1,3}(?:\.\d{1,3}){3})<\d+> "
    r"(?:returned 113\(No route to host\)|failed : No route to host)"
    r"|failed to connect to \[?(?P<host>[\w.-]+?)\]?:\d+ \(errno: 113 - No route to host\)"
    r"|\[Errno 113\] No route to host.{0,80}?\(['\"]?(?P<addr>[\w.-]+)['\"]?, \d+\))"
)


def unreachable_node(a: Analysis) -> Verdict | None:
    """Every peer gets `No route to host` from the same one node of the job, which reports no
    such trouble itself: that node's firewall or routing (its own software), not the fabric."""
    targets: set[str] = set()
    reporters: set[str] = set()
    lines = []
    for entry in a.lines:
        if "No route to host" not in entry.text:
            continue
        m = _NO_ROUTE.search(entry.text)
        if m is None:
            continue
        target = a.topo.hosts.canonical(m.group("ip") or m.group("host") or m.group("addr"))
        if target is None or not a.in_job(target) or (a.node_list and target not in a.node_list):
            return None  # an address outside the job (a store, a registry): not this rule's
        targets.add(target)
        pre = strip_prefixes(entry.text)
        nccl = parse_nccl_prefix(entry.text)
        reporter = a.topo.hosts.canonical(nccl.host if nccl else pre.host) or a.topo.node_of(
            pre.task, pre.rank
        )
        if reporter is not None:
            reporters.add(reporter)
        lines.append(entry)
    if len(targets) != 1 or not reporters:
        return None
    (target,) = targets
    if target in reporters:
        return None
    if any(e.node == target and e.root and e.hardware for e in a.node_events):
        return None  # its own logs show a link or NIC fault: the hardware stages decide
    running, stopped = firewalls_running(a)
    job = a.job_nodes()
    if target in running and not stopped and len(job) >= 2 and set(job) <= set(running):
        # Every node runs the same firewall (the site's compute profile): each would turn its
        # peers away, so there is no node to exclude and a retry meets the same rules.
        return Verdict(
            Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
            f"{target} refuses its peers (No route to host from {', '.join(sorted(reporters))}) "
            f"and a firewall runs on every node of the job ({', '.join(sorted(job))}): the "
            "site's firewall rules", 0.8,
            culprits=sorted(job), evidence=[*lines[:2], *list(running.values())[:2]],
            kind=AnomalyKind.CRASH,
        )  # fmt: skip
    return Verdict(
        Category.SYSTEM_SOFTWARE, "unreachable|no_route_to_host",
        f"{target} refuses its peers (No route to host from {', '.join(sorted(reporters))}): "
        "a firewall or route on that node", 0.75,
        culprits=[target], evidence=lines[:4], kind=AnomalyKind.CRASH,
    )  # fmt: skip


# torch.distributed's store-based barrier (distributed_c10d.py `_store_based_barrier`) logs
# `Waiting in store based barrier ... for rank: 3, key: ... (world_size=16, worker_count=8,
# timeout=...)` and raises `Timed out initializing process group in store based barrier on
# rank: 8, ... (world_size=32, worker_count=16, ...)`.
_BARRIER = re.compile(
    r"store based barrier\b.*?\brank:? (?P<rank>\d+)\b.*?\(world_size=(?P<world>\d+), "
    r"worker_count=(?P<count>\d+)"
)
_JOINED = re.compile(r"store_based_barrier_key:\d+ to store for rank: (?P<rank>\d+)\b")


def world_larger_than_launched(a: Analysis) -> Verdict | None:
    """Every process the job started reached the barrier, yet the count stayed short of the
    world size the job declared for the whole timeout: the launch starts fewer processes than
    its own WORLD_SIZE/--nnodes says (the job script or its arguments), a hang that recurs."""
    worlds: set[tuple[int, int]] = set()
    ranks: set[int] = set()
    evidence = []
    for entry in a.lines:
        if "store" not in entry.text or "barrier" not in entry.text:
            continue
        if (m := _BARRIER.search(entry.text)) is not None:
            worlds.add((int(m["world"]), int(m["count"])))
            ranks.add(int(m["rank"]))
            evidence.append(entry)
        elif (j := _JOINED.search(entry.text)) is not None:
            ranks.add(int(j["rank"]))
    if not worlds:
        return _members_short_of_world(a) or _jax_tasks_never_launched(a) or _jax_tasks_late(a)
    if len(worlds) != 1:
        return None  # the count moved (workers were still arriving)
    ((world, count),) = worlds
    # How many processes the job started: srun's task ids where it reports them (one task per
    # rank), else the ranks the log shows (collectors drop repeated lines, so at most).
    tasks = set(a.topo.tasks_seen)
    started = len(tasks) if len(tasks) > 1 else len(ranks)
    if not 0 < count < world or started != count or max(ranks) >= count:
        return None  # some started process never reached the barrier: not the job's count
    return Verdict(
        Category.APPLICATION, "launch|world_larger_than_launched",
        f"all {count} processes the job started waited in the store-based barrier for a world "
        f"of {world} that never came: the launch starts fewer processes than the job's "
        "declared world size", 0.85,
        evidence=evidence[:2] + evidence[-1:], kind=AnomalyKind.HANG,
    )  # fmt: skip


# Lightning announces each process as it joins the process group (lightning/fabric/utilities/
# distributed.py `_init_dist_connection`): `Initializing distributed: GLOBAL_RANK: 4, MEMBER:
# 5/8` (PyTorch Lightning before 1.6: `initializing ddp: GLOBAL_RANK: ...`); the world it waits
# for is what the Trainer was told (devices x num_nodes).
_MEMBER = re.compile(
    r"\b[Ii]nitializing (?:distributed|ddp): GLOBAL_RANK: (?P<rank>\d+), "
    r"MEMBER: \d+/(?P<world>\d+)\b"
)


# The arguments of `init_process_group(..., world_size=32, rank=0, ...)` as a job prints them
# (`world_size: 32`, `rank=0`): the world every process waits for, and who is waiting.
_WORLD_ARG = re.compile(r"\b[Ww]orld_size\s*[=:]\s*(?P<world>\d{1,6})\b")
_RANK_ARG = re.compile(r"(?<![\w.])rank\s*[=:]\s*(?P<rank>\d{1,6})\b")

_NUM_TASKS = re.compile(r"\bNumTasks=(?P<n>\d+)\b")


def _num_tasks_shown(a: Analysis) -> int | None:
    """`NumTasks=` from a grep'd `scontrol show job` beside sacct's table (which lacks it)."""
    found = {int(m["n"]) for e in a.facts.lines if (m := _NUM_TASKS.search(e.text))}
    return found.pop() if len(found) == 1 else None


# The job script's own `#SBATCH --ntasks-per-node=N` (or srun's), as its output or a note shows.
_PER_NODE = re.compile(r"--ntasks-per-node[= ](?P<n>\d{1,4})\b")


def _per_node_times_nodes(a: Analysis) -> int | None:
    """Tasks started = --ntasks-per-node x the job's nodes, where both are stated."""
    stated = {int(m["n"]) for e in a.lines[:200] if (m := _PER_NODE.search(e.text[:2000]))}
    nodes = len(a.node_list)
    return stated.pop() * nodes if len(stated) == 1 and nodes else None


def _members_short_of_world(a: Analysis) -> Verdict | None:
    """Every process Slurm started announced itself, as a member of a larger world than were
    started (Trainer(devices=4, num_nodes=2) under --ntasks-per-node=1), and the job ended
    without one training step or error: it waited for members that were never launched."""
    if a.running or last_progress(a) is not None:
        return None
    if any(e.root and e.serious and e.origin == "job" for e in a.events):
        return None
    worlds: set[int] = set()
    ranks: set[int] = set()
    evidence = []
    for entry in a.lines:
        if "MEMBER" in entry.text and (m := _MEMBER.search(entry.text)) is not None:
            worlds.add(int(m["world"]))
            ranks.add(int(m["rank"]))
            evidence.append(entry)
        elif (
            "orld_size" in entry.text
            and (w := _WORLD_ARG.search(entry.text)) is not None
            and (r := _RANK_ARG.search(entry.text)) is not None
        ):
            worlds.add(int(w["world"]))
            ranks.add(int(r["rank"]))
            evidence.append(entry)
    tasks = len(a.topo.tasks_seen)
    started = (
        a.facts.num_tasks or _num_tasks_shown(a) or (tasks if tasks > 1 else None)
        or _per_node_times_nodes(a)
    )  # fmt: skip
    if len(worlds) != 1 or started is None:
        return None
    (world,) = worlds
    if not started <= len(ranks) < world:
        return None  # some started process never announced itself: not the job's count
    # (More members than tasks: a task spawned its node's devices itself, as Lightning does
    # when Slurm's task count does not match; the world still never filled.)
    return Verdict(
        Category.APPLICATION, "launch|world_larger_than_launched",
        f"{len(ranks)} members (of {started} tasks Slurm started) joined a world of {world} "
        "that never came: the launch starts fewer processes than the job's declared world "
        "size", 0.85, evidence=evidence[:3], kind=AnomalyKind.HANG,
    )  # fmt: skip


# JAX's coordination service (XLA tsl coordination_service.cc, jax.distributed.initialize):
# `XlaRuntimeError: DEADLINE_EXCEEDED: Barrier timed out. Id: PjRT_Client_Connect. Timed out
# task names:` (older: `Barrier_id: ...`; newer XLA adds `# of tasks that reached the barrier:
# 2/4.` and `Some timed out task names:`), then one `/job:jax_worker/replica:0/task:N` line per
# missing process (ayaka14732/llama-2-jax#20, AI-Hypercomputer/gpu-recipes#2).
_JAX_BARRIER = re.compile(r"\bDEADLINE_EXCEEDED: Barrier timed out\. (?:Barrier_id|Id): \S+")
_JAX_TASK = re.compile(r"^/job:[\w-]+/replica:\d+/task:(?P<task>\d+)\s*$")


def _jax_tasks_never_launched(a: Analysis) -> Verdict | None:
    """JAX's start-up barrier timed out waiting for exactly the process ids from the number Slurm
    started upward (`num_processes=8` under 4 tasks): the job's own arguments declare processes
    its launch never starts (marin-community/marin#1933: "you don't launch all the workers"),
    an application failure that recurs."""
    started = a.facts.num_tasks or _num_tasks_shown(a) or len(a.topo.tasks_seen)
    if started < 1 or a.running or last_progress(a) is not None:
        return None
    missing: set[int] = set()
    evidence = []
    reading = False
    for entry in a.lines:
        body = strip_prefixes(entry.text).body.strip()
        if "Barrier timed out" in body and _JAX_BARRIER.search(body):
            evidence.append(entry)
        if "imed out task names:" in body:
            reading = True  # (newer XLA: `... Some timed out task names:` two lines below)
        elif reading and (m := _JAX_TASK.match(body)) is not None:
            missing.add(int(m["task"]))
        else:
            reading = False
    if not missing or sorted(missing) != list(range(started, max(missing) + 1)):
        return None  # a launched process is missing too (or ids of another numbering)
    return Verdict(
        Category.APPLICATION, "launch|world_larger_than_launched",
        f"JAX's start-up barrier timed out waiting for processes {started}-{max(missing)}, but "
        f"the job started {started}: its num_processes is larger than its launch", 0.85,
        evidence=evidence[:3], kind=AnomalyKind.CRASH,
    )  # fmt: skip


_JAX_TASK_INLINE = re.compile(r"/job:[\w-]+/replica:\d+/task:(?P<task>\d+)\b")
_JAX_CONNECTING = re.compile(r"\bConnecting to JAX distributed service on\b")


def _jax_tasks_late(a: Analysis) -> Verdict | None:
    """JAX's start-up barrier timed out for processes the log shows alive and still in the
    job's own set-up (printing after the others had connected, never connecting themselves):
    the job's preparation (an environment sync, a download) outlasts its own initialization
    timeout (jax.distributed.initialize's initialization_timeout; the coordination service
    says "some tasks were never scheduled, or scheduling delays"), which recurs on any nodes."""
    if a.running or last_progress(a) is not None:
        return None
    barrier = next(
        (i for i, e in enumerate(a.lines)
         if "Barrier timed out" in e.text and _JAX_BARRIER.search(e.text)),
        None,
    )  # fmt: skip
    if barrier is None:
        return None
    missing: set[int] = set()
    for entry in a.lines[barrier : barrier + 12]:
        body = strip_prefixes(entry.text).body
        named = body.partition("task names:")[2] or (body if body.startswith("/job:") else "")
        missing |= {int(m["task"]) for m in _JAX_TASK_INLINE.finditer(named)}
    first_connect: int | None = None
    connected: set[int] = set()
    seen_after: set[int] = set()
    for i, entry in enumerate(a.lines[:barrier]):
        task = strip_prefixes(entry.text).task
        if task is None:
            continue
        if _JAX_CONNECTING.search(entry.text):
            connected.add(task)
            first_connect = i if first_connect is None else first_connect
        elif first_connect is not None:
            seen_after.add(task)
    if not missing or first_connect is None or missing & connected or not missing <= seen_after:
        return None
    late = ", ".join(str(t) for t in sorted(missing))
    return Verdict(
        Category.APPLICATION, "launch|setup_outlasts_init_timeout",
        f"JAX's start-up barrier timed out waiting for task(s) {late}, which were alive and "
        "still in the job's own set-up when the others connected: the job's preparation "
        "outlasts its initialization timeout", 0.8,
        evidence=[a.lines[barrier]], kind=AnomalyKind.CRASH,
    )  # fmt: skip


# The job starts under debugpy told to wait for an IDE to attach (debugpy README: `python -m
# debugpy --listen HOST:PORT --wait-for-client`, or `debugpy.wait_for_client()` in the code).
_DEBUGGER_WAIT = re.compile(r"-m debugpy\b[^\n]*--wait-for-client\b|\bdebugpy\.wait_for_client\(")


def waiting_for_debugger(a: Analysis, outcome: str | None) -> Verdict | None:
    """A job launched to wait for a debugger that never attached, idle until its time limit
    without one training step: the job script's leftover debug setting, a hang that recurs."""
    if outcome not in ("timeout", "timeout_no_checkpoint") or last_progress(a) is not None:
        return None
    said = next((e for e in a.lines if "debugpy" in e.text and _DEBUGGER_WAIT.search(e.text)), None)
    if said is None:
        return None
    return Verdict(
        Category.APPLICATION, "launch|waiting_for_debugger",
        "the job was launched to wait for a debugger (debugpy --wait-for-client) and never "
        "started training before its time limit", 0.85, evidence=[said], kind=AnomalyKind.HANG,
    )  # fmt: skip


# The c10d TCPStore client naming the host it could not reach (torch/csrc/distributed/c10d
# socket.cpp): `The client socket has timed out after 60s while trying to connect to (login02,
# 29500).`, `... has failed to connect to [node1]:29500 (errno: 111 ...)`.
STORE_TARGET = re.compile(
    r"client socket has (?:failed to connect|timed out after \d+(?:ms|s)? while trying to "
    r"connect) to "
    r"\(?\[?(?P<host>[A-Za-z][\w.-]*?)\]?(?:, |:)\d+"
)
# torchrun's static and c10d rendezvous host the TCPStore in one of the job's own processes
# (torch.distributed.elastic rendezvous: the agent on the endpoint's host serves it), so an
# endpoint outside the allocation has nothing listening on it, on every attempt.
STORE_CONNECT = frozenset({"store_connect_failed"})
# What torchrun's agent raises on top of that connect failure (patterns.json).
_STORE_FAMILY = STORE_CONNECT | _WAITING


def store_outside_allocation(a: Analysis) -> Verdict | None:
    """Every attempt to reach the rendezvous store goes to a host that is not one of the job's
    nodes, and the job's own launch (its `--rdzv_endpoint`, `--master_addr`, `MASTER_ADDR`)
    points there: the job script's arguments (pytorch/pytorch#79388), an application failure
    that recurs until someone changes them (attribution-labels.md tie-breaker 6)."""
    allocation = {n.split(".", 1)[0] for n in a.node_list}
    if len(allocation) < 2:
        return None  # without the job's node list nothing says the host is outside it
    roots = [e for e in a.events if e.root and e.serious and e.origin == "job"]
    failed = [e for e in roots if e.match.id in STORE_CONNECT]
    targets = {m["host"].split(".", 1)[0] for e in failed if (m := STORE_TARGET.search(e.message))}
    if len(targets) != 1 or any(e.match.id not in _STORE_FAMILY for e in roots):
        return None  # another failure (or several store hosts) in the job: not this rule's
    (host,) = targets
    if any(host.startswith(n) or n.startswith(host) for n in allocation):
        return None  # the node under another of its names (`gpu01-ib`, `gpu01.cluster`)
    launch = next(
        (
            e
            for e in a.lines[:300]
            if not e.text.startswith("#")
            and (m := STORE_HOST.search(e.text[:2000])) is not None
            and m.group(1).split(".", 1)[0] == host
        ),
        None,
    )
    if launch is None:
        return None  # nothing shows the job chose it (a site's setting is not the job's)
    return Verdict(
        Category.APPLICATION, "launch|store_outside_allocation",
        f"the job's launch points its rendezvous store at {host}, which is not one of its nodes "
        f"({failed[0].message[:120]})", 0.85,
        evidence=[launch, *(e.line for e in failed[:3])], kind=AnomalyKind.CRASH,
    )  # fmt: skip


# The job's coordinator named by a loopback address (`--coordinator_address=localhost:12345`,
# `--rdzv_endpoint=127.0.0.1:29500`, `MASTER_ADDR=localhost`): on a job of several nodes every
# process off the first node dials its own host, where nothing listens (jax-ml/jax#19821,
# pytorch/pytorch#79388: "localhost" as the endpoint of a multi-node run).
_LOOPBACK_LAUNCH = re.compile(
    r"(?:coordinator(?:[_ -]?address)?|--rdzv[-_]endpoint|--master[-_]addr|\bMASTER_ADDR)"
    r"[=: ]+['\"]?\[?(?:localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|::1)\]?(?::\d+)?['\"]?(?![\w.-])",
    re.IGNORECASE,
)
# ... and what the processes then print: a refused or timed-out connection to the loopback, or
# the coordinator's start-up barrier timing out for want of them.
# (All of 127.0.0.0/8 is the loopback: Debian's /etc/hosts maps the host's own name to
# 127.0.1.1, so `hostname --ip-address` in a job script hands the peers that.)
_LOOPBACK_FAILED = re.compile(
    r"(?:localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])(?:[,:] ?\d+)?\)?[^\n]{0,80}"
    r"(?:Connection refused|Failed to connect|timed out)|"
    r"(?:Connection refused|failed to connect|timed out)[^\n]{0,120}"
    r"(?:\(localhost|127\.\d{1,3}\.\d{1,3}\.\d{1,3}|\[::1\])|"
    r"\bDEADLINE_EXCEEDED: Barrier timed out\b",
    re.IGNORECASE,
)


def loopback_coordinator(a: Analysis) -> Verdict | None:
    """A job spanning several nodes whose own launch names its coordinator or rendezvous store
    by a loopback address, failing to connect before any training step: the job script's
    arguments (attribution-labels.md tie-breaker 6), an application failure that recurs."""
    nodes = {n.split(".", 1)[0] for n in a.job_nodes()}
    if len(nodes) < 2 or a.running or last_progress(a) is not None:
        return None
    launch = next(
        (e for e in a.lines[:400] if "ocal" in e.text or "127." in e.text or "::1" in e.text
         if _LOOPBACK_LAUNCH.search(e.text[:2000])),
        None,
    )  # fmt: skip
    if launch is None:
        return None
    failed = [e for e in a.lines if _LOOPBACK_FAILED.search(e.text[:2000])]
    if not failed:
        return None
    return Verdict(
        Category.APPLICATION, "launch|loopback_coordinator",
        f"the job runs on {len(nodes)} nodes but its launch names its coordinator by a loopback "
        "address, so the processes on other nodes connect to their own host "
        f"({launch.text.strip()[:120]})", 0.85,
        evidence=[launch, *failed[:3]], kind=AnomalyKind.CRASH,
    )  # fmt: skip
