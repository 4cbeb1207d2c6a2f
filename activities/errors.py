"""The Temporal boundary for Resurgo's errors: a `PermanentError` leaves an activity as a
non-retryable `ApplicationError` typed by its class name; everything else (transient errors
included) stays retryable, so Temporal retries it with the activity's policy."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from temporalio.exceptions import ApplicationError

from resurgo.errors import PermanentError


@contextmanager
def permanent_failures() -> Iterator[None]:
    try:
        yield
    except PermanentError as exc:
        raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from exc
