"""The README's reference tables, generated from the code so that they cannot go stale: the
commands (from the CLI itself), the exit codes (`resurgo.cli.exits`) and every config key with
its environment variable (from the config models). `tests/unit/test_cli_reference.py` checks
the README against them.

    python -m resurgo.cli.reference commands|exit-codes|config
    python -m resurgo.cli.reference man DIR      # man pages: resurgo.1, resurgo-audit.1, ...
"""

from __future__ import annotations

import sys
from datetime import date
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from resurgo.cli.exits import ExitCode
from resurgo.config_env import model_of

__all__ = ["commands_markdown", "config_markdown", "exit_codes_markdown", "man_pages"]

EXIT_MEANINGS = {
    ExitCode.OK: "done",
    ExitCode.FAILURE: "the answer is no: refused (409), contract not met, a check failed",
    ExitCode.USAGE: "bad arguments, options or config; nothing was started",
    ExitCode.NOT_FOUND: "no such job, audit store, bundle or policy file",
    ExitCode.UNAVAILABLE: "a service is down or failed: the API, Temporal, the audit database",
    ExitCode.DENIED: "the API refused the token (401) or its role (403)",
}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def commands_markdown() -> str:
    import typer.main

    from resurgo.cli.app import SECTIONS
    from resurgo.cli.main import app

    root = typer.main.get_command(app)
    ctx = root.context_class(root)
    rows = ["| command | section | what it does |", "|---|---|---|"]
    section_of = {name: title for title, names in SECTIONS for name in names}
    for name in root.list_commands(ctx):  # type: ignore[attr-defined]
        command = root.get_command(ctx, name)  # type: ignore[attr-defined]
        subs = getattr(command, "commands", None)
        entries = (
            [(f"{name} {sub}", c) for sub, c in sorted(subs.items())] if subs else [(name, command)]
        )
        for shown, cmd in entries:
            what = cmd.get_short_help_str(limit=200)
            rows.append(f"| `resurgo {shown}` | {section_of.get(name, '')} | {_cell(what)} |")
    return "\n".join(rows) + "\n"


def exit_codes_markdown() -> str:
    rows = ["| code | name | meaning |", "|---|---|---|"]
    rows += [f"| {int(c)} | {c.name} | {EXIT_MEANINGS[c]} |" for c in ExitCode]
    return "\n".join(rows) + "\n"


def _keys(model: type[BaseModel], prefix: list[str]) -> list[tuple[list[str], str, str]]:
    found: list[tuple[list[str], str, str]] = []
    for name, field in model.model_fields.items():
        inner, mapping = model_of(field.annotation)
        path = [*prefix, name]
        if inner is not None:
            found += _keys(inner, [*path, "<name>"] if mapping else path)
            continue
        if field.default is not PydanticUndefined:
            default = repr(field.default)
        elif field.default_factory is not None:
            default = repr(field.default_factory())  # type: ignore[call-arg]
        else:
            default = "(required)"
        kind = getattr(field.annotation, "__name__", None) or str(field.annotation)
        found.append((path, kind.replace("typing.", ""), default))
    return found


def config_markdown() -> str:
    from resurgo.config import ResurgoConfig

    rows = ["| key | environment | type | default |", "|---|---|---|---|"]
    for path, kind, default in _keys(ResurgoConfig, []):
        env = "RESURGO_" + "__".join(p.upper() for p in path)
        key = ".".join(path)
        rows.append(f"| `{key}` | `{env}` | {_cell(kind)} | `{_cell(default)}` |")
    return "\n".join(rows) + "\n"


def _roff(text: str) -> str:
    """Text as literal roff: no line may start a request, backslashes stay backslashes."""
    lines = []
    for line in text.replace("\\", "\\e").splitlines():
        lines.append("\\&" + line if line.startswith((".", "'")) else line)
    return "\n".join(lines)


def man_pages(directory: Path) -> list[Path]:
    """One man page per command (section 1), its text the command's own `--help`."""
    import typer.main

    from resurgo.cli.main import app

    root = typer.main.get_command(app)
    directory.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    today = date.today().isoformat()

    def page(names: list[str], command: Any, parent: Any) -> None:
        ctx = command.context_class(command, info_name=names[-1], parent=parent)
        title = "-".join(names)
        summary = command.get_short_help_str(limit=120) or "Resurgo"
        body = [
            f'.TH "{title.upper()}" "1" "{today}" "resurgo" "Resurgo manual"',
            ".SH NAME",
            f"{title} \\- {_roff(summary)}",
            ".SH DESCRIPTION",
            ".nf",
            _roff(command.get_help(ctx)),
            ".fi",
            ".SH EXIT STATUS",
            ".nf",
            _roff("\n".join(f"{int(c)}  {c.name}: {EXIT_MEANINGS[c]}" for c in ExitCode)),
            ".fi",
        ]
        path = directory / f"{title}.1"
        path.write_text("\n".join(body) + "\n")
        written.append(path)
        for sub, child in sorted(getattr(command, "commands", {}).items()):
            page([*names, sub], child, ctx)

    page(["resurgo"], root, None)
    return written


TABLES = {
    "commands": commands_markdown,
    "exit-codes": exit_codes_markdown,
    "config": config_markdown,
}

if __name__ == "__main__":  # pragma: no cover
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which == "man" and len(sys.argv) == 3:
        for written in man_pages(Path(sys.argv[2])):
            print(written)
        sys.exit(0)
    if which not in TABLES:
        sys.exit(f"usage: python -m resurgo.cli.reference {'|'.join(TABLES)}")
    sys.stdout.write(TABLES[which]())
