"""The noise model of the detection simulation (README.md says what it is): its fixed parts, a
scenario of the grid, the layout of a test's ops, and the drawing of a process's captures into
sessions and op tables."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from tprof_engine.model.arrays import FloatArray
from tprof_engine.model.records import OpTable

SEED = 20240611
SLOWDOWNS = (0.05, 0.10, 0.15, 0.25)
OP_TARGETS = ("largest", "~10%")  # which op is slowed in the power trials

# Fixed parts of the noise model (the scenario grid varies the rest).
MIN_OP_US = 10.0
MAX_OP_US = 2000.0
ROUND_SIGMA = 0.02  # shared per-round factor (log SD) hitting every op of a round
OUTLIER_RATE = 0.01  # share of op samples hit by an outlier
OUTLIER_FACTOR = 3.0
PROBE_US = 1000.0
PROBE_NOISE = 0.03  # the probe's own per-round log SD
PROBE_ROUND_SHARE = 0.5  # part of the round factor the probe sees (it runs just before the body)
PROBE_TRACKING = 0.5  # the probe follows the machine factor with a log error of SD drift × this
HEAVY_PROB = 0.3  # heavy family: chance that a session runs in the slow memory-bound mode
HEAVY_FACTOR = 1.6
HEAVY_PROBE_SHARE = 0.5  # the probe sees HEAVY_FACTOR ** this of the slow mode (1.26×)


@dataclass(frozen=True, slots=True, kw_only=True)
class Scenario:
    """One cell of the grid: a test's shape, its noise, and how many trials to run."""

    ops: int = 8
    cv: float = 0.05  # per-op per-round coefficient of variation
    drift: float = 0.02  # per-session machine factor, log SD
    rounds: int = 20
    sessions: int = 3  # baseline sessions (each its own drift); the current run is one more
    heavy: bool = False  # memory-bound family: sessions bimodal ~1.0× / ~1.6×
    # Per-op session drift (log SD), independent per op: the machine moving some ops more than
    # others (memory-bound vs compute-bound), which neither the probe nor the rest of the test
    # tracks.  0 in the main grid; the "op drift" cells set it.
    op_drift: float = 0.0
    # The probe's own session drift (log SD), which the ops don't share: a probe that meets
    # another cache or allocator state from process to process (an HF Llama generate test's
    # moved -19 to +13 % while its ops held still).  0 in the main grid; the "probe wander"
    # cell sets it.
    probe_wander: float = 0.0
    unchanged_trials: int = 2000
    power_trials: int = 200  # per slowdown and op; the first trials of the unchanged ones

    @property
    def key(self) -> str:
        """Names the sample stream: the same scenario draws the same samples in every run."""
        return (
            f"K{self.ops} cv{self.cv:g} d{self.drift:g} n{self.rounds} S{self.sessions}"
            f" heavy{int(self.heavy)}"
            + (f" opd{self.op_drift:g}" if self.op_drift else "")
            + (f" pw{self.probe_wander:g}" if self.probe_wander else "")
        )

    @property
    def label(self) -> str:
        drift = "heavy" if self.heavy else f"{self.drift:.0%}"
        if self.op_drift:
            drift = f"{drift}+{self.op_drift:.0%}op"
        if self.probe_wander:
            drift = f"{drift}+{self.probe_wander:.0%}pr"
        shape = f"K={self.ops:<2} CV {self.cv:.0%} drift {drift:<5}"
        return f"{shape} n={self.rounds} S={self.sessions}"


@dataclass(frozen=True, slots=True)
class Layout:
    """The test's ops: per-op base µs per round, log-spaced from MIN_OP_US to MAX_OP_US."""

    base_us: FloatArray
    names: tuple[str, ...]

    @classmethod
    def for_ops(cls, k: int) -> Layout:
        base = np.exp(np.linspace(math.log(MIN_OP_US), math.log(MAX_OP_US), k))
        return cls(base_us=base, names=tuple(f"aten::op{i:02d}" for i in range(k)))

    @property
    def shares(self) -> FloatArray:
        shares: FloatArray = self.base_us / self.base_us.sum()
        return shares

    def target(self, which: str) -> int:
        """Index of the slowed op: the largest one, or the one carrying closest to 10 %."""
        if which == "largest":
            return int(np.argmax(self.base_us))
        return int(np.argmin(np.abs(self.shares - 0.10)))


@dataclass(frozen=True, slots=True)
class Session:
    """One profiled session's raw samples: op µs (ops × rounds) and probe µs per round."""

    op_us: FloatArray
    probe_us: FloatArray


@dataclass(frozen=True, slots=True)
class Process:
    """What one pytest process keeps for every capture it takes: the machine's drift as it
    ran, how closely the probe tracked it, and whether it ran in the slow memory-bound mode."""

    machine: float
    tracking: float
    heavy: float
    probe: float = 0.0  # the probe's own drift in this process (log), which the ops don't share


def draw_process(rng: np.random.Generator, scen: Scenario) -> Process:
    machine = rng.normal(0.0, scen.drift)
    tracking = rng.normal(0.0, scen.drift * PROBE_TRACKING)
    heavy = math.log(HEAVY_FACTOR) if scen.heavy and rng.random() < HEAVY_PROB else 0.0
    # drawn last and only where the scenario has it, so other scenarios' streams stay the same
    probe = rng.normal(0.0, scen.probe_wander) if scen.probe_wander else 0.0
    return Process(machine=machine, tracking=tracking, heavy=heavy, probe=probe)


def capture(rng: np.random.Generator, scen: Scenario, layout: Layout, proc: Process) -> Session:
    """One capture's rounds in ``proc``: its own per-round noise over the process's parts."""
    k, n = scen.ops, scen.rounds
    per_round = rng.normal(0.0, ROUND_SIGMA, n)
    sigma = math.sqrt(math.log1p(scen.cv**2))
    log_ops = proc.machine + proc.heavy + per_round[None, :] + rng.normal(0.0, sigma, (k, n))
    op_us = layout.base_us[:, None] * np.exp(log_ops)
    op_us[rng.random((k, n)) < OUTLIER_RATE] *= OUTLIER_FACTOR
    log_probe = (
        proc.machine
        + proc.probe
        + proc.tracking
        + HEAVY_PROBE_SHARE * proc.heavy
        + PROBE_ROUND_SHARE * per_round
        + rng.normal(0.0, PROBE_NOISE, n)
    )
    return Session(op_us=op_us, probe_us=PROBE_US * np.exp(log_probe))


def op_drift(rng: np.random.Generator, scen: Scenario) -> FloatArray:
    """Each op's own session factor (1.0 each without per-op drift)."""
    if not scen.op_drift:
        return np.ones(scen.ops)
    drift: FloatArray = np.exp(rng.normal(0.0, scen.op_drift, scen.ops))
    return drift


def with_op_drift(session: Session, factors: FloatArray) -> Session:
    return Session(op_us=session.op_us * factors[:, None], probe_us=session.probe_us)


def draw_session(rng: np.random.Generator, scen: Scenario, layout: Layout) -> Session:
    """Samples of one session under the model (see the module constants and README.md): a
    process and its one capture; the per-op drift drawn last, so the other parts of a trial's
    stream stay the same."""
    session = capture(rng, scen, layout, draw_process(rng, scen))
    return with_op_drift(session, op_drift(rng, scen)) if scen.op_drift else session


def to_table(session: Session, layout: Layout) -> OpTable:
    """A real OpTable: calls constant (1 per op per round), CPU only."""
    k, n = session.op_us.shape
    zeros = np.zeros((k, n))
    return OpTable(
        names=layout.names,
        calls=np.ones((k, n), dtype=np.int64),
        self_cpu_us=session.op_us,
        total_cpu_us=session.op_us,
        self_device_us=zeros,
        total_device_us=zeros,
        wall_us=session.op_us.sum(axis=0) + session.probe_us,
        probe_cpu_us=session.probe_us,
        probe_device_us=np.zeros(n),
    )


def slowed(session: Session, op: int, factor: float) -> Session:
    """The same session with one op's times scaled by ``factor`` (the probe untouched)."""
    op_us = session.op_us.copy()
    op_us[op] *= factor
    return Session(op_us=op_us, probe_us=session.probe_us)
