"""Stack dumps an operator took of a stuck job and summarised in a note: ranks in different
places of the job's code.

When a job hangs, the usual check is a stack dump of every rank (`py-spy dump --pid`, `pystack
remote`, gdb's `bt`; pytorch/pytorch#54059, the py-spy README). Summarised in a `#` note (`#
py-spy dump (ranks 0,1): main.py:_train -> self.comm.barrier(); rank 2: main.py:_train ->
loader.next() (epoch 2)`, `# rank 11 py-spy: webdataset/shardlists.py:__iter__ waiting on
exhausted shard list; ranks 0-10,12-15 in all_gather`) it shows some ranks waiting in a
collective the others never reach because they are elsewhere in the job's own code (its data
iterator, a loop with another count): the job's code path, application, stop
(attribution-labels.md: deadlocks in user code). Every rank in the same collective says
nothing about why.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis, Verdict
from resurgo.contracts import AnomalyKind, Category, LogLine

_DUMP = re.compile(r"(?i)\b(?:py-?spy|pystack|stack dumps?|gdb\b.{0,20}\bbt\b|backtraces?)\b")
_RANKS = re.compile(r"(?i)\branks?\s*[\d(]")
_COLLECTIVE = re.compile(
    r"(?i)\b(?:barrier|all_?gather\w*|all_?reduce\w*|reduce_scatter\w*|broadcast\w*|"
    r"all_to_all\w*|alltoall\w*|wait_tensor|collective)\b"
)


def _notes(a: Analysis) -> list[LogLine]:
    return [e for e in [*a.header, *a.lines[-60:], *a.facts.lines] if e.text.startswith("#")]


def noted_stacks_diverge(a: Analysis) -> Verdict | None:
    """A note of stack dumps with some ranks in a collective and others in the job's code."""
    for note in _notes(a):
        if not _DUMP.search(note.text):
            continue
        # (one part per group of ranks: `ranks 0,1: ...; rank 2: ...`)
        parts = [p for p in re.split(r";|\. (?=[Rr]ank)", note.text) if _RANKS.search(p)]
        waiting = [p for p in parts if _COLLECTIVE.search(p)]
        elsewhere = [p for p in parts if not _COLLECTIVE.search(p)]
        if waiting and elsewhere:
            return Verdict(
                Category.APPLICATION, "hang|noted_stacks_diverge",
                "stack dumps of the stuck job show ranks in different places of its code: "
                f"{elsewhere[0].strip(' #')[:120]} while the others wait in a collective "
                "it never reaches", 0.8, evidence=[note], kind=AnomalyKind.HANG,
            )  # fmt: skip
    return None
