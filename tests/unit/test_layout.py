"""The layout holds: data flows from the processes down to the domain, never back up.

Layers, lowest first: the domain (`resurgo/` itself: no Temporal import at all, and no
rendering: no rich, typer or click), then `workflows/` and `activities/` (the Temporal boundary),
then the processes (`worker/`), the HTTP gateway (`api/`), the command line (`cli/`) and the dev
stack (`devstack/`). The CLI starts processes, so it may import their entry points, but only
inside the command that starts them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP = ("workflows", "activities", "worker", "api", "cli", "devstack")
MAX_LINES = 500


def layer_of(path: Path) -> str:
    rel = path.relative_to(REPO)
    return rel.parts[0] if rel.parts[0] in TOP else "domain"


def source_files() -> list[Path]:
    files = [p for p in (REPO / "resurgo").rglob("*.py") if not p.is_symlink()]
    files = [p for p in files if not any(q.is_symlink() for q in p.parents)]
    for top in TOP:
        files.extend((REPO / top).rglob("*.py"))
    return sorted(files)


def imports(path: Path) -> list[tuple[str, bool]]:
    """(module, at module level) for every import in the file."""
    tree = ast.parse(path.read_text(), str(path))
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = top and not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
            if isinstance(child, ast.Import):
                found.extend((a.name, top) for a in child.names)
            elif isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                found.append((child.module, top))
            visit(child, inner)

    visit(tree, True)
    return found


def target_layer(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "resurgo":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in TOP else "domain"


ALLOWED = {
    "domain": {"domain"},
    "workflows": {"domain", "workflows", "activities"},
    "activities": {"domain", "activities"},
    "worker": {"domain", "workflows", "activities", "worker"},
    "api": {"domain", "workflows", "api"},
    "cli": {"domain", "workflows", "cli"},
    "devstack": {"domain", "workflows", "devstack", "cli"},
}
# Terminal rendering and command-line parsing: the CLI's, never the domain's.
RENDERING = {"rich", "typer", "click"}
# Process entry points the CLI may import, lazily, in the command that starts them.
ENTRY_POINTS = {
    "resurgo.worker.processes",
    "resurgo.worker.watchdog",
    "resurgo.api.server",
    "resurgo.devstack.demo",
    "resurgo.devstack.devserver",
}


def test_every_source_file_is_seen() -> None:
    files = source_files()
    assert len(files) > 80
    assert REPO / "workflows" / "job_recovery.py" in files
    assert REPO / "resurgo" / "contracts.py" in files


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_imports_flow_down(path: Path) -> None:
    layer = layer_of(path)
    wrong = []
    for module, top in imports(path):
        root = module.split(".")[0]
        if root in TOP:
            wrong.append(f"{module}: import through resurgo.{module}, the one import root")
            continue
        if layer == "domain" and root == "temporalio":
            wrong.append(f"{module}: the domain never imports Temporal")
            continue
        if layer == "domain" and root in RENDERING:
            wrong.append(f"{module}: the domain never renders; output lives in cli/")
            continue
        target = target_layer(module)
        if target is None or target in ALLOWED[layer]:
            continue
        if layer == "cli" and not top and module in ENTRY_POINTS:
            continue
        wrong.append(f"{module}: {layer} must not import {target}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("path", source_files(), ids=lambda p: str(p.relative_to(REPO)))
def test_modules_are_small(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines; split it by concern"


def test_the_package_links_every_top_level_folder() -> None:
    for top in TOP:
        link = REPO / "resurgo" / top
        assert link.is_symlink() and link.resolve() == REPO / top, top
