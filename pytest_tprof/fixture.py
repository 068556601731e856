"""The ``tprof`` fixture object."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pytest

from profiler.errors import CaptureError
from profiler.results import ProfiledTest
from profiler.runner import Body

RESULT_KEY = pytest.StashKey[ProfiledTest]()


class Profile(Protocol):
    """Profiles a test's body for its rounds: the plugin's ``profile``."""

    def __call__(
        self, item: pytest.Item, body: Body, *, rounds: int | None, warmup: int | None
    ) -> tuple[Any, ProfiledTest]: ...


class TprofFixture:
    """``tprof(fn, *args, **kwargs)`` profiles ``fn`` for the rounds and returns its result.

    Without ``--tprof`` it calls ``fn`` once, so the test stays a normal test.
    """

    def __init__(self, item: pytest.Item, profile: Profile | None) -> None:
        self._item = item
        self._profile = profile
        self._used = False

    @property
    def enabled(self) -> bool:
        return self._profile is not None

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
        if self._profile is None:
            if setup is not None:
                prepared = setup()
                if prepared is not None:
                    args, kwargs = prepared
            return fn(*args, **kwargs)
        body = Body(fn=fn, args=args, kwargs=kwargs, setup=setup)
        value, result = self._profile(self._item, body, rounds=rounds, warmup=warmup)
        self._item.stash[RESULT_KEY] = result
        return value
