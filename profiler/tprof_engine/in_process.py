"""A test body profiled in this process: the runner's usual capture source
(``runner.Source``; a distributed test's ranks are the other, :mod:`tprof_engine.ranked`).

It calibrates the calls per round, runs the rounds through ``capture.session`` (each call's
instructions counted when the run collects counters) and takes the work census.
"""

from __future__ import annotations

from typing import Any

from tprof_engine.capture import counters  # ctypes only
from tprof_engine.config import Body
from tprof_engine.decide.judge import iterations_of
from tprof_engine.model.errors import TprofError
from tprof_engine.model.work import WorkTable
from tprof_engine.store import schema


class InProcess:
    """The body's rounds and census, in this process, with the runner's capture stage."""

    pairable = True  # tprof ab: its rounds can take turns with the other side's

    def __init__(self, runner: Any, body: Body, counts: list[int]) -> None:
        self._runner, self._body = runner, body
        self._session = runner._session
        fn = body.fn
        if runner.counter is not None:  # each call's instructions go to ``counts``
            fn = counters.counting_calls(body.fn, runner.counter, counts)
        self._call = self._session.Call(
            fn=fn, args=body.args, kwargs=dict(body.kwargs), setup=body.setup
        )

    def iterations(self, baseline: schema.Baseline | None) -> int:
        """Calls of the body per round: the baseline's, else calibrated to the minimum round."""
        if baseline is not None and (stored := iterations_of(baseline.protocol)):
            return stored
        body = self._body
        if body.setup is not None:
            return 1
        return int(
            self._session.calibrate_iterations(
                lambda: body.fn(*body.args, **dict(body.kwargs)),
                min_round_us=self._runner.config.min_round_us,
                device=self._session.detect(),
            )
        )

    def capture(self, spec: Any) -> Any:
        return self._session.capture_rounds(self._call, spec)

    def census(self) -> tuple[WorkTable | None, tuple[str, ...]]:
        """The body's work census, after the timed rounds (warm), outside the profiler; or
        none, and why, when it couldn't be taken (timing still gates)."""
        config, body = self._runner.config, self._body
        if not config.census:
            return None, ()
        try:
            work = self._runner._census_of.take_census(
                body.fn, body.args, body.kwargs, setup=body.setup, stack=config.stack
            )
            return work, ()
        except TprofError as exc:
            return None, (f"no work census: {exc}",)
        except Exception as exc:  # the census is a second layer: it must not fail the test
            return None, (f"no work census (please report this): {type(exc).__name__}: {exc}",)
