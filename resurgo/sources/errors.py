"""Exceptions raised by signal sources.

`SourceUnavailable` is transient from the caller's point of view (network down, server overloaded,
timeouts after the bounded retries): try again later. `SourceContractError` means the source
answered but not as its documented API says (malformed JSON, missing fields, a rejected query,
a 404 on the API path): retrying will not help, the configuration or the server must change.
"""

from __future__ import annotations

from resurgo.errors import PermanentError, ResurgoError, TransientError


class SourceError(ResurgoError):
    """Base class; the message names the source, the request and what went wrong."""


class SourceUnavailable(SourceError, TransientError):
    """The source could not be reached or answered with a server error (after retries)."""


class SourceContractError(SourceError, PermanentError):
    """The source answered, but not in the documented format (or rejected the request)."""
