"""HTTP conventions the gateway follows: readable OpenAPI operation ids and CORS.

Operation ids are the route functions' names (`list_jobs`, `job_timeline`, `approve`), which is
what generated clients call their methods. CORS is off unless `[api] cors_origins` lists the
browser origins allowed to call the API (`["*"]` for any); bearer tokens travel in a header, so
credentials (cookies) are never allowed cross-origin.
"""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute

from resurgo.config import ApiSettings

__all__ = ["add_cors", "operation_id"]


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
