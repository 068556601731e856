"""The verdict vocabulary and the verdict records: one place for the words and their orders.

A test gets one :data:`TestWord`; each op of each family gets one :data:`OpWord`.  Every
report (terminal, JSON, Markdown, HTML, the CLI) renders these records; none re-types a word.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any, ClassVar, Final, Literal

from tprof_engine.model.device_delta import DeviceRowDelta
from tprof_engine.model.family_specs import FAMILIES
from tprof_engine.model.work_verdict import WorkVerdict

TestWord = Literal[
    "regressed",
    "error",
    "changed",
    "incomparable",
    "inconclusive",
    "improved",
    "no-baseline",
    "not-saved",
    "unchanged",
    "saved",
]


OpWord = Literal[
    "regressed",
    "new",
    "calls-changed",
    "removed",
    "improved",
    "too-noisy",
    "not-gated",
    "unchanged",
]


REGRESSED: Final = "regressed"
IMPROVED: Final = "improved"
UNCHANGED: Final = "unchanged"
CHANGED: Final = "changed"
INCONCLUSIVE: Final = "inconclusive"
INCOMPARABLE: Final = "incomparable"
NO_BASELINE: Final = "no-baseline"
ERROR: Final = "error"
SAVED: Final = "saved"
NOT_SAVED: Final = "not-saved"  # a --tprof-save run that didn't record the test (says why)


# Op verdicts beyond the test verdicts.
NEW: Final = "new"
REMOVED: Final = "removed"
CALLS_CHANGED: Final = "calls-changed"
NOT_GATED: Final = "not-gated"
TOO_NOISY: Final = "too-noisy"


# Most urgent first: the order of every listing of tests, and of families combined into a test.
TEST_ORDER: Final[tuple[TestWord, ...]] = (
    REGRESSED,
    ERROR,
    CHANGED,
    INCOMPARABLE,
    INCONCLUSIVE,
    IMPROVED,
    NO_BASELINE,
    NOT_SAVED,
    UNCHANGED,
    SAVED,
)


# Test verdicts that fail the test.
FAILING: Final = frozenset({REGRESSED, ERROR})


# Test verdicts that say why in the one-line summary.
EXPLAINED: Final = frozenset({ERROR, INCOMPARABLE, INCONCLUSIVE, NO_BASELINE, NOT_SAVED})


# Op verdicts a failure shows: regressions and structural changes.
FLAGGED_OPS: Final = frozenset({REGRESSED, NEW, REMOVED, CALLS_CHANGED})
STRUCTURAL_OPS: Final = frozenset({NEW, REMOVED, CALLS_CHANGED})


# Within a family's op rows: regressions, then added work, then removed work, then the rest.
_OP_RANK: Final[Mapping[str, int]] = {REGRESSED: 0, NEW: 1, CALLS_CHANGED: 1, REMOVED: 2}


def verdict_rank(word: str) -> int:
    """Position of a test verdict in :data:`TEST_ORDER` (unknown words last)."""
    return TEST_ORDER.index(word) if word in TEST_ORDER else len(TEST_ORDER)  # type: ignore[arg-type]


def op_rank(word: str) -> int:
    """Position of an op verdict among a family's rows (flagged first)."""
    return _OP_RANK.get(word, 3)


def json_number(v: Any) -> Any:
    """A value as the JSON report stores it: finite floats to 6 significant digits, else None.

    Significant digits, not decimals: tiny p-values must not become 0.
    """
    if isinstance(v, float):
        if math.isnan(v) or math.isinf(v):
            return None
        return float(f"{v:.6g}")
    if isinstance(v, tuple):
        return list(v)
    return v


@dataclass(frozen=True, slots=True, kw_only=True)
class OpVerdict:
    """One op of one family: medians per round in µs (probe units), p adjusted by Holm."""

    op: str
    family: str
    verdict: OpWord
    baseline_median_us: float
    current_median_us: float
    delta_us: float
    delta_pct: float
    p_value: float | None
    calls_baseline: int
    calls_current: int
    share: float
    floor_pct: float
    mde_pct: float | None
    gated: bool
    note: str = ""
    # The op's time over the rest of its test, against the baseline's (material ops only).
    vs_rest_pct: float | None = None
    vs_rest_floor_pct: float | None = None
    vs_rest_mde_pct: float | None = None  # the ratio's minimum detectable change
    # Regressed on the op-against-the-rest route alone (not in probe units).
    vs_rest_only: bool = False
    # The work census's op this op runs inside, when the census doesn't name it itself
    # (``aten::mkldnn_convolution`` runs inside ``aten::convolution``); None otherwise.
    inside: str | None = None

    @property
    def flagged(self) -> bool:
        return self.verdict in FLAGGED_OPS

    def to_dict(self) -> dict[str, Any]:
        return {k: json_number(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OpVerdict:
        def num(v: Any) -> float:
            return float("nan") if v is None else float(v)

        fields = {k: v for k, v in d.items() if k in _OP_FIELDS}
        fields.setdefault("gated", False)  # reports before op rows carried it
        for k in ("baseline_median_us", "current_median_us", "delta_us", "delta_pct"):
            fields[k] = num(d[k])
        fields["share"] = num(d["share"])
        fields["floor_pct"] = num(d["floor_pct"])
        return cls(**fields)


@dataclass(frozen=True, slots=True, kw_only=True)
class FamilyResult:
    """Test-level figures for one family (``cpu`` or ``cuda``)."""

    family: str
    verdict: TestWord
    baseline_total_us: float
    current_total_us: float
    delta_pct: float
    p_value: float
    floor_pct: float
    floor_source: str
    mde_pct: float
    timing_regressed: bool
    op_gate: tuple[str, ...]  # ops that fail the test on their own
    structure_added_us: float
    structure_regressed: bool
    reasons: tuple[str, ...]
    # host: the ops before which the time outside any op grew, largest first
    grew_before: tuple[str, ...] = ()
    # Whether this family decides the test's verdict, or is only reported beside it
    # (model.family_specs: a device test's CPU time and idle time report).
    gates: bool = True
    too_noisy: bool = False  # its floor or detectable effect too wide to vouch for anything
    # Judged in raw µs though it has a drift probe: its baseline sessions agreed better
    # without it (decide.timing.samples.probe_narrows).
    raw_us: bool = False
    # What turns its change into one in the other units (raw µs where judged in probe units,
    # and the other way round; decide.timing.units.other_units_follow); 1 with one kind.
    to_other_units: float = 1.0

    @property
    def fails(self) -> bool:
        """It fails the test: a structural regression (calls, host waits) from any family, a
        timing one from a family that gates."""
        timing = self.timing_regressed or bool(self.op_gate)
        return self.structure_regressed or (self.gates and timing)

    @property
    def deciding_word(self) -> TestWord:
        """The word it adds to the test's verdict: its own, or for a family that only
        reports, what its calls and structure say (its timing is shown, not judged)."""
        if self.gates:
            return self.verdict
        if self.structure_regressed:
            return REGRESSED
        return CHANGED if self.verdict == CHANGED else UNCHANGED

    def to_dict(self) -> dict[str, Any]:
        return {k: json_number(v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> FamilyResult:
        return cls(
            **{
                **d,
                "op_gate": tuple(d["op_gate"]),
                "reasons": tuple(d["reasons"]),
                "grew_before": tuple(d.get("grew_before", ())),
            }
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class RoundSamples:
    """Per-round times (probe units, µs) of one flagged op, for distribution plots."""

    op: str
    family: str
    baseline_us: tuple[float, ...]
    current_us: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "op": self.op,
            "family": self.family,
            "baseline_us": list(self.baseline_us),
            "current_us": list(self.current_us),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RoundSamples:
        return cls(
            op=str(d["op"]),
            family=str(d["family"]),
            baseline_us=tuple(float(v) for v in d.get("baseline_us", ())),
            current_us=tuple(float(v) for v in d.get("current_us", ())),
        )


# What decided a verdict beyond the families' op and total figures, each a cause of its own:
# the kinds the verdict itself names, and those of the gates (decide.gates: a new gate names
# its own kind, so a kind is any word).
CauseKind = str
TIMING: Final = "timing"  # a family's timing: its total or ops beyond their floors
CALLS: Final = "calls"  # ops that came, went or changed calls; new host waits
WORK: Final = "work"  # the work census (FLOPs, bytes, calls per op, module and phase)
COMPILE: Final = "compile"  # torch.compile's graphs per call or a recompilation
MEMORY: Final = "memory"  # the exact memory gate (--tprof-collect=memory)
BUSY: Final = "busy"  # the machine disturbed too many rounds for timing to be judged
COMMUNICATION: Final = "communication"  # the collectives' exact gate (distributed tests)
SETTINGS: Final = "settings"  # the numeric settings the test's code chose (model.settings)


@dataclass(frozen=True, slots=True, kw_only=True)
class Cause:
    """One thing that decided a verdict, as reports name it; ``failing`` when it fails the test,
    ``exact`` when counted exactly (counts that don't drift), so that one failing a test needs
    no second look (no re-measurement, no fresh process).

    The families' ops and totals and the work verdict are causes too, read from their own
    records; these are the rest.  Reports render causes from this list, never from the
    verdict's reason text.
    """

    kind: CauseKind
    text: str
    failing: bool = False
    exact: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "text": self.text, "failing": self.failing, "exact": self.exact}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Cause:
        return cls(
            kind=str(d["kind"]),
            text=str(d["text"]),
            failing=bool(d.get("failing", False)),
            exact=bool(d.get("exact", False)),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class TestVerdict:
    """The verdict on one test, with every op's figures for reports."""

    __test__: ClassVar[bool] = False  # not a pytest test class, whatever its name

    verdict: TestWord
    reason: str
    ops: tuple[OpVerdict, ...] = ()
    families: tuple[FamilyResult, ...] = ()
    uniform_shift_pct: float | None = None
    probe_shift_pct: float | None = None
    # Judged beside other busy processes over the ops' common shift (uniform_shift_pct taken
    # out of the current run's CPU times: decide.timing.beside).
    beside_others: bool = False
    sessions: int = 0
    differences: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    timing_compared: bool = True
    round_samples: tuple[RoundSamples, ...] = ()
    # The deterministic layer: the work census against the baseline's (None: not compared).
    work: WorkVerdict | None = None
    # Device runs: the kernels, copies and fills of the flagged ops, largest move first.
    device_rows: tuple[DeviceRowDelta, ...] = ()
    causes: tuple[Cause, ...] = ()  # beyond the families and the work: compile, memory, busy

    @property
    def regressed(self) -> bool:
        return self.verdict == REGRESSED

    @property
    def failing(self) -> bool:
        return self.verdict in FAILING

    @property
    def timing_regressed(self) -> bool:
        return any((f.timing_regressed or f.op_gate) and f.gates for f in self.families)

    @property
    def structure_regressed(self) -> bool:
        return any(f.structure_regressed for f in self.families)

    @property
    def work_regressed(self) -> bool:
        return self.work is not None and self.work.regressed

    @property
    def exact_regressed(self) -> bool:
        """An exact cause (calls, work, compiled graphs, memory, collectives: counts that
        don't drift) fails the test, so the failure needs no second look."""
        return any(c.failing and c.exact for c in self.all_causes())

    def all_causes(self) -> tuple[Cause, ...]:
        """Everything that decided the verdict, typed: each family's timing and calls (from
        its record), the work census's word, then the gates' causes."""
        found: list[Cause] = []
        for f in self.families:
            label = FAMILY_LABEL.get(f.family, f.family)
            timed = f.timing_regressed or bool(f.op_gate)
            if timed or f.verdict == IMPROVED:
                text = f"{label}: " + ("; ".join(f.reasons) or f.verdict)
                found.append(Cause(kind=TIMING, text=text, failing=timed and f.gates))
            if f.structure_regressed:
                found.append(
                    Cause(
                        kind=CALLS,
                        text=f"{label}: calls or host waits grew",
                        failing=True,
                        exact=True,
                    )
                )
        if self.work is not None and self.work.verdict != UNCHANGED:
            text = f"work: {self.work.headline()}"
            found.append(Cause(kind=WORK, text=text, failing=self.work.regressed, exact=True))
        return (*found, *self.causes)

    def flagged_ops(self) -> list[OpVerdict]:
        """Ops to show in a failure: regressed and structural changes, largest delta first."""
        return sorted((o for o in self.ops if o.flagged), key=lambda o: -o.delta_us)

    def top_op(self) -> OpVerdict | None:
        """The op a one-line summary names: the first flagged, else the largest gated delta."""
        flagged = self.flagged_ops()
        if flagged:
            return flagged[0]
        timed = [o for o in self.ops if o.gated]
        return max(timed, key=lambda o: o.delta_us, default=None)

    @property
    def busy(self) -> Cause | None:
        """Why the machine kept timing from being judged, or None."""
        return next((c for c in self.causes if c.kind == BUSY), None)

    def with_notes(self, *notes: str) -> TestVerdict:
        return replace(self, notes=(*self.notes, *notes))

    def with_cause(self, cause: Cause) -> TestVerdict:
        return replace(self, causes=(*self.causes, cause))

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "uniform_shift": json_number(self.uniform_shift_pct),
            "probe_shift": json_number(self.probe_shift_pct),
            "beside_others": self.beside_others,
            "sessions": self.sessions,
            "differences": list(self.differences),
            "notes": list(self.notes),
            "timing_compared": self.timing_compared,
            "families": [f.to_dict() for f in self.families],
            "ops": [o.to_dict() for o in self.ops],
            "round_samples": [s.to_dict() for s in self.round_samples],
            "work": None if self.work is None else self.work.to_dict(),
            "device_rows": [r.to_dict() for r in self.device_rows],
            "causes": [c.to_dict() for c in self.causes],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TestVerdict:
        """Inverse of :meth:`to_dict`."""
        return cls(
            verdict=d["verdict"],
            reason=d.get("reason", ""),
            ops=tuple(OpVerdict.from_dict(o) for o in d.get("ops", [])),
            families=tuple(FamilyResult.from_dict(f) for f in d.get("families", [])),
            uniform_shift_pct=d.get("uniform_shift"),
            probe_shift_pct=d.get("probe_shift"),
            beside_others=bool(d.get("beside_others", False)),
            sessions=int(d.get("sessions", 0)),
            differences=tuple(d.get("differences", [])),
            notes=tuple(d.get("notes", [])),
            timing_compared=bool(d.get("timing_compared", True)),
            round_samples=tuple(RoundSamples.from_dict(s) for s in d.get("round_samples", [])),
            work=None if d.get("work") is None else WorkVerdict.from_dict(d["work"]),
            device_rows=tuple(DeviceRowDelta.from_dict(r) for r in d.get("device_rows", [])),
            causes=tuple(Cause.from_dict(c) for c in d.get("causes", [])),
        )


def worst(words: Sequence[TestWord]) -> TestWord:
    """The most urgent of some test verdicts, by :data:`TEST_ORDER`."""
    return min(words, key=verdict_rank)


_OP_FIELDS: Final = frozenset(OpVerdict.__dataclass_fields__)


# How reports name each family: the registry's labels (model.family_specs).
FAMILY_LABEL: Final = {name: s.label for name, s in FAMILIES.items()}
