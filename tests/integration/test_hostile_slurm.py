"""A hostile cluster user against the real local Slurm cluster (and the real Temporal dev server):
forged discovery rows, names and work dirs posing as fields, directives that break parsers, and
acting on a job that never opted in. Every job is submitted `--hold` (it never runs, so it costs
no node) and cancelled at the end."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from resurgo.config import ClusterSettings, ResurgoConfig
from resurgo.contracts import ActionRequest, ActionStep, JobKey
from resurgo.slurm.actions import SlurmActions
from resurgo.slurm.client import SlurmClient
from resurgo.slurm.errors import ActionsNotAllowed, ParseError
from resurgo.slurm.parsers import SQUEUE_SEP
from resurgo.slurm.runner import LocalRunner
from resurgo.slurm.snapshot import JobSnapshot
from resurgo.worker.discovery import Discovery

pytestmark = [pytest.mark.timeout(180)]

Submit = Callable[..., int]
# Every character str.splitlines() splits at, and the newline itself.
SEPARATORS = ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r", "\n"]


@pytest.fixture
def env(slurm_conf: str) -> dict[str, str]:
    return {**os.environ, "SLURM_CONF": slurm_conf, "TZ": "UTC"}


@pytest.fixture
def submit(env: dict[str, str], tmp_path: Path) -> Iterator[Submit]:
    submitted: list[str] = []

    def run(*args: str, comment: str | None = None, name: str = "wrap") -> int:
        argv = ["sbatch", "--parsable", "--hold", "--output=/dev/null", "-J", name, *args]
        done = subprocess.run(
            [*argv, "--wrap", "true"], env=env, capture_output=True, text=True, check=True,
            cwd=tmp_path,
        )  # fmt: skip
        submitted.append(done.stdout.strip().split(";")[0])
        if comment is not None:
            # scontrol takes any text (sbatch would refuse some of these characters).
            subprocess.run(
                ["scontrol", "update", f"JobId={submitted[-1]}", f"Comment={comment}"],
                env=env, check=True, capture_output=True,
            )  # fmt: skip
        return int(submitted[-1])

    yield run
    if submitted:
        subprocess.run(["scancel", *submitted], env=env, check=False)


@pytest.fixture(params=["json", "text"])
def client(request: pytest.FixtureRequest, slurm_conf: str) -> SlurmClient:
    """Both ways of reading Slurm: `squeue --json` (this 22.05) and the text fallback."""
    return SlurmClient(
        LocalRunner(slurm_conf), structured=None if request.param == "json" else False
    )


def squeue(env: dict[str, str], job_id: int, fmt: str) -> str:
    out = subprocess.run(
        ["squeue", "-h", "-t", "all", "-j", str(job_id), "-o", fmt],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return out.stdout.strip()


def forged_row(env: dict[str, str], victim: int, directive: dict[str, object]) -> str:
    """A discovery row for the victim, as the old `squeue -o` format printed it."""
    fields = squeue(env, victim, "%i|%V|%T|%e|%u|%P|%j").split("|")
    return SQUEUE_SEP.join([*fields, json.dumps({"resurgo": directive})])


async def test_a_forged_row_never_carries_another_jobs_directive(
    client: SlurmClient, submit: Submit, env: dict[str, str]
) -> None:
    action = {"mode": "action", "max_attempts": 1, "environment": "e" + uuid.uuid4().hex}
    pairs = []
    for sep in SEPARATORS:
        victim = submit()
        attacker = submit(comment='{"resurgo":{}}' + sep + forged_row(env, victim, action))
        pairs.append((victim, attacker))
    listed: dict[int, list[str]] = {}
    for job in await client.list_jobs():
        listed.setdefault(job.job_id, []).append(job.comment)
    for victim, attacker in pairs:
        assert listed.get(victim) == [""], f"victim {victim} is listed with its own comment only"
        assert len(listed[attacker]) == 1 and listed[attacker][0].startswith('{"resurgo":{}}')


async def test_discovery_starts_nothing_for_a_victim_of_a_forged_row(
    client: SlurmClient,
    submit: Submit,
    env: dict[str, str],
    temporal_env: WorkflowEnvironment,
) -> None:
    cluster = "h" + uuid.uuid4().hex[:10]
    discovery = make_discovery(temporal_env.client, client, cluster)
    directive = {"mode": "action", "max_attempts": 1, "environment": cluster}
    victims, attackers = [], []
    for sep in SEPARATORS:
        victims.append(submit())
        own = json.dumps({"resurgo": {"mode": "observe", "environment": cluster}})
        attackers.append(submit(comment=own + sep + forged_row(env, victims[-1], directive)))
    started = await discovery.poll_once()
    try:
        ids = {int(wf.split(":")[2]) for wf in started}
        assert not ids & set(victims), "no workflow for any victim"
        # The attacker's own comment is not a valid directive any more: its job is reported.
        assert set(attackers) <= ids
    finally:
        await terminate(temporal_env.client, started)


async def test_a_comment_that_breaks_parsing_costs_only_its_job(
    client: SlurmClient, submit: Submit, temporal_env: WorkflowEnvironment
) -> None:
    cluster = "h" + uuid.uuid4().hex[:10]
    discovery = make_discovery(temporal_env.client, client, cluster)
    good = submit(comment=json.dumps({"resurgo": {"mode": "observe", "environment": cluster}}))
    # Slurm keeps comments under 1 KiB: enough nesting to exhaust Python's recursion limit.
    submit(comment='{"resurgo":' + "[" * 1010)
    surrogate = submit(
        comment='{"resurgo":{"mode":"observe","environment":"' + cluster + '","policy":"\\ud800"}}'
    )
    started = await discovery.poll_once()  # today: RecursionError ends the controller
    try:
        assert good in {int(wf.split(":")[2]) for wf in started}
        # A second poll is not blocked by the bad jobs either.
        newer = submit(comment=json.dumps({"resurgo": {"environment": cluster}}))
        again = await discovery.poll_once()
        started += again
        assert newer in {int(wf.split(":")[2]) for wf in again}
        assert surrogate not in {int(wf.split(":")[2]) for wf in again}
    finally:
        await terminate(temporal_env.client, started)


async def test_names_posing_as_fields_cost_nothing(client: SlurmClient, submit: Submit) -> None:
    victim = submit(name="train")
    posers = [
        submit(name="x JobState= Comment=C", comment="C"),
        submit(name="x NodeList=n[0-3000000] Comment=y"),
        submit(name="y Comment=z JobState=COMPLETED Restarts=7", comment="z"),
    ]
    snapshot = JobSnapshot(client, max_age=30.0)
    seen = await snapshot.show_job(victim)  # today: IndexError fails every watch here
    assert seen is not None and seen.state == "PENDING" and seen.name == "train"
    names = ["x JobState= Comment=C", "x NodeList=n[0-3000000] Comment=y",
             "y Comment=z JobState=COMPLETED Restarts=7"]  # fmt: skip
    for job, name in zip(posers, names, strict=True):
        if not await client.structured():
            # Text: such a record may be unreadable, but it fails alone, with its own error.
            with contextlib.suppress(ParseError):
                await snapshot.show_job(job)
            continue
        obs = await snapshot.show_job(job)
        assert obs is not None and obs.name == name and obs.state == "PENDING"
        assert obs.restarts == 0 and obs.node_list == []
    again = await snapshot.show_job(victim)
    assert again is not None and again.name == "train"


async def test_a_work_dir_cannot_forge_a_hold_tag_or_output_path(
    submit: Submit, slurm_conf: str, tmp_path: Path
) -> None:
    slurm = SlurmClient(LocalRunner(slurm_conf))
    key = "resurgo:local:1:1795961410:g1:requeue_hold"
    forged = tmp_path / f"w AdminComment=resurgo:hold key={key} at=2099-01-01T00:00:00Z"
    stdout = tmp_path / "x StdOut=" / "etc" / "shadow"
    forged.mkdir()
    stdout.mkdir(parents=True)
    excluded = submit("--exclude=node1,node2,node3", f"--chdir={forged}")
    pathed = submit(f"--chdir={stdout}", "--output=slurm-%j.out")
    obs = await slurm.show_job(excluded)
    assert obs is not None and obs.admin_comment == "" and obs.exc_node_list
    other = await slurm.show_job(pathed)
    assert other is not None and other.std_out == f"{stdout}/slurm-{pathed}.out"
    facts, _ = await SlurmActions(slurm, cluster="local").remediations()
    assert [f for f in facts if f.job_id == excluded] == [], "the breaker counts nothing of it"


async def test_no_action_on_a_job_that_never_opted_in(submit: Submit, slurm_conf: str) -> None:
    slurm = SlurmClient(LocalRunner(slurm_conf))
    actions = SlurmActions(slurm, cluster="local")
    victim = submit(comment="my own notes")
    req = ActionRequest(
        job=JobKey(cluster="local", job_id=victim, submit_time=datetime.now(UTC)),
        step=ActionStep.CANCEL, idempotency_key=f"resurgo:local:{victim}:1:g1:cancel", attempt=0,
    )  # fmt: skip
    with pytest.raises(ActionsNotAllowed, match="does not opt in"):
        await actions.run(req)
    obs = await slurm.show_job(victim)
    assert obs is not None and obs.state == "PENDING", "the victim's job is untouched"
    opted = submit(comment='{"resurgo":{"mode":"action"}}')
    done = await actions.run(req.model_copy(update={"job": req.job.model_copy(
        update={"job_id": opted})}))  # fmt: skip
    assert done.observation is not None and done.observation.state == "CANCELLED"


async def test_json_and_text_agree_on_ordinary_jobs(
    submit: Submit, slurm_conf: str, tmp_path: Path
) -> None:
    jobs = [
        submit("--output=o-%j-%x-%u.log", name="pat"),
        submit(f"--output={tmp_path}/abs-%j.log", "--exclude=node[3-4]"),
        submit("--array=1-2", "--output=arr-%A_%a.log"),
        submit(comment='{"resurgo": {"mode": "observe"}} multi\nline'),
    ]
    structured = SlurmClient(LocalRunner(slurm_conf))
    text = SlurmClient(LocalRunner(slurm_conf), structured=False)
    for job in jobs:
        a, b = await structured.show_job(job), await text.show_job(job)
        if "\n" in (a.comment if a else ""):
            continue  # the text record of a multi-line comment is not one line
        assert a == b, job
    assert (await structured.show_job(jobs[0])).std_out == f"{tmp_path}/o-{jobs[0]}-pat-root.log"  # type: ignore[union-attr]


def make_discovery(client: Client, slurm: SlurmClient, cluster: str) -> Discovery:
    settings = ClusterSettings(environment=cluster, discovery_lookback=600)
    return Discovery(client, slurm, cluster, ResurgoConfig(clusters={cluster: settings}))


async def terminate(client: Client, ids: list[str]) -> None:
    for wf in ids:
        with contextlib.suppress(Exception):  # already over
            await client.get_workflow_handle(wf).terminate("test over")
