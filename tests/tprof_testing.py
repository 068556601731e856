"""Helpers the test files share (tests/ is on sys.path through its conftest.py)."""

from __future__ import annotations

import contextlib
import errno
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

from tprof_engine.decide import judge
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.environment import Fingerprint
from tprof_engine.model.records import (
    KIND_ANNOTATION,
    KIND_DEVICE,
    KIND_OP,
    KIND_SYNC,
    EventArrays,
    OpTable,
)
from tprof_engine.model.verdicts import TestVerdict
from tprof_engine.store import paths

# --------------------------------------------------------------------------- pytester runs

# A conftest for suites whose tests assert timing verdicts of planted 8x slowdowns (against
# 100 % floors): no round is ever judged disturbed, so a neighbour on a shared runner (another
# job, the other xdist worker of this suite) can't turn their verdicts into "machine busy".
# The busy-machine rule has tests of its own (tests/profiler/decide/test_busy.py); these control the
# readings they depend on.  Loaded by the suite's processes and their fresh-process children.
QUIET_READINGS_CONFTEST = """
import pytest

from tprof_engine.decide.timing import busy


@pytest.fixture(autouse=True)
def _rounds_never_judged_disturbed(monkeypatch):
    monkeypatch.setattr(busy, "_masks", lambda table, rule, reference=None: None)
"""


def with_quiet_readings(pytester: pytest.Pytester) -> pytest.Pytester:
    """The pytester project with :data:`QUIET_READINGS_CONFTEST` as its conftest."""
    pytester.makeconftest(QUIET_READINGS_CONFTEST)
    return pytester


def small_args(
    *, rounds: int = 4, warmup: int = 1, min_round_us: int | None = 0, keep_cache: bool = False
) -> tuple[str, ...]:
    """Options for a run of tiny bodies that makes no timing claim: few rounds, no calibration
    of iterations (``min_round_us=None`` keeps it), no cache files unless ``keep_cache``."""
    args = () if keep_cache else ("-p", "no:cacheprovider")
    args += (f"--tprof-rounds={rounds}", f"--tprof-warmup={warmup}")
    if min_round_us is not None:
        args += (f"--tprof-min-round-us={min_round_us}",)
    return args


SMALL = small_args()


class Suite:
    """One pytester project with its baseline and trace folders."""

    def __init__(self, pytester: pytest.Pytester) -> None:
        self.pytester = pytester
        self.base = pytester.path / "baselines"
        self.traces = pytester.path / "traces"
        self._env_dir: Path | None = None

    def args(self, *args: str, base: Path | None = None, traces: Path | None = None) -> list[str]:
        return [
            *SMALL,
            f"--tprof-baseline-dir={base or self.base}",
            f"--tprof-trace-dir={traces or self.traces}",
            *args,
        ]

    def run(
        self, *args: str, base: Path | None = None, traces: Path | None = None, **kwargs: Any
    ) -> pytest.RunResult:
        """An in-process run of ``SMALL`` and the project's folders, then ``args``."""
        return self.pytester.runpytest(*self.args(*args, base=base, traces=traces), **kwargs)

    @property
    def env_dir(self) -> Path:
        """This environment's folder: the only one after the first save."""
        if self._env_dir is None:
            [self._env_dir] = [d for d in self.base.iterdir() if d.is_dir()]
        return self._env_dir

    def path_of(self, nodeid: str) -> Path:
        return paths.baseline_path(self.base, self.env_dir.name, nodeid)

    def contents(self) -> dict[Path, bytes]:
        """Every file under the baseline folder and its bytes."""
        return {p: p.read_bytes() for p in self.base.rglob("*") if p.is_file()}

    def snapshot(self) -> dict[Path, tuple[bytes, int]]:
        """Every file under the baseline folder, its bytes and its modification time."""
        return {
            p: (p.read_bytes(), p.stat().st_mtime_ns) for p in self.base.rglob("*") if p.is_file()
        }


def summary(result: pytest.RunResult) -> list[str]:
    """The lines of the tprof section of the terminal summary."""
    lines = result.outlines
    start = next(i for i, line in enumerate(lines) if line.strip("= ") == "tprof")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("===")), len(lines))
    return lines[start + 1 : end]


def line(verdict: str, nodeid: str, rest: str) -> str:
    """A summary line as the terminal writes it."""
    return f"{verdict.upper():<12} {nodeid} | {rest}"


# --------------------------------------------------------------------------- real GPU traces

GPU_TRACES = Path(__file__).parent / "data" / "gpu-traces"


def gpu_trace(name: str) -> Path:
    """One of the traces recorded on real GPUs (tests/data/gpu-traces/README.md).

    A missing one is an error: these are part of the repository, not an optional extra.
    """
    path = GPU_TRACES / name
    if not path.is_file():
        raise FileNotFoundError(f"{path}: test data missing from the checkout; restore it from git")
    return path


# --------------------------------------------------------------------------- faults


class FaultyOs:
    """``os`` for one module under test (set as its ``os`` attribute), with some calls replaced."""

    def __init__(self, **replaced: Any) -> None:
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        return self._replaced.get(name, getattr(os, name))


def enospc(*args: Any) -> Any:
    """A call on a full disk."""
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@contextlib.contextmanager
def deadline(seconds: int) -> Iterator[None]:
    """Fail instead of hanging: a blocked open() or read() is interrupted by SIGALRM."""

    def expired(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"still blocked after {seconds} s")

    before = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)


# --------------------------------------------------------------------------- events

CPU, STREAM, STREAM2 = 1, 100, 101
# name, start, end, kind, thread, corr (ops), link (device), bytes, launch start
Row = tuple[str, int, int, int, int, int, int, int, int]


def op(name: str, start: int, end: int, corr: int) -> Row:
    return (name, start, end, KIND_OP, CPU, corr, 0, 0, 0)


def step(n: int, start: int, end: int) -> Row:
    return (f"ProfilerStep#{n}", start, end, KIND_ANNOTATION, CPU, 0, 0, 0, 0)


def dev(name: str, start: int, end: int, link: int, *, launch: int = 0, nbytes: int = 0,
        stream: int = STREAM) -> Row:  # fmt: skip
    return (name, start, end, KIND_DEVICE, stream, 0, link, nbytes, launch)


def sync(name: str, start: int, end: int, link: int) -> Row:
    return (name, start, end, KIND_SYNC, STREAM, 0, link, 0, 0)


def event_arrays(rows: list[Row]) -> EventArrays:
    names = tuple(dict.fromkeys(r[0] for r in rows))

    def col(k: int) -> np.ndarray:
        return np.asarray([r[k] for r in rows], dtype=np.int64)

    return EventArrays(
        names=names,
        name_idx=np.asarray([names.index(r[0]) for r in rows], dtype=np.int64),
        start_ns=col(1),
        end_ns=col(2),
        thread=col(4),
        kind=col(3).astype(np.int8),
        corr=col(5),
        link=col(6),
        nbytes=col(7),
        launch_ns=col(8),
    )


# --------------------------------------------------------------------------- op tables

ROUNDS = 20


def table(
    ops: dict[str, tuple[float, int]],
    *,
    seed: int,
    cv: float = 0.03,
    scale: float = 1.0,
    probe: float = 1000.0,
    device: dict[str, float] | None = None,
    rounds: int = ROUNDS,
    device_cv: float | None = None,
    device_scale: float | None = None,
    device_probe: float = 500.0,
) -> OpTable:
    """An op table with log-normal per-round noise; ``ops`` maps name → (median µs, calls).

    ``device`` maps name → median device µs; its noise and scale are the CPU's unless
    ``device_cv`` and ``device_scale`` say otherwise (kernels vary less than the host)."""
    rng = np.random.default_rng(seed)
    names = tuple(sorted(ops))
    k = len(names)

    def noisy(values: np.ndarray, cv: float, scale: float) -> np.ndarray:
        return values[:, None] * scale * np.exp(rng.normal(0, cv, (values.size, rounds)))

    cpu = noisy(np.array([ops[n][0] for n in names], dtype=float), cv, scale)
    dev_arr = np.zeros((k, rounds))
    if device is not None:
        dev_arr = noisy(
            np.array([device.get(n, 0.0) for n in names], dtype=float),
            cv if device_cv is None else device_cv,
            scale if device_scale is None else device_scale,
        )
    return OpTable(
        names=names,
        calls=np.array([[ops[n][1]] * rounds for n in names], dtype=np.int64).reshape(k, rounds),
        self_cpu_us=cpu,
        total_cpu_us=cpu,
        self_device_us=dev_arr,
        total_device_us=dev_arr,
        wall_us=cpu.sum(axis=0),
        probe_cpu_us=probe * scale * np.exp(rng.normal(0, cv, rounds)),
        probe_device_us=np.full(rounds, device_probe) if device is not None else np.zeros(rounds),
        has_device=device is not None,
    )


def open_form(saved: str | Path) -> dict[str, Any]:
    """A saved baseline's document in its open form (``schema_version`` 2), whatever form the
    file holds: tests edit that form to damage a file as a user's editor would."""
    import json

    from tprof_engine.model.errors import BaselineError
    from tprof_engine.store import packing

    text = Path(saved).read_text(encoding="utf-8") if isinstance(saved, Path) else saved
    doc = json.loads(text)
    if doc.get("schema_version") != packing.PACKED_VERSION:
        return dict(doc)
    return packing.unpacked(doc, lambda msg, fix="": BaselineError(msg))


def paired_verdict(base: OpTable, head: OpTable) -> TestVerdict:
    """``tprof ab``'s verdict of ``head``'s rounds against ``base``'s, paired round by round,
    under the default rule, both sides recorded on one CPU machine."""
    machine = {"torch": "2.13.0", "device": "cpu", "cpu_model": "Test CPU"}
    side = {
        "fingerprint": Fingerprint(hard=machine),
        "protocol": {"rounds": 20, "warmup": 1, "iterations": 1, "activities": ["cpu"]},
    }
    return judge.judge(
        judge.Recorded(tables=(base,), **side),  # type: ignore[arg-type]
        judge.Recorded(tables=(head,), **side),  # type: ignore[arg-type]
        Rule(),
        paired=True,
    )
