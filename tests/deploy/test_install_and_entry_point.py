"""How the package is installed and started: the script without the ``[cli]`` extra, the
build metadata, and the Makefile's install stamps."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

# Makes `import typer` fail as it does after a plain `pip install langgraph-durable`.
WITHOUT_TYPER = """
import importlib.abc, sys

class NoTyper(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] == "typer":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTyper())
sys.modules.pop("typer", None)
"""


def run_without_typer(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which typer cannot be imported."""
    return subprocess.run([sys.executable, "-c", WITHOUT_TYPER + code, "threads"],
                          capture_output=True, text=True, timeout=60, cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_script_without_the_cli_extra_says_how_to_install_it() -> None:
    """The `langgraph-durable` script that pyproject declares, run where typer is missing,
    prints one line naming the install command and exits 1 (no traceback)."""
    module, _, function = PYPROJECT["project"]["scripts"]["langgraph-durable"].partition(":")
    result = run_without_typer(f"import importlib\n"
                               f"getattr(importlib.import_module({module!r}), {function!r})()")
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert "pip install typer rich" in lines[0]


def test_python_dash_m_without_the_cli_extra_says_how_to_install_it() -> None:
    """``python -m langgraph_durable`` without typer gives the same one line, exit 1."""
    result = run_without_typer("import runpy\n"
                               "runpy.run_module('langgraph_durable', run_name='__main__')")
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1
    assert "pip install typer rich" in result.stderr


def test_the_license_is_an_spdx_expression_the_build_backend_supports() -> None:
    """``license`` is an SPDX string (a TOML table makes setuptools warn that it is
    deprecated), and the build requires a setuptools that reads it (PEP 639: >= 77)."""
    assert PYPROJECT["project"]["license"] == "MIT"
    (setuptools,) = [Requirement(r) for r in PYPROJECT["build-system"]["requires"]
                     if Requirement(r).name == "setuptools"]
    assert not setuptools.specifier.contains("76.9")
    assert setuptools.specifier.contains("77.0")


def make_dry_run(target: str, venv: Path) -> list[str]:
    """The commands ``make -n TARGET`` would run with ``VENV=venv``."""
    result = subprocess.run(["make", "-n", "-C", str(ROOT), target, f"VENV={venv}"],
                            capture_output=True, text=True, timeout=30, check=True)
    return [line for line in result.stdout.splitlines() if not line.startswith("make")]


def test_make_demo_installs_once(tmp_path: Path) -> None:
    """`make demo` installs the package when its stamp is missing or older than
    pyproject.toml, and otherwise only runs the demo."""
    venv = tmp_path / "venv"
    venv.mkdir()
    first = make_dry_run("demo", venv)
    assert any("pip install" in line and ".[embedded]" in line for line in first)
    stamp = venv / ".installed-embedded"
    stamp.touch()
    os.utime(stamp, (os.path.getmtime(ROOT / "pyproject.toml") + 60,) * 2)
    assert make_dry_run("demo", venv) == [f"{venv}/bin/langgraph-durable demo"]
