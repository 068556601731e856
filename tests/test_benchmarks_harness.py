"""benchmarks/harness/, what the benchmark scripts share: a run's report is read back or the
script stops, a workspace is a committed repository, a list option names what it takes."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
try:
    from harness import runs, tables, workspace
finally:
    sys.path.pop(0)


def test_a_run_reads_back_its_report_and_its_tests_by_name(tmp_path: Path) -> None:
    report = tmp_path / "out.json"
    report.write_text('{"tests": []}')  # an earlier run's: removed before this one
    write = (
        "import json, sys; json.dump({'tests': [{'nodeid': 'a.py::test_x', 'verdict': 'saved'}]},"
        " open(sys.argv[1], 'w'))"
    )
    done = runs.run([sys.executable, "-c", write, str(report)], tmp_path, report=report)
    assert done.returncode == 0
    assert done.tests == {"test_x": {"nodeid": "a.py::test_x", "verdict": "saved"}}
    assert done.wall_s > 0


def test_a_run_without_its_report_stops_the_benchmark_naming_it(tmp_path: Path) -> None:
    report = tmp_path / "out.json"
    report.write_text('{"tests": []}')
    with pytest.raises(SystemExit, match=r"^the probe failed \(0\):\nsaid\n"):
        runs.run([sys.executable, "-c", "print('said')"], tmp_path, report=report, what="the probe")


def test_a_run_with_an_exit_code_it_does_not_take_stops_the_benchmark(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"^crash failed \(3\)"):
        runs.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, what="crash")
    assert (
        runs.run([sys.executable, "-c", "raise SystemExit(3)"], tmp_path, ok=None).returncode == 3
    )


def test_a_repository_is_made_with_its_files_committed(tmp_path: Path) -> None:
    sha = workspace.make_repo(tmp_path, {"test_a.py": "def test_a():\n    pass\n"}, "reports/\n")
    assert workspace.git(tmp_path, "rev-parse", "HEAD") == sha
    assert workspace.git(tmp_path, "ls-files").split() == [".gitignore", "test_a.py"]
    (tmp_path / "test_a.py").write_text("def test_a():\n    assert True\n")
    assert workspace.commit(tmp_path, "second") == workspace.git(tmp_path, "rev-parse", "HEAD")
    assert workspace.git(tmp_path, "log", "--format=%s").split("\n") == ["second", "base"]


def test_a_kept_folder_must_be_empty_when_asked(tmp_path: Path) -> None:
    (tmp_path / "left.txt").write_text("")
    with workspace.workspace("x-", tmp_path) as folder:
        assert folder == tmp_path.resolve()
    with (
        pytest.raises(SystemExit, match="not empty"),
        workspace.workspace("x-", tmp_path, empty=True),
    ):
        pass


def test_a_list_option_names_the_items_it_takes() -> None:
    assert tables.csv("none, busy,", ("none", "busy"), "load") == ["none", "busy"]
    with pytest.raises(
        argparse.ArgumentTypeError, match=r"^load \['idle'\]: choose from none, busy$"
    ):
        tables.csv("idle", ("none", "busy"), "load")
