"""An `AuditDigest` kept up to date from the audit store: each refresh reads only the events
stored since the last one (keyset on the row id), at most once per `max_age` seconds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from resurgo.audit.store import MAX_LIMIT, AuditStore
from resurgo.metrics.digest import AuditDigest

R = TypeVar("R")


class DigestReader:
    def __init__(self, store: AuditStore, *, max_age: float = 5.0) -> None:
        self.store = store
        self.max_age = max_age
        self._digest = AuditDigest()
        self._read_at = float("-inf")
        self._lock = threading.Lock()

    def view(self, read: Callable[[AuditDigest], R]) -> R:
        """`read(digest)` on a fresh digest, under the lock: nothing changes while it reads."""
        with self._lock:
            if time.monotonic() - self._read_at >= self.max_age:
                self._catch_up()
                self._read_at = time.monotonic()
            return read(self._digest)

    def _catch_up(self) -> None:
        while True:
            page = self.store.query(after_id=self._digest.last_id or None, limit=MAX_LIMIT)
            self._digest.feed(page)
            if len(page) < MAX_LIMIT:
                return


__all__ = ["DigestReader"]
