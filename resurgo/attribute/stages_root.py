"""Attribution stages that find the failure the others followed from (numbered as in `rules`).

5. the earliest root-candidate failure across ranks. A rank whose first error is a cascade
   (connection closed/reset by peer, collective timeouts, aborted communicators) is a victim and
   never the root cause, nor is anything it does afterwards. The same deterministic application
   error on every rank is the application's (no culprit, stop-grade confidence); an error on
   some ranks only is retried. A rank killed by a signal names its node (unless its node's
   kernel log shows the OOM killer: the application);
7. only cascades: the ranks that stayed silent while their peers timed out are suspects.
"""

from __future__ import annotations

import re
from datetime import datetime

from resurgo.attribute.analysis import Analysis, Verdict, actor_node, event_node
from resurgo.attribute.cascade_roots import elastic_verdict, oom_killed_child, silent_rank_errors
from resurgo.attribute.causes import (
    LIBRARY_BUGS,
    OOM_KILLS,
    _collective_mismatch,
    _drifted_node,
    _explain_by_node,
    _no_retry_helps,
    _node_software_fault,
    _specific_cause,
    _transient,
    _version_drift,
    crashed_in_job_code,
    job_owned_path,
    oom_verdict,
)
from resurgo.attribute.events import Event, TaskExit, normalise
from resurgo.attribute.site_notes import all_reported_abridged
from resurgo.attribute.stages_application import application_verdict
from resurgo.attribute.stages_common import (
    NATIVE_CRASH,
    NODE_LOCAL_SYSTEM,
    NODE_OWN_STATE,
    _backed,
    _checked,
    _exit_lines,
    _peer_node,
    _primary_candidates,
    _rank,
    _set_by_job,
    _shared_service,
    _watchdog_aborts,
    after_the_kill,
    every_rank_waited,
    quiet_node,
    said_everywhere,
    watchdog_abort,
)
from resurgo.attribute.stages_outcome import ranks_diverged
from resurgo.contracts import AnomalyKind, Category

# Unknown roots about shared state (storage, checkpoints) or a lone CUDA error: no node to blame.
SHARED_UNKNOWN = frozenset(
    {"checkpoint_save_failed", "dcp_checkpoint_exception", "resume_load_failed", "python_exception"}
) | {"cuda_error_other"}  # (labels: a lone `unknown error` supports no cause)
_RANK_LIST = re.compile(r"\d+")
# The reporting node failed to reach another (the peer may be the one at fault).
_PEER_FAILURE = re.compile(
    r"(?i)timed out|connection refused|reset by peer|no route to host|remote|peer"
)
# Node-local storage: a full disk there is that node's state (another job's leftovers), while
# ENOSPC on a shared file system is the file system's (or the project's quota).
_LOCAL_PATH = re.compile(
    r"(?:^|['\"\s=])(?:/tmp|/var/tmp|/dev/shm|/local|/localscratch|/scratch/local|/raid|/nvme|/mnt/local|"
    r"/lscratch|/local_scratch|/ssd)\b"
)


def _root_failure(a: Analysis) -> Verdict | None:
    victims = a.victims()
    primaries = [e for e in _primary_candidates(a, victims) if not e.hardware]
    deaths = [
        x
        for x in a.scan.exit_order
        if x.status in ("signal", "killed", "oom") and x.actor not in victims
        and (a.kill_order is None or x.order < a.kill_order)
    ]  # fmt: skip
    node_app = [
        e for e in a.node_events
        if e.root and e.serious and e.category in (Category.APPLICATION, Category.SYSTEM_SOFTWARE)
        and a.in_job(e.node) and not after_the_kill(a, e)
    ]  # fmt: skip
    shared = _shared_service(
        a, [e for e in a.node_events if e.root and a.in_job(e.node)], primaries
    )
    if shared is not None:
        return shared
    if not primaries and (hidden := silent_rank_errors(a, victims)):
        # A rank that raised while its peers timed out waiting for it: its task's first
        # line was another rank's timeout, but its own error is the root.
        primaries = hidden
        victims = victims - {e.actor for e in hidden if e.actor is not None}
    if primaries:
        return _from_primaries(a, primaries, victims, deaths, node_app)
    if deaths:
        verdict = _from_death(a, deaths[0], node_app)
        world = a.topo.world_size() or len(a.actors())
        if world >= 2 and len({x.actor for x in deaths}) >= world:
            # Every process died the same way at once: not one node's doing.
            verdict.culprits = []
            verdict.summary = f"every task died: {deaths[0].what}"
        return verdict
    # (a failure torchrun records after Slurm began killing the job is Slurm's own signal)
    cut = a.kill_order
    elastic = [f for f in a.scan.elastic if f.root and (cut is None or f.order < cut)]
    if elastic and _watchdog_aborts(a, elastic):
        elastic = []  # the NCCL watchdog's own SIGABRT after its timeouts: the cascade
    if elastic:
        # One agent per node prints its own "first observed failure": the earliest is the
        # job's (the others are their nodes' ranks aborting after it).
        f = min(elastic, key=lambda f: (f.when is None, f.when or datetime.min, f.order))
        node = f.node or (a.topo.node_of(None, f.rank) if f.rank is not None else None)
        explained = _explain_by_node(a, node, node_app)
        if explained is not None:
            return explained
        if (own := elastic_verdict(a, f, node)) is not None:
            return own  # the child's own exception, as torchrun's record carries it
        signal = f"signal {-f.exitcode}" if f.exitcode is not None and f.exitcode < 0 else (
            f"exit code {f.exitcode}")  # fmt: skip
        # SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE: a native crash; SIGKILL & co: cause unknown.
        native = f.exitcode in (-11, -6, -7, -4, -8)
        return Verdict(
            Category.SYSTEM_SOFTWARE if native else Category.UNKNOWN, f"elastic|{signal}",
            f"rank {f.rank} on {node or '?'} failed first ({signal})", 0.6,
            culprits=[node] if node else [],
            ranks=[f.rank] if f.rank is not None else [], evidence=[f.line],
        )  # fmt: skip
    # A task that exited without a word, where nothing else on its node spoke either (srun's
    # task numbers and the log's rank prefixes name the same processes differently).
    spoke = {e.actor for e in a.events} | {
        n for e in a.events if (n := event_node(a, e)) is not None
    }
    silent = [
        x for x in a.scan.exit_order
        if x.status == "exit" and x.code and not x.after_termination
        and x.actor not in spoke and x.node not in spoke
    ] if not every_rank_waited(a) else []  # fmt: skip
    if silent:
        x = silent[0]
        explained = _explain_by_node(a, x.node, node_app)
        if explained is not None:
            return explained
        local = [e for e in node_app if e.node == x.node and e.category == Category.SYSTEM_SOFTWARE]
        if local:
            # Its node's own logs say what broke there (a daemon, a mount, the kernel).
            return Verdict(
                Category.SYSTEM_SOFTWARE, local[0].key,
                f"{local[0].match.id} on {x.node}; task {x.task} exited with code {x.code}",
                0.7, culprits=[x.node] if x.node else [], ranks=[x.task],
                evidence=[local[0].line, x.line],
            )  # fmt: skip
        return Verdict(
            Category.UNKNOWN, f"exit|{x.code}", f"task {x.task} on {x.node} exited with code "
            f"{x.code} first, without an error message", 0.5,
            culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[x.line],
        )  # fmt: skip
    if node_app:
        e = node_app[0]
        if e.match.id in OOM_KILLS and (owned := oom_verdict(a, e)) is not None:
            return owned  # (whose memory it was, from the kernel's own report)
        return Verdict(
            e.category, e.key, f"{e.match.id} on {e.node}", 0.65,
            culprits=[e.node] if e.match.id in NODE_LOCAL_SYSTEM and e.node else [],
            evidence=[e.line],
        )  # fmt: skip
    return None


def _from_death(a: Analysis, x: TaskExit, node_app: list[Event]) -> Verdict:
    explained = _explain_by_node(a, x.node, node_app)
    if explained is not None:
        explained.evidence.append(x.line)
        explained.ranks = [x.task]
        return explained
    if watchdog_abort(a, x):  # (the hang's own teardown: no native crash of the node's)
        return Verdict(
            Category.UNKNOWN, "exit|watchdog_abort", f"ranks timed out in a collective, then "
            f"the watchdog aborted them (task {x.task} on {x.node} first)", 0.4,
            culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[x.line],
            kind=AnomalyKind.HANG,
        )  # fmt: skip
    if x.status == "oom":
        return Verdict(
            Category.APPLICATION, "oom|task", f"task {x.task} on {x.node} ran out of memory",
            0.8, ranks=[x.task], evidence=[x.line],
        )  # fmt: skip
    # (Its node's own software fault, even one logged as a warning: an NFS mount not
    # responding, a task hung in the kernel behind it; a shared outage was ruled out before.)
    local = [
        e for e in a.node_events
        if e.root and e.node == x.node and e.match.id in NODE_LOCAL_SYSTEM
        and a.in_job(e.node) and not after_the_kill(a, e)
    ]  # fmt: skip
    if local:
        e = local[0]
        return Verdict(
            Category.SYSTEM_SOFTWARE, e.key, f"{e.match.id} on {x.node}", 0.7,
            culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[e.line, x.line],
        )  # fmt: skip
    # A native crash (SIGSEGV/SIGABRT/SIGBUS/SIGILL/SIGFPE) with no hardware fault on its host
    # is the framework's or the node's software; a bare SIGKILL says nothing about the cause.
    native = x.status == "signal"
    node = x.node
    if node is not None and quiet_node(a, node) and not _backed(a, node):
        # Its node's logs were looked at and show nothing at all: the signal alone says
        # neither why nor that the node is bad (attribution-labels.md tie-breaker 2).
        return Verdict(
            Category.UNKNOWN, f"signal|{normalise(x.what)}", f"task {x.task} on {node} died "
            f"first: {x.what}; its node's logs show no fault", 0.5, ranks=[x.task],
            evidence=[x.line],
        )  # fmt: skip
    return Verdict(
        Category.SYSTEM_SOFTWARE if native else Category.UNKNOWN,
        f"signal|{normalise(x.what)}", f"task {x.task} on {x.node} died first: {x.what}",
        0.6, culprits=[x.node] if x.node else [], ranks=[x.task], evidence=[x.line],
    )  # fmt: skip


def _from_primaries(
    a: Analysis,
    primaries: list[Event],
    victims: set[str],
    deaths: list[TaskExit],
    node_app: list[Event],
) -> Verdict:
    first = _specific_cause(min(primaries, key=lambda e: e.order), primaries)
    if first.match.id in OOM_KILLS:
        # Slurm or the kernel killed a task for memory: the node's own OOM report may show
        # another user's process holding that memory (the node's state, not the job's).
        for e in node_app:
            owned = oom_verdict(a, e) if e.match.id in OOM_KILLS else None
            if owned is not None and owned.category == Category.SYSTEM_SOFTWARE:
                owned.evidence.append(first.line)
                return owned
    same = [e for e in primaries if e.key == first.key]
    actors = {e.actor for e in same if e.actor is not None}
    everywhere = said_everywhere(a, first, same, primaries, victims)
    nodes = sorted({n for e in same if (n := event_node(a, e)) is not None})
    if not nodes and first.category == Category.SYSTEM_SOFTWARE:
        # Slurm's own line names the node (`Task launch for StepId=5.0 failed on node cn131`).
        said = {a.topo.hosts.canonical(e.match.groups.get("node")) for e in same}
        nodes = sorted(n for n in said if n is not None and a.in_job(n))
    if not nodes and not everywhere and event_node(a, first) is None:
        # An unlabelled crash report (or a rank whose node the log does not say): srun's
        # verdict says whose process died.
        dead = {x.node for x in deaths if x.node and not x.after_termination} or {
            x.node for x in a.scan.exit_order
            if x.node and x.status == "exit" and x.code and x.actor not in victims
            and not x.after_termination
        }  # fmt: skip
        if len(dead) == 1:
            nodes = sorted(dead)
        elif first.category == Category.SYSTEM_SOFTWARE:
            # A node-local software failure printed without a label: the task srun saw end
            # first after it is the one that printed it (the rest ended waiting for it).
            after = [
                x for x in a.scan.exit_order
                if x.node and x.status != "terminated" and x.actor not in victims
                and not x.after_termination and x.order > first.order
            ]  # fmt: skip
            nodes = [after[0].node] if after and after[0].node else []
    ranks = sorted({r for e in same if (r := _rank(e)) is not None})
    evidence = [e.line for e in same] + [
        x.line for x in a.scan.exit_order if x.actor in actors and x.status != "terminated"
    ]
    evidence += [e.line for e in a.events if e.cascade][:3]  # fmt: skip
    category = first.category
    mid = first.match.id
    if everywhere:
        scope = "every rank"
    elif ranks:
        scope = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"
    else:
        scope = "one rank"
    summary = f"{first.message[:160]} ({scope})"
    if category == Category.APPLICATION and not everywhere:
        drifted = _drifted_node(a, first, primaries)
        if drifted is not None:
            evidence += [e.line for e in a.node_events if e.node == drifted]
            return Verdict(
                Category.SYSTEM_SOFTWARE, first.key,
                f"{summary}: only on {drifted}, where the other nodes got past it "
                "(the node's software image)", 0.7,
                culprits=[drifted], ranks=ranks, evidence=evidence,
            )  # fmt: skip
    if category == Category.APPLICATION:
        return application_verdict(
            a, first, same, victims, nodes, ranks, everywhere, summary, evidence
        )
    if (owned := _set_by_job(a, first, summary, ranks, evidence)) is not None:
        return owned
    if category == Category.SYSTEM_SOFTWARE:
        no_retry = _no_retry_helps(a, first, primaries, nodes, everywhere, summary)
        if no_retry is not None:
            no_retry.ranks, no_retry.evidence = ranks, evidence
            return no_retry
        troubled = {
            e.node for e in a.node_events
            if e.root and e.category == Category.SYSTEM_SOFTWARE and e.node is not None
        }  # fmt: skip
        odd_node = False
        if (mid.startswith("nccl_") or "NCCL" in first.message) and (odd := _version_drift(a)):
            # Every rank reports the mismatch (NCCL's check, or a bootstrap between versions
            # failing inside NCCL); the odd node out is the one to exclude.
            nodes, odd_node = odd, True
            summary = f"NCCL version differs on {', '.join(odd)} ({summary})"
        # (A checkpoint only the saving rank writes says nothing about whose disk is full.)
        local_disk = (
            mid == "fs_no_space"
            and bool(_LOCAL_PATH.search(first.message))
            and not any(e.checkpoint_save for e in same)
        )
        # A fault the catalogue places on one node (its driver, verbs device, image), said by
        # the one node it happened on, unless it is that node failing to reach a peer.
        said_by_one = (
            len(nodes) == 1
            and mid in a.registry
            and a.registry.get(mid).scope == "node"
            and not _PEER_FAILURE.search(first.message)
            # NCCL's own bug report ("internal error - please report this issue") alone, from
            # one rank on a node whose kernel log is clean, is no evidence against the node.
            and not (mid in LIBRARY_BUGS and all(quiet_node(a, n) for n in nodes))
        )
        if not nodes and mid in NODE_OWN_STATE and len(a.node_list) == 1:
            nodes = list(a.node_list)  # (a job of one node: its /dev/shm is that node's)
        node_local = (
            odd_node
            or mid in NODE_LOCAL_SYSTEM
            or local_disk
            or said_by_one
            or (bool(nodes) and set(nodes) <= troubled)
        )
        local = node_local and (odd_node or not everywhere) and nodes and (
            len(a.node_list) < 2 or set(nodes) < set(a.node_list)
        )  # fmt: skip
        if local:
            evidence += [e.line for e in a.node_events if e.node in nodes and e.root]
        return Verdict(
            category, first.key, summary, 0.8 if local else 0.75,
            culprits=nodes if local else [], ranks=ranks, evidence=evidence,
        )  # fmt: skip
    if category == Category.SCHEDULER:  # (Slurm failing to serve the job: no node, no code)
        return Verdict(category, first.key, summary, 0.8, ranks=ranks, evidence=evidence)
    # unknown root (segfault, abort, CUDA error of no known class, exception of no known type)
    if mid == "python_exception" and job_owned_path(a, first.message):  # its data, config
        return Verdict(Category.APPLICATION, first.key, summary, 0.85, ranks=ranks,
                       evidence=evidence)  # fmt: skip
    if everywhere and mid == "python_exception":
        # The same exception, same message, from every rank: the job's code, data or config
        # (stop-grade), unless its type is about reaching something shared (a hub, a
        # tracker, a store) that may be back on the next try.
        return Verdict(Category.APPLICATION, first.key, summary,
                       0.75 if _transient(first) else 0.85, ranks=ranks,
                       evidence=evidence)  # fmt: skip
    if first.actor is not None:
        explained = _explain_by_node(a, actor_node(a, first.actor), node_app)
        if explained is not None:
            explained.evidence += evidence
            explained.ranks = ranks
            return explained
        broken = _node_software_fault(a, actor_node(a, first.actor), node_app, NODE_LOCAL_SYSTEM)
        if broken is not None and not everywhere:
            # An error of no known class from a node whose own files show its software broken
            # (a driver/library mismatch, a missing device): the node's state explains it.
            return Verdict(
                Category.SYSTEM_SOFTWARE, broken.key, f"{summary}: {broken.match.id} on "
                f"{broken.node}", 0.75, culprits=[broken.node] if broken.node else [],
                ranks=ranks, evidence=[broken.line, *evidence],
            )  # fmt: skip
    if everywhere and mid in NATIVE_CRASH and (own := crashed_in_job_code(a, first)):
        # Every rank crashed natively inside the job's own code (its compiled extension):
        # the same fault on every node is the job's (attribution-labels.md tie-breaker 3).
        return Verdict(Category.APPLICATION, f"native_crash|{own}", f"{summary} in the job's "
                       f"own {own[-120:]}", 0.85, ranks=ranks, evidence=evidence)  # fmt: skip
    named = mid not in SHARED_UNKNOWN and not everywhere
    if named and nodes and all(quiet_node(a, n) and not _backed(a, n) for n in nodes):
        # A death of no known cause on nodes whose kernel logs were checked and say nothing:
        # no evidence names them (attribution-labels.md tie-breaker 2).
        named = False
    # A native crash in a one-node job: no other node ran the same code, so nothing sets the
    # node's software apart from the job's (attribution-labels.md: a lone error supports no
    # cause).
    alone = len(a.node_list) == 1
    named = named and not (alone and mid in NATIVE_CRASH)
    native = mid in NATIVE_CRASH and not alone
    category = Category.SYSTEM_SOFTWARE if native else Category.UNKNOWN
    return Verdict(
        category, first.key, summary, 0.6 if named else 0.5,
        culprits=nodes if named else [], ranks=ranks, evidence=evidence,
    )  # fmt: skip


def _cascade_only(a: Analysis) -> Verdict | None:
    cascades = [e for e in a.events if e.cascade and e.serious and e.actor is not None]
    if not cascades:
        if every_rank_waited(a):
            waits = [e for e in a.events if e.match.kind == AnomalyKind.HANG]
            return Verdict(
                Category.UNKNOWN, "hang", "every rank timed out waiting in its collective, none "
                "was silent: no rank or node stands out", 0.4,
                evidence=[e.line for e in waits[:3]], kind=AnomalyKind.HANG,
            )  # fmt: skip
        return None
    mismatch = _collective_mismatch(cascades)
    if mismatch is not None:
        return mismatch
    if (
        any(e.match.kind == AnomalyKind.HANG for e in cascades)
        and (diverged := ranks_diverged(a)) is not None
    ):
        return diverged  # timed out waiting in different collectives of the job's code
    reporting = {e.actor for e in cascades}
    actors = a.actors()
    # Silent: an actor of the kind that reported (ranks vs srun tasks vs hosts name the same
    # processes differently; a task number is not a rank that kept quiet).
    kinds = {x[0] for x in reporting if x}
    silent = sorted(
        x for x in actors - reporting - {e.actor for e in a.events if e.root} if x[:1] in kinds
    )
    if all_reported_abridged(a):
        silent = []  # an operator's note: every rank reported it, the copies were left out
    hang = any(e.match.kind == AnomalyKind.HANG for e in cascades)
    culprits: list[str] = []
    ranks: list[int] = []
    if silent and len(silent) < len(actors):
        culprits = sorted({n for s in silent if (n := a.node_of_actor(s)) is not None})
        ranks = sorted(int(s[1:]) for s in silent if s[1:].isdigit())
        # attribution-labels.md tie-breaker 2: a silent node is suspect; once its own logs
        # were checked and are clean, it is named only where other evidence (DCGM, Slurm's
        # state) backs it.
        culprits = [n for n in culprits if not _checked(a, n) or _backed(a, n)]
    # The peers they lost, where the address names one of the job's nodes (NodeAddr).
    peers = {n for e in cascades if (n := _peer_node(a, e)) is not None and n in a.node_list}
    # Ranks a reporter names as the ones that never arrived (monitored_barrier).
    named = sorted({int(r) for e in cascades for r in _RANK_LIST.findall(
        e.match.groups.get("peer_ranks") or "")})  # fmt: skip
    if named:
        ranks = named
        culprits = sorted({n for r in named if (n := a.topo.node_of(None, r)) is not None})
    if peers and len(peers) < len(a.node_list):
        narrowed = sorted(peers & set(culprits)) if culprits else []
        culprits = narrowed or sorted(peers)
    what = "timed out waiting" if hang else "lost their connection"
    who = f"; silent: rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" + (
        f" on {', '.join(culprits)}" if culprits else "") if ranks else ""  # fmt: skip
    evidence = [e.line for e in cascades[:6]] + _exit_lines(a, culprits)
    first = min(cascades, key=lambda e: e.order)
    return Verdict(
        Category.UNKNOWN, "hang|collective" if hang else f"cascade|{first.match.id}",
        f"{len(reporting)} rank(s) {what} for a peer{who}", 0.5 if culprits else 0.4,
        culprits=culprits, ranks=ranks, evidence=evidence,
        kind=AnomalyKind.HANG if hang else AnomalyKind.CRASH,
    )  # fmt: skip


def killed_by_oom(a: Analysis) -> Verdict | None:
    """A process the kernel's OOM killer ended, whose peers then reported only the loss of it."""
    killed = oom_killed_child(a)
    return None if killed is None else _explain_by_node(a, killed.node, [killed])
