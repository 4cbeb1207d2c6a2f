"""The job's node list as its own output states it, for bundles without a scheduler record.

Job scripts print Slurm's environment (`SLURM_JOB_NODELIST=gpu[011-012]`, `SLURM_NODELIST=`)
and operators head a pasted log with the allocation (`# job 5512908  nodes=gdr-[1-4]`,
`# gpu-h-[01-04] job 5500872 ...`). attribution-labels.md: task N is the N-th host of
SLURM_JOB_NODELIST, so this list is what places tasks and ranks on nodes.
"""

from __future__ import annotations

import re

from resurgo.contracts import LogLine
from resurgo.detect.lines import parse_nccl_prefix
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

_HOSTLIST = (
    r"[A-Za-z][\w.-]*(?:\[[\d,\s-]+\][\w.-]*)?(?:,[A-Za-z][\w.-]*(?:\[[\d,\s-]+\][\w.-]*)?)*"
)
_SLURM_ENV = re.compile(rf"\bSLURM_(?:JOB_)?NODELIST=\"?({_HOSTLIST})")
# (bounded blanks: two open `\s*` around an optional `=` try every split of a long blank run)
_NODES_WORD = re.compile(
    rf"(?i)\b(?:nodes?|nodelist|allocation)\s{{0,8}}[=:]?\s{{0,8}}({_HOSTLIST})"
)
_BRACKETED = re.compile(r"(?<![\w/.-])([A-Za-z][\w.-]*\[[\d,-]+\][\w.-]*)")
HEADER_LINES = 60
# Docker names a container's host after its id's first 12 hex digits unless told otherwise: a
# process inside it prints that, not the node's name (no evidence of another allocation).
_CONTAINER_ID = re.compile(r"[0-9a-f]{12}")
# A one-node allocation, as the note quotes the request (`--nodes=1`, `-N 1`): a single host
# named beside it (`node hgx-h100-04`) is then the job's node.
_ONE_NODE = re.compile(r"(?:--nodes[= ]|(?<![\w-])-N ?)1(?![\d-])")


def _expand(expr: str) -> list[str]:
    try:
        return expand_hostlist(expr.strip().rstrip(".,;:"))
    except ParseError:
        return []


# torchrun's `--rdzv-endpoint=HOST:PORT` / `--rdzv_endpoint HOST:PORT`, `--master_addr HOST`,
# `MASTER_ADDR=HOST`.
STORE_HOST = re.compile(
    r"(?:--rdzv[-_]endpoint|--master[-_]addr|\bMASTER_ADDR)[= ]+\[?([A-Za-z][\w.-]*)"
)


def nodes_in_log(lines: list[LogLine]) -> list[str]:
    """The job's nodes from Slurm's environment printed in its output, else from the first
    operator note (`#` line) naming a bracketed host list; [] when the log states none, or
    when hosts the log itself shows (NCCL's `host:pid:tid` prefixes) are not all on it."""
    found: list[str] = []
    for entry in lines[:300]:
        m = _SLURM_ENV.search(entry.text[:500])
        if m is not None and (found := _expand(m.group(1))):
            break
    from_note = not found
    if not found:
        for entry in lines[:HEADER_LINES]:
            text = entry.text[:500]
            if text.startswith(("+ ", "$ ")) and "  # " in text:
                # A note trailing the launch command the shell traced (`+ srun ... train.py
                # # nodes gpu-q[05-08], --time=02:00:00`).
                text = text[text.index("  # ") + 2 :]
            if not text.startswith("#"):
                continue
            m = _NODES_WORD.search(text)
            expr = m.group(1) if m is not None else None
            named = [x[1] for x in _NODES_WORD.finditer(text)] if _ONE_NODE.search(text) else []
            one = next((g for g in named if any(c.isdigit() for c in g)), None)
            if expr is None or ("[" not in expr and "," not in expr):
                b = _BRACKETED.search(text)
                expr = b.group(1) if b is not None else None
            if expr is not None and len(got := _expand(expr)) >= 2:
                found = got
                break
            if one is not None and len(got := _expand(one)) == 1:
                found = got  # (`sbatch --nodes=1 ... node hgx-h100-04`: the one node named)
                break
    if not found:
        return []
    listed = set(found)
    for entry in lines[:2000]:
        nccl = parse_nccl_prefix(entry.text)
        if (
            nccl is not None
            and (host := nccl.host.split(".", 1)[0]) not in listed
            and not _CONTAINER_ID.fullmatch(host)
        ):
            return []  # the note names another allocation than the one that ran
        if from_note and ("rdzv" in entry.text or "MASTER" in entry.text or "master" in entry.text):
            # The launch's rendezvous host runs the job: a note's list without it is
            # another allocation (`# same config on gpu-l[01-04] last week`). (Slurm's own
            # environment is the job's allocation whatever the launch points at.)
            store = STORE_HOST.search(entry.text[:2000])
            if store is not None and store.group(1).split(".", 1)[0] not in listed:
                return []
    return found


# How a job's own output names its id: the environment Slurm sets (`SLURM_JOB_ID=4412`,
# printed by job scripts) or an operator's header (`# job 2210502 ...`).
_JOB_ID_IN_LOG = re.compile(
    r"\bSLURM_JOB_?ID=(\d{1,12})\b|^#\s*(?:slurm\s+)?job(?:\s+id)?[:\s]\s*(\d{2,12})\b"
)


# Slurm's own lines in the job's output name it too: srun's `Terminating StepId=5521144.0`,
# slurmstepd's `*** JOB 5521144 ON gpu07 CANCELLED AT ...` / `*** STEP 5521144.0 ON ...`.
_JOB_ID_BY_SLURM = re.compile(
    r"\b(?:srun|slurmstepd)\b.{0,80}?(?:\bStepId=|\*\*\* (?:JOB|STEP) )(\d{1,12})\b"
)


def job_id_in_log(lines: list[LogLine]) -> int | None:
    """The job id the job's output states (first 200 lines; else Slurm's own lines among the
    last 200), to tell its sacct rows from those of other jobs pasted beside them (an earlier
    run, a job of the same name, the job whose leftovers are on the node)."""
    for entry in lines[:200]:
        m = _JOB_ID_IN_LOG.search(entry.text[:300])
        if m is not None:
            return int(m.group(1) or m.group(2))
    for entry in lines[-200:]:
        text = entry.text[:300]
        if ("srun" in text or "slurmstepd" in text) and (m := _JOB_ID_BY_SLURM.search(text)):
            return int(m.group(1))
    return None


# An array task's own output (`SLURM_ARRAY_JOB_ID=3301870 SLURM_ARRAY_TASK_ID=12`, sbatch(1)
# OUTPUT ENVIRONMENT VARIABLES): which row of an array's sacct table is the job's.
_ARRAY_JOB_IN_LOG = re.compile(r"\bSLURM_ARRAY_JOB_ID=(\d{1,12})\b")
_ARRAY_TASK_IN_LOG = re.compile(r"\bSLURM_ARRAY_TASK_ID=(\d{1,9})\b")


# The job's own words for its array task, as `%A_%a` (sbatch's filename pattern for the array's
# job id and task id): `array task 88120_5`, `Array job 88120_5`.
_ARRAY_TASK_STATED = re.compile(r"(?i)\barray (?:task|job)(?: id)?[ =:]+(\d{1,12})_(\d{1,9})\b")


def array_task_in_log(lines: list[LogLine]) -> str | None:
    """`<array job id>_<task id>` where the job's output (first 200 lines) states both."""
    array = task = None
    for entry in lines[:200]:
        if "rray" in entry.text and (m := _ARRAY_TASK_STATED.search(entry.text)) is not None:
            return f"{m[1]}_{m[2]}"
        if "SLURM_ARRAY" not in entry.text:
            continue
        array = array or (m.group(1) if (m := _ARRAY_JOB_IN_LOG.search(entry.text)) else None)
        task = task or (m.group(1) if (m := _ARRAY_TASK_IN_LOG.search(entry.text)) else None)
    return f"{array}_{task}" if array and task else None
