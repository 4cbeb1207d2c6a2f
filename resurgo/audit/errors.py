"""Errors of the audit store."""

from __future__ import annotations

from resurgo.errors import PermanentError


class BadAuditEvent(PermanentError):
    """An event that can never be stored (a field over its column limit, non-JSON data)."""
