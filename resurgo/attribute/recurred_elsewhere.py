"""An operator's note that an earlier run of the job failed the same way on other nodes.

attribution-labels.md, tie-breaker 3: the same failure on every node, or reproduced on other
hardware, is the application's. Operators say so in a note beside the logs: `# previous job
917727 on dgx[101-104] ended the same way right after a 'Removing checkpoint' line`, `# 73304
(same script, node[11-12]) died in DDP init with the same 'unhandled system error'`. When the
nodes the note names share none with this run's (or it says each attempt ran on other nodes),
no node of either run explains the failure:
the job's code, configuration or environment does, and a retry fails again (stop).

The note is believed only where the logs leave room for it: a verdict resting on a node's own
files (an Xid in its kernel log, a port down in its ibstat) stands, since one bad node per run
is still possible; a note naming one of this run's nodes (the same GPU failing across restarts)
is the hardware's case, not this one.

A note may instead name the earlier runs by job id alone (`# 1903110, 1903562 and 1904021 ran
the same recipe; each log stops mid-run without a traceback`): their sacct rows beside it give
their nodes and states, and where every one of them failed on nodes this run did not use, the
note says the same.

The converse points the same way: a note that the job, changed in its own setup, ran on these
same nodes (`# 41993240: same nodes and config with pipeline_parallel_degree 1, 200 steps
completed`, `# the identical image rebuilt with NCCL 2.4.8 trains on the same nodes`, `# rerun
with the fixed ms-swift release trains past step 3000 on the same node`): the nodes carried
the changed job, so what failed is what the job changed back: its code, configuration or
software (attribution-labels.md: application covers the job's configuration and environment).
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.site_notes import short_notes
from resurgo.contracts import AnomalyKind, Category, LogLine
from resurgo.slurm.errors import ParseError
from resurgo.slurm.parsers import expand_hostlist

# The failure again, in the words notes use.
_SAME = re.compile(
    r"(?i)\b(?:the same way|identically|with the same (?:error|message|assertion|traceback|"
    r"exception|'|\")|same (?:(?:kind|type|sort) of )?(?:error|failure|hang|crash|traceback|"
    r"assertion)\b)"
)
_FAILED = re.compile(
    r"(?i)\b(?:fail|died|dies|hung|hang|stopp|stops\b|ended|crash|abort|diverg|error)"
)
# An earlier run: `previous job`, `attempt 1`, `job 4087`, `73304 (`, `rerun`.
_EARLIER = re.compile(
    r"(?i)\b(?:previous|earlier|prior|first)\b.{0,30}\b(?:job|attempt|run|submission)\b|"
    r"\b(?:job|attempt|run)\s+\d{2,}\b|^#\s*\d{3,}\b|\brerun\b|\bresubmi"
)
# Or every attempt failing, each on other nodes (`# each attempt hangs right after step 1500
# on a different node`): the note says the nodes differ without naming them.
_EACH = re.compile(
    r"(?i)\b(?:each|every|all(?: \w+)?) (?:attempts?|runs?|resubmissions?|retr(?:y|ies))\b"
    r"|\bhappened (?:again and again|repeatedly)\b"
)
# (Other machines by any name: nodes, hosts, clusters, cloud providers: `on several different
# cloud GPU providers`.)
_ELSEWHERE = re.compile(
    r"(?i)\bon (?:a |\w+ )?(?:different|other|disjoint|new) (?:\w+ ){0,2}?(?:nodes?|hosts?|"
    r"hardware|machines?|clusters?|providers?|clouds?|systems?|sites?)\b"
)
# Host names and Slurm hostlists in the note's text.
_HOSTS = re.compile(r"\b[A-Za-z][\w-]*?(?:\[[\d,-]+\]|\d+)[\w-]*(?![\w\[])")
_PREFIX = re.compile(r"^[A-Za-z-]+")


def recurred_elsewhere(a: Analysis, v: Verdict) -> Verdict:
    """`v` as the application's when a note says an earlier run on other nodes failed alike."""
    if v.category in (Category.APPLICATION, Category.NONE) or _rests_on_node_files(v):
        return v
    note = _note(a)
    changed = _changed_job_ran_here(a) if note is None else None
    if note is None and changed is None:
        return v
    kind, outcome, summary = v.kind, v.outcome, v.summary
    if v.outcome == "owner_cancelled":
        # A run that failed before as this one did, cancelled by its owner with no error of its
        # own: it had stopped (hung) and the owner ended it.
        kind, outcome, summary = (
            AnomalyKind.HANG,
            None,
            "the job stopped and its owner cancelled it",
        )
    key, why, confidence, said = (
        ("recurred_on_other_nodes", "an earlier run on other nodes failed the same way (the "
         "job's own code, configuration or environment)", 0.85, note)
        if note is not None else
        ("changed_job_ran_here", "the job with its own setup changed ran on the same nodes "
         "(its code, configuration or software, not the nodes)", 0.8, changed)
    )  # fmt: skip
    assert said is not None
    return Verdict(
        Category.APPLICATION, key, f"{summary}; {why}", confidence,
        ranks=v.ranks, evidence=[said, *v.evidence[:2]], kind=kind, outcome=outcome,
    )  # fmt: skip


def _rests_on_node_files(v: Verdict) -> bool:
    """Some of the verdict's evidence is a node's own file (kernel log, diagnostics)."""
    return any(e.source not in ("job.log", "scheduler.txt") for e in v.evidence)


def _note(a: Analysis) -> LogLine | None:
    ours = set(a.job_nodes())
    prefixes = {m.group(0) for n in ours if (m := _PREFIX.match(n))}
    for entry in [*a.lines, *a.facts.lines]:
        text = entry.text.lstrip()
        if not text.startswith("#") or len(text) > 600:
            continue
        if _EACH.search(text) and _ELSEWHERE.search(text) and _FAILED.search(text):
            return entry
        if not (ours and _SAME.search(text) and _FAILED.search(text) and _EARLIER.search(text)):
            continue  # (nodes named in a note are compared with this run's, when it has some)
        named = _named_nodes(text, prefixes)
        if named and not named & ours:
            return entry
    return _runs_named_by_id(a, ours) if ours else None


# The same work as this run (`ran the same recipe`, `same config`), said of the runs a note names.
_SAME_WORK = re.compile(
    r"(?i)\bsame (?:recipe|config\w*|script|job script|model|code|command|setup|yaml|toml)\b"
)
# (`31702:` opening a note is an id; `10:14` a time, `1.0` a number)
_JOB_ID = re.compile(r"(?<![\w.:-])(\d{4,12})(?![\w.-]|:\d)")
_FAILED_STATES = ("FAILED", "CANCELLED", "TIMEOUT", "OUT_OF_ME")


def _runs_named_by_id(a: Analysis, ours: set[str]) -> LogLine | None:
    """A note naming earlier runs of the same work by job id, each of which sacct shows
    failing on nodes this run did not use."""
    notes = [
        e for e in [*a.lines[:200], *a.facts.lines]
        if e.text.lstrip().startswith("#") and len(e.text) <= 600
        and _SAME_WORK.search(e.text) and _FAILED.search(e.text)
    ]  # fmt: skip
    if not notes:
        return None
    runs = a.once("recurred_elsewhere:sacct_runs", lambda: _sacct_runs(a))
    own = str(a.job.job_id) if a.job is not None else None
    for note in notes:
        ids = [i for i in _JOB_ID.findall(note.text) if i != own]
        shown = [runs[i] for i in ids if i in runs]
        if not shown or len(shown) != len(ids):
            continue  # (a number that is no run of the table: not the note's subject)
        if all(state.startswith(_FAILED_STATES) and nodes and not nodes & ours
               for state, nodes in shown):  # fmt: skip
            return note
    return None


_SAME_NODES = re.compile(
    # (each word before `nodes` ends at its blank: one way to read the words, no backtracking)
    r"(?i)\b(?:same|identical) (?:[\w/-]{1,40},? (?:and )?){0,4}(?:nodes?|hosts?|machines?)\b"
    r"|\bon (?:both|these|all(?: \w+)?) nodes\b"
)
_RAN = re.compile(
    r"(?i)\b(?:completed?|completes|trains|trained|works|worked|(?:ran|runs?) (?:fine|normally)|"
    r"passe[sd]|succeed(?:s|ed)?|finishe[sd]|initiali[sz]es and trains)\b"
)
# What the job changed for that run: a setting (`pipeline_parallel_degree 1`, `NCCL_ALGO=Ring`),
# a rebuilt image, another release of its software.
_CHANGED = re.compile(
    r"(?i)\b(?:fixed|rebuilt|downgrad\w*|upgrad\w*|instead of|changed|\w+_degree|"
    r"with (?:the )?(?:older|newer|previous|other|another|different)\b|release|version|"
    r"without)\b|\(no\b|"
    r"(?-i:\b[A-Z][A-Z0-9_]{3,}=\S+)"  # (an environment variable, as scripts spell them)
    r"|(?-i:\b[a-z]+(?:_[a-z]+)+=\S+)"  # (a snake_case option: batch_accumulation_per_replica=1)
    r"|\bwith (?:the )?container\b"
)


def _changed_job_ran_here(a: Analysis) -> LogLine | None:
    """A note that the job, changed in its own setup, ran on the same nodes."""
    ours = set(a.job_nodes())
    prefixes = {m.group(0) for n in ours if (m := _PREFIX.match(n))}
    for entry, text in short_notes(a):
        if not (_SAME_NODES.search(text) and _CHANGED.search(text)):
            continue
        named = _named_nodes(text, prefixes)
        if named and not named & ours:
            continue  # (`same model, nodes gpu[211-214]`: another run's nodes, not these)
        if _RAN.search(text) or _names_a_completed_run(a, text):
            return entry
    return None


def _names_a_completed_run(a: Analysis, text: str) -> bool:
    """The note names, by job id, a run sacct shows COMPLETED."""
    own = str(a.job.job_id) if a.job is not None else None
    ids = [i for i in _JOB_ID.findall(text) if i != own]
    if not ids:
        return False
    runs = a.once("recurred_elsewhere:sacct_runs", lambda: _sacct_runs(a))
    return any(runs.get(i, ("", set()))[0].startswith("COMPLETED") for i in ids)


def _sacct_runs(a: Analysis) -> dict[str, tuple[str, set[str]]]:
    """Every job's own row in the scheduler text's sacct tables: id → (state, nodes)."""
    runs: dict[str, tuple[str, set[str]]] = {}
    for job_id, row in a.facts.sacct_jobs.items():
        try:
            nodes = set(expand_hostlist(row.get("NodeList", ""), limit=256))
        except ParseError:
            nodes = set()
        runs[job_id] = (row.get("State", ""), nodes)
    return runs


def _named_nodes(text: str, prefixes: set[str]) -> set[str]:
    """Host names in `text` that look like the job's (the same alphabetic stem)."""
    out: set[str] = set()
    for m in _HOSTS.finditer(text):
        token = m.group(0)
        stem = _PREFIX.match(token)
        if stem is None or stem.group(0) not in prefixes:
            continue
        try:
            out.update(expand_hostlist(token, limit=256))
        except ParseError:
            continue
    return out
