"""The `resurgo` command line follows its ecosystem's conventions: `-h`, `--version`,
`--log-level`, help and errors printed literally, choices refused at parse time, a tokens-file
entry that works as printed, one duration parser, documented exit codes, and one line (not a
traceback) for an unexpected failure."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path

import pytest
import typer
from rich.table import Table
from rich.text import Text
from typer.testing import CliRunner

from resurgo.api.auth import TokenRegistry, load_tokens_file
from resurgo.cli import exits
from resurgo.cli.app import Fault, make_app
from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app
from resurgo.cli.output import tsv
from resurgo.config import ResurgoConfig
from resurgo.durations import parse_duration, parse_since

REPO = Path(__file__).resolve().parents[2]


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(app, list(args), env={"RESURGO_CONFIG": "", "COLUMNS": "200"})
    return result.exit_code, result.stdout, result.stderr


def test_version_and_short_help() -> None:
    code, out, _ = run("--version")
    assert code == 0 and out.strip() == f"resurgo {metadata.version('resurgo')}"
    code, out, _ = run("-h")
    assert code == 0 and "Usage:" in out
    code, out, _ = run("audit", "-h")
    assert code == 0 and "--follow" in out


def test_help_is_grouped_and_printed_literally() -> None:
    code, out, _ = run("api", "--help")
    assert code == 0 and "bind address (default [api] host)" in out
    code, out, _ = run("--help")
    headings = [h for h in ("Operate", "Inspect", "Run the services", "Set up") if h in out]
    assert len(headings) == 4
    assert out.index("Operate") < out.index("  approve") < out.index("Run the services")


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--fault", "bogus"],
        ["demo", "--mode", "acting"],
        ["mode", "c1", "42", "actoin"],
        ["jobs", "--mode", "acting", "--api-url", "http://127.0.0.1:9"],
        ["api-token", "bob", "--role", "root"],
        ["--log-level", "loud", "audit"],
    ],
)
def test_choices_are_refused_before_anything_starts(args: list[str]) -> None:
    code, out, err = run(*args)
    assert code == ExitCode.USAGE and out == ""
    assert "Invalid value" in err


def test_the_demo_offers_exactly_the_trainers_faults() -> None:
    tree = ast.parse((REPO / "infra" / "demo" / "trainer.py").read_text())
    faults = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "FAULTS"
    )
    assert [f.value for f in Fault] == list(faults)


def test_the_printed_token_entry_is_accepted_by_the_tokens_file(tmp_path: Path) -> None:
    code, out, err = run("api-token", "bob", "--role", "operator")
    assert code == 0
    token = out.strip()
    entry = err[err.index("[tokens") : err.index("(in the main config")]
    tokens_file = tmp_path / "api-tokens.toml"
    tokens_file.write_text(entry)
    loaded = load_tokens_file(tokens_file)
    assert loaded["bob"].role == "operator"
    principal = TokenRegistry.from_settings(ResurgoConfig().api, str(tokens_file)).authenticate(
        token
    )
    assert principal is not None and principal.name == "bob"
    code, _, err = run("api-token", "bob\n[tokens.eve]")
    assert code == ExitCode.USAGE


def test_jobs_since_is_parsed_locally_and_refused_early() -> None:
    code, _, err = run("jobs", "--since", "last tuesday", "--api-url", "http://127.0.0.1:9")
    assert code == ExitCode.USAGE and "last tuesday" in err
    code, _, err = run("jobs", "--since", "7d", "--api-url", "http://127.0.0.1:9")
    assert code == ExitCode.UNAVAILABLE and "cannot reach the Resurgo API" in err


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("15m", 900), ("1h30m", 5400), ("7d", 604800), ("2w", 1209600),
     ("500ms", 0.5), ("PT1H30M", 5400), ("P7D", 604800), ("P1DT12H", 129600), ("45", 45)],
)  # fmt: skip
def test_one_duration_parser(text: str, seconds: float) -> None:
    assert parse_duration(text) == timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "text", ["", "1 hour", "h", "1h30", "-5m", "0s", "P", "PT", "P1Y", "1e999"]
)
def test_durations_that_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_since_is_a_duration_ago_or_an_iso_time() -> None:
    now = datetime(2026, 11, 2, 12, tzinfo=UTC)
    assert parse_since("1h30m", now) == datetime(2026, 11, 2, 10, 30, tzinfo=UTC)
    assert parse_since("2026-11-01", now) == datetime(2026, 11, 1, tzinfo=UTC)
    offset = parse_since("2026-11-01T08:00:00+01:00", now)
    assert offset == datetime(2026, 11, 1, 7, tzinfo=UTC)
    with pytest.raises(ValueError, match="ISO date"):
        parse_since("yesterday", now)


def test_the_exit_code_table_documents_every_code() -> None:
    documented = {
        int(m.group(1)): m.group(2)
        for m in re.finditer(r"^\| (\d+)\s+\| (\w+)", exits.__doc__ or "", re.MULTILINE)
    }
    assert documented == {int(c): c.name for c in ExitCode}


def test_piped_tables_are_tab_separated_with_escaped_cells() -> None:
    table = Table("name", "line")
    table.add_row(Text("job\twith tab"), "first\nsecond [bold]")
    assert tsv(table).splitlines() == ["name\tline", "job\\twith tab\tfirst\\nsecond [bold]"]


def test_an_unexpected_failure_is_one_line() -> None:
    script = (
        "import sys; sys.argv=['resurgo', *sys.argv[1:]];"
        "from tests.unit.test_cli_conventions import demo_app; demo_app()"
    )
    quiet = subprocess.run([sys.executable, "-c", script, "boom"], capture_output=True,
                           text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert quiet.returncode == ExitCode.FAILURE
    assert quiet.stderr.strip().splitlines() == [
        "error: RuntimeError: store said [/opt/data] is gone  (--log-level debug shows the "
        "traceback)"
    ]
    loud = subprocess.run([sys.executable, "-c", script, "--log-level", "debug", "boom"],
                          capture_output=True, text=True, cwd=REPO, timeout=60)  # fmt: skip
    assert loud.returncode != 0 and "Traceback" in loud.stderr


def demo_app() -> None:
    """The app of `test_an_unexpected_failure_is_one_line`, run in a child process."""
    broken = make_app("test")

    @broken.command()
    def boom() -> None:
        raise RuntimeError("store said [/opt/data] is gone")

    @broken.command()
    def other() -> None:
        raise typer.Exit(0)

    broken()


def test_attribute_prints_the_error_as_the_job_wrote_it(tmp_path: Path) -> None:
    said = "RuntimeError: expected [batch, 256] features, got [/opt/data] :fire:"
    (tmp_path / "job.log").write_text(
        f"step 1 loss 2.3\n[rank1]: Traceback (most recent call last):\n[rank1]: {said}\n"
        "srun: error: node2: task 1: Exited with exit code 1\n"
    )
    code, out, err = run("attribute", str(tmp_path))
    assert code == ExitCode.OK, err
    summary = next(line for line in out.splitlines() if line.startswith("summary\t"))
    assert said in summary
    evidence = next(line for line in out.splitlines() if line.startswith("job.log\t"))
    assert evidence.endswith(said)
    code, _, err = run("attribute", str(tmp_path / "missing"))
    assert code == ExitCode.NOT_FOUND and "no bundle at" in err


def test_the_signals_snippet_is_toml_whatever_the_values() -> None:
    import tomllib

    from resurgo.sources.check_report import config_snippet
    from resurgo.sources.config import SignalsSettings

    # DEL and other control characters are valid JSON but not valid raw TOML: escaped here.
    settings = SignalsSettings(logs="loki+http://loki:3100", selector='job=~"a\x7fb\x1b"')
    text = config_snippet(settings, 'gpu "a".b', file_source=False)
    signals = tomllib.loads(text)["clusters"]['gpu "a".b']["signals"]
    assert signals["selector"] == 'job=~"a\x7fb\x1b"'


def test_every_print_is_plain_when_piped() -> None:
    import io

    from resurgo.cli.output import PlainWhenPiped

    out = io.StringIO()
    piped = PlainWhenPiped(file=out, markup=False, emoji=False, highlight=False, width=80)
    long = "uncorrectable ECC error on gpu-17 " * 10
    piped.print(Text(long.strip()))
    piped.print("note:", "[/opt/data] stays", sep=" ")
    table = Table("node", "why")
    table.add_row("gpu-17", long.strip())
    piped.print(table)
    assert out.getvalue().splitlines() == [
        long.strip(), "note: [/opt/data] stays", "node\twhy", f"gpu-17\t{long.strip()}"
    ]  # fmt: skip
