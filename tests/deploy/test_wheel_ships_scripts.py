"""The Lua scripts are package data: a wheel built from the source holds every one, and the
package installed from it loads them all."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import langgraph_durable

SOURCE = Path(langgraph_durable.__file__).parent.parent


def test_a_wheel_ships_and_loads_every_script(tmp_path: Path) -> None:
    """Build a wheel from a copy of the source, unpack it, and load its registry in a
    fresh interpreter: the scripts it finds are the files of the source tree."""
    tree = tmp_path / "src"
    tree.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(SOURCE / name, tree / name)
    shutil.copytree(SOURCE / "langgraph_durable", tree / "langgraph_durable",
                    ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--no-index", "--wheel-dir", str(tmp_path / "dist"),
                    str(tree)], check=True, capture_output=True, timeout=240)
    [wheel] = (tmp_path / "dist").glob("*.whl")
    folder = SOURCE / "langgraph_durable" / "_core" / "scripts"
    expected = {str(p.relative_to(SOURCE)) for p in folder.rglob("*.lua")}
    with zipfile.ZipFile(wheel) as archive:
        assert expected <= set(archive.namelist())
        archive.extractall(tmp_path / "site")
    loaded = subprocess.run(
        [sys.executable, "-c", "import langgraph_durable._core.scripts.registry as r; "
         "print(r.__file__); print(' '.join(sorted(r.SCRIPTS)))"],
        cwd=tmp_path, env={"PYTHONPATH": str(tmp_path / "site")}, check=True,
        capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert loaded[0].startswith(str(tmp_path / "site"))
    assert loaded[1].split() == sorted(p.stem for p in folder.glob("*.lua"))
