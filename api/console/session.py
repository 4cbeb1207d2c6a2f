"""Who is looking at the console: a login with an API token, kept in a signed session cookie,
and the CSRF check every form post passes.

The cookie (Starlette's `SessionMiddleware`, signed with itsdangerous) is HttpOnly,
SameSite=Strict and scoped to the console's path. It holds the principal's name and role and a
random CSRF token, never the API token itself. It is signed with a key derived from the
configured tokens, so changing the token set (revoking one) logs every browser out.
"""

from __future__ import annotations

import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.requests import Request

from resurgo.api.auth import INSECURE_PRINCIPAL, Principal, Role, TokenRegistry

SESSION_COOKIE = "resurgo_console"
SESSION_MAX_AGE = 12 * 3600  # one on-call shift
CSRF_FIELD = "csrf"
# Forms are a few hundred bytes; the API's BodyGate caps every body at 64 KiB anyway.
MAX_FORM_BYTES = 16 * 1024


class NotLoggedIn(Exception):
    """The request has no valid console session: the browser goes to the login page."""


class Refused(Exception):
    """A logged-in principal asked for something its role or the CSRF check does not allow."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status, self.detail = status, detail


@dataclass(frozen=True)
class ConsoleAuth:
    registry: TokenRegistry
    insecure: bool

    def session_key(self) -> str:
        return self.registry.derived_key("resurgo-console-session").hex()

    def login(self, request: Request, token: str) -> Principal | None:
        principal = self.registry.authenticate(token.strip()) if token.strip() else None
        if principal is None:
            return None
        request.session.clear()
        request.session.update(
            {
                "name": principal.name,
                "role": principal.role.name.lower(),
                "users": sorted(principal.users),
                CSRF_FIELD: secrets.token_urlsafe(32),
            }
        )
        return principal

    def principal(self, request: Request) -> Principal:
        """The session's principal (or the insecure one on a loopback demo)."""
        if self.insecure:
            self.csrf_token(request)
            return INSECURE_PRINCIPAL
        name, role = request.session.get("name"), request.session.get("role")
        users = request.session.get("users", [])
        if not isinstance(name, str) or not isinstance(role, str) or not isinstance(users, list):
            raise NotLoggedIn
        try:
            return Principal(name=name, role=Role.parse(role), users=frozenset(map(str, users)))
        except (KeyError, ValueError) as exc:
            raise NotLoggedIn from exc

    def check_csrf(self, request: Request, fields: dict[str, str]) -> None:
        expected = request.session.get(CSRF_FIELD)
        given = fields.get(CSRF_FIELD, "")
        if not isinstance(expected, str) or not hmac.compare_digest(expected, given):
            raise Refused(403, "the form's CSRF token is missing or stale: reload the page")

    def csrf_token(self, request: Request) -> str:
        token = request.session.get(CSRF_FIELD)
        if not isinstance(token, str):
            token = secrets.token_urlsafe(32)
            request.session[CSRF_FIELD] = token
        return token

    async def form(self, request: Request, role: Role) -> tuple[Principal, dict[str, str]]:
        """A form post's principal and fields: the session and role are checked before the body
        is read, the CSRF token right after."""
        principal = self.principal(request)
        if principal.role < role:
            raise Refused(
                403,
                f"{principal.name} has the {principal.role.name.lower()} role; "
                f"this needs {role.name.lower()}",
            )
        fields = await read_form(request)
        self.check_csrf(request, fields)
        return principal, fields


async def read_form(request: Request) -> dict[str, str]:
    """An `application/x-www-form-urlencoded` body as single values (the first of each)."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise Refused(415, "forms are posted as application/x-www-form-urlencoded")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM_BYTES:
            raise Refused(413, f"forms are limited to {MAX_FORM_BYTES} bytes")
    try:
        parsed = parse_qs(body.decode("utf-8"), keep_blank_values=True, max_num_fields=20)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refused(400, f"unreadable form: {exc}") from exc
    return {key: values[0] for key, values in parsed.items() if values}


__all__ = [
    "CSRF_FIELD",
    "SESSION_COOKIE",
    "SESSION_MAX_AGE",
    "ConsoleAuth",
    "NotLoggedIn",
    "Refused",
    "read_form",
]
