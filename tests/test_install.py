"""The plugin as a user installs it: nothing installed takes an import name from their project.

A project with its own ``profiler.py``, ``benchmarks.py`` and ``examples.py`` runs pytest with the
plugin loaded, from this checkout's (editable) install and from a wheel in a fresh venv.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

USER_MODULES = {
    # Names a PyTorch project commonly has at its top level.
    "profiler.py": "judge = 'the user project profiler'\n",
    "benchmarks.py": "SIZE = 32\n",
    "examples.py": "def batch():\n    import torch\n    return torch.ones(4, 32)\n",
}
USER_TEST = """
import benchmarks
import examples
import profiler
import torch


def test_step(tprof):
    assert profiler.judge == "the user project profiler"
    w = torch.ones(benchmarks.SIZE, benchmarks.SIZE)
    tprof(lambda: examples.batch() @ w)
"""


def user_project(tmp_path: Path) -> Path:
    project = tmp_path / "project"
    project.mkdir()
    for name, text in USER_MODULES.items():
        (project / name).write_text(text)
    (project / "test_user.py").write_text(USER_TEST)
    return project


def run_pytest(python: str, project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TPROF"))}
    return subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def save_then_gate(python: str, project: Path) -> None:
    for args in (("--tprof-save",), ("--tprof",)):
        done = run_pytest(
            python, project, *args, "--tprof-baseline-dir", "baselines", "--tprof-rounds", "5"
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "1 passed" in done.stdout
        assert "Error while loading plugin" not in done.stderr


def test_a_projects_own_profiler_benchmarks_and_examples_modules_work_beside_the_plugin(
    tmp_path: Path,
) -> None:
    save_then_gate(sys.executable, user_project(tmp_path))


def build_wheel(tmp_path: Path) -> Path:
    """The wheel of a copy of the package's sources (the checkout gets no build folder)."""
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md", "LICENSE", "profiler", "pytest_tprof"):
        if (ROOT / name).is_dir():
            shutil.copytree(
                ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__")
            )
        else:
            shutil.copy2(ROOT / name, source / name)
    isolation = ["--no-build-isolation"] if _has_setuptools() else []
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-w", "dist", "."],
        cwd=source,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    (wheel,) = (source / "dist").glob("pytest_tprof-*.whl")
    return wheel


def _has_setuptools() -> bool:
    return importlib.util.find_spec("setuptools") is not None


def fresh_venv(where: Path) -> str:
    """A new venv whose own site-packages will hold the wheel; torch, pytest and the rest come
    from this one's site-packages as a plain path (its ``.pth`` files, such as this checkout's
    editable install, are not run there)."""
    subprocess.run(
        [getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(where)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    python = str(where / "bin" / "python")
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    Path(site, "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_the_wheel_installs_the_engine_under_its_own_name_in_a_fresh_venv(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path)
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"tprof_engine", "pytest_tprof"}
    package = ROOT / "profiler" / "tprof_engine"
    engine = {p.relative_to(package).as_posix() for p in package.rglob("*.py")}
    assert {n.removeprefix("tprof_engine/") for n in names if n.endswith(".py")} >= engine
    (metadata,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    meta = zipfile.ZipFile(wheel).read(metadata).decode()
    assert "Requires-Dist: pytest>=8.3" in meta  # the lowest pytest the demo was run on
    assert "License-Expression: MIT" in meta and "License-File: LICENSE" in meta
    assert "Classifier: Programming Language :: Python :: 3.13" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    python = fresh_venv(tmp_path / "venv")
    # --ignore-installed: where this environment has the project installed from a wheel too,
    # its copy (seen through deps.pth) must not stand in for this one
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--ignore-installed"]
    subprocess.run(
        [*pip, str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    where = subprocess.run(
        [python, "-c", "import tprof_engine, pytest_tprof; print(tprof_engine.__file__)"],
        check=True,
        capture_output=True,
        text=True,
        cwd=tmp_path,
    ).stdout.strip()
    assert Path(where).is_relative_to(tmp_path / "venv")
    project = user_project(tmp_path)
    save_then_gate(python, project)
    shown = subprocess.run(
        [str(tmp_path / "venv" / "bin" / "tprof"), "show", str(project / "baselines")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "test_step" in shown.stdout
