"""The trace folder: which verdicts leave a trace, its name per run, and the folder's bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tprof_engine.store import trace_files as tf

NODE = "tests/test_a.py::test_step"


@pytest.mark.parametrize(
    ("verdict", "every", "save_trace", "written"),
    [
        ("unchanged", False, False, False),
        ("unchanged", True, False, True),
        ("saved", True, False, True),
        ("regressed", False, False, True),
        ("inconclusive", False, False, False),
        ("inconclusive", True, False, True),
        ("changed", False, False, True),
        ("no-baseline", False, False, False),
        ("no-baseline", True, False, True),
        ("incomparable", False, False, False),
        ("error", False, False, False),
        ("improved", False, False, True),
        ("saved", False, False, False),
        ("saved", False, True, True),
    ],
)
def test_which_verdicts_leave_a_trace(
    verdict: str, every: bool, save_trace: bool, written: bool
) -> None:
    assert tf.wanted(verdict, every=every, save_trace=save_trace) is written


def touch(path: Path, size: int = 10, age_s: float = 0.0) -> Path:
    path.write_bytes(b"x" * size)
    t = path.stat().st_mtime - age_s
    os.utime(path, (t, t))
    return path


def test_each_run_names_its_own_trace_and_a_test_keeps_its_newest_runs(tmp_path: Path) -> None:
    runs = ["20261126T100000.000001", "20261126T100500.000002", "20261126T101000.000003"]
    made = [touch(tf.trace_path(tmp_path, NODE, r)) for r in runs]
    beside = touch(tf.beside_path(made[1]))
    old_style = touch(tmp_path / f"{tf.paths.slug(NODE)}.pt.trace.json.gz")
    other = touch(tf.trace_path(tmp_path, "tests/test_a.py::test_step2", runs[0]))
    not_a_trace = touch(tmp_path / f"{tf.paths.slug(NODE)}.notes.txt")
    assert made[1].name == f"{tf.paths.slug(NODE)}.{runs[1]}.pt.trace.json.gz"
    assert beside.name.endswith(f"{runs[1]}.vs-baseline.pt.trace.json.gz")
    assert set(tf.traces_of(tmp_path, NODE)) == {*made, beside, old_style}

    gone = tf.prune_runs(tmp_path, NODE, 2)  # the newest two runs stay, side by side and all
    assert set(gone) == {made[0], old_style}
    assert {p for p in tmp_path.iterdir()} == {made[1], beside, made[2], other, not_a_trace}
    assert set(tf.prune_runs(tmp_path, NODE, 1)) == {made[1], beside}
    assert tf.prunes("unchanged") and tf.prunes("inconclusive") and not tf.prunes("regressed")


def test_the_folder_is_bounded_oldest_first_and_a_named_trace_stays(tmp_path: Path) -> None:
    old = [touch(tmp_path / f"t{i}.2026.pt.trace.json.gz", 100, age_s=100 - i) for i in range(5)]
    named = old[0]  # the oldest, but a report of this run names it
    other = touch(tmp_path / "readme.txt", 10_000, age_s=1000)
    gone = tf.bounded(tmp_path, limit_bytes=250, keep=[named])
    assert gone == old[1:4]
    assert {p for p in tmp_path.iterdir()} == {named, old[4], other}
    assert tf.bounded(tmp_path, limit_bytes=250) == []


def test_a_run_stamp_sorts_in_time_order() -> None:
    a = tf.run_stamp()
    b = tf.run_stamp()
    assert len(a) == len("20261126T101502.123456") and a <= b
