"""``tprof bisect``: the search, the classes, the effect's interval, bad input and the report
(docs/bisect.md).  The end-to-end run on a small repository is marked slow."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tprof_engine import bisect_report, cli
from tprof_engine.bisect_search import (
    BAD,
    GOOD,
    SKIP,
    UNSURE,
    Effect,
    Search,
    classify,
    max_steps,
    paired_effect,
)

ROOT = Path(__file__).resolve().parents[1]


def _search(commits: int, culprit: int, broken: set[int]) -> tuple[Search, int]:
    search = Search([f"c{i}" for i in range(commits)])
    steps = 0
    while (i := search.next()) is not None:
        steps += 1
        search.record(i, SKIP if i in broken else (BAD if i >= culprit else GOOD))
    return search, steps


@pytest.mark.parametrize("culprit", range(63))
def test_the_search_finds_every_culprit_of_63_commits_in_six_steps(culprit: int) -> None:
    search, steps = _search(63, culprit, set())
    assert search.found and search.culprits() == [f"c{culprit}"]
    assert steps <= max_steps(63) == 6


@pytest.mark.parametrize("culprit", [0, 1, 17, 30, 31, 32, 61, 62])
@pytest.mark.parametrize("broken", [0, 15, 30, 31, 45, 61])
def test_a_broken_commit_costs_at_most_two_more_steps(culprit: int, broken: int) -> None:
    search, steps = _search(63, culprit, {broken} - {culprit})
    assert steps <= max_steps(63) + 2
    if search.found:
        assert search.culprits() == [f"c{culprit}"]
    else:  # the broken commit stands just before the culprit: both are named
        assert broken == culprit - 1 and search.culprits() == [f"c{broken}", f"c{culprit}"]


def test_every_commit_skipped_leaves_the_whole_range() -> None:
    search, steps = _search(5, 4, {0, 1, 2, 3})
    assert steps == 4 and not search.found
    assert search.culprits() == ["c0", "c1", "c2", "c3", "c4"]
    assert search.last_good is None


def test_the_paired_effect_and_its_interval() -> None:
    base = np.array([100.0, 110.0, 90.0, 105.0, 95.0, 100.0, 102.0, 98.0])
    slower = base * 1.25 * np.array([1.01, 0.99, 1.0, 1.02, 0.98, 1.0, 1.01, 0.99])
    effect = paired_effect(base, slower)
    assert effect is not None and effect.pairs == 8
    assert effect.low < effect.centre < effect.high
    assert effect.low > 0.2 and effect.high < 0.3
    assert effect.base_us == pytest.approx(100.0)
    assert math.isclose(effect.cur_us / effect.base_us, 1 + effect.centre)
    assert paired_effect(base[:1], slower[:1]) is None  # one pair says nothing


def test_a_commit_is_classed_by_where_its_interval_lies_against_half_of_bads() -> None:
    bad = Effect(centre=0.25, low=0.2, high=0.3, pairs=20)
    assert classify(Effect(centre=0.24, low=0.2, high=0.28, pairs=20), bad) == BAD
    assert classify(Effect(centre=0.01, low=-0.02, high=0.04, pairs=20), bad) == GOOD
    assert classify(Effect(centre=0.1, low=0.05, high=0.16, pairs=20), bad) == UNSURE


def _git(folder: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)
    return done.stdout.decode().strip()


def _repo(folder: Path, commits: int = 3) -> list[str]:
    _git(folder, "init", "-q")
    shas = []
    for n in range(commits):
        (folder / "f.txt").write_text(f"{n}\n")
        _git(folder, "add", "f.txt")
        _git(
            folder, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-qm", f"c{n}"
        )
        shas.append(_git(folder, "rev-parse", "HEAD"))
    return shas


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert cli.main(argv) == cli.EXIT_ERROR
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_bad_input_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert "tprof bisect runs inside a git repository" in _error(capsys, ["bisect", "a", "b"])
    shas = _repo(tmp_path)
    assert "no commit 'nosuch'" in _error(capsys, ["bisect", "nosuch", "HEAD"])
    assert "are the same commit" in _error(capsys, ["bisect", "HEAD", shas[-1]])
    said = _error(capsys, ["bisect", "HEAD", "HEAD~2"])
    assert "is not an ancestor of BAD" in said and "git merge-base" in said
    said = _error(capsys, ["bisect", "HEAD~2", "HEAD", "--", "-n", "2"])
    assert "drop -n" in said
    assert cli.main(["bisect", "--rounds", "2", "HEAD~2", "HEAD"]) == cli.EXIT_ERROR
    assert "6 or more" in capsys.readouterr().err


def _doc() -> dict[str, object]:
    facts = {"sha": "a" * 40, "subject": "spin more", "author": "x", "date": "2025-01-02T03:04:05"}
    return {
        "good": {**facts, "sha": "0" * 40},
        "bad": {**facts, "sha": "f" * 40},
        "commits": 63,
        "pytest_args": ["t.py::test_step"],
        "regressions": [
            {
                "test": "t.py::test_step", "kind": "timing", "family": "cpu", "op": "x::spin",
                "good_to_bad": "+25.0% [+20.0%, +30.0%]", "found": True,
                "culprit": {**facts, "stat": ["1 file changed"]}, "candidates": ["a" * 40],
                "measured_steps": 6, "runs": 7, "traces": ["g.json.gz", "c.json.gz"],
                "rows": [{"op": "x::spin", "family": "cpu", "good_us": 100.0,
                          "culprit_us": 125.0, "change": "+25.0% [+20.0%, +30.0%]"}],
            },
            {
                "test": "t.py::test_step", "kind": "work", "family": None, "op": None,
                "good_to_bad": "FLOPs +100%", "found": False, "culprit": None,
                "candidates": ["b" * 40, "c" * 40], "measured_steps": 7, "runs": 7,
                "traces": None, "rows": [],
            },
        ],
        "skipped": [{"sha": "b" * 40, "subject": "break", "date": "", "why": "pytest exited 2"}],
        "cost": {"seconds": 100.0, "paired_runs": 7, "paired_seconds": 70.0, "census_runs": 8,
                 "census_seconds": 25.0},
    }  # fmt: skip


def test_the_report_in_text_and_markdown() -> None:
    doc = _doc()
    text = "\n".join(bisect_report.text(doc))
    assert "first bad commit: aaaaaaaaaa spin more (2025-01-02T03:04:05, x)" in text
    assert "x::spin (cpu): 100.0 µs → 125.0 µs +25.0% [+20.0%, +30.0%]" in text
    assert "trace pair: g.json.gz (GOOD) and c.json.gz (it)" in text
    assert "not pinned: the first bad commit is one of bbbbbbbbbb, cccccccccc" in text
    assert "skipped: bbbbbbbbbb break: pytest exited 2" in text
    assert (
        "cost: 100 s: 7 paired runs (70 s), 8 census runs (25 s), checkouts and the rest 5 s"
        in text
    )
    md = bisect_report.markdown(doc)
    assert (
        "| `t.py::test_step` | x::spin (cpu) +25.0% [+20.0%, +30.0%] | `aaaaaaaaaa` spin more" in md
    )
    assert "one of `bbbbbbbbbb`, `cccccccccc`" in md


@pytest.mark.slow
@pytest.mark.serial
def test_bisect_names_both_culprits_of_a_small_repository(tmp_path: Path) -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import bisect_check
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    planted = bisect_check.make_repo(tmp_path, 0, commits=8)
    report = tmp_path / "out.json"
    done = subprocess.run(
        [sys.executable, "-m", "tprof_engine", "bisect", f"--json={report}", "HEAD~7", "HEAD",
         "--", bisect_check.TEST],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    # 1: a timing step stayed unsure on a loaded machine and left a range (timings are the
    # benchmark's to measure: benchmarks/bisect_check.py); the work's answer is exact
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    doc = json.loads(report.read_text())
    found = {r["kind"]: r["culprit"]["sha"] for r in doc["regressions"] if r["found"]}
    assert found["work"] == planted["work"]
    assert found.get("timing", planted["timing"]) == planted["timing"]  # never a wrong one
    assert (tmp_path / ".tprof" / "bisect" / "bisect.json").exists()
    assert "first bad commit" in done.stdout


def _op(op: str, verdict: str, share: float, calls: tuple[int, int] = (5, 5)) -> dict[str, object]:
    return {
        "op": op, "family": "cpu", "verdict": verdict, "share": share, "floor_pct": 8.0,
        "calls_baseline": calls[0], "calls_current": calls[1],
    }  # fmt: skip


def test_the_suspects_are_regressed_or_material_ops_whose_work_did_not_move() -> None:
    import argparse

    from tprof_engine.bisection import _suspects

    test = {
        "ops": [
            _op("x::spin", "unchanged", 0.7),  # material: above its floor to be hunted
            _op("aten::add", "regressed", 0.01),  # judged regressed: above no change
            _op("aten::mm", "regressed", 0.2),  # its work moved: the work bisection's
            _op("aten::t", "unchanged", 0.01),  # neither
            _op("aten::sum", "unchanged", 0.3, (0, 5)),  # its calls changed
        ],
        "families": [{"family": "cpu", "timing_regressed": True}],
    }
    args = argparse.Namespace(op=None, family=None)
    assert _suspects(test, {"aten::mm"}, args) == [
        ("cpu", "x::spin", 0.08),
        ("cpu", "aten::add", 0.0),
    ]
    args = argparse.Namespace(op="aten::t", family=None)
    assert _suspects(test, set(), args) == [("cpu", "aten::t", 0.0)]
    args = argparse.Namespace(op=None, family=["cuda"])
    assert _suspects(test, set(), args) == []
    quiet = {"ops": [_op("aten::t", "unchanged", 0.01)], "families": test["families"]}
    args = argparse.Namespace(op=None, family=None)
    assert _suspects(quiet, set(), args) == [("cpu", None, 0.0)]  # the family's total


def test_a_work_culprits_rows_are_the_json_reports_work_rows_in_words() -> None:
    from tprof_engine.model.work_verdict import WorkDelta

    row = WorkDelta(
        op="aten::mm", module="", phase="forward", status="added", gated=True, base_calls=0,
        cur_calls=1, base_flops=0, cur_flops=4_194_304, base_bytes=0, cur_bytes=196_608,
        base_signature="", cur_signature="self f32[128, 128]",
    ).to_dict()  # fmt: skip
    assert bisect_report._row_text(row) == (
        "aten::mm in the body (forward): added, calls 0 → 1, FLOPs 0 → 4194304, bytes 0 → 196608"
    )
