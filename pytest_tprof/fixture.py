"""The ``tprof`` fixture object."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pytest

from tprof_engine.config import Body
from tprof_engine.model.errors import CaptureError, ConfigError, TprofError
from tprof_engine.model.limits import ROUNDS_LIMIT, WARMUP_LIMIT, number_problem
from tprof_engine.model.results import ProfiledTest

RESULT_KEY = pytest.StashKey[ProfiledTest]()


class Profile(Protocol):
    """Profiles a test's body for its rounds: the plugin's ``profile``."""

    def __call__(
        self, item: pytest.Item, body: Any, *, rounds: int | None, warmup: int | None
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
        __tracebackhide__ = True
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
        __tracebackhide__ = True  # a bad argument's error points at the test's own line
        _check_pedantic(args, kwargs, setup=setup, rounds=rounds, warmup=warmup)
        return self._run(
            fn, tuple(args), dict(kwargs or {}), setup=setup, rounds=rounds, warmup=warmup
        )

    def distributed(
        self,
        make_step: Callable[[int], Callable[[], Any]],
        /,
        *,
        world_size: int = 2,
        backend: str = "gloo",
        timeout: float = 300.0,
        rounds: int | None = None,
        warmup: int | None = None,
    ) -> Any:
        """Profile a step on every rank of a process group of ``world_size`` new processes.

        ``make_step(rank)`` runs in each rank, after its process group is up, and returns the
        rank's step (a function of no arguments); define it at a module's top level, since
        each rank imports it by name.  Under ``--tprof`` every rank runs the protocol and the
        test is judged on all of them, its collectives exactly; the ranks' tables come back
        (one ``RankTables`` per rank).  Without it every rank runs its step once, and an
        empty tuple comes back.  A rank that raises, dies or outlives ``timeout`` seconds
        fails the test, named.
        """
        __tracebackhide__ = True
        from tprof_engine import ranked
        from tprof_engine.ranked import DistributedBody

        _check_pedantic((), None, setup=None, rounds=rounds, warmup=warmup)
        try:
            ranked.check_body(make_step, world_size=world_size, backend=backend, timeout_s=timeout)
        except TprofError as exc:  # its message is the whole story: point at the test's line
            raise exc.with_traceback(None) from None
        if self._used:
            raise CaptureError("tprof was called twice in one test; profile one callable per test")
        self._used = True
        body = DistributedBody(
            make_step=make_step, world_size=world_size, backend=backend, timeout_s=float(timeout)
        )
        try:
            if self._profile is None:
                ranked.run_unprofiled(
                    make_step, world_size=world_size, backend=backend, timeout_s=float(timeout)
                )
                return ()
            value, result = self._profile(self._item, body, rounds=rounds, warmup=warmup)
        except TprofError as exc:
            raise exc.with_traceback(None) from None
        self._item.stash[RESULT_KEY] = result
        return value

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
        __tracebackhide__ = True
        if self._used:
            raise CaptureError("tprof was called twice in one test; profile one callable per test")
        if not callable(fn):
            raise ConfigError(
                f"tprof's first argument must be the function to profile (got {_a(fn)}); "
                "pass the function and its arguments: tprof(fn, *args)"
            )
        self._used = True
        if self._profile is None:
            if setup is not None:
                prepared = setup()
                if prepared is not None:
                    args, kwargs = prepared
            return fn(*args, **kwargs)
        body = Body(fn=fn, args=args, kwargs=kwargs, setup=setup)
        try:
            value, result = self._profile(self._item, body, rounds=rounds, warmup=warmup)
        except TprofError as exc:  # its message is the whole story: point at the test's line
            raise exc.with_traceback(None) from None
        self._item.stash[RESULT_KEY] = result
        return value


def _check_pedantic(args: Any, kwargs: Any, *, setup: Any, rounds: Any, warmup: Any) -> None:
    """A :class:`ConfigError` naming the first argument of ``tprof.pedantic`` that can't be used."""
    __tracebackhide__ = True
    for key, value, minimum, maximum in (
        ("rounds", rounds, 2, ROUNDS_LIMIT),
        ("warmup", warmup, 0, WARMUP_LIMIT),
    ):
        problem = None
        if value is not None:
            problem = number_problem(value, minimum=minimum, maximum=maximum, integer=True)
        if problem is not None:
            raise ConfigError(f"tprof.pedantic '{key}' {problem}")
    if not isinstance(args, (tuple, list)):
        raise ConfigError(f"tprof.pedantic 'args' must be a tuple (got {_a(args)})")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise ConfigError(f"tprof.pedantic 'kwargs' must be a dict (got {_a(kwargs)})")
    if setup is not None and not callable(setup):
        raise ConfigError(f"tprof.pedantic 'setup' must be callable or None (got {_a(setup)})")


def _a(value: object) -> str:
    """``a Tensor``, ``an int``: what a value is, for a message."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
