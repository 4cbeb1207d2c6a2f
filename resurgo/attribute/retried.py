"""Errors the job retried past: a failure its own retry loop announced and then got over.

Trainers, storage clients and hub libraries wrap flaky operations in retries and say so on the
failed try: `checkpoint write failed (attempt 1/5)`, huggingface_hub's `Retrying in 1s [Retry
1/5].` (utils/_http.py `http_backoff`), tenacity's `Retrying train.save in 2.0 seconds as it
raised OSError` (before_sleep_log), urllib3's `Retrying (Retry(total=4, ...)) after connection
broken by ...`. When a later line of the job reports the operation succeeded (`successfully
saved checkpoint ... (attempt 2/5)`), the error was handled: a retry that succeeded is `none`
(attribution-labels.md kind), not the job's failure.
"""

from __future__ import annotations

import re

from resurgo.attribute.analysis import Analysis
from resurgo.attribute.events import Event
from resurgo.detect.lines import strip_prefixes

# A failed try that will be tried again: `attempt 1/5`, `[Retry 1/5]`, `retry 2 of 3`,
# `retrying in 5s`, `will retry`.
_RETRYING = re.compile(
    r"(?i)\b(?:attempt|try|retry)\s*#?(?P<k>\d+)\s*(?:/|of)\s*(?P<n>\d+)\b|\bretrying\b|"
    r"\bwill (?:be )?retr(?:y|ied)\b"
)
# The operation then reported done.
_SUCCEEDED = re.compile(
    r"(?i)\b(?:success(?:ful(?:ly)?)?|succeeded|saved|written|completed|recovered)\b"
)
_FAILED_AGAIN = re.compile(r"(?i)\b(?:fail(?:ed|ure)?|error|giving up|gave up|exhausted)\b")
# How far below the failed try the success may be reported (a few more tries between).
RETRY_WINDOW = 30


def _will_retry(text: str) -> bool:
    m = _RETRYING.search(text)
    if m is None:
        return False
    if m["k"] is not None and m["n"] is not None:
        return int(m["k"]) < int(m["n"])  # (the last try failing is no retry)
    return True


def retried_ok(a: Analysis, e: Event) -> bool:
    """The event's own line announces a retry and a later line of the job reports success
    before any failure that is not another announced try."""
    if e.origin != "job" or not _will_retry(e.message):
        return False
    for entry in a.lines[e.order + 1 : e.order + 1 + RETRY_WINDOW]:
        body = strip_prefixes(entry.text).body
        if _FAILED_AGAIN.search(body):
            if _will_retry(body):
                continue
            return False
        if _SUCCEEDED.search(body):
            return True
    return False
