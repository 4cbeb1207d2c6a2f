"""Python tracebacks in a job's output: frames, the exception line, and whose code raised it.

`job_log.scan_job` follows tracebacks per actor with these patterns (a frame in a save
function marks an error raised while saving a checkpoint), and classifies an exception no
registry entry knows: the application's when the job's own code raised it, else of unknown
cause. Kept apart because it is about Python's traceback format only, not Slurm's or NCCL's.
"""

from __future__ import annotations

import re

from resurgo.contracts import AnomalyKind, Category
from resurgo.detect.registry import PatternMatch

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]{1,500})", line \d+, in (?P<func>[\w<>.]+)')
_LIBRARY_PATH = re.compile(
    r"/(?:site|dist)-packages/|/lib/python\d[\d.]*/|^<frozen |^<string>$|/usr/lib/"
)
_TRACEBACK = re.compile(r"\bTraceback \(most recent call last\):")
_EXC_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?(?P<name>[A-Za-z_]\w*(?:Error|Exception))(?::|$)")
_SAVE_FUNC = re.compile(r"(?i)save|persist|serialize|dump_state")


def _users_code(path: str | None) -> bool:
    """The frame that raised is the job's own code, not an installed library or Python's."""
    return bool(path) and not _LIBRARY_PATH.search(path or "")


def _generic_exception(body: str, *, user_code: bool = False) -> PatternMatch:
    """An exception no registry entry knows, ending a traceback: a weak root, the
    application's when the job's own code raised it, else of unknown cause."""
    return PatternMatch.model_construct(
        id="python_user_exception" if user_code else "python_exception",
        kind=AnomalyKind.CRASH,
        category=Category.APPLICATION if user_code else Category.UNKNOWN,
        role="root",
        severity="error",
        span=(0, len(body)),
        groups={},
        tags=(),
    )
