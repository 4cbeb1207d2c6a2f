"""The `resurgo` application object: plain help (no markup), `-h`, `--version`, `--log-level`,
commands grouped by what they are for, choices checked at parse time, and a last-resort handler
that turns an unexpected exception into one line on stderr (the traceback with --log-level debug).

Kept free of heavy imports: everything here runs on every `resurgo` start.
"""

from __future__ import annotations

import logging
import sys
from enum import StrEnum
from typing import Annotated, Any

import typer
from rich.text import Text
from typer.core import TyperGroup

from resurgo.cli.exits import ExitCode
from resurgo.cli.output import err

__all__ = [
    "CONTEXT",
    "Fault",
    "LogLevel",
    "Role",
    "make_app",
    "setup_logging",
    "subcommands",
]

# `-h` as well as `--help` everywhere (sub-commands inherit it from the root context).
CONTEXT: dict[str, Any] = {"help_option_names": ["-h", "--help"]}

# What the help lists, by purpose; commands not named here are listed last.
SECTIONS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Operate", ("jobs", "job", "advice", "approve", "reject", "mode", "nodes")),
    ("Inspect", ("audit", "attribute", "policy", "signals")),
    ("Run the services", ("worker", "controller", "watchdog", "api")),
    ("Set up and try", ("api-token", "dev-server", "demo")),
)


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


class Role(StrEnum):
    VIEWER = "viewer"
    OPERATOR = "operator"
    ADMIN = "admin"


class Fault(StrEnum):
    """The demo trainer's faults (infra/demo/trainer.py FAULTS; a test keeps them equal)."""

    NONE = "none"
    EXCEPTION = "exception"
    SIGKILL = "sigkill"
    SEGFAULT = "segfault"
    HANG = "hang"
    HANG_SILENT = "hang_silent"
    SLOW = "slow"
    GPU_XID = "gpu_xid"
    NCCL = "nccl"
    ECC = "ecc"
    IB = "ib"
    CKPT_FAIL = "ckpt_fail"
    NAN = "nan"


_log_level: LogLevel | None = None


def setup_logging(default: LogLevel = LogLevel.INFO) -> None:
    """Log at `--log-level` (or $RESURGO_LOG_LEVEL), else at the command's default."""
    level = (_log_level or default).value.upper()
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")


def _version(value: bool) -> None:
    if value:
        from importlib import metadata  # 20 ms, and only `--version` needs it

        try:
            version = metadata.version("resurgo")
        except metadata.PackageNotFoundError:
            version = "unknown (not installed)"
        typer.echo(f"resurgo {version}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True,
                     help="Print the version and exit."),
    ] = False,
    log_level: Annotated[
        LogLevel | None,
        typer.Option("--log-level", envvar="RESURGO_LOG_LEVEL", case_sensitive=False,
                     help="Log level of every command (default: info for services, warnings "
                          "otherwise); debug also shows tracebacks.", show_default=False),
    ] = None,
) -> None:  # fmt: skip
    global _log_level
    del version
    _log_level = log_level
    if log_level is not None:
        setup_logging(log_level)


class GroupedHelp(TyperGroup):
    """`resurgo --help` lists the commands in SECTIONS, in order, under their headings."""

    # Typer vendors its own click (typer._click), so the context and formatter stay untyped.
    def list_commands(self, ctx: Any) -> list[str]:
        order = [name for _, names in SECTIONS for name in names]
        known = super().list_commands(ctx)
        return [n for n in order if n in known] + sorted(n for n in known if n not in order)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        names = self.list_commands(ctx)
        placed = {name for _, group in SECTIONS for name in group}
        sections = [(title, [n for n in group if n in names]) for title, group in SECTIONS]
        sections.append(("Other commands", [n for n in names if n not in placed]))
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        for title, group in sections:
            rows = []
            for name in group:
                command = self.get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


class ResurgoTyper(typer.Typer):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().__call__(*args, **kwargs)
        except Exception as exc:
            # A bug or an unforeseen failure: one line, unless debugging was asked for.
            if _log_level == LogLevel.DEBUG:
                raise
            first = (str(exc).strip().splitlines() or [""])[0]
            err.print(
                Text(f"error: {type(exc).__name__}: {first}", style="red"),
                Text(" (--log-level debug shows the traceback)", style="dim"),
                soft_wrap=True,
            )
            sys.exit(int(ExitCode.FAILURE))


def make_app(help_text: str) -> typer.Typer:
    app = ResurgoTyper(
        cls=GroupedHelp,
        help=help_text,
        no_args_is_help=True,
        rich_markup_mode=None,
        context_settings=CONTEXT,
        pretty_exceptions_enable=False,
    )
    app.callback()(_root)
    return app


def subcommands(help_text: str) -> typer.Typer:
    """A command group (`resurgo policy ...`) with the same conventions."""
    return typer.Typer(
        help=help_text, no_args_is_help=True, rich_markup_mode=None, context_settings=CONTEXT
    )
