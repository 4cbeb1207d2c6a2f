"""`resurgo audit` and `resurgo policy replay` as an operator meets them: user text printed as
written, piped output one line per event, reads that never create a store, the job list's limit,
`--json` with no events, `--follow`, and the exit codes of `resurgo.cli.exits`."""

from __future__ import annotations

import json
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resurgo.audit.store import AuditStore
from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app
from resurgo.contracts import AuditEvent, AuditEventType

T0 = datetime(2026, 11, 2, 8, 0, 0, 250000, tzinfo=UTC)
HOSTILE = "expected [batch, 256] features in [/opt/data] :fire: [bold]x[/bold]"
ECC = "uncorrectable ECC error encountered " + "on node gpu-17 rank 3 " * 12


def event(n: int, job: int, type_: AuditEventType, summary: str, **kw: object) -> AuditEvent:
    fields: dict[str, object] = {
        "event_id": f"e{job}-{n}", "cluster": "c1", "job_id": job,
        "workflow_id": f"resurgo:c1:{job}:1700000000", "attempt": 0, "type": type_,
        "producer": "workflow", "at": T0 + timedelta(seconds=n), "summary": summary,
    }  # fmt: skip
    fields.update(kw)
    return AuditEvent.model_validate(fields)


@pytest.fixture
def store_url(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'audit.db'}"
    with AuditStore(url) as store:
        store.append(
            [
                event(1, 4242, AuditEventType.MONITORING_STARTED, "job opted in"),
                event(2, 4242, AuditEventType.ANOMALY, HOSTILE),
                event(3, 4242, AuditEventType.ATTRIBUTION, ECC, attempt=1),
                event(4, 7, AuditEventType.MONITORING_STARTED, "other job"),
                event(5, 8, AuditEventType.MONITORING_STARTED, "third job"),
            ]
        )
    return url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No config, no $RESURGO_AUDIT_URL: the default store would be ~/.resurgo/audit.db."""
    home = tmp_path / "home"
    home.mkdir()
    for var in ("RESURGO_CONFIG", "RESURGO_AUDIT_URL", "RESURGO_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    return home


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"RESURGO_CONFIG": ""})
    return result.exit_code, result.stdout, result.stderr


def test_user_text_is_printed_as_written_and_piped_rows_are_whole(store_url: str) -> None:
    code, out, _ = run("audit", "4242", "--url", store_url)
    assert code == ExitCode.OK
    assert HOSTILE in out  # neither eaten as markup nor a MarkupError
    # Piped (not a terminal): one tab-separated line per event, nothing wrapped or cut.
    lines = [line for line in out.splitlines() if "uncorrectable ECC" in line]
    assert len(lines) == 1
    assert lines[0].split("\t") == ["2026-11-02 08:00:03.250", "1", "attribution", "workflow", ECC]


def test_read_commands_never_create_a_store(tmp_path: Path, home: Path) -> None:
    missing = tmp_path / "nonexistent" / "dir" / "a.db"
    code, out, err = run("audit", "--url", f"sqlite:///{missing}")
    assert code == ExitCode.NOT_FOUND and out == ""
    assert f"no audit store at {missing}" in err
    assert not missing.parent.exists()

    code, _, err = run("audit")
    assert code == ExitCode.NOT_FOUND and "no audit store at" in err
    policy = tmp_path / "p.toml"
    policy.write_text("[policies.default]\nmax_attempts = 2\n")
    code, out, err = run("policy", "replay", "--policy", str(policy))
    assert code == ExitCode.NOT_FOUND and "would change" not in out
    assert not (home / ".resurgo").exists()


def test_a_bad_store_url_is_one_line_not_a_traceback() -> None:
    code, out, err = run("audit", "--url", "bogus://x")
    assert code == ExitCode.USAGE and out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "unsupported audit store URL" in err


def test_no_events_is_not_found_and_json_still_prints_a_list(store_url: str) -> None:
    code, out, err = run("audit", "42", "--json", "--url", store_url)
    assert code == ExitCode.NOT_FOUND and json.loads(out) == []
    assert "no audit events for job 42" in err
    code, out, _ = run("audit", "4242", "--json", "--url", store_url, "--attempt", "1")
    assert code == ExitCode.OK and [e["summary"] for e in json.loads(out)] == [ECC]


def test_type_and_attempt_need_a_job_and_types_are_checked_first(store_url: str) -> None:
    code, _, err = run("audit", "--type", "attribution", "--url", store_url)
    assert code == ExitCode.USAGE and "need a JOB" in err
    code, _, err = run("audit", "--attempt", "1", "--url", store_url)
    assert code == ExitCode.USAGE
    # An unknown type is refused before the store is even looked for.
    code, _, err = run("audit", "4242", "--type", "atribution", "--url", "sqlite:////no/such.db")
    assert code == ExitCode.USAGE and "atribution" in err
    code, out, _ = run("audit", "4242", "--type", "anomaly", "--json", "--url", store_url)
    assert code == ExitCode.OK and [e["type"] for e in json.loads(out)] == ["anomaly"]


def test_the_job_list_says_when_it_is_cut(store_url: str) -> None:
    code, out, err = run("audit", "--url", store_url, "--limit", "2")
    assert code == ExitCode.OK
    rows = out.strip().splitlines()
    assert rows[0].split("\t")[:3] == ["cluster", "job", "events"] and len(rows) == 3
    assert "showing the 2 most recently active jobs; more exist" in err
    code, out, err = run("audit", "--url", store_url, "--limit", "3")
    assert len(out.strip().splitlines()) == 4 and "more exist" not in err


def test_follow_prints_new_events_until_monitoring_ends(store_url: str) -> None:
    def later() -> None:
        time.sleep(0.6)
        with AuditStore(store_url) as store:
            store.append([event(6, 4242, AuditEventType.ADVICE, "requeue_excluding gpu-17")])
            time.sleep(0.3)
            store.append([event(7, 4242, AuditEventType.COMPLETED, "job completed")])

    writer = threading.Thread(target=later)
    writer.start()
    started = time.monotonic()
    code, out, _ = run("audit", "4242", "--follow", "--interval", "0.1", "--url", store_url)
    writer.join()
    assert code == ExitCode.OK and time.monotonic() - started < 20
    types = [line.split("\t")[2] for line in out.strip().splitlines()]
    assert types == ["monitoring_started", "anomaly", "attribution", "advice", "completed"]


def test_policy_replay_takes_the_same_durations_as_every_since(
    store_url: str, tmp_path: Path
) -> None:
    policy = tmp_path / "p.toml"
    policy.write_text("[policies.default]\nmax_attempts = 2\n")
    for since in ("1h30m", "7d", "PT90M", "2026-11-01"):
        code, out, err = run("policy", "replay", "--policy", str(policy), "--since", since,
                             "--url", store_url)  # fmt: skip
        assert code == ExitCode.OK, (since, err)
        assert "would change" in out
    code, _, err = run("policy", "replay", "--policy", str(policy), "--since", "1 hour",
                       "--url", store_url)  # fmt: skip
    assert code == ExitCode.USAGE and "1 hour" in err


def test_a_file_that_is_not_a_store_and_an_unknown_driver(tmp_path: Path) -> None:
    garbage = tmp_path / "notes.db"
    garbage.write_text("these are my notes, not a database\n")
    code, out, err = run("audit", "--url", f"sqlite:///{garbage}")
    assert code == ExitCode.UNAVAILABLE and out == ""
    assert err.strip() == "error: the audit store cannot be read: file is not a database"
    assert garbage.read_text() == "these are my notes, not a database\n"
    code, _, err = run("audit", "--url", "mysql+nodriver://u:secret@127.0.0.1:9/x")
    assert code == ExitCode.USAGE and "secret" not in err
    assert len(err.strip().splitlines()) == 1
