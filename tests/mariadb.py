"""A real MariaDB for tests: reuse the one running, else start it, else install and start it.

    base = ensure_mariadb()                  # mysql+pymysql://root@127.0.0.1:3306
    url, drop = fresh_database(base)         # .../resurgo_t_<hex>, dropped by drop()
    with temporary_database(base) as url: ...

`RESURGO_TEST_MYSQL_URL` overrides the base URL (then nothing is started or installed).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pymysql
from sqlalchemy.engine import URL, make_url

DEFAULT_BASE_URL = "mysql+pymysql://root@127.0.0.1:3306"
MARIADBD = "/usr/sbin/mariadbd"
START_TIMEOUT = 30.0
ENV_URL = "RESURGO_TEST_MYSQL_URL"


class MariaDBUnavailable(RuntimeError):
    pass


def _connect(url: URL, database: str | None = None, timeout: int = 3) -> Any:
    return pymysql.connect(
        host=url.host or "127.0.0.1",
        port=url.port or 3306,
        user=url.username or "root",
        password=url.password or "",
        database=database,
        connect_timeout=timeout,
        charset="utf8mb4",
        autocommit=True,
    )


def _answers(url: URL) -> bool:
    try:
        _connect(url, timeout=2).close()
    except pymysql.err.OperationalError:
        return False
    return True


def _install() -> None:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    subprocess.run(["apt-get", "update"], check=True, env=env, timeout=600)
    subprocess.run(
        ["apt-get", "install", "-y", "mariadb-server"], check=True, env=env, timeout=1200
    )


def _start() -> None:
    run_dir = Path("/run/mysqld")
    run_dir.mkdir(parents=True, exist_ok=True)
    if os.geteuid() == 0 and shutil.which("chown"):
        subprocess.run(["chown", "mysql:mysql", str(run_dir)], check=False)
    args = [
        "start-stop-daemon",
        "--start",
        "--oknodo",
        "--background",
        "--exec",
        MARIADBD,
    ]
    if os.geteuid() == 0:
        args += ["--", "--user=mysql"]
    subprocess.run(args, check=True, timeout=30)


def ensure_mariadb(base_url: str | None = None) -> str:
    """Return a base URL (no database) of a MariaDB that answers; start/install it if needed."""
    base = base_url or os.environ.get(ENV_URL) or DEFAULT_BASE_URL
    url = make_url(base)
    if _answers(url):
        return base
    if base_url is not None or os.environ.get(ENV_URL):
        raise MariaDBUnavailable(f"no MySQL/MariaDB answers at {url.render_as_string()}")
    if not Path(MARIADBD).exists():
        _install()
    _start()
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if _answers(url):
            return base
        time.sleep(0.5)
    raise MariaDBUnavailable(f"MariaDB did not answer at {url.host}:{url.port} within 30 s")


def fresh_database(base_url: str) -> tuple[str, Callable[[], None]]:
    """Create a uniquely named database; return its URL and a function that drops it."""
    url = make_url(base_url)
    name = f"resurgo_t_{uuid.uuid4().hex[:16]}"
    conn = _connect(url)
    try:
        with conn.cursor() as cur:
            cur.execute(
                f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
            )
    finally:
        conn.close()

    def drop() -> None:
        c = _connect(url)
        try:
            with c.cursor() as cur:
                cur.execute(f"DROP DATABASE IF EXISTS `{name}`")
        finally:
            c.close()

    return url.set(database=name).render_as_string(hide_password=False), drop


@contextmanager
def temporary_database(base_url: str) -> Iterator[str]:
    """`fresh_database` as a context manager: the database is dropped on exit."""
    db_url, drop = fresh_database(base_url)
    try:
        yield db_url
    finally:
        drop()
