"""One GPU per xdist worker: chosen in the worker before CUDA starts; the controller warns."""

from __future__ import annotations

import json

import pytest

from pytest_tprof.options import requested_early
from pytest_tprof.xdist import assign_worker_gpu, device_header


def test_a_worker_takes_its_own_entry_of_the_users_list() -> None:
    environ = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "4,6"}
    assert assign_worker_gpu(environ, lambda: 8) == "6"
    assert environ["CUDA_VISIBLE_DEVICES"] == "6"


def test_without_a_list_a_worker_takes_a_gpu_counted_by_the_driver() -> None:
    environ = {"PYTEST_XDIST_WORKER": "gw3"}
    assert assign_worker_gpu(environ, lambda: 2) == "1"
    assert environ == {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "1"}


def test_nothing_changes_outside_a_worker_or_without_gpus() -> None:
    controller = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert assign_worker_gpu(controller, lambda: 2) is None
    assert controller == {"CUDA_VISIBLE_DEVICES": "0,1"}
    cpu_worker = {"PYTEST_XDIST_WORKER": "gw0"}
    assert assign_worker_gpu(cpu_worker, lambda: 0) is None
    assert cpu_worker == {"PYTEST_XDIST_WORKER": "gw0"}


def test_the_controller_header_gives_the_plan_or_one_warning() -> None:
    assert device_header(2, {}, lambda: 2) == [
        "tprof: one GPU per xdist worker (CUDA_VISIBLE_DEVICES: gw0 → 0, gw1 → 1)"
    ]
    assert device_header(3, {"CUDA_VISIBLE_DEVICES": "5"}, lambda: 8) == [
        "tprof: warning: 3 xdist workers share 1 GPU round-robin (gw0, gw1, gw2 → 5); workers "
        "on one GPU disturb each other's timings: use -n 1 for one GPU per worker"
    ]
    assert device_header(2, {}, lambda: 0) == []


@pytest.mark.slow
def test_under_xdist_each_worker_reports_the_device_it_was_given(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    # A user's list of two devices, on a machine without CUDA: each worker still narrows the
    # list to its own entry before torch starts, and its fingerprint says what it saw.
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    pytester.makepyfile(
        test_four="""
        import os
        import pytest
        import torch

        @pytest.mark.parametrize("op", ["relu", "tanh", "exp", "sigmoid"])
        def test_op(tprof, op):
            tprof(getattr(torch, op), torch.ones(8))
            worker = os.environ["PYTEST_XDIST_WORKER"]
            assert os.environ["CUDA_VISIBLE_DEVICES"] == {"gw0": "0", "gw1": "1"}[worker]
        """
    )
    result = pytester.runpytest_subprocess(
        "-n", "2", "--dist=load", "-p", "no:cacheprovider", "--tprof", "--tprof-rounds=2",
        "--tprof-warmup=0", "--tprof-min-round-us=0", "--no-tprof-census",
        "--tprof-json=report.json",
    )  # fmt: skip
    result.assert_outcomes(passed=4)
    result.stdout.fnmatch_lines(
        ["tprof: one GPU per xdist worker (CUDA_VISIBLE_DEVICES: gw0 → 0, gw1 → 1)"]
    )
    doc = json.loads((pytester.path / "report.json").read_text())
    # the controller saw the user's list; each worker its own entry
    assert doc["environment"]["soft"]["device"] == "cpu (CUDA_VISIBLE_DEVICES=0,1)"
    assert sorted(t["device"] for t in doc["tests"]) == [
        "cpu (CUDA_VISIBLE_DEVICES=0)",
        "cpu (CUDA_VISIBLE_DEVICES=0)",
        "cpu (CUDA_VISIBLE_DEVICES=1)",
        "cpu (CUDA_VISIBLE_DEVICES=1)",
    ]


@pytest.mark.parametrize(
    ("ini", "args", "requested"),
    [
        ("", (), False),
        ("", ("--tprof",), True),
        ("", ("--tprof-save",), True),
        ("tprof = true", (), True),
        ("tprof_save = true", (), False),  # a save is asked for per run, never by the ini
        ("tprof = true", ("--no-tprof",), False),
        ("tprof = maybe", (), False),  # read_settings reports the bad value
    ],
)
def test_profiling_is_known_before_conftests_from_the_command_line_or_the_ini_file(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...], requested: bool
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    config = pytester.parseconfig(*args)
    assert requested_early(config) is requested
