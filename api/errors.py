"""One error shape for every error the API answers, whoever raised it:

```json
{"error": {"code": "not_found", "message": "no job 42 on cluster 'c1' is known to Resurgo",
           "details": null}}
```

`code` is stable and machine-readable (the table below), `message` is for a person, `details`
is a list for request validation (422: one entry per problem, with `loc` and `msg`) and null
otherwise. The same shape comes from our own problems (`ApiProblem`), FastAPI's validation and
routing errors, the store being down, Temporal refusing, and the body gate in front of it all.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from temporalio.service import RPCError, RPCStatusCode

from resurgo.api.core import ApiProblem
from resurgo.audit.store import AuditStoreUnavailable

__all__ = ["CODES", "documented", "error_body", "error_response", "install_error_handlers"]

log = logging.getLogger("resurgo.api")

CODES: dict[int, str] = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "body_too_large",
    422: "invalid_request",
    429: "too_many_requests",
    500: "internal_error",
    502: "temporal_refused",
    503: "unavailable",
    504: "timeout",
}


def documented(*codes: int) -> dict[int | str, dict[str, Any]]:
    """`responses=` for a route or router: these statuses answer with the one error shape."""
    from resurgo.api.models import ErrorBody

    return {code: {"model": ErrorBody} for code in codes}


def error_body(status: int, message: str, details: list[Any] | None = None) -> dict[str, Any]:
    code = CODES.get(status, "client_error" if status < 500 else "server_error")
    return {"error": {"code": code, "message": message, "details": details}}


def error_response(
    status: int,
    message: str,
    details: list[Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(status, message, details), status_code=status, headers=headers)


def _validation_details(exc: RequestValidationError) -> list[Any]:
    # Only where and what: the rejected input itself is not echoed back.
    return [
        {"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
        for e in jsonable_encoder(exc.errors())
    ]


def _document_the_shape(app: FastAPI) -> None:
    """Every operation's 422 is the one error shape in the OpenAPI document too (FastAPI would
    document its own `HTTPValidationError` for routes that do not declare 422 themselves)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = build()
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        if "ErrorBody" not in schemas:
            from pydantic.json_schema import models_json_schema

            from resurgo.api.models import ErrorBody

            _, found = models_json_schema(
                [(ErrorBody, "serialization")], ref_template="#/components/schemas/{model}"
            )
            schemas.update(found.get("$defs", {}))
        ref = {"$ref": "#/components/schemas/ErrorBody"}
        for path in spec.get("paths", {}).values():
            for operation in path.values():
                invalid = operation.get("responses", {}).get("422")
                if isinstance(invalid, dict):
                    invalid["content"] = {"application/json": {"schema": ref}}
        # FastAPI's own validation schemas, once nothing refers to them any more.
        for unused in ("HTTPValidationError", "ValidationError"):
            if f'"#/components/schemas/{unused}"' not in json.dumps(spec):
                schemas.pop(unused, None)
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]


def install_error_handlers(app: FastAPI) -> None:
    _document_the_shape(app)

    @app.exception_handler(ApiProblem)
    async def problem(_: Request, exc: ApiProblem) -> JSONResponse:
        return error_response(exc.status, exc.detail, headers=exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        details = _validation_details(exc)
        where = ", ".join(".".join(str(p) for p in d["loc"]) for d in details[:5])
        return error_response(422, f"invalid request: {where}" if where else "invalid request",
                              details)  # fmt: skip

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        headers = dict(exc.headers) if exc.headers else None
        return error_response(exc.status_code, str(exc.detail), headers=headers)

    @app.exception_handler(AuditStoreUnavailable)
    async def store_down(_: Request, exc: AuditStoreUnavailable) -> JSONResponse:
        return error_response(503, str(exc))

    @app.exception_handler(RPCError)
    async def temporal_error(_: Request, exc: RPCError) -> JSONResponse:
        if exc.status in (RPCStatusCode.UNAVAILABLE, RPCStatusCode.DEADLINE_EXCEEDED):
            # The transport's own text (a Rust error chain) is for the log, not the caller.
            log.warning("Temporal unavailable: %s", exc)
            return error_response(503, "Temporal is unavailable; audit reads still answer")
        log.error("Temporal refused a request: %s (%s)", exc, exc.status)
        return error_response(502, f"Temporal refused the request: {exc.message}")
