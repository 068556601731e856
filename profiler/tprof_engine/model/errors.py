"""Exceptions raised by the profiler library; one base class, builtin categories underneath."""

from __future__ import annotations


class TprofError(Exception):
    """Base of every error pytest-tprof raises on purpose."""


class ConfigError(TprofError, ValueError):
    """An option, marker keyword or argument has a value that can't be used."""


class BaselineError(TprofError, ValueError):
    """A stored baseline file can't be read or written; the message names the file and the fix."""


class TraceError(TprofError, ValueError):
    """A Chrome trace file can't be read."""


class CaptureError(TprofError, RuntimeError):
    """Profiling could not run (a profiler already active, ``tprof`` used twice, ...)."""
