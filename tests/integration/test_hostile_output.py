"""A job's output path is the job owner's choice, read by a root controller (issue #12).

Real Slurm jobs, the real watch (`watch_attempt`) and the local runner: a job that points its
output at another user's file, or swaps its output for a symlink to one, gets nothing of that
file into the evidence; a FIFO as output neither hangs its own watch nor starves the other
jobs' watches.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from resurgo.contracts import JobKey, WatchRequest, WatchResult
from resurgo.detect.registry import Registry
from resurgo.detect.watch_loop import watch_attempt
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.output_files import OutputRefused
from resurgo.slurm.runner import LocalRunner
from resurgo.slurm.snapshot import JobSnapshot
from resurgo.slurm.ssh import SshRunner, SshTarget
from tests.sshd import SshServer, running_sshd

pytestmark = [pytest.mark.slurm, pytest.mark.timeout(240)]

SECRET = "SECRET-4f2a-root-only"
ERROR = "RuntimeError: CUDA error: uncorrectable ECC error encountered"
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory the `nobody` user's jobs can write in (pytest's tmp_path is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="resurgo-hostile-", dir="/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def secret(shared_dir: Path) -> Path:
    """Root's private file, holding a line the registry would take as evidence."""
    path = shared_dir / "root-only.txt"
    path.write_text(f"{ERROR} {SECRET}\n")
    path.chmod(0o600)
    return path


def sbatch(slurm_conf: str, *args: str) -> int:
    env = {**os.environ, "SLURM_CONF": slurm_conf}
    done = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--time=5", *args],
                          capture_output=True, text=True, env=env, cwd="/tmp")  # fmt: skip
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def scancel(slurm_conf: str, job_id: int) -> None:
    subprocess.run(["scancel", str(job_id)], env={**os.environ, "SLURM_CONF": slurm_conf})


async def running_or_done(slurm: SlurmClient, job_id: int) -> datetime:
    """Wait until the job left PENDING; returns its submit time."""
    for _ in range(600):
        obs = await slurm.show_job(job_id)
        assert obs is not None
        if obs.state != "PENDING" and obs.submit_time is not None:
            return obs.submit_time
        await asyncio.sleep(0.1)
    raise AssertionError(f"job {job_id} never started")


async def watch(runner: LocalRunner, job_id: int, submit: datetime, **kw: object) -> WatchResult:
    req = WatchRequest(
        job=JobKey(cluster="c", job_id=job_id, submit_time=submit), attempt=0,
        seen_started=True, max_window_seconds=120, poll_seconds=0.1, slurm_poll_seconds=0.2,
        **kw,  # type: ignore[arg-type]
    )  # fmt: skip
    reader = JobSnapshot(SlurmClient(runner), max_age=0.2)
    return await watch_attempt(req, reader, runner, Registry.default(), lambda _: None)


def evidence(result: WatchResult) -> str:
    anomaly = result.anomaly
    assert anomaly is not None, result
    return anomaly.summary + "\n" + "\n".join(s.text for s in anomaly.signals)


async def test_output_pointed_at_another_users_file_is_not_read(
    slurm_conf: str, secret: Path
) -> None:
    runner = LocalRunner(slurm_conf)
    job_id = sbatch(slurm_conf, f"--uid={NOBODY.pw_uid}", f"--output={secret}",
                    "--wrap", "echo hello; exit 1")  # fmt: skip
    try:
        submit = await running_or_done(SlurmClient(runner), job_id)
        result = await watch(runner, job_id, submit)
    finally:
        scancel(slurm_conf, job_id)
    assert result.outcome == "anomaly"
    seen = evidence(result)
    assert SECRET not in seen
    assert "not read" in seen and f"not by the job's user (uid {NOBODY.pw_uid})" in seen
    assert any("owned by uid 0" in note for note in result.notes)


async def test_output_swapped_for_a_symlink_mid_job_is_not_followed(
    slurm_conf: str, shared_dir: Path, secret: Path
) -> None:
    runner = LocalRunner(slurm_conf)
    out = shared_dir / "job.out"
    # The job writes its own output, then replaces the file with a link to root's secret.
    script = (f"echo 'iteration 1/ 10 |'; ln -s {secret} {shared_dir}/link; "
              f"mv -f {shared_dir}/link {out}; sleep 3; exit 1")  # fmt: skip
    job_id = sbatch(slurm_conf, f"--uid={NOBODY.pw_uid}", f"--output={out}", "--wrap", script)
    try:
        submit = await running_or_done(SlurmClient(runner), job_id)
        result = await watch(runner, job_id, submit)
    finally:
        scancel(slurm_conf, job_id)
    assert out.is_symlink()  # the swap happened
    assert result.outcome == "anomaly"
    seen = evidence(result)
    assert SECRET not in seen
    assert "symbolic link" in seen


async def test_a_fifo_as_output_stalls_no_watch(slurm_conf: str, shared_dir: Path) -> None:
    runner = LocalRunner(slurm_conf)
    out = shared_dir / "fifo-job.out"
    # The job swaps its output for a FIFO nobody writes to: a plain open() of it never returns.
    script = f"mkfifo {shared_dir}/f; mv -f {shared_dir}/f {out}; sleep 120"
    fifo_job = sbatch(slurm_conf, f"--uid={NOBODY.pw_uid}", f"--output={out}", "--wrap", script)
    healthy_out = shared_dir / "healthy.out"
    healthy_job = sbatch(
        slurm_conf, f"--output={healthy_out}", "--wrap",
        "sleep 1; echo '0:  iteration        1/      10 | elapsed time per iteration (ms): 85.3 |'"
        "; sleep 120",
    )  # fmt: skip
    try:
        slurm = SlurmClient(runner)
        fifo_submit = await running_or_done(slurm, fifo_job)
        for _ in range(100):
            if stat.S_ISFIFO(os.lstat(out).st_mode):
                break
            await asyncio.sleep(0.1)
        # A watch that hangs is cancelled and retried (heartbeat timeout): more retries than
        # the default thread pool has threads.
        for _ in range(10):
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watch(runner, fifo_job, fifo_submit), 1.0)
        healthy_submit = await running_or_done(slurm, healthy_job)
        try:
            other = await asyncio.wait_for(watch(runner, healthy_job, healthy_submit), 60)
        except TimeoutError:
            pytest.fail("another job's watch stalled behind the FIFO's reads")
        assert other.outcome == "progress" and other.progress is not None
        assert other.progress.iteration == 1
        # The FIFO job's own watch goes on following Slurm state, and says why it reads nothing.
        own = asyncio.create_task(watch(runner, fifo_job, fifo_submit))
        await asyncio.sleep(1.0)
        scancel(slurm_conf, fifo_job)
        ended = await asyncio.wait_for(own, 60)
        assert ended.outcome == "anomaly"
        assert "FIFO, not a regular file" in evidence(ended)
    finally:
        scancel(slurm_conf, fifo_job)
        scancel(slurm_conf, healthy_job)
        release_readers(out)


def release_readers(fifo: Path) -> None:
    """Open the FIFO for writing once: readers blocked in open() (if any) get EOF and end."""
    with contextlib.suppress(OSError):
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))


async def test_the_jobs_own_file_is_read(slurm_conf: str, shared_dir: Path) -> None:
    """The checks refuse only what is not the job user's own regular file."""
    runner = LocalRunner(slurm_conf)
    out = shared_dir / "own.out"
    job_id = sbatch(slurm_conf, f"--uid={NOBODY.pw_uid}", f"--output={out}",
                    "--wrap", f"echo '{ERROR}'; sleep 1; exit 1")  # fmt: skip
    try:
        submit = await running_or_done(SlurmClient(runner), job_id)
        result = await watch(runner, job_id, submit)
    finally:
        scancel(slurm_conf, job_id)
    assert out.stat().st_uid == NOBODY.pw_uid
    assert result.outcome == "anomaly" and not result.notes
    assert ERROR in evidence(result)
    assert datetime.now(UTC) > submit


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


async def test_over_ssh_the_login_node_makes_the_same_checks(
    sshd: SshServer, shared_dir: Path, secret: Path
) -> None:
    runner = SshRunner(SshTarget(
        host=sshd.host, port=sshd.port, username=sshd.username,
        client_keys=(str(sshd.client_key),), known_hosts=str(sshd.known_hosts),
        connect_timeout=5.0, command_timeout=10.0,
    ))  # fmt: skip
    link = shared_dir / "link.out"
    link.symlink_to(secret)
    fifo = shared_dir / "out.fifo"
    os.mkfifo(fifo)
    own = shared_dir / "nobody.out"
    own.write_text("hello\n")
    os.chown(own, NOBODY.pw_uid, NOBODY.pw_gid)
    try:
        for path, owner, reason in [
            (link, "nobody", "symbolic link"),
            (fifo, "nobody", "FIFO, not a regular file"),
            (secret, "nobody", f"owned by uid 0, not by the job's user (uid {NOBODY.pw_uid})"),
            (own, "no-such-user-x", "not known"),
        ]:
            with pytest.raises(OutputRefused, match=re.escape(reason)):
                await runner.read_file(str(path), 0, 1 << 20, owner=owner)
        data, size, _ = await runner.read_file(str(own), 0, 1 << 20, owner="nobody")
        assert (data, size) == (b"hello\n", 6)
        data, _, _ = await runner.read_file(str(own), 0, 100, owner=str(NOBODY.pw_uid))
        assert data == b"hello\n"
        with pytest.raises(FileNotFoundError):
            await runner.read_file(str(shared_dir / "missing"), 0, 10, owner="nobody")
    finally:
        release_readers(fifo)
        await runner.close()
