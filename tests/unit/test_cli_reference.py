"""The README's command, exit-code and config tables come from the code
(`python -m resurgo.cli.reference commands|exit-codes|config`) and are checked against it here,
so they cannot go stale."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import typer.main

from resurgo.cli.exits import ExitCode
from resurgo.cli.main import app
from resurgo.cli.reference import (
    TABLES,
    commands_markdown,
    config_markdown,
    exit_codes_markdown,
    man_pages,
)
from resurgo.config import ConfigError, load_config

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_command_is_in_the_table() -> None:
    root = typer.main.get_command(app)
    table = commands_markdown()
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None) or {}
        for shown in [f"{name} {s}" for s in subs] or [name]:
            assert f"| `resurgo {shown}` |" in table


def test_every_exit_code_is_in_the_table() -> None:
    rows = re.findall(r"^\| (\d+) \| (\w+) \|", exit_codes_markdown(), re.MULTILINE)
    assert rows == [(str(int(c)), c.name) for c in ExitCode]


def test_the_config_table_names_variables_that_work(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cells are split on " | ": an escaped pipe (as in `str \| None`) stays inside its cell.
    cells = [line.strip().strip("|").split(" | ") for line in config_markdown().splitlines()[2:]]
    rows = [(c[0].strip(" `"), c[1].strip(" `"), c[2].strip()) for c in cells]
    assert len(rows) > 40
    keys = {key for key, _, _ in rows}
    assert {"temporal.address", "audit.url", "api.port", "clusters.<name>.mode"} <= keys
    # Every plain key of a section: setting its variable changes what load_config reads.
    monkeypatch.delenv("RESURGO_CONFIG", raising=False)
    candidates = {"str": ["from-env", "http://from-env.example"], "int": ["7"], "float": ["7.5"]}
    tried = 0
    for key, env, kind in rows:
        section, _, field = key.partition(".")
        base = kind.split("\\|")[0].strip()
        if "<name>" in key or "." in field or base not in candidates:
            continue
        for value in candidates[base]:
            monkeypatch.setenv(env, value)
            try:
                got = getattr(getattr(load_config(), section), field)
            except ConfigError:
                continue  # a constrained key (a URL pattern, a range): try the next value
            finally:
                monkeypatch.delenv(env)
            assert str(got) == value, (key, env, got)
            tried += 1
            break
        else:
            raise AssertionError(f"no test value fits {key}")
    assert tried >= 15


@pytest.mark.parametrize("name", sorted(TABLES))
def test_the_readme_tables_match_the_code(name: str) -> None:
    text = README.read_text()
    start, end = f"<!-- generated:{name} -->", f"<!-- /generated:{name} -->"
    if start not in text:
        pytest.skip(f"README has no {start} block yet (python -m resurgo.cli.reference {name})")
    block = text.split(start, 1)[1].split(end, 1)[0]
    assert block.strip() == TABLES[name]().strip(), f"regenerate: resurgo.cli.reference {name}"


def test_a_man_page_for_every_command(tmp_path: Path) -> None:
    import shutil
    import subprocess

    written = {p.name for p in man_pages(tmp_path)}
    root = typer.main.get_command(app)
    for name, command in root.commands.items():  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None) or {}
        for page in [f"resurgo-{name}-{s}.1" for s in subs] or [f"resurgo-{name}.1"]:
            assert page in written
    assert "resurgo.1" in written
    text = (tmp_path / "resurgo-api.1").read_text()
    assert text.startswith('.TH "RESURGO-API" "1"') and "(default [api] host)" in text
    if shutil.which("nroff"):
        shown = subprocess.run(["nroff", "-man", "-ww", str(tmp_path / "resurgo-audit.1")],
                               capture_output=True, text=True, check=True)  # fmt: skip
        assert "Usage: resurgo audit [OPTIONS]" in shown.stdout and not shown.stderr


@pytest.mark.parametrize(
    ("words", "expected"),
    [("resurgo au", "audit"), ("resurgo policy re", "replay"), ("resurgo demo --fault ec", "ecc")],
)
def test_shell_completion_knows_commands_and_choices(words: str, expected: str) -> None:
    import os
    import shutil
    import subprocess

    resurgo = shutil.which("resurgo", path=str(Path(sys.executable).parent))
    assert resurgo is not None
    env = {**os.environ, "COMP_WORDS": words, "COMP_CWORD": str(len(words.split()) - 1),
           "_RESURGO_COMPLETE": "complete_bash"}  # fmt: skip
    done = subprocess.run([resurgo], env=env, capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == [expected]
