"""What ``busy_reruns.py`` tallies of its runs and the tables it prints of them: each test's
verdict sorted into a kind (``inconclusive`` split by whether its reason says the machine was
busy), the unchanged runs per load, the planted runs per plant and load."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from busy_suites import HOST_PLANTS

FAILED = ("regressed", "error")
BUSY_WORDS = "machine busy"
HOST_WORD = "host"
REASON_CHARS = 300
# the verdict tallies, in the order the tables print them
KINDS = (
    "unchanged",
    "inconclusive-busy",
    "inconclusive-other",
    "improved",
    "changed",
    "regressed",
    "error",
    "other",
)


def kind_of(t: dict[str, Any]) -> str:
    """The tally a test's verdict goes in."""
    verdict = str(t["verdict"])
    if verdict == "inconclusive":
        busy = BUSY_WORDS in str(t.get("reason") or "").lower()
        return "inconclusive-busy" if busy else "inconclusive-other"
    return verdict if verdict in KINDS else "other"


def label(t: dict[str, Any]) -> str:
    """A test's verdict as a run's line prints it: the tally, or the verdict (``saved``)."""
    kind = kind_of(t)
    return str(t["verdict"]) if kind == "other" else kind


def reason_head(reason: str) -> str:
    """A reason up to its first colon: what kind of reason it is."""
    return reason.split(":", 1)[0][:60]


def abbrev(test: str) -> str:
    return test.removeprefix("test_")


@dataclass
class FalseFailure:
    condition: str
    run: int
    test: str
    verdict: str
    reason: str


@dataclass
class Condition:
    """The unchanged runs under one load."""

    name: str
    runs: int = 0
    per_test: dict[str, Counter[str]] = field(default_factory=dict)
    confirmed: int = 0  # test-runs whose timing regression went to a confirmation
    other_reasons: Counter[str] = field(default_factory=Counter)  # inconclusive-other's heads
    false_failures: list[FalseFailure] = field(default_factory=list)

    @property
    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.per_test.values():
            out.update(c)
        return out

    @property
    def test_runs(self) -> int:
        return sum(self.totals.values())


@dataclass
class Collateral:
    run: int
    test: str
    verdict: str
    reason: str


@dataclass
class PlantRow:
    """One plant's runs under one load."""

    plant: str
    condition: str
    test: str
    runs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    caught: int = 0
    host_named: int = 0
    collateral: list[Collateral] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def condition_table(c: Condition) -> None:
    print(f"\n{c.name}: {c.runs} runs x {len(c.per_test)} tests = {c.test_runs} test-runs")
    short = {
        "inconclusive-busy": "inc-busy",
        "inconclusive-other": "inc-other",
    }
    heads = [short.get(k, k) for k in KINDS]
    w = max(26, *map(len, c.per_test))
    print(f"  {'test':<{w}}" + "".join(f"{h:>11}" for h in heads))
    for test, counts in [*c.per_test.items(), ("total", c.totals)]:
        print(f"  {test:<{w}}" + "".join(f"{counts[k]:>11}" for k in KINDS))
    print(f"  a timing regression re-measured (confirmations run): {c.confirmed} test-runs")
    for head, n in c.other_reasons.most_common():
        print(f"  inconclusive-other x{n}: {head}")
    for ff in c.false_failures:
        print(f"  false failure, run {ff.run}, {ff.test}: {ff.reason[:REASON_CHARS]}")


def plant_table(rows: Sequence[PlantRow]) -> None:
    w = max(20, *(len(abbrev(r.test)) for r in rows))
    print(
        f"\n{'plant':<11} {'load':<6} {'test':<{w}} {'caught':>7} {'host':>6}  "
        f"{'verdicts':<36} collateral"
    )
    for r in rows:
        host = f"{r.host_named}/{r.runs}" if r.plant in HOST_PLANTS else "-"
        verdicts = ", ".join(f"{k} {v}" for k, v in r.verdicts.most_common())
        coll = ", ".join(f"{c.test} (run {c.run})" for c in r.collateral)
        print(
            f"{r.plant:<11} {r.condition:<6} {abbrev(r.test):<{w}} {r.caught:>3}/{r.runs:<3} "
            f"{host:>6}  {verdicts:<36} {len(r.collateral)} {coll}"
        )
    print("\nfirst reason per plant and load:")
    for r in rows:
        if r.reasons:
            print(f"  {r.plant} ({r.condition}): {r.reasons[0][:REASON_CHARS]}")


def summary_line(c: Condition) -> str:
    t = c.totals
    bad = t["regressed"] + t["error"]
    rest = {k: t[k] for k in KINDS if k not in ("unchanged", "inconclusive-busy", *FAILED)}
    other = sum(rest.values())
    detail = ", ".join(f"{k} {v}" for k, v in rest.items() if v)
    detail = f": {detail}" if detail else ""
    return (
        f"{c.name}: {bad} false failures in {c.test_runs} test-runs (unchanged {t['unchanged']}, "
        f"inconclusive-busy {t['inconclusive-busy']}, other {other}{detail})"
    )


def condition_doc(c: Condition) -> dict[str, Any]:
    """One condition's tallies as ``--out`` writes them."""
    return {
        "runs": c.runs,
        "test_runs": c.test_runs,
        "totals": dict(c.totals),
        "per_test": {k: dict(v) for k, v in c.per_test.items()},
        "confirmed": c.confirmed,
        "inconclusive_other_reasons": dict(c.other_reasons),
        "false_failures": [asdict(f) for f in c.false_failures],
        "summary": summary_line(c),
    }


def plant_doc(r: PlantRow) -> dict[str, Any]:
    return {**asdict(r), "verdicts": dict(r.verdicts)}
