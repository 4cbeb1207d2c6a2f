"""HTTP conventions the gateway follows: readable OpenAPI operation ids, CORS, plain integers.

Operation ids are the route functions' names (`list_jobs`, `job_timeline`, `approve`), which is
what generated clients call their methods. CORS is off unless `[api] cors_origins` lists the
browser origins allowed to call the API (`["*"]` for any); bearer tokens travel in a header, so
credentials (cookies) are never allowed cross-origin.
"""

from __future__ import annotations

import re
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute
from pydantic import BeforeValidator

from resurgo.config import ApiSettings

__all__ = ["PlainDigits", "add_cors", "operation_id"]

_DIGITS = re.compile(r"[0-9]{1,19}")


def _plain_digits(value: Any) -> Any:
    """Refuse integer text that int() would still read (`1_2`, ` 12`, `+12`, wide digits)."""
    if isinstance(value, str) and not _DIGITS.fullmatch(value):
        raise ValueError("must be plain decimal digits")
    return value


# Put on every integer query/path parameter: pydantic reads `1_2` as 12 (PEP 515 grouping), so a
# typo would silently address another job, generation or page size.
PlainDigits = BeforeValidator(_plain_digits)


def operation_id(route: APIRoute) -> str:
    return route.name


def add_cors(app: FastAPI, settings: ApiSettings) -> None:
    """Answer browsers from `settings.cors_origins` only; nothing at all when the list is empty."""
    if not settings.cors_origins:
        return
    app.add_middleware(
        CORSMiddleware,
        allow_origins=settings.cors_origins,
        allow_methods=["GET", "POST"],
        allow_headers=["Authorization", "Content-Type", "Idempotency-Key"],
        allow_credentials=False,
        max_age=600,
    )
