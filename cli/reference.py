"""The README's reference tables, generated from the code so that they cannot go stale: the
commands (from the CLI itself), the exit codes (`resurgo.cli.exits`) and every config key with
its environment variable (from the config models). `tests/unit/test_cli_reference.py` checks
the README against them.

    python -m resurgo.cli.reference commands|exit-codes|config
"""

from __future__ import annotations

import sys
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import PydanticUndefined

from resurgo.cli.exits import ExitCode

__all__ = ["commands_markdown", "config_markdown", "exit_codes_markdown"]

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


def _model_of(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        for arg in get_args(annotation):
            model, mapping = _model_of(arg)
            if model is not None:
                return model, mapping
        return None, False
    if origin is dict:
        model, _ = _model_of(get_args(annotation)[1])
        return model, True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation, False
    return None, False


def _keys(model: type[BaseModel], prefix: list[str]) -> list[tuple[list[str], str, str]]:
    found: list[tuple[list[str], str, str]] = []
    for name, field in model.model_fields.items():
        inner, mapping = _model_of(field.annotation)
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


TABLES = {
    "commands": commands_markdown,
    "exit-codes": exit_codes_markdown,
    "config": config_markdown,
}

if __name__ == "__main__":  # pragma: no cover
    which = sys.argv[1] if len(sys.argv) > 1 else ""
    if which not in TABLES:
        sys.exit(f"usage: python -m resurgo.cli.reference {'|'.join(TABLES)}")
    sys.stdout.write(TABLES[which]())
