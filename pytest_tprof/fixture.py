"""The ``tprof`` fixture object."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import pytest

from profiler.errors import CaptureError
from profiler.results import ProfiledTest

if TYPE_CHECKING:
    from pytest_tprof.plugin import TprofPlugin

RESULT_KEY = pytest.StashKey[ProfiledTest]()


class TprofFixture:
    """``tprof(fn, *args, **kwargs)`` profiles ``fn`` for the rounds and returns its result.

    Without ``--tprof`` it calls ``fn`` once, so the test stays a normal test.
    """

    def __init__(self, item: pytest.Item, plugin: TprofPlugin | None) -> None:
        self._item = item
        self._plugin = plugin
        self._used = False

    @property
    def enabled(self) -> bool:
        return self._plugin is not None

    def __call__(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        return self._run(fn, args, kwargs, setup=None, rounds=None, warmup=None)

    def pedantic(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        setup: Callable[[], Any] | None = None,
        rounds: int | None = None,
        warmup: int | None = None,
    ) -> Any:
        """Like pytest-benchmark's: ``setup`` runs before every round, outside the measurement,
        and may return ``(args, kwargs)`` for that round."""
        return self._run(
            fn, tuple(args), dict(kwargs or {}), setup=setup, rounds=rounds, warmup=warmup
        )

    def _run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        *,
        setup: Callable[[], Any] | None,
        rounds: int | None,
        warmup: int | None,
    ) -> Any:
        if self._used:
            raise CaptureError("tprof was called twice in one test; profile one callable per test")
        self._used = True
        if self._plugin is None:
            if setup is not None:
                prepared = setup()
                if prepared is not None:
                    args, kwargs = prepared
            return fn(*args, **kwargs)
        value, result = self._plugin.profile(
            self._item, fn, args, kwargs, setup=setup, rounds=rounds, warmup=warmup
        )
        self._item.stash[RESULT_KEY] = result
        return value
