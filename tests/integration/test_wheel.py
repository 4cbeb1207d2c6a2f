"""The installed wheel has one import root, `resurgo`: built from this checkout, installed into
a clean virtualenv, it runs `resurgo --help` and imports every module, with nothing of the
source tree on the path.

The clean venv gets its third-party dependencies from the project's .venv through a path
entry (a `.pth` line adds a directory but runs none of its `.pth` files, so the project's
editable install stays invisible); Resurgo's own code comes only from the wheel.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TOP = ("workflows", "activities", "worker", "api", "cli", "devstack")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(REPO)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (built,) = out.glob("resurgo-*.whl")
    return built


def test_the_wheel_has_one_import_root(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    roots = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert roots == {"resurgo"}
    for top in TOP:
        assert f"resurgo/{top}/__init__.py" in names, top
    assert "resurgo/workflows/job_recovery.py" in names
    assert "resurgo/detect/patterns.json" in names
    # The console renders from files shipped as package data, not from the source tree.
    for page in ("templates/base.html", "templates/job.html", "static/console.js"):
        assert f"resurgo/api/console/{page}" in names, page


def test_installed_wheel_runs_and_imports_every_module(wheel: Path, tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "-q",
         str(wheel)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    run = {"cwd": tmp_path, "capture_output": True, "text": True, "timeout": 120}
    shown = subprocess.run([str(venv / "bin" / "resurgo"), "--help"], **run)  # type: ignore[call-overload]
    assert shown.returncode == 0, shown.stderr
    assert "controller" in shown.stdout and "attribute" in shown.stdout
    probe = (
        "import importlib, pkgutil, resurgo, sys\n"
        "assert resurgo.__file__.startswith(sys.prefix), resurgo.__file__\n"
        "names = [m.name for m in pkgutil.walk_packages(resurgo.__path__, 'resurgo.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "for top in ('workflows', 'activities', 'worker', 'api', 'cli'):\n"
        "    try: importlib.import_module(top)\n"
        "    except ModuleNotFoundError: pass\n"
        "    else: raise SystemExit(f'top-level {top} importable')\n"
        "print(len(names))\n"
    )
    done = subprocess.run([str(py), "-c", probe], **run)  # type: ignore[call-overload]
    assert done.returncode == 0, done.stderr
    sources = [
        p for p in (REPO / "resurgo").rglob("*.py") if p.name != "__init__.py"
    ]  # rglob does not follow the links: count the linked folders too
    for top in TOP:
        sources.extend(p for p in (REPO / top).rglob("*.py") if p.name != "__init__.py")
    assert int(done.stdout.strip()) >= len(sources)
