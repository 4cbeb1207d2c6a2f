"""`resurgo api` under a real uvicorn server: a body is read only after the token checked out,
never past 64 KiB, and `/readyz` names addresses only to a valid token."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from resurgo.api.auth import MAX_BODY_BYTES
from resurgo.api.server import free_port
from resurgo.devstack.localstack import REPO, wait_for
from resurgo.tokens import hash_token, new_token

TEMPORAL = "127.0.0.1:9"  # nothing listens: only the gateway's own checks run
MODE = "/v1/jobs/local/7/mode"


class Api:
    def __init__(self, url: str, viewer: str, operator: str, store: str) -> None:
        self.url, self.viewer, self.operator, self.store = url, viewer, operator, store

    def auth(self, token: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {token}"}


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    tmp = tmp_path_factory.mktemp("api")
    viewer, operator = new_token(), new_token()
    store = f"sqlite:///{tmp / 'audit.db'}"
    port = free_port()
    config = tmp / "resurgo.toml"
    config.write_text(
        f'[temporal]\naddress = "{TEMPORAL}"\n[audit]\nurl = "{store}"\n'
        f'[api.tokens.vera]\nrole = "viewer"\nsha256 = "{hash_token(viewer)}"\n'
        f'[api.tokens.otto]\nrole = "operator"\nsha256 = "{hash_token(operator)}"\n'
    )
    argv = [sys.executable, "-m", "resurgo.cli.main", "api", "--config", str(config),
            "--port", str(port)]  # fmt: skip
    with open(tmp / "api.log", "wb") as out:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        try:
            return httpx.get(url + "/healthz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_for(up, 30, what="resurgo api")
        yield Api(url, viewer, operator, store)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=15)


def test_no_token_is_refused_before_the_body_is_parsed(api: Api) -> None:
    # Malformed JSON without a token: the answer is about the token, not about the body.
    for headers in ({}, api.auth("not-a-token")):
        resp = httpx.post(api.url + MODE, content=b"{not json", timeout=10,
                          headers={**headers, "Content-Type": "application/json"})  # fmt: skip
        assert resp.status_code == 401, resp.text
        assert resp.headers["www-authenticate"].startswith("Bearer")
    # A streamed body (no Content-Length) without a token: refused too.
    resp = httpx.post(api.url + MODE, content=iter([b"{", b'"mode"']), timeout=10)
    assert resp.status_code == 401


def test_bodies_over_the_limit_are_refused(api: Api) -> None:
    big = b'{"mode": "observe", "reason": "' + b"x" * (MAX_BODY_BYTES + 1) + b'"}'
    headers = {**api.auth(api.operator), "Content-Type": "application/json"}
    resp = httpx.post(api.url + MODE, content=big, headers=headers, timeout=30)
    assert resp.status_code == 413, resp.text
    assert "limited to" in resp.json()["error"]["message"]
    # The same without a Content-Length (chunked): counted while it streams in.
    chunks = iter([big[i : i + 8192] for i in range(0, len(big), 8192)])
    resp = httpx.post(api.url + MODE, content=chunks, headers=headers, timeout=30)
    assert resp.status_code == 413, resp.text
    # A small body with a valid token still gets through to the route (no such job: 404/503).
    small = httpx.post(api.url + MODE, json={"mode": "observe"}, headers=headers, timeout=30)
    assert small.status_code not in (401, 413), small.text


def test_readyz_names_addresses_only_to_a_valid_token(api: Api) -> None:
    anonymous = httpx.get(api.url + "/readyz", timeout=20)
    assert anonymous.status_code == 200 and anonymous.json()["degraded"]
    checks = anonymous.json()["checks"]
    assert {k: (v["ok"], v["detail"]) for k, v in checks.items()} == {
        "temporal": (False, "not ok"), "audit": (True, "ok"),
    }  # fmt: skip
    assert TEMPORAL not in anonymous.text and "audit.db" not in anonymous.text
    for token in ("wrong", "x" * 64):
        assert "audit.db" not in httpx.get(api.url + "/readyz", headers=api.auth(token)).text
    known = httpx.get(api.url + "/readyz", headers=api.auth(api.viewer), timeout=20)
    assert known.status_code == 200
    assert known.json()["checks"]["audit"]["detail"] == api.store
