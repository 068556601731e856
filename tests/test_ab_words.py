"""What a ``tprof ab`` failure prints holds where the user ran it: every next step, pasted in
the folder the run started in (the repository's root, or a subfolder), runs and does what it
says, and every file it names is there once it ends (tprof_engine.decide.outcome,
tprof_engine.ab)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = """
import torch


def step(layer, x):
    return torch.relu(layer(x)).sum()
"""
TESTS = """
import torch
from mypkg import step


def test_layer(tprof):
    torch.manual_seed(0)
    layer = torch.nn.Linear(64, 64)
    x = torch.randn(16, 64)
    tprof(step, layer, x)
"""
# The change under review: a layer four times as wide, whose work regresses exactly (no fresh
# pair is started to confirm it, so the runs stay short).
WIDER = TESTS.replace("Linear(64, 64)", "Linear(64, 256)")
FAST = "--tprof-rounds=4 --tprof-warmup=1"
NODE = "tests/test_perf.py::test_layer"


def project(root: Path) -> Path:
    """A committed project, its working tree holding the wider layer."""
    (root / "src" / "mypkg").mkdir(parents=True)
    (root / "src" / "mypkg" / "__init__.py").write_text(PACKAGE)
    (root / "tests").mkdir()
    (root / "tests" / "test_perf.py").write_text(TESTS)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / ".gitignore").write_text(".tprof/\nbaselines/\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
        subprocess.run(
            ["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args],
            cwd=root, check=True, capture_output=True,
        )  # fmt: skip
    (root / "tests" / "test_perf.py").write_text(WIDER)
    return root


def pasted(command: str, cwd: Path) -> tuple[int, str]:
    """``command`` as a user pastes it into a shell in ``cwd`` (``tprof`` found on PATH)."""
    bin_dir = Path(sys.executable).parent
    assert (bin_dir / "tprof").is_file(), "the tprof command is installed beside this Python"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "TPROF"))}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(
        command, shell=True, cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def next_steps(out: str) -> dict[str, str]:
    """The failure's next steps by their words before the first colon."""
    block = out.split("\n  next:\n", 1)[1].split("\n\n", 1)[0].split("\n=", 1)[0]
    steps = [line.strip() for line in block.splitlines() if line.startswith("    ")]
    return dict(step.split(": ", 1) for step in steps)  # type: ignore[misc]


def printed_files(out: str) -> list[str]:
    """The files the run names on lines of their own."""
    named = re.findall(r"^\s*(?:trace|base side's trace|JSON report): (\S+)$", out, re.M)
    return named


@pytest.mark.slow
@pytest.mark.parametrize("where", ["", "tests"], ids=["from-the-root", "from-a-subfolder"])
def test_every_next_step_of_a_failure_runs_as_pasted_where_the_run_started(
    tmp_path: Path, where: str
) -> None:
    cwd = project(tmp_path) / where
    code, out = pasted(f"tprof ab HEAD -- {FAST}", cwd)

    assert code == 1, out
    # pytest repeats a failure's whole message in its summary where the CI variable is set
    files = sorted(set(printed_files(out)))
    assert len(files) == 3, out  # the head's trace, the base's, the JSON report
    for name in files:
        assert (cwd / name).is_file(), name
    assert "baseline: " not in out  # no stored baseline was read
    steps = next_steps(out)
    assert set(steps) == {
        "meant it? nothing is stored",
        "again, alone",
        "which line of your code",
        "see the ops in time",
    }, out
    typed = NODE if not where else NODE.removeprefix("tests/")
    assert steps["again, alone"] == f'tprof ab HEAD -- {FAST} "{typed}"'

    code, again = pasted(steps["again, alone"], cwd)
    assert code == 1, again  # the same regression, the one test alone
    assert "1 failed" in again and f"REGRESSED    {NODE}" in again

    code, located = pasted(steps["which line of your code"], cwd)
    assert code == 1, located
    assert re.search(r"\[\S*mypkg/__init__\.py:\d+ in step\]", located), located
    assert "which line of your code" not in located  # its rows now name the line

    opened = re.fullmatch(
        r"open (\S+) \(this tree's\) and (\S+) \(the base's\) in https://ui.perfetto.dev",
        steps["see the ops in time"],
    )
    assert opened is not None, steps["see the ops in time"]
    for name in opened.groups():
        assert (cwd / name).is_file(), name
    assert "ab-base-traces" in opened.group(2)


@pytest.mark.slow
def test_a_node_id_pytest_cannot_find_from_here_exits_two(tmp_path: Path) -> None:
    cwd = project(tmp_path) / "tests"
    code, out = pasted(f'tprof ab HEAD -- {FAST} "{NODE}"', cwd)  # the root's id, in tests/
    assert code == 2, out
    assert f"file or directory not found: {NODE}" in out


@pytest.mark.slow
def test_xdist_asked_for_by_the_ini_file_is_refused_naming_it(tmp_path: Path) -> None:
    root = project(tmp_path)
    (root / "pytest.ini").write_text("[pytest]\naddopts = -n 2\n")
    who = ["-c", "user.email=t@example.com", "-c", "user.name=t"]
    subprocess.run(
        ["git", *who, "commit", "-qm", "n", "--", "pytest.ini"],
        cwd=root, check=True, capture_output=True,
    )  # fmt: skip
    code, out = pasted(f"tprof ab HEAD -- {FAST}", root / "tests")
    assert code == 2, out
    assert "tprof ab runs each side serially: drop -n (given in addopts of ../pytest.ini)" in out
