"""A small HTTP client shared by the Loki, VictoriaLogs and Prometheus sources.

httpx.AsyncClient with explicit timeouts and bounded retries (connection errors, timeouts, 429
and 5xx answers) by stamina, the kept retry library: exponential backoff with jitter, so many
watches retrying one restarted Loki do not come back in lockstep. Every failure becomes a
`SourceUnavailable` or a `SourceContractError` whose message names the source, the request and
the server's own words.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import stamina

from resurgo.metrics.process import PROCESS
from resurgo.sources.errors import SourceContractError, SourceError, SourceUnavailable

DEFAULT_TIMEOUT = 10.0
DEFAULT_RETRIES = 2
DEFAULT_BACKOFF = 0.25
MAX_BACKOFF = 5.0
_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
_SNIPPET = 300

Params = Mapping[str, str | int | float | Sequence[str]]


class _Retryable(Exception):
    """A failure worth another try (the message says what happened)."""


def snippet(text: str, limit: int = _SNIPPET) -> str:
    """One-line head of a response body for error messages."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


class HttpApi:
    """GET requests against one base URL, with timeouts, bounded retries and clear errors."""

    def __init__(
        self,
        base_url: str,
        *,
        name: str,
        timeout: float = DEFAULT_TIMEOUT,
        retries: int = DEFAULT_RETRIES,
        backoff: float = DEFAULT_BACKOFF,
        headers: Mapping[str, str] | None = None,
        client: httpx.AsyncClient | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"{name}: base URL must start with http:// or https://: {base_url!r}")
        if retries < 0:
            raise ValueError("retries must be >= 0")
        self.base_url = base_url.rstrip("/")
        self.name = name
        self.retries = retries
        self.backoff = backoff
        self.headers = dict(headers or {})
        self._owned = client is None
        self._client = client or httpx.AsyncClient(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 5.0)),
            follow_redirects=False,
        )

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    async def aclose(self) -> None:
        if self._owned:
            await self._client.aclose()

    async def get(self, path: str, params: Params | None = None) -> httpx.Response:
        """A successful (2xx) response; raises SourceUnavailable / SourceContractError."""
        url = self.url(path)
        what = f"{self.name} at {self.base_url}: GET {path}"
        retrying = stamina.retry_context(
            on=_Retryable,
            attempts=self.retries + 1,
            timeout=None,
            wait_initial=self.backoff,
            wait_max=MAX_BACKOFF,
            wait_jitter=self.backoff,
            wait_exp_base=2,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    return await self._get_once(url, what, params)
        except _Retryable as exc:
            tries = self.retries + 1
            PROCESS.source_failed(self.name)  # once per failed read, not per retry
            raise SourceUnavailable(f"{what} failed after {tries} attempt(s): {exc}") from None
        except SourceError:
            PROCESS.source_failed(self.name)
            raise
        raise AssertionError("unreachable")  # pragma: no cover

    async def _get_once(self, url: str, what: str, params: Params | None) -> httpx.Response:
        try:
            response = await self._client.get(url, params=_params(params), headers=self.headers)
        except httpx.TimeoutException as exc:
            raise _Retryable(f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise _Retryable(
                f"cannot connect ({type(exc).__name__}: {exc or 'no detail'})"
            ) from exc
        status = response.status_code
        if 200 <= status < 300:
            return response
        body = snippet(response.text)
        if status in _RETRY_STATUS:
            raise _Retryable(f"answered HTTP {status}: {body or response.reason_phrase}")
        hint = ""
        if status == 404:
            hint = f" (is {self.base_url} really a {self.name} server?)"
        elif status in (401, 403):
            hint = " (authentication required: configure headers/credentials)"
        raise SourceContractError(
            f"{what} was rejected with HTTP {status}: {body or response.reason_phrase}{hint}"
        )

    async def get_json(self, path: str, params: Params | None = None) -> Any:
        response = await self.get(path, params)
        try:
            return decode_json(response.text, f"{self.name} at {self.base_url}: GET {path}")
        except SourceError:
            PROCESS.source_failed(self.name)
            raise


def decode_json(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = exc.msg if isinstance(exc, json.JSONDecodeError) else "too deeply nested"
        raise SourceContractError(
            f"{what} returned invalid JSON ({detail}); body starts with: {snippet(text, 120)!r}"
        ) from None


def _params(params: Params | None) -> httpx.QueryParams | None:
    if params is None:
        return None
    out: list[tuple[str, str | int | float | bool | None]] = []
    for key, value in params.items():
        if isinstance(value, str | int | float):
            out.append((key, str(value)))
        else:
            out.extend((key, str(v)) for v in value)
    return httpx.QueryParams(out)
