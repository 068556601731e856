"""The engine's one door into torch's private and version-dependent API.

Every call that differs between torch releases goes through here: kineto's raw events and
their accessors, the profiler's experimental config, ``FunctionEvent``'s device time, the
module tracker, autograd's sequence numbers, dispatch-key checks, the flop counter's
formulas, Dynamo's compile log and call hook, inductor's lazy import, and the warnings torch
raises from tprof's own use of its profiler.  Each feature is detected once per process (per
event class, for events), and a missing one has a fallback or a header note saying what is
lost (:func:`notes`), never an ``AttributeError`` inside a test.

What differs among the supported releases (``tprof_engine.torch_support``) is data here, read
off each release's own classes (``benchmarks/torch_shape.py``; the shapes are kept under
``tests/data/torch-releases/``, which the tests read): :data:`OFFERS` says, for each thing a
release may lack, what tprof calls it, the first release that has it, and what a run without it
reads instead; :data:`CORE_ACCESSORS`, :data:`EVENT_ACCESSORS`, :data:`CONFIG_OPTIONS` and
:data:`DEVICE_TIME_NAMES` name what is looked for.  Each is detected once per process by what
the classes really offer (a patch release or a custom build may differ from its number), and
each one missing is one run-header line naming the release and the feature (:func:`notes`).

torch 2.11's profiler warns, once per process, that it clears events at the end of each
cycle: :func:`own_warnings_quiet` keeps that and every other warning of tprof's own profiler
calls away from the user's warning filters.
"""

from __future__ import annotations

import contextlib
import functools
import re
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.flop_counter import flop_registry, mm_flop, sdpa_flop_count
from torch.utils.module_tracker import ModuleTracker

OpOverload = torch._ops.OpOverload  # what a dispatch mode is handed for each op

__all__ = [
    "FEATURES",
    "OFFERS",
    "DispatchMode",
    "EventFeatures",
    "Features",
    "ModuleTracker",
    "Offer",
    "OpOverload",
    "TorchDispatchMode",
    "autograd_sequence_nr",
    "config_options",
    "copy_bytes",
    "current_autograd_node",
    "detect",
    "device_activities",
    "device_activity",
    "dynamo_compile_log",
    "dynamo_eval_frame",
    "eager_run_quiet",
    "event_features",
    "experimental_config",
    "flop_registry",
    "function_event_device_us",
    "has_composite_kernel",
    "inductor_left_unloaded",
    "kineto_events",
    "mm_flop",
    "node_sequence_nr",
    "notes",
    "own_warnings_quiet",
    "profiler_enabled",
    "sdpa_flop_count",
]

# What the fast reduction reads of every event; without one of them it falls back to
# ``key_averages()``.
CORE_ACCESSORS = (
    "name",
    "start_ns",
    "end_ns",
    "start_thread_id",
    "end_thread_id",
    "device_type",
    "correlation_id",
    "linked_correlation_id",
    "is_user_annotation",
    "is_async",
)
# The accessors of the features a release may lack, by feature.
EVENT_ACCESSORS = {
    "activity_type": "activity_type",
    "metadata_json": "metadata_json",
    "hidden_flag": "is_hidden_event",
}
CONFIG_OPTIONS = ("enable_cuda_sync_events", "expose_kineto_event_metadata")
# FunctionEvent's self device time, newest name first (2.4 renamed cuda to device).
DEVICE_TIME_NAMES = ("self_device_time_total", "self_cuda_time_total")


@dataclass(frozen=True, slots=True)
class Offer:
    """Something tprof reads that not every torch release offers."""

    key: str
    feature: str  # what the run header calls it
    since: str  # the first release that has it, read off the releases' classes
    device_runs: bool  # only a run that profiles a device uses it
    without: str  # what a run without it reads instead, or loses ("": nothing)


# The newest release the table was read off (tprof_engine.torch_support.VERIFIED's last).
NEWEST_KNOWN = (2, 14)

OFFERS: tuple[Offer, ...] = (
    Offer(
        "raw_events",
        "raw kineto events",
        "2.6",
        False,
        "ops are read through key_averages() (slower; no device table)",
    ),
    Offer(
        "activity_type",
        "kineto events' activity type",
        "2.12",
        True,
        "device events are told apart by name (kernel, Memcpy, Memset, sync)",
    ),
    Offer("metadata", "kineto event metadata", "2.10", True, "copies read 0 bytes"),
    Offer(
        "sync_events",
        "CUDA sync events",
        "2.6",
        True,
        "which op made the host wait is not shown",
    ),
    Offer("hidden_flag", "kineto's hidden-event flag", "2.9", False, ""),
)


@dataclass(frozen=True, slots=True)
class EventFeatures:
    """What one ``_KinetoEvent`` class offers."""

    core: bool  # every accessor of CORE_ACCESSORS
    activity_type: bool
    metadata_json: bool
    hidden_flag: bool


@functools.cache
def event_features(event_cls: type) -> EventFeatures:
    """What ``event_cls`` offers, read once per class."""

    def has(name: str) -> bool:
        return callable(getattr(event_cls, name, None))

    return EventFeatures(
        core=all(map(has, CORE_ACCESSORS)),
        **{field: has(accessor) for field, accessor in EVENT_ACCESSORS.items()},
    )


def config_options(config_cls: Any) -> tuple[str, ...]:
    """Which of :data:`CONFIG_OPTIONS` ``config_cls`` accepts (each tried alone)."""
    if config_cls is None:
        return ()
    found = []
    for option in CONFIG_OPTIONS:
        try:
            config_cls(**{option: False})
        except TypeError:
            continue
        found.append(option)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class Features:
    """What this process's torch offers tprof, detected once."""

    torch: str
    events: EventFeatures | None  # None: no ``_KinetoEvent`` at all
    config: tuple[str, ...]  # the experimental config's options tprof uses
    device_time: str  # FunctionEvent's self device time attribute

    @property
    def raw_events(self) -> bool:
        return self.events is not None and self.events.core

    @property
    def offered(self) -> frozenset[str]:
        """The keys of :data:`OFFERS` this torch has."""
        ev = self.events
        has = {
            "raw_events": self.raw_events,
            "activity_type": ev is not None and ev.activity_type,
            "metadata": ev is not None
            and ev.metadata_json
            and "expose_kineto_event_metadata" in self.config,
            "sync_events": "enable_cuda_sync_events" in self.config,
            "hidden_flag": ev is not None and ev.hidden_flag,
        }
        return frozenset(key for key, offered in has.items() if offered)


def detect() -> Features:
    try:
        from torch._C._autograd import _KinetoEvent
    except ImportError:
        events = None
    else:
        events = event_features(_KinetoEvent)
    from torch.autograd.profiler_util import FunctionEvent

    device_time = next((a for a in DEVICE_TIME_NAMES if hasattr(FunctionEvent, a)), "")
    config = getattr(getattr(torch._C, "_profiler", None), "_ExperimentalConfig", None)
    return Features(
        torch=str(torch.__version__),
        events=events,
        config=config_options(config),
        device_time=device_time,
    )


FEATURES = detect()


def notes(features: Features, *, cuda: bool) -> tuple[str, ...]:
    """The run header's lines on what this torch lacks and what that costs, one per feature
    the run would use (none when it lacks nothing)."""
    v, have = features.torch, features.offered
    lacking = tuple(
        f"not available with torch {v}: {o.feature} (torch {o.since} and later): {o.without}"
        for o in OFFERS
        if o.key not in have and o.without and (cuda or not o.device_runs)
    )
    return _newer(v) + lacking


def _newer(version: str) -> tuple[str, ...]:
    """The line for a torch newer than every release the table was read off."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found.group(1)), int(found.group(2))) <= NEWEST_KNOWN:
        return ()
    newest = ".".join(map(str, NEWEST_KNOWN))
    return (
        f"torch {version} is newer than the releases pytest-tprof was verified on (2.6 to "
        f"{newest}): what its profiler changed reads as missing here, or not at all",
    )


# ------------------------------------------------------------------ the profiler session


@contextlib.contextmanager
def own_warnings_quiet() -> Iterator[None]:
    """Keep the warnings torch raises from tprof's own profiler calls (start, stop, export,
    reading events) away from the user's filters: a suite with ``filterwarnings = error``
    must not fail on them.  Only wrap tprof's calls: the body runs outside.

    In the main thread only: the filters are the process's, so another thread (the trace
    writer's) changing them would hide the test's own warnings, or lose pytest's filters of
    the test running beside it.  A warning there goes through the filters in force; one they
    make an error fails that trace's write, never the test."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


@contextlib.contextmanager
def eager_run_quiet() -> Iterator[None]:
    """Run compiled code eagerly (the census's dispatch mode, ``force_eager``) without torch
    2.12's warning that a ``fullgraph=True`` function found no compiled frames: tprof made it
    so, and under ``filterwarnings = error`` the warning would stop the census."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.compile with fullgraph=True found no")
        yield


@contextlib.contextmanager
def inductor_left_unloaded() -> Iterator[None]:
    """Start a session without importing ``torch._inductor`` (about 1 s, once per process).

    torch's profiler asks ``hasattr(torch, "_inductor")`` when it starts, to read inductor's
    CUDA-graph setting; torch's lazy module attribute imports the package to answer.  Where
    inductor isn't loaded yet, nothing has compiled with it, so its setting can't be on: for
    the start alone, ``torch._inductor`` reads as absent (not imported), as it would have
    before torch made it lazy.  Once inductor is loaded the question is answered as usual.
    """
    lazy = torch.__dict__.get("__getattr__")
    if "torch._inductor" in sys.modules or not callable(lazy):
        yield
        return

    def without_inductor(name: str) -> Any:
        if name == "_inductor":
            raise AttributeError(name)
        return lazy(name)

    torch.__dict__["__getattr__"] = without_inductor
    try:
        yield
    finally:
        torch.__dict__["__getattr__"] = lazy


def experimental_config(cuda: bool, features: Features = FEATURES) -> Any:
    """Kineto's sync events (which op made the host wait) and each copy's metadata (its
    bytes), on device runs only, with the options this torch has; None when it has neither."""
    if not cuda or not features.config:
        return None
    config: Any = torch._C._profiler._ExperimentalConfig
    return config(**dict.fromkeys(features.config, True))


def profiler_enabled() -> bool:
    """Whether a torch profiler (ours or the user's) is collecting right now."""
    return bool(torch.autograd.profiler._is_profiler_enabled)


# ------------------------------------------------------------------ reading events


def kineto_events(prof: Any) -> Sequence[Any]:
    """The session's raw kineto events (a profiler that collected none gives none)."""
    results = getattr(prof.profiler, "kineto_results", None)
    with own_warnings_quiet():
        return [] if results is None else results.events()


# kineto's names of its CUDA synchronization activities (``cuda_sync``).
SYNC_NAMES = frozenset({"Context Sync", "Stream Sync", "Event Sync", "Stream Wait Event"})


def device_activities(
    events: Sequence[Any],
    name_idx: Any,
    on_device: Any,
    *,
    kind_of: Callable[[Any], str] | None = None,
) -> Any:
    """Each event's activity type as kineto names it (``kernel``, ``gpu_memcpy``,
    ``gpu_memset``, ``cuda_sync``, …) as a numpy object array; host events read ``""``.

    A name is one kind of device activity, so each distinct name's first device event is
    read and every event gets its name's: through ``activity_type`` where the event class has
    it, else (torch 2.11) from its name and sync metadata; ``kind_of`` reads one event instead
    (a device backend's ``activity_kind``)."""
    out = np.full(len(events), "", dtype=object)
    dev = np.flatnonzero(on_device)
    if dev.size == 0:
        return out
    cls: Any = type(events[0])
    of_name = kind_of or (_by_type if event_features(cls).activity_type else _by_name)
    names, first = np.unique(name_idx[dev], return_index=True)
    kinds = np.empty(int(names[-1]) + 1, dtype=object)
    kinds[names] = [of_name(events[i]) for i in dev[first].tolist()]
    out[dev] = kinds[name_idx[dev]]
    return out


def device_activity(event: Any) -> str:
    """One device event's activity type, as :func:`device_activities` reads it."""
    cls: Any = type(event)
    return _by_type(event) if event_features(cls).activity_type else _by_name(event)


def _by_type(event: Any) -> str:
    return str(event.activity_type())


def _by_name(event: Any) -> str:
    name = str(event.name())
    if name in SYNC_NAMES or '"cuda_sync_kind"' in _metadata(event):
        return "cuda_sync"
    if name.startswith("Memcpy"):
        return "gpu_memcpy"
    if name.startswith("Memset"):
        return "gpu_memset"
    return "kernel"


def _metadata(event: Any) -> str:
    read = getattr(event, "metadata_json", None)
    return str(read()) if callable(read) else ""


_BYTES = re.compile(r'"bytes":\s*(\d+)')


def copy_bytes(event: Any) -> int:
    """A copy's or fill's bytes, from kineto's metadata; 0 where this torch has none."""
    found = _BYTES.search(_metadata(event))
    return int(found.group(1)) if found else 0


def function_event_device_us(event: Any, features: Features = FEATURES) -> tuple[float, float]:
    """A ``FunctionEvent``'s self and total device µs (0, 0 where this torch has neither)."""
    if not features.device_time:
        return 0.0, 0.0
    total = features.device_time.removeprefix("self_")
    return float(getattr(event, features.device_time)), float(getattr(event, total))


# ------------------------------------------------------------------ autograd and dispatch


class DispatchMode(TorchDispatchMode):
    """torch's dispatch mode without Dynamo's guard: torch wraps a mode's
    ``__torch_dispatch__`` in ``torch._dynamo.disable`` unless the mode says not to, which
    imports Dynamo (about a second) and costs a frame switch per op.  The census compiles
    nothing while it runs (``census.compiled_code_runs_eagerly``), so it protects nothing
    there.  A release that asks no such question reads the method as any other."""

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        return False


def autograd_sequence_nr() -> int:
    """The sequence number the next autograd node will get."""
    return int(torch._C._autograd._get_sequence_nr())


def current_autograd_node() -> Any:
    """The autograd node running now (None outside backward)."""
    return torch._C._current_autograd_node()


def node_sequence_nr(node: Any) -> int:
    return int(node._sequence_nr())


_CIA = torch._C.DispatchKey.CompositeImplicitAutograd


def has_composite_kernel(func: Any) -> bool:
    """Whether an op overload has a CompositeImplicitAutograd kernel (it can decompose)."""
    return _CIA in func.py_kernels or bool(
        torch._C._dispatch_has_kernel_for_dispatch_key(func.name(), _CIA)  # type: ignore[no-untyped-call]
    )


# ------------------------------------------------------------------ torch.compile


def dynamo_compile_log() -> tuple[list[Any], list[Any]]:
    """Dynamo's graph-break reasons and guard failures so far; empty when Dynamo was never
    imported (nothing was compiled) or keeps no such log."""
    if "torch._dynamo" not in sys.modules:
        return [], []
    from torch._dynamo import utils

    breaks = list(getattr(utils, "graph_break_reasons", []))
    failed = list(getattr(utils, "guard_failures", {}).values())
    guards = [g for failures in failed for g in failures]
    return breaks, guards


def dynamo_eval_frame() -> Any:
    """Dynamo's ``eval_frame`` module when Dynamo is loaded (it is by the first
    ``torch.compile``), else None: importing it would cost a second."""
    return sys.modules.get("torch._dynamo.eval_frame")
