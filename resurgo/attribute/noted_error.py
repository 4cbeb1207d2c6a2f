"""The error a job ended with, as an operator's note states it when the traceback was cut.

Pasted logs often keep a traceback's first frames and lose its last line; whoever collected the
bundle then writes what it ended in (`# operator note: the traceback ends in a CUDA out of
memory error`, `# the run aborts with CUDA out of memory reported for GPU 4`). A CUDA
out-of-memory error is the model's or the batch's (attribution-labels.md: CUDA OOM from model or
batch size is application, even on one node), so a verdict that found no error of its own is
the job's when a note says the run died of one. Only a note that says so of this run: the
error is the object of `ends in`, `fails with`, `aborts with`, `dies with` (a note that a run
elsewhere trained *without* an OOM says nothing of this one), and never when the note makes the
OOM a side effect of something else, or when another process held the memory.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.attribute.site_notes import short_notes
from resurgo.contracts import Category

# (each filler word ends at its blank: one way to read the words, no backtracking)
_ENDED_WITH = re.compile(
    r"(?i)\b(?:ends?|ended|fails?|failed|aborts?|aborted|dies|died|crash(?:es|ed)?|exits?|"
    r"exited|stops?|stopped) (?:in|with|on) (?:(?:a|an|the) )?(?:[\w.()-]{1,40} ){0,2}?"
    r"(?:\(?CUDA out[ -]of[ -]memory|CUDA OOM|torch\.(?:cuda\.)?OutOfMemoryError)"
)
# The note itself says the OOM followed from something else, or was another process's.
_NOT_ITS_OWN = re.compile(
    r"(?i)\bside[ -]effect\b|\bconsequence\b|\bleftover\b|\banother process\b|\bzombie\b|"
    r"\bheld by\b"
)


def noted_oom(a: Analysis, v: Verdict) -> Verdict:
    """An `unknown` verdict made the job's OOM when a note says the run died of one."""
    if v.category != Category.UNKNOWN:
        return v
    for entry, text in short_notes(a):
        if _ENDED_WITH.search(text) and not _NOT_ITS_OWN.search(text):
            return Verdict(
                Category.APPLICATION, "oom|noted", f"{v.summary}; an operator's note says the "
                "run died of CUDA out of memory (the model's or the batch's)", 0.8,
                ranks=v.ranks, evidence=[entry, *v.evidence[:2]], kind=v.kind,
            )  # fmt: skip
    return v
