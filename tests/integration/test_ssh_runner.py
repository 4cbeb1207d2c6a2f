"""SshRunner against a real OpenSSH server (tests/sshd.py) and the real local Slurm cluster."""

from __future__ import annotations

import asyncio
import logging
import os
import shlex
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import CommandTimeout, SchedulerUnavailable
from resurgo.slurm.ssh import SshHostKeyRejected, SshRunner, SshTarget
from tests.sshd import SshServer, running_sshd

pytestmark = [pytest.mark.timeout(120)]


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def target(server: SshServer, **overrides: object) -> SshTarget:
    fields: dict[str, object] = {
        "host": server.host,
        "port": server.port,
        "username": server.username,
        "client_keys": (str(server.client_key),),
        "known_hosts": str(server.known_hosts),
        "connect_timeout": 5.0,
    }
    fields.update(overrides)
    return SshTarget(**fields)  # type: ignore[arg-type]


@pytest.fixture
async def runner(sshd: SshServer) -> AsyncIterator[SshRunner]:
    run = SshRunner(target(sshd), slurm_conf=os.environ.get("SLURM_CONF"))
    yield run
    await run.close()


@pytest.fixture
async def slurm_runner(sshd: SshServer, slurm_conf: str) -> AsyncIterator[SshRunner]:
    run = SshRunner(target(sshd), slurm_conf=slurm_conf)
    yield run
    await run.close()


def pwned_paths() -> list[Path]:
    tag = uuid.uuid4().hex[:8]
    return [Path(f"/tmp/pwned-{tag}-{i}") for i in range(4)]


@pytest.mark.slurm
async def test_slurm_commands_over_one_connection(slurm_runner: SshRunner) -> None:
    slurm = SlurmClient(slurm_runner)
    submitted = await slurm_runner.run(
        ["sbatch", "--parsable", "--job-name=resurgo-ssh-it", "--output=/dev/null",
         "--time=2", "--wrap", "sleep 30"]
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip().split(";")[0])
    try:
        obs = await slurm.show_job(job_id)
        assert obs is not None and obs.job_id == job_id and obs.name == "resurgo-ssh-it"
        assert obs.submit_time is not None  # parsed: TZ=UTC reached the remote side
        nodes = await slurm.show_nodes()
        assert {n.name for n in nodes} >= {"node1", "node2", "node3", "node4"}
        assert job_id in {j.job_id for j in await slurm.list_jobs()}
        sinfo = await slurm_runner.run(["sinfo", "-h", "-N", "-o", "%N|%t"])
        assert sinfo.returncode == 0 and "node1|" in sinfo.stdout
        env = await slurm_runner.run(["sh", "-c", 'echo "$TZ|$SLURM_CONF"'])
        assert env.stdout.strip() == f"UTC|{slurm_runner.slurm_conf}"
        assert slurm_runner.connects == 1  # every command above shared one connection
    finally:
        await slurm_runner.run(["scancel", str(job_id)])


@pytest.mark.slurm
async def test_hostile_names_and_comments_run_nothing(slurm_runner: SshRunner) -> None:
    """Untrusted text travels as single arguments: nothing it contains is ever executed."""
    p = pwned_paths()
    name = f"x;touch {p[0]}"
    comment = f'{{"resurgo":{{"note":"$(touch {p[1]})`touch {p[2]}`"}}}}\'; touch {p[3]}; \''
    slurm = SlurmClient(slurm_runner)
    submitted = await slurm_runner.run(
        ["sbatch", "--parsable", f"--job-name={name}", f"--comment={comment}",
         "--output=/dev/null", "--time=2", "--hold", "--wrap", "sleep 30"]
    )  # fmt: skip
    assert submitted.returncode == 0, submitted.stderr
    job_id = int(submitted.stdout.strip().split(";")[0])
    try:
        admin = f"$(touch {p[0]}) && touch {p[1]} | touch {p[2]}\ntouch {p[3]}"
        await slurm.update_job(job_id, AdminComment=admin.replace("\n", " "))
        obs = await slurm.show_job(job_id)
        assert obs is not None
        assert obs.name == name and obs.comment == comment
        assert obs.admin_comment == admin.replace("\n", " ")
        echoed = await slurm_runner.run(["echo", f"$(touch {p[0]})", f"`touch {p[1]}`", admin])
        assert echoed.stdout == f"$(touch {p[0]}) `touch {p[1]}` {admin}\n"
        with pytest.raises(ValueError):
            await slurm_runner.run([f"X=1 touch {p[0]}"])
    finally:
        await slurm_runner.run(["scancel", str(job_id)])
    assert not [path for path in p if path.exists()]


async def test_stat_files_in_one_round_trip(runner: SshRunner, tmp_path: Path) -> None:
    odd = tmp_path / "job $(touch y) 'out' x.log"
    odd.write_bytes(b"12345\n")
    plain = tmp_path / "plain.log"
    plain.write_bytes(b"")
    missing = tmp_path / "missing.log"
    stats = await runner.stat_files([str(odd), str(plain), str(missing)])
    assert stats == {
        str(odd): (6, odd.stat().st_ino),
        str(plain): (0, plain.stat().st_ino),
        str(missing): None,
    }
    assert not (Path.home() / "y").exists() and not Path("y").exists()


async def test_read_file_offsets_size_inode(runner: SshRunner, tmp_path: Path) -> None:
    path = tmp_path / "job $(touch x) 'out'.log"
    path.write_bytes(b"line one\nline two\n\xff\xfebinary\n")
    size, inode = path.stat().st_size, path.stat().st_ino
    assert await runner.read_file(str(path), 0, 1 << 20) == (path.read_bytes(), size, inode)
    assert await runner.read_file(str(path), 5, 3) == (b"one", size, inode)
    assert await runner.read_file(str(path), 9, 100) == (path.read_bytes()[9:], size, inode)
    assert await runner.read_file(str(path), size, 100) == (b"", size, inode)
    assert await runner.read_file(str(path), size + 50, 100) == (b"", size, inode)
    replaced = tmp_path / "other"
    replaced.write_bytes(b"new\n")
    os.replace(replaced, path)
    data, new_size, new_inode = await runner.read_file(str(path), 0, 100)
    assert (data, new_size) == (b"new\n", 4) and new_inode != inode
    with pytest.raises(FileNotFoundError):
        await runner.read_file(str(tmp_path / "missing.log"), 0, 10)
    with pytest.raises(FileNotFoundError):
        await runner.read_file("-rf", 0, 10)
    assert not (Path.home() / "x").exists() and not Path("x").exists()


async def test_unknown_or_changed_host_key_is_refused(sshd: SshServer, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    for known_hosts in (sshd.other_known_hosts(), tmp_path / "no-such-known-hosts"):
        runner = SshRunner(target(sshd, known_hosts=str(known_hosts)))
        with pytest.raises(SshHostKeyRejected, match="refusing to connect") as info:
            await runner.run(["touch", str(marker)], timeout=5)
        assert isinstance(info.value, SchedulerUnavailable)
        assert runner.connects == 0
    assert not marker.exists()


async def test_link_dropped_mid_command_then_reconnects(runner: SshRunner, sshd: SshServer) -> None:
    assert (await runner.run(["true"])).returncode == 0
    task = asyncio.create_task(runner.run(["sleep", "5"], timeout=20))
    await asyncio.sleep(0.5)
    assert sshd.kill_sessions() > 0
    started = time.monotonic()
    with pytest.raises(SchedulerUnavailable, match=r"dropped|failed"):
        await task
    assert time.monotonic() - started < 3
    again = await runner.run(["echo", "back"])
    assert again.stdout == "back\n" and runner.connects == 2


async def test_server_down_then_back_with_backoff(runner: SshRunner, sshd: SshServer) -> None:
    assert (await runner.run(["true"])).returncode == 0
    sshd.stop()
    try:
        started = time.monotonic()
        with pytest.raises(SchedulerUnavailable) as info:
            await runner.run(["true"], timeout=2)
        assert not isinstance(info.value, CommandTimeout)
        assert time.monotonic() - started < 4
    finally:
        sshd.start()
    assert (await runner.run(["echo", "ok"], timeout=15)).stdout == "ok\n"
    assert runner.connects == 2


async def test_one_caller_retries_with_backoff_until_its_deadline(
    runner: SshRunner, sshd: SshServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Server down for a caller with 3 s: it tries again after ~0.5 s and ~1 s more (jittered
    backoff), not in a tight loop, and gives up by its deadline."""
    assert (await runner.run(["true"])).returncode == 0
    sshd.stop()
    try:
        caplog.set_level(logging.WARNING, logger="resurgo.ssh")
        started = time.monotonic()
        with pytest.raises(SchedulerUnavailable, match=r"failed|unavailable"):
            await runner.run(["true"], timeout=3)
        assert time.monotonic() - started < 4
        tries = [r for r in caplog.records if "failed (attempt" in r.getMessage()]
        assert 2 <= len(tries) <= 4, [r.getMessage() for r in tries]
    finally:
        sshd.start()
    assert (await runner.run(["echo", "ok"], timeout=15)).stdout == "ok\n"


async def test_command_timeout_keeps_the_connection(runner: SshRunner, tmp_path: Path) -> None:
    marker = tmp_path / "finished"
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        await runner.run(["sh", "-c", f"sleep 7; touch {shlex.quote(str(marker))}"], timeout=1)
    assert time.monotonic() - started < 3
    assert (await runner.run(["true"])).returncode == 0 and runner.connects == 1
    # The remote `timeout` ended it at 1 + 5 s: the touch never ran.
    await asyncio.sleep(max(0.0, started + 7.5 - time.monotonic()))
    assert not marker.exists()


async def test_many_concurrent_commands_share_the_connection(runner: SshRunner) -> None:
    results = await asyncio.gather(
        *(runner.run(["sh", "-c", 'sleep 0.3; echo "$0"', str(i)]) for i in range(30))
    )
    assert [r.stdout for r in results] == [f"{i}\n" for i in range(30)]
    assert runner.connects == 1
