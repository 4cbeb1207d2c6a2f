"""A real local HTTP server answering GETs with recorded bodies: stands in for Loki and
VictoriaLogs, which cannot run on the test machines (bodies in their documented formats live in
tests/fixtures/loki and tests/fixtures/victorialogs)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest


@dataclass
class Route:
    path: str
    body: bytes
    status: int = 200
    content_type: str = "application/json"
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters that must be equal."""
    contains: dict[str, str] = field(default_factory=dict)
    """Query parameters that must contain these substrings."""
    times: int | None = None
    """Serve this route at most this many times (then the next matching route)."""

    def matches(self, path: str, query: dict[str, str]) -> bool:
        if path != self.path or self.times == 0:
            return False
        if any(query.get(k) != v for k, v in self.params.items()):
            return False
        return all(v in query.get(k, "") for k, v in self.contains.items())


def fixture(path: Path, **kwargs: Any) -> dict[str, Any]:
    """Route keyword arguments serving a fixture file (text bodies as text/plain)."""
    content_type = "application/json" if path.suffix == ".json" else "text/plain"
    if path.suffix == ".jsonl":
        content_type = "application/stream+json"
    return {"body": path.read_bytes(), "content_type": content_type, **kwargs}


class ReplayServer:
    """A real HTTP server on 127.0.0.1 answering GETs from a list of routes (first match)."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self.requests: list[tuple[str, dict[str, str]]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                parts = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
                route = server._pick(parts.path, query)
                if route is None:
                    body, status, kind = b"404 page not found\n", 404, "text/plain"
                else:
                    body, status, kind = route.body, route.status, route.content_type
                self.send_response(status)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.thread.start()

    def _pick(self, path: str, query: dict[str, str]) -> Route | None:
        with self._lock:
            self.requests.append((path, query))
            for route in self.routes:
                if route.matches(path, query):
                    if route.times is not None:
                        route.times -= 1
                    return route
        return None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def calls(self, path: str) -> list[dict[str, str]]:
        return [q for p, q in self.requests if p == path]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def replay() -> Iterator[Callable[[list[Route]], ReplayServer]]:
    servers: list[ReplayServer] = []

    def start(routes: list[Route]) -> ReplayServer:
        servers.append(ReplayServer(routes))
        return servers[-1]

    yield start
    for server in servers:
        server.close()
