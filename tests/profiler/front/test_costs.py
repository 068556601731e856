"""Where a test's profiling time goes: the stages the runner and the capture time."""

from __future__ import annotations

import pytest

from tprof_engine.model.costs import STAGES, Costs, Stopwatch


def test_costs_add_up_stage_by_stage_and_the_rounds_are_the_body_s() -> None:
    a = Costs({"rounds": 1.0, "reduce": 0.25})
    b = Costs({"rounds": 0.5, "census": 0.125})
    both = a.plus(b)
    assert both.seconds == {"rounds": 1.5, "reduce": 0.25, "census": 0.125}
    assert both.plugin_s == 0.375
    assert list(both.to_dict()) == ["rounds", "reduce", "census"]  # the stages' order
    assert Costs.from_dict(both.to_dict()) == both


def test_a_stopwatch_adds_up_a_stage_met_twice() -> None:
    watch = Stopwatch()
    with watch.stage("judge"):
        pass
    with pytest.raises(ValueError), watch.stage("judge"):  # timed even when it raises
        raise ValueError
    watch.merge(Costs({"judge": 1.0, "export": 2.0}))
    costs = watch.costs()
    assert set(costs.seconds) == {"judge", "export"}
    assert 1.0 <= costs.seconds["judge"] < 1.5


def test_a_profiled_test_says_what_each_stage_cost(tmp_path) -> None:
    import torch

    from tprof_engine.config import Body, RunConfig
    from tprof_engine.runner import Runner

    runner = Runner(RunConfig(baseline_dir=str(tmp_path / "b"), trace_dir=str(tmp_path / "t")))
    a = torch.randn(32, 32)
    _, test = runner.profile("t.py::test_mm", Body(fn=lambda: torch.mm(a, a)), rounds=3, warmup=1)
    assert runner.startup_s is not None and runner.startup_s > 0  # once per process
    met = set(test.costs.seconds)
    assert {"load", "calibrate", "rounds", "profiler", "reduce", "census", "judge"} <= met
    assert met <= set(STAGES)
    assert all(s >= 0 for s in test.costs.seconds.values())
    saved = runner.save(test)
    assert saved.costs.seconds["save"] > 0
    assert type(test).from_dict(saved.to_dict()).costs.to_dict() == saved.costs.to_dict()


def test_a_save_reads_its_baseline_again_only_when_the_file_changed(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from tprof_engine.config import Body, RunConfig
    from tprof_engine.runner import Runner
    from tprof_engine.store import baselines

    config = RunConfig(baseline_dir=str(tmp_path / "b"), trace_dir=None, census=False, save=True)
    runner, other = Runner(config), Runner(config)
    a = torch.randn(8, 8)
    body = Body(fn=lambda: torch.mm(a, a))
    node = "t.py::test_mm"

    def recorded(by: Runner) -> None:
        by.save(by.profile(node, body, rounds=3, warmup=1)[1])

    recorded(runner)
    reads: list[object] = []
    read = baselines.load_baseline
    monkeypatch.setattr(
        baselines, "load_baseline", lambda *a, **k: reads.append(a) or read(*a, **k)
    )
    recorded(runner)
    assert len(reads) == 1  # the run's read, kept for its save
    _, test = runner.profile(node, body, rounds=3, warmup=1)
    recorded(other)  # another process records a session meanwhile: it is read and kept
    runner.save(test)
    assert len(reads) == 4
    assert len(read(runner.baseline_path(node)).sessions) == 4
