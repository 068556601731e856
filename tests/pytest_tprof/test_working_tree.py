"""The plugin loaded by name (``-p pytest_tprof.plugin``) from a working tree, autoload off:
how benchmarks/gpu_check.py runs it on a machine where it isn't installed."""

from __future__ import annotations

import json

import pytest

from pytest_tprof.fresh import passed_on


def test_the_fresh_process_loads_the_plugins_and_ini_overrides_its_parent_was_given() -> None:
    given = ["tests", "-p", "pytest_tprof.plugin", "-pxdist.plugin", "-q", "--tprof",
             "-p", "no:cacheprovider", "--pdb", "-o", "tprof_window=2", "-oxfail_strict=true",
             "--override-ini=python_files=check_*.py", "--tprof-window", "3"]  # fmt: skip
    assert passed_on(given, ["tests"]) == [
        "-p", "pytest_tprof.plugin", "-pxdist.plugin", "-q", "-p", "no:cacheprovider",
        "-o", "tprof_window=2", "-oxfail_strict=true", "--override-ini=python_files=check_*.py",
    ]  # fmt: skip
    assert passed_on(["--tprof"]) == []


def test_the_fresh_process_gets_the_users_own_options_and_not_what_selected_or_scheduled() -> None:
    given = ["tests/test_m.py::test_a", "--plant", "3", "--model-size=big", "-k", "a",
             "-n", "4", "-n2", "--dist=load", "--lf", "--basetemp", "/tmp/b", "-x",
             "--junitxml=out.xml", "--tprof-rounds", "8", "--tprof-save", "--no-tprof-confirm",
             "--rootdir", "here", "-c", "pytest.ini", "tests/test_m.py::test_b"]  # fmt: skip
    positional = ["tests/test_m.py::test_a", "tests/test_m.py::test_b"]
    assert passed_on(given, positional) == ["--plant", "3", "--model-size=big", "-k", "a", "-x"]


@pytest.mark.slow
def test_with_xdist_loaded_by_its_module_name_the_controller_gets_every_result(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("xdist")
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makepyfile(
        """
        import pytest
        import torch

        @pytest.mark.parametrize("op", ["relu", "tanh"])
        def test_op(tprof, op):
            tprof(getattr(torch, op), torch.ones(8))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "pytest_tprof.plugin", "-p", "xdist.plugin", "-n", "2", "-p", "no:cacheprovider",
        "--tprof", "--tprof-rounds=2", "--tprof-warmup=0", "--tprof-min-round-us=0",
        "--no-tprof-census", "--tprof-json=report.json",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    doc = json.loads((pytester.path / "report.json").read_text())
    assert sorted(t["nodeid"] for t in doc["tests"]) == [
        "test_with_xdist_loaded_by_its_module_name_the_controller_gets_every_result.py::"
        f"test_op[{op}]"
        for op in ("relu", "tanh")
    ]
