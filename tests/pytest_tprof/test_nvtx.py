"""--tprof-collect=nvtx and --tprof-collect=counters: what a machine without them says, once."""

from __future__ import annotations

import json

import pytest
import torch

from tprof_engine.capture import facts, session
from tprof_engine.capture.backends import CPU

NO_NVTX = (
    "tprof: --tprof-collect=nvtx: this torch has no NVTX (a build without CUDA); "
    "profiling without NVTX ranges"
)


def test_each_capture_and_each_round_is_a_named_range(monkeypatch: pytest.MonkeyPatch) -> None:
    pushed: list[str] = []
    depth: list[int] = []
    monkeypatch.setattr(torch.cuda.nvtx, "range_push", lambda name: pushed.append(name) or 0)
    monkeypatch.setattr(torch.cuda.nvtx, "range_pop", lambda: depth.append(len(pushed)) or 0)
    x = torch.ones(16)
    session.capture(
        torch.relu, (x,), rounds=3, warmup=1, probe=False, device=CPU,
        nvtx_label="tprof:test_a.py::test_relu",
    )  # fmt: skip
    assert pushed == [
        "tprof:test_a.py::test_relu",
        "tprof:test_a.py::test_relu:warmup0",
        "tprof:test_a.py::test_relu:round0",
        "tprof:test_a.py::test_relu:round1",
        "tprof:test_a.py::test_relu:round2",
    ]
    assert len(depth) == len(pushed)  # every range is closed


def test_without_a_label_no_range_is_pushed(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(name: str) -> int:
        raise AssertionError(f"pushed {name}")

    monkeypatch.setattr(torch.cuda.nvtx, "range_push", refuse)
    session.capture(torch.relu, (torch.ones(4),), rounds=2, warmup=0, probe=False, device=CPU)


@pytest.mark.slow
@pytest.mark.skipif(facts.nvtx_available(), reason="this torch has NVTX (a CUDA build)")
def test_the_cpu_build_has_no_nvtx_and_a_run_says_so_once(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import torch

        def test_a(tprof):
            tprof(torch.relu, torch.ones(8))

        def test_b(tprof):
            tprof(torch.tanh, torch.ones(8))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--tprof", "--tprof-collect=nvtx", "--tprof-rounds=2",
        "--tprof-warmup=0", "--tprof-min-round-us=0", "--no-tprof-census",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    assert result.outlines.count(NO_NVTX) == 1
    plain = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--tprof", "--tprof-rounds=2", "--tprof-warmup=0",
        "--tprof-min-round-us=0", "--no-tprof-census",
    )  # fmt: skip
    assert NO_NVTX not in plain.outlines


@pytest.mark.slow
def test_counters_are_one_header_line_either_way(pytester: pytest.Pytester) -> None:
    from tprof_engine.capture.counters import unavailable_reason

    pytester.makepyfile(
        """
        import torch

        def test_a(tprof):
            tprof(torch.relu, torch.ones(8))
        """
    )
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--tprof", "--tprof-collect=counters", "--tprof-rounds=2",
        "--tprof-warmup=0", "--tprof-min-round-us=0", "--no-tprof-census",
        "--tprof-json=report.json",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    notes = json.loads((pytester.path / "report.json").read_text())["tests"][0]["notes"]
    counted = [n for n in notes if n.startswith("CPU instructions per round: ")]
    header = [s for s in result.outlines if s.startswith("tprof: --tprof-collect=counters: ")]
    reason = unavailable_reason()
    if reason is None:
        assert header == [
            "tprof: --tprof-collect=counters: CPU instructions of each measured round are in "
            "each test's notes (not gated)"
        ]
        assert len(counted) == 1
    else:
        assert header == [
            f"tprof: --tprof-collect=counters: no hardware counter ({reason}); "
            "running without counters"
        ]
        assert counted == []
