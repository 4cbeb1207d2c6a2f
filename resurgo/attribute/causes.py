"""Narrowing a root failure down to its specific cause and place.

The real error a generic wrapper reports just below it (a DataLoader worker's `Caught ...`, a
DCP `CheckpointException`), and software drift: the one node running a different NCCL than
the rest of the job, or whose environment (imports, shared libraries, modules) is missing what
the other nodes' have. The root-failure stage asks these before it settles on a category.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict, event_node
from resurgo.attribute.events import Event
from resurgo.attribute.oom_blocks import block_of, oom_blocks
from resurgo.attribute.oom_holders import job_pids
from resurgo.attribute.own_environment import HOME_DIR, built_for_newer_driver
from resurgo.attribute.ps_listing import others_hold_more
from resurgo.attribute.stages_common import _rank
from resurgo.attribute.topology import split_host_prefix
from resurgo.attribute.tracebacks import REPORTS_ANOTHER
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.detect.lines import parse_nccl_prefix, strip_prefixes
from resurgo.policy.decide import NO_RETRY_HELPS_KEY

_NCCL_VERSION = re.compile(r"\bNCCL version (?P<major>\d+)\.(?P<minor>\d+)\.(?P<patch>\d+)")
_VERSION_PAIR = re.compile(r"\brank (?P<rank>\d+) version (?P<code>\d{4,6})\b")
# A library reporting its own bug (NCCL's ncclInternalError: "please report this issue to the
# NCCL developers"): by itself, from one rank, no evidence against the node it ran on.
LIBRARY_BUGS = frozenset({"nccl_internal_error"})
# A program's environment missing a piece: the job's own, or one node's image.
ENVIRONMENT_IDS = frozenset(
    {"shared_library_missing", "lmod_module_unknown", "mpi_pmi_init_failed"}
)
_ENVIRONMENT = re.compile(
    r"\b(?:ImportError|ModuleNotFoundError)\b|cannot open shared object file|"
    r"undefined symbol: |GLIBC_\d[\d.]* not found"
)
# How far below a generic wrapper exception its real cause may be printed (one traceback).
WRAPPED_CAUSE_LINES = 40


def _version_drift(a: Analysis) -> list[str]:
    """Nodes running a different NCCL than most of the job, from each host's `NCCL version`
    line and NCCL's `Mismatched NCCL version detected : rank A version X rank B version Y`."""
    on: dict[int, set[str]] = {}
    compared: dict[int, set[str]] = {}
    for entry in a.lines:
        if "version" not in entry.text:
            continue
        host, text = split_host_prefix(entry.text, a.topo.host_prefixes)
        pre = strip_prefixes(text)
        nccl = parse_nccl_prefix(text)
        if m := _NCCL_VERSION.search(pre.body):
            node = a.topo.hosts.canonical(nccl.host if nccl else host) or a.topo.node_of(
                pre.task, pre.rank
            )
            code = int(m["major"]) * 10000 + int(m["minor"]) * 100 + int(m["patch"])
            if node is not None:
                on.setdefault(code, set()).add(node)
        pairs = list(_VERSION_PAIR.finditer(pre.body))
        for m in pairs:
            if (node := a.topo.node_of(None, int(m["rank"]))) is not None:
                compared.setdefault(int(m["code"]), set()).add(node)
        # NCCL's init.cc prints the peer's pair, then the reporting rank's own: its version is
        # the one loaded on the host the line's `host:pid:tid` prefix names.
        reporter = nccl.host if nccl is not None else host
        own = a.topo.hosts.canonical(reporter) if reporter and len(pairs) == 2 else None
        if own is not None:
            compared.setdefault(int(pairs[1]["code"]), set()).add(own)
    # NCCL's own comparison of the libraries each rank loaded outranks a version a framework's
    # error message prints (which may be the one it was built with).
    on = compared if len(compared) >= 2 else on
    if len(on) < 2:
        return []
    everyone = set().union(*on.values())
    common = max(on, key=lambda code: len(on[code]))
    drifted = everyone - on[common]
    return sorted(drifted) if len(drifted) * 2 < len(everyone) else []


def _environment_error(e: Event) -> bool:
    return e.match.id in ENVIRONMENT_IDS or bool(_ENVIRONMENT.search(e.message))


def _drifted_node(a: Analysis, first: Event, primaries: list[Event]) -> str | None:
    """The one node whose software environment is missing what the others' have.

    An import, shared-library or module error is the job's own environment when every node
    hits it; when it comes from one node's ranks only while ranks elsewhere ran on (their
    first sign is a cascade, or nothing), that node's image has drifted (taxonomy B.18).
    """
    if not _environment_error(first):
        return None
    failing = [e for e in primaries if _environment_error(e)]
    nodes = {event_node(a, e) for e in failing}
    if len(nodes) != 1 or None in nodes:
        return None
    node = next(iter(nodes))
    assert node is not None
    failed = {e.actor for e in failing}
    others = {x for x in a.actors() - failed if a.node_of_actor(x) != node}
    if not others or any(e.actor in others for e in primaries):
        return None
    return node


def _specific_cause(first: Event, primaries: list[Event]) -> Event:
    """The known cause a generic wrapper reports just after it (same rank).

    Wrappers print first and carry the real error below them: a DataLoader worker's `Caught
    OSError ... Original Traceback`, a DCP `CheckpointException` listing each rank's failure.
    """
    wrapper = bool(REPORTS_ANOTHER.search(first.message))
    container = first.match.id in CONTAINER_WRAPPERS
    # (slurmstepd prints pyxis's lines with no task label: no actor, the log below is its own)
    if (first.category != Category.UNKNOWN and not container) or (
        first.actor is None and not wrapper and not container
    ):
        return first
    for e in sorted(primaries, key=lambda e: e.order):
        if e.order <= first.order or e.actor != first.actor:
            continue
        if e.order - first.order > WRAPPED_CAUSE_LINES:
            break
        if container:
            # pyxis prints enroot's log below its own failure: an error there that is the
            # job's (an image that does not exist, its credentials) decides.
            if e.category == Category.APPLICATION:
                return e
        elif e.category != Category.UNKNOWN or wrapper:
            return e
    return first


# A container runtime's own failure line, printed above the runtime's log that says why.
CONTAINER_WRAPPERS = frozenset({"container_start_failed"})


# ProcessGroupNCCL's watchdog names the work that timed out: `WorkNCCL(SeqNum=73312,
# OpType=BROADCAST, NumelIn=1, ...)`.
_WORK = re.compile(r"\bSeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel>\d+))?")


# Pipeline stages legitimately wait in SEND and RECV at the same sequence number.
_POINT_TO_POINT = frozenset({"SEND", "RECV", "RECVANYSOURCE", "_SEND", "_RECV"})
_PG = re.compile(r"\bPG(?: ID)? (\d+)\b")


def _collective_mismatch(cascades: list[Event]) -> Verdict | None:
    """Ranks stuck in *different* collectives at the same sequence number: the job's code
    issued collectives in a different order (or shape) on some ranks, a deterministic bug
    (PyTorch's desync debugging reports the same); not a peer that went away."""
    seen: dict[str, dict[tuple[str, str], list[Event]]] = {}
    for e in cascades:
        if "SeqNum=" not in e.message:
            continue
        if (m := _WORK.search(e.message)) is not None and m["op"] not in _POINT_TO_POINT:
            # Sequence numbers count per process group: compare within one group only.
            pg = _PG.search(e.message)
            at = f"{pg.group(1) if pg else '?'}/{m['seq']}"
            seen.setdefault(at, {}).setdefault((m["op"], m["numel"] or ""), []).append(e)
    for seq, kinds in seen.items():
        if len(kinds) >= 2 and len({op for op, _ in kinds}) >= 2:
            groups = sorted(kinds.items(), key=lambda kv: len(kv[1]))
            odd = groups[0][1]
            ranks = sorted({r for e in odd if (r := _rank(e)) is not None})
            what = ", ".join(f"{op} on {len(es)} rank(s)" for (op, _), es in groups)
            ops = "/".join(sorted({o for o, _ in kinds}))
            return Verdict(
                Category.APPLICATION, f"collective_mismatch|{ops}",
                f"ranks are in different collectives at sequence number {seq.split('/')[-1]} "
                f"({what}): the "
                "job's code issues collectives in a different order on some ranks", 0.85,
                ranks=ranks, evidence=[e.line for _, es in groups for e in es[:2]],
                kind=AnomalyKind.HANG,
            )  # fmt: skip
    return None


def _node_software_fault(
    a: Analysis, node: str | None, node_app: list[Event], local: frozenset[str]
) -> Event | None:
    """The first node-local software fault in `node`'s own files (not the job's output)."""
    for e in node_app:
        if (
            e.node == node
            and e.origin != "job"
            and e.category == Category.SYSTEM_SOFTWARE
            and (
                e.match.id in local
                or (e.match.id in a.registry and a.registry.get(e.match.id).scope == "node")
            )
        ):
            return e
    return None


# Software the site installs in every node's image (driver, CUDA compatibility, fabric manager,
# container GPU runtime, RDMA stack): the same failure from every node of the job is the image,
# so there is no node to exclude and a retry on other nodes of that image fails alike.
SITE_IMAGE_FAULTS = frozenset(
    {
        "cuda_driver_insufficient",
        "nvidia_driver_library_mismatch",
        "nvidia_driver_unavailable",
        "cuda_system_not_ready",
        "cuda_driver_mismatch",
        "container_gpu_runtime_missing",
        "container_runtime_setup_failed",
        "enroot_runtime_dir_denied",
        "nccl_ib_no_device",
        # Settings the site makes on every node (task prolog environment, nccl.conf, the
        # image's network names, MIG layout): unless the job's own script set them
        # (`stages_common._set_by_job` asks first), they are the site's.
        "nccl_no_socket_interface",
        "nccl_net_not_found",
        "torch_no_gpus_available",
        "mig_enabled_no_instances",
    }
)
# The cluster's Slurm configuration failing the step's launch (catalogue_system.json).
SITE_SLURM_FAULTS = frozenset(
    {"slurm_mpi_plugin_error", "srun_container_option_unknown", "slurm_spank_init_failed"}
)
# EDQUOT (errno 122): a quota stays exhausted until someone frees space or raises it.
_QUOTA = re.compile(r"\bDisk quota exceeded\b|\bEDQUOT\b|\[Errno 122\]")


def _no_retry_helps(
    a: Analysis,
    first: Event,
    primaries: list[Event],
    nodes: list[str],
    everywhere: bool,
    summary: str,
) -> Verdict | None:
    """A system-software failure that no retry gets past (attribution-labels.md: "stop" until a
    human changes the site's software or the quota), or None."""
    if (quota := _over_quota(a, first, primaries, summary)) is not None:
        return quota
    if first.match.id in SITE_SLURM_FAULTS:
        # The site's Slurm itself cannot launch the step (its MPI plugin, its SPANK plugins):
        # every attempt goes through the same configuration.
        return Verdict(
            Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
            f"{summary}: the site's Slurm cannot launch the job's step", 0.85,
        )  # fmt: skip
    site_nodes = {event_node(a, e) for e in [first, *primaries] if e.match.id in SITE_IMAGE_FAULTS}
    if everywhere and len(nodes) >= 2 and set(nodes) | set(a.node_list) <= site_nodes:
        if (own := built_for_newer_driver(a, [first, *primaries], summary)) is not None:
            return own
        if first.match.id in GPU_VISIBILITY and not _asked_for_gpus(a):
            # No GPU visible anywhere, and nothing says the job asked for one: its script
            # (no `--gres=gpu`, an emptied CUDA_VISIBLE_DEVICES) is the likelier owner.
            return Verdict(
                Category.APPLICATION, f"{first.match.id}|no_gpu_requested",
                f"{summary}: on every node, and the job shows no GPU request", 0.85,
            )  # fmt: skip
        # The site's software fails on every node of the job (the first error, or the detail
        # a wrapper prints below it: pyxis's enroot log): nothing is left to exclude.
        return Verdict(
            Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
            f"{summary}: the site's software is broken on every node of the job", 0.85,
            culprits=nodes,
        )  # fmt: skip
    return None


# Errors that say a process sees no GPU at all: the node's driver or cgroup, unless the job
# never asked Slurm for one.
GPU_VISIBILITY = frozenset({"torch_no_gpus_available"})
# A GPU request in the job script, srun/sbatch options or Slurm's record of the job
# (`--gres=gpu:8`, `--gpus-per-node=4`, `TRES=...,gres/gpu=16`).
_GPU_REQUEST = re.compile(r"(?i)\bgres[=:/]\s*gpu\b|--gpus(?:-per-(?:node|task|socket))?[= ]\d|"
                          r"\bgres/gpu(?::\w+)?=\d|\bGres=gpu\b")  # fmt: skip


def _asked_for_gpus(a: Analysis) -> bool:
    return any(_GPU_REQUEST.search(e.text) for e in (*a.header, *a.lines[:50], *a.facts.lines))


# Writing the job's files: where a full quota shows (a short write is how torch.save reports
# one: `unexpected pos 2881615424 vs 2881615312`).
STORAGE_WRITE_IDS = frozenset(
    {"fs_no_space", "checkpoint_write_failed", "checkpoint_save_failed", "fs_io_error"}
)
# `lfs quota` and `quota` print `Disk quotas for usr omensah (uid 60311):` (or grp, prj) and
# mark a limit reached with `*` after the number used (lfs-quota(1), quota(1)).
_QUOTA_OWNER = re.compile(r"\bDisk quotas for (?P<kind>usr|user|grp|group|prj|project) \S+")
_OVER_LIMIT = re.compile(r"(?:^|\s)\d[\d.]*[kKMGTPE]?\*(?:\s|$)")
# A quota-exceeded path in the user's own home is the user's quota.
_HOME_PATH = re.compile(r"['\"\s]" + HOME_DIR)
QUOTA_TABLE_LINES = 4


def quota_reached(a: Analysis) -> str | None:
    """Whose quota the bundle shows at its limit: "user", "group" (group or project), else
    None. Read from `lfs quota`/`quota` output in any file (an operator's note, a node file)."""
    files: list[list[LogLine]] = [a.header, a.lines, a.facts.lines, *a.node_logs.values()]
    for lines in files:
        for i, entry in enumerate(lines):
            if "Disk quotas" not in entry.text or not (m := _QUOTA_OWNER.search(entry.text)):
                continue
            table = lines[i + 1 : i + 1 + QUOTA_TABLE_LINES]
            if any(_OVER_LIMIT.search(row.text.lstrip("# ")) for row in table):
                return "user" if m["kind"] in ("usr", "user") else "group"
    return None


def _over_quota(a: Analysis, first: Event, primaries: list[Event], summary: str) -> Verdict | None:
    """A write that failed because a quota is full. The user's own quota is the job's own
    storage use (its checkpoints, its retention): the application's; a project's or group's
    quota, or one of unknown owner, is a limit the site sets. A retry writes into the same
    quota either way: stop."""
    said = [e for e in primaries if _QUOTA.search(e.message)]
    owner = quota_reached(a)
    if not said and not (owner and first.match.id in STORAGE_WRITE_IDS):
        return None
    if owner is None and any(_HOME_PATH.search(e.message) for e in said):
        owner = "user"
    if owner == "user":
        return Verdict(
            Category.APPLICATION, "quota|user", f"{summary}: the user's disk quota is full "
            "(the job's own files); a retry writes into the same quota", 0.85,
        )  # fmt: skip
    return Verdict(
        Category.SYSTEM_SOFTWARE, NO_RETRY_HELPS_KEY,
        f"{summary}: a disk quota is exhausted; a retry writes into the same quota", 0.85,
    )  # fmt: skip


# faulthandler's dump after a native crash (`Current thread 0x... (most recent call first):`
# then `  File "/home/u/ops/fused_rope.py", line 41 in forward`): its first frame is where the
# process was when it crashed.
_FAULT_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+ in ')
_INSTALLED = re.compile(r"/(?:site-packages|dist-packages|lib/python\d[\w.]*)/|^<frozen ")
FAULT_DUMP_LINES = 8


def crashed_in_job_code(a: Analysis, first: Event) -> str | None:
    """The job's own file a native crash happened under, from faulthandler's dump that
    follows the crash line on the same rank; None when it is in installed code or unknown."""
    for entry in a.lines[first.order + 1 : first.order + 1 + FAULT_DUMP_LINES]:
        if (m := _FAULT_FRAME.match(strip_prefixes(entry.text).body)) is not None:
            return None if _INSTALLED.search(m["path"]) else m["path"]
    return None


_TRANSIENT_EXCEPTION = re.compile(
    r"(?i)connect|timeout|timed ?out|network|http|ssl|socket|unavailable|temporar|resource|"
    r"busy|retry|oserror|ioerror|eoferror|interrupt|lock|quota|memory"
)


def _transient(e: Event) -> bool:
    """An exception whose type is about reaching something shared (a hub, a tracker, a
    store, a file system) may pass on the next try, whatever rank raised it."""
    return bool(_TRANSIENT_EXCEPTION.search(e.message.split(":", 1)[0]))


def _first_to_exit(a: Analysis, victims: set[str]) -> list[str]:
    """The node of the task srun saw fail first, before Slurm began terminating the step: where
    a rank whose node the log does not say (a rank prefix, no task label) ran."""
    for x in a.scan.exit_order:
        if x.actor in victims or x.after_termination or x.status == "terminated":
            continue
        return [x.node] if x.node and a.in_job(x.node) else []
    return []


# The path an error names: `No such file or directory: 'data/x.json'`, `Unable to find '/a/b'`.
_NAMED_PATH = re.compile(r"['\"](?P<path>\.{0,2}/?[\w.+@=-][^'\"]{0,400})['\"]")
# A traceback frame of the job's own code: `File "/home/u/proj/train.py", line 12, in main`.
_JOB_FRAME = re.compile(r'File "(?P<path>/[^"]{1,500})", line \d+')
_RELATIVE_FILE = re.compile(
    r"^(?:\.{1,2}/)?(?:[\w.+@=-]+/)*[\w.+@=-]+\.(?:json|jsonl|ya?ml|toml|txt|csv|tsv|parquet|arrow|"
    r"pt|pth|bin|ckpt|safetensors|npy|npz|idx|tar|model|py|sh|cfg|ini|pkl|h5)$"
)
# Shared roots (`/lustre`, `/home`, `/scratch/project`) are not the job's tree by themselves.
OWN_TREE_DEPTH = 3


def job_owned_path(a: Analysis, message: str) -> bool:
    """A missing or forbidden path that belongs to the job: relative to its working directory,
    or inside the directory tree its own code runs from (`/home/u/proj/data/x.json` next to
    `/home/u/proj/src/train.py`). The job's configuration, on any node; a path elsewhere may
    be a mount missing on one node."""
    m = _NAMED_PATH.search(message.split(":", 1)[-1])
    if m is None:
        return False
    path = m["path"]
    if not path.startswith("/"):
        # A relative file path (`data/x.json`, `./cfg.yaml`, `train.jsonl`); not a host name,
        # a URL or a model id (`huggingface.co`, `meta-llama/Llama-2-7b`).
        return "://" not in path and bool(_RELATIVE_FILE.search(path))
    if _passed_by_job(a, path):
        return True
    parts = path.split("/")[1 : OWN_TREE_DEPTH + 1]
    if len(parts) < OWN_TREE_DEPTH:
        return False
    for entry in a.lines:
        if 'File "/' not in entry.text or (f := _JOB_FRAME.search(entry.text)) is None:
            continue
        code = f["path"]
        if _INSTALLED.search(code):
            continue
        if code.split("/")[1 : OWN_TREE_DEPTH + 1] == parts:
            return True
    return False


# A data location the job's own command line or environment passes (`--data /datasets/c4`,
# `--data-path=...`, `--train_data_dir ...`, Megatron's `DATA_PATH='0.7 /lustre/pile/text 0.3
# ...'` of weighted path prefixes): the paths after such an option are the job's arguments.
_DATA_OPTION = re.compile(
    r"--[\w-]*data(?:set)?[\w-]*(?:=|\s+)|\b[A-Z_]*DATA(?:SET)?[A-Z_]*=|"
    r"\b\w*data(?:set)?_(?:path|dir|root|prefix)s?\s*[:=]\s*"
)
_ABSOLUTE = re.compile(r"(?<![\w.])/[\w.+@=-]+(?:/[\w.+@=-]+)+")
# Lines that may carry the job's command line: its script's echo, the first lines of its
# output, an operator's note of what the job script passes.
ARGUMENT_LINES = 200


def _passed_by_job(a: Analysis, path: str) -> bool:
    """A missing path under a data location the job's own arguments pass: what the job sets is
    the job's (attribution-labels.md tie-breaker 6), a wrong path stays wrong on any node."""
    for entry in (*a.header, *a.lines[:ARGUMENT_LINES], *a.facts.lines):
        text = entry.text
        if ("data" not in text and "DATA" not in text) or not (m := _DATA_OPTION.search(text)):
            continue
        for given in _ABSOLUTE.findall(text[m.end() : m.end() + 400]):
            given = given.rstrip("/.")
            if given.count("/") < 2 or not path.startswith(given):
                continue
            if len(path) == len(given) or path[len(given)] in "/._-":
                return True
    return False


# The kernel's or Slurm's OOM killer ending a process of the job (its memory use).
OOM_KILLS = frozenset({"host_oom_kill", "slurm_oom_kill", "dataloader_worker_killed"})


def _explain_by_node(a: Analysis, node: str | None, node_app: list[Event]) -> Verdict | None:
    """A rank that died without a word: did its node's kernel kill it (OOM)?"""
    for e in node_app:
        if e.node == node and e.category == Category.APPLICATION and e.match.id in OOM_KILLS:
            return oom_verdict(a, e) or Verdict(
                Category.APPLICATION, e.key, f"{e.match.id} on {node}: the job ran out of "
                "host memory", 0.8, evidence=[e.line],
            )  # fmt: skip
    return None


def oom_verdict(a: Analysis, e: Event) -> Verdict | None:
    """What the kernel's own OOM report says of a kill on the job's node: a process of another
    user holding most of the memory (a leftover of an earlier job) is the node's state, not the
    job's (attribution-labels.md tie-breaker 4); a report naming this job's cgroup, with its
    own processes holding the memory, is the job's (stop-grade)."""
    block = block_of(oom_blocks(a.node_logs), e.line)
    if block is None:
        return None
    if block.held_by_another_user():
        return Verdict(
            Category.SYSTEM_SOFTWARE, "oom|held_by_other|host", f"{e.match.id} on {e.node}: "
            "another user's process holds most of the node's memory", 0.75,
            culprits=[e.node] if e.node else [], evidence=[e.line],
        )  # fmt: skip
    job_user = a.job.user if a.job is not None else ""
    if (
        not block.memcg
        and not block.tasks
        and e.node
        and (held := others_hold_more(a.node_logs.get(e.node, []), job_user, block.killed_rss_kib))
    ):
        # (No task table in the report: the operator's `ps` of the node shows who held it.)
        return Verdict(
            Category.SYSTEM_SOFTWARE, "oom|held_by_other|host", f"{e.match.id} on {e.node}: "
            f"{held.user}'s process {held.pid} holds {held.rss_kib // 1024**2} GiB of the "
            "node's memory", 0.75, culprits=[e.node], evidence=[e.line, held.line],
        )  # fmt: skip
    job_id = a.job.job_id if a.job is not None else None
    if block.of_this_job(job_id) or (
        # A memory cgroup's limit killing a process the job's output names as its own: the
        # limit of the job's allocation (Slurm's task/cgroup), which the job outgrew.
        block.memcg and block.killed_pid is not None and str(block.killed_pid) in job_pids(a)
    ):
        return Verdict(
            Category.APPLICATION, e.key, f"{e.match.id} on {e.node}: the job's own processes "
            "ran out of host memory", 0.8, evidence=[e.line],
        )  # fmt: skip
    return None


# The processes an OOM message names on the GPU (c10/cuda/CUDACachingAllocator.cpp: `Process
# 48812 has 36.02 GiB memory in use`), and where the job's output names its own processes
# (torchrun `local_rank: 3 (pid: 3301917)`, `Sending process 3301914 closing signal`, NCCL's
# `host:pid:tid` prefix).
