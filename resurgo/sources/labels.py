"""Label helpers: selector quoting, VictoriaLogs `_stream` parsing and label-name proposals.

Proposals: when the configured label for a role (`job_id`, `host`, `stream`) is missing, rank
the label names actually present: the same name spelled differently (`JOB_ID`, `jobId`) first,
then well-known aliases (`slurm_job_id`, `SLURM_JOB_ID`, `hostname`, `nodename`, `Hostname`,
`instance`, ...), then names sharing the role's key words, then plain string similarity.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import NamedTuple

_NORMALISE = re.compile(r"[^a-z0-9]")

ROLE_ALIASES: dict[str, tuple[str, ...]] = {
    "job_id": (
        "job_id",
        "slurm_job_id",
        "slurm_jobid",
        "jobid",
        "slurm_job",
        "slurm_array_job_id",
        "batch_job_id",
    ),
    "host": (
        "host",
        "hostname",
        "node",
        "nodename",
        "node_name",
        "slurmd_nodename",
        "slurm_nodename",
        "host_name",
        "slurm_node",
        "instance",
        "kubernetes_node",
    ),
    "stream": (
        "stream",
        "log_stream",
        "std_stream",
        "output",
        "channel",
        "fd",
        "source",
        "filename",
        "file",
    ),
}
_KEY_WORDS: dict[str, tuple[tuple[str, ...], ...]] = {
    "job_id": (("job", "id"),),
    "host": (("host",), ("node",)),
    "stream": (("stream",),),
}
PROPOSAL_THRESHOLD = 0.75
_INTERNAL = frozenset({"_msg", "_time", "_stream", "_stream_id", "__name__"})


class LabelCandidate(NamedTuple):
    name: str
    score: float
    reason: str


def normalise(name: str) -> str:
    """`SLURM_JOB_ID`, `slurm.job-id`, `slurmJobId` → `slurmjobid`."""
    return _NORMALISE.sub("", name.lower())


def _words(name: str) -> set[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    return {w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w}


def rank_candidates(
    role: str, present: Iterable[str], configured: str | None = None, exclude: Iterable[str] = ()
) -> list[LabelCandidate]:
    """Label names in `present` that may play `role`, best first (scores in 0..1)."""
    aliases = ROLE_ALIASES.get(role, (role,))
    wanted = normalise(configured or role)
    alias_norms = [normalise(a) for a in aliases]
    skip = set(exclude) | _INTERNAL
    out: list[LabelCandidate] = []
    for name in sorted(set(present)):
        if name in skip or not name:
            continue
        norm = normalise(name)
        if not norm:
            continue
        if norm == wanted:
            out.append(LabelCandidate(name, 1.0, f"same name as {configured or role!r}"))
            continue
        if norm in alias_norms:
            rank = alias_norms.index(norm)
            out.append(LabelCandidate(name, 0.95 - 0.01 * rank, f"known alias for {role}"))
            continue
        words = _words(name)
        if any(all(w in words or w in norm for w in group) for group in _KEY_WORDS.get(role, ())):
            out.append(LabelCandidate(name, 0.85, f"name mentions {role.replace('_', ' ')}"))
            continue
        ratio = max(
            difflib.SequenceMatcher(None, norm, target).ratio() for target in [wanted, *alias_norms]
        )
        if ratio >= 0.6:
            out.append(LabelCandidate(name, round(ratio * 0.9, 3), "similar spelling"))
    out.sort(key=lambda c: (-c.score, c.name))
    return out


def propose_label(
    role: str, present: Iterable[str], configured: str | None = None, exclude: Iterable[str] = ()
) -> str | None:
    """The best candidate for `role` if it is convincing enough, else None."""
    ranked = rank_candidates(role, present, configured, exclude)
    if ranked and ranked[0].score >= PROPOSAL_THRESHOLD:
        return ranked[0].name
    return None


# ---------------------------------------------------------------------- quoting
def quote_string(value: str) -> str:
    """A double-quoted string literal for LogQL, LogsQL and PromQL (Go string escapes)."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + out.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t") + '"'


_PLAIN_LABEL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_selector_label(name: str) -> str:
    """A Prometheus/Loki label name usable unquoted in a selector (ValueError otherwise)."""
    if _PLAIN_LABEL.fullmatch(name) is None:
        raise ValueError(
            f"label name {name!r} cannot be used in a LogQL/PromQL selector "
            "(letters, digits and '_' only, not starting with a digit)"
        )
    return name


# ---------------------------------------------------------------------- VictoriaLogs `_stream`
_STREAM_PAIR = re.compile(r'\s*([^=,{}"\s]+)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(?:,|$)', re.DOTALL)
_UNESCAPE = {"n": "\n", "r": "\r", "t": "\t", '"': '"', "\\": "\\"}


def parse_stream_labels(text: str) -> dict[str, str]:
    """`{host="node1",job_id="42"}` → dict (ValueError when it is not in that form)."""
    raw = text.strip()
    if not (raw.startswith("{") and raw.endswith("}")):
        raise ValueError(f'stream labels must look like {{k="v",...}}: {raw[:80]!r}')
    body = raw[1:-1]
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(body):
        if body[pos:].strip() == "":
            break
        m = _STREAM_PAIR.match(body, pos)
        if m is None:
            raise ValueError(f"malformed stream labels near {body[pos : pos + 40]!r}")
        value = re.sub(r"\\(.)", lambda e: _UNESCAPE.get(e.group(1), e.group(1)), m.group(2))
        labels[m.group(1)] = value
        pos = m.end()
    return labels
