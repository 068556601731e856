"""Work plants: the work census of ``pytest --tprof`` on a new user's suite, unchanged and planted.

Writes five realistic CPU tests of its own into a temporary folder (none from ``examples/``),
each profiled through the ``tprof`` fixture, records a three-session baseline with
``--tprof-save``, then runs ``pytest --tprof`` on the folder:

1. unchanged, ``--runs`` times: any test verdict ``regressed`` or ``error`` is a false failure,
   counted by the layer that failed it: ``work`` (its work verdict regressed), ``calls`` (a
   family's calls regressed: the structure layer), ``timing`` (only times regressed, after
   the fresh-process confirmation) or ``error``;
2. with each plant, ``--plant-runs`` times.  A plant is caught when its test's verdict is
   ``regressed``, its work verdict is ``regressed`` and a work reason names a moved row of the
   kind planted (below); the table also counts the runs where the timing and the calls
   layers regressed too.  Any other test failing in a planted run is a collateral failure;
3. once unchanged and once with each plant, against a copy of the baseline whose
   ``environment.hard.cpu_model`` reads ``"Other CPU"``: every test must note "timings not
   compared" (and no timing may regress), and the work census must still catch every plant.

The tests (plants switched by ``WORK_PLANT`` in the test file, so one file runs both ways):

- ``test_encoder_train``: ``nn.TransformerEncoder`` (2 layers, d_model 64, 4 heads, feed-forward
  256, batch first) and a linear head, cross-entropy loss, AdamW step.  Plant ``ffn``: the
  feed-forward 10 % wider (282); caught when ``aten::addmm`` or ``aten::mm`` is named in a
  module whose path holds ``linear1`` or ``linear2``.
- ``test_mlp_forward``: a 3-layer MLP's inference (``torch.no_grad()``) on a (64, 512) batch.
  Plant ``copy``: ``h = h.t().contiguous().t()`` of the (64, 512) activation inside
  ``forward``; caught when ``aten::clone`` is named.
- ``test_attention_fp32``: a hand-written scaled-dot-product attention block (q / k / v
  ``Linear``, softmax), forward and backward.  Plant ``float64``: the softmax computed in
  float64 (``.double()``, then ``.float()``); caught when ``aten::_to_copy`` is named or a
  named row's input signature has ``f64``.
- ``test_layernorm_model``: ``Linear → LayerNorm → GELU → Linear`` (an ``nn.Sequential``),
  MSE loss, SGD step.  Plant ``layernorm``: ``nn.LayerNorm`` replaced by a hand-written one
  (mean, var, normalise, the same affine parameters); caught when ``aten::native_layer_norm``
  is named gone or new ops are named in the norm's module (``1``).
- ``test_conv_gru_inference``: Conv1d, GRU and a linear head, inference; never planted.

Prints every run's verdicts (``test=verdict/work verdict``), then a table, and exits 1 on any
false failure, missed plant, collateral failure or timing compared across hardware.  It also
notes a baseline file that holds fewer sessions than were saved: a save restarts the window
when a test's ops or calls differ from the last session's (seen here: the training tests'
first save, calibrated in a process without a baseline, lacks the zero-call ops that the
optimizer's lazy state creates during warm-up in later saves).

Each pytest run is ``python -m pytest FOLDER -q -p no:cacheprovider`` with the folder as cwd
and rootdir (it holds ``pytest.ini`` and an empty ``conftest.py``), ``--tprof-rounds=12
--tprof-warmup=2`` and ``--tprof-baseline-dir``, ``--tprof-trace-dir`` and ``--tprof-json``
in the folder.  ``--keep DIR`` works in DIR (new or empty) and keeps it: baselines, traces,
each run's JSON report (``reports/``) and pytest output (``logs/``).  The default run (3 saves,
6 unchanged runs, 4 plants x 5, 5 runs on other hardware: 34 pytest runs) takes about 6 min
on a shared 2-core machine.

    python benchmarks/work_plants.py [--runs 6] [--plant-runs 5] [--sessions 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from harness.runs import by_name, run_pytest, sessions_held, short
from harness.tables import rule
from harness.workspace import prepare, workspace
from work_suite import (
    OTHER_CPU,
    PLANTS,
    PROFILE_ARGS,
    SUITE,
    TESTS,
    Plant,
    Result,
    result_of,
)


class Suite:
    """The folder (pytest's rootdir) and the pytest runs in it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        prepare(folder, "test_work_plants.py", SUITE, "[pytest]\n", ())

    def run(
        self, label: str, args: list[str], plant: str = "", baselines: str = "baselines"
    ) -> dict[str, Result]:
        """One pytest run; its results by test name.  Prints one line of verdicts."""
        self.count += 1
        env, head = {**os.environ, "WORK_PLANT": plant}, f"WORK_PLANT={plant!r}"
        tag, args = f"{self.count:02d}-{label}", [*PROFILE_ARGS, *args]
        tests = run_pytest(
            self.folder, tag, args, env=env, head=head, tests=TESTS, baselines=baselines
        )
        results = {name: result_of(t) for name, t in by_name(tests).items()}
        cells = [f"{n[5:]}={r.verdict}/{r.work_verdict}" for n, r in results.items()]
        print(f"  {label:<20} " + "  ".join(cells), flush=True)
        return results


# --------------------------------------------------------------------------- the steps


def record(suite: Suite, sessions: int) -> dict[str, int]:
    """``--tprof-save`` ``sessions`` times; the sessions each baseline file then holds."""
    print(f"baseline: --tprof-save x {sessions} (verdict/work verdict per test)", flush=True)
    for i in range(sessions):
        suite.run(f"save{i + 1}", ["--tprof-save"])
    held = sessions_held(suite.folder / "baselines")
    print(f"  sessions per baseline file: {held}", flush=True)
    return held


@dataclass
class Unchanged:
    runs: int = 0
    layers: Counter[str] = field(default_factory=Counter)
    verdicts: dict[str, Counter[str]] = field(default_factory=dict)

    @property
    def false_failures(self) -> int:
        return sum(self.layers.values())


def unchanged(suite: Suite, runs: int) -> Unchanged:
    print(f"\nunchanged: {runs} runs", flush=True)
    out = Unchanged(runs=runs, verdicts={n: Counter() for n in TESTS})
    for i in range(runs):
        for name, r in suite.run(f"unchanged{i + 1}", ["--tprof"]).items():
            out.verdicts[name][r.verdict] += 1
            if r.failed:
                out.layers[r.layer] += 1
                print(f"    FALSE FAILURE {name} ({r.layer}): {short(r.reason)}", flush=True)
    return out


@dataclass
class PlantRow:
    plant: Plant
    runs: int = 0
    caught: int = 0
    timing_too: int = 0
    calls_too: int = 0
    collateral: list[str] = field(default_factory=list)
    first_reason: str = ""


def collateral(res: dict[str, Result], plant: Plant, where: str) -> list[str]:
    """Other tests that failed beside a plant, printed."""
    out = [n for n, r in res.items() if n != plant.test and r.failed]
    for n in out:
        print(f"    COLLATERAL {where}: {n} ({res[n].layer}): {short(res[n].reason)}", flush=True)
    return out


def planted(suite: Suite, runs: int) -> list[PlantRow]:
    print(f"\nplants: {runs} runs each", flush=True)
    rows = []
    for p in PLANTS:
        row = PlantRow(plant=p, runs=runs)
        for i in range(runs):
            res = suite.run(f"{p.name}{i + 1}", ["--tprof"], plant=p.name)
            r = res[p.test]
            row.caught += r.caught(p)
            row.timing_too += r.timing_regressed
            row.calls_too += r.calls_regressed
            row.first_reason = row.first_reason or r.reason
            if not r.caught(p):
                print(
                    f"    MISSED {p.name}: {r.verdict}, work {r.work_verdict}: {short(r.reason)}",
                    flush=True,
                )
            row.collateral += collateral(res, p, p.name)
        rows.append(row)
    return rows


def rewrite_cpu_model(src: Path, dst: Path) -> int:
    """A copy of the baselines whose ``environment.hard.cpu_model`` differs; files rewritten."""
    shutil.copytree(src, dst)
    n = 0
    for path in sorted(dst.rglob("*.json")):
        doc = json.loads(path.read_text())
        doc["environment"]["hard"]["cpu_model"] = OTHER_CPU
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
        n += 1
    return n


@dataclass
class OtherHardware:
    files: int = 0
    false_failures: list[str] = field(default_factory=list)
    caught: dict[str, bool] = field(default_factory=dict)
    collateral: list[str] = field(default_factory=list)
    timed: set[str] = field(default_factory=set)  # tests whose timings were compared anyway
    reasons: dict[str, str] = field(default_factory=dict)


def other_hardware(suite: Suite) -> OtherHardware:
    dst = "baselines-other-cpu"
    out = OtherHardware()
    out.files = rewrite_cpu_model(suite.folder / "baselines", suite.folder / dst)
    print(f"\nother hardware: a baseline copy with cpu_model {OTHER_CPU!r}", flush=True)
    res = suite.run("otherhw-unchanged", ["--tprof"], baselines=dst)
    out.false_failures = [n for n, r in res.items() if r.failed]
    out.timed |= {n for n, r in res.items() if r.timings_compared or r.timing_regressed}
    for n in out.false_failures:
        print(f"    FALSE FAILURE {n} ({res[n].layer}): {short(res[n].reason)}", flush=True)
    for p in PLANTS:
        res = suite.run(f"otherhw-{p.name}", ["--tprof"], plant=p.name, baselines=dst)
        r = res[p.test]
        out.caught[p.name] = r.caught(p)
        out.reasons[p.name] = r.reason
        out.timed |= {n for n, o in res.items() if o.timings_compared or o.timing_regressed}
        if not r.caught(p):
            print(f"    MISSED {p.name}: {r.verdict}, work {r.work_verdict}: {short(r.reason)}")
        out.collateral += collateral(res, p, f"{p.name} (other hardware)")
    return out


# --------------------------------------------------------------------------- the table


def table(
    sessions: dict[str, int], want: int, u: Unchanged, rows: list[PlantRow], hw: OtherHardware
) -> int:
    """Prints the summary; the number of failures of the target."""
    print("\n" + rule())
    n = u.runs * len(TESTS)
    lay = u.layers
    print(
        f"unchanged: {u.runs} runs x {len(TESTS)} tests = {n} test-runs; false failures "
        f"{u.false_failures}/{n} (work {lay['work']}, calls {lay['calls']}, "
        f"timing {lay['timing']}, error {lay['error']})"
    )
    for name, c in u.verdicts.items():
        print(f"  {name:<24} {dict(c)}  [baseline: {sessions.get(name, 0)} sessions]")
    print(f"\n{'plant':<10} {'test':<21} {'named':<36} caught  timing  calls  collateral")
    for r in rows:
        p = r.plant
        print(
            f"{p.name:<10} {p.test:<21} {p.expected:<36} {r.caught:>2}/{r.runs:<3} "
            f"{r.timing_too:>2}/{r.runs:<3} {r.calls_too:>2}/{r.runs:<3} "
            f"{len(r.collateral)} {r.collateral or ''}"
        )
    print(f"\ndifferent hardware ({hw.files} files, cpu_model {OTHER_CPU!r}):")
    print(f"  unchanged run: false failures {len(hw.false_failures)} {hw.false_failures or ''}")
    caught = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in hw.caught.items())
    print(f"  caught: {caught}; collateral {len(hw.collateral)} {hw.collateral or ''}")
    print(f"  timings compared anyway: {sorted(hw.timed) or 'none'}")
    print("\nfirst reason per plant (same hardware, then other hardware):")
    for r in rows:
        print(f"  {r.plant.name}: {r.first_reason}")
        print(f"  {r.plant.name} (other hw): {hw.reasons.get(r.plant.name, '')}")
    short_windows = {k: v for k, v in sessions.items() if v != want}
    if short_windows:
        print(
            f"\nnote: {want} saves left these baselines with other than {want} sessions "
            f"(a save restarted the window): {short_windows}"
        )
    missed = sum(r.runs - r.caught for r in rows)
    hw_missed = sum(not v for v in hw.caught.values())
    coll = sum(len(r.collateral) for r in rows) + len(hw.collateral) + len(hw.false_failures)
    print(
        f"\nfalse failures {u.false_failures}, missed plants {missed} "
        f"(+{hw_missed} on other hardware), collateral failures {coll}, "
        f"timings compared across hardware {len(hw.timed)}"
    )
    return u.false_failures + missed + hw_missed + coll + len(hw.timed)


def check(folder: Path, a: argparse.Namespace) -> int:
    t0 = time.time()
    suite = Suite(folder)
    print(f"folder {folder}", flush=True)
    sessions = record(suite, a.sessions)
    u = unchanged(suite, a.runs)
    rows = planted(suite, a.plant_runs)
    hw = other_hardware(suite)
    bad = table(sessions, a.sessions, u, rows, hw)
    print(f"{suite.count} pytest runs, {time.time() - t0:.0f} s")
    print(
        "target (no false failure, missed plant or collateral failure):", "MISSED" if bad else "met"
    )
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--runs", type=int, default=6, help="unchanged runs (default 6)")
    ap.add_argument("--plant-runs", type=int, default=5, help="runs per plant (default 5)")
    ap.add_argument("--sessions", type=int, default=3, help="baseline sessions (default 3)")
    ap.add_argument("--keep", type=Path, default=None, help="work in this folder and keep it")
    a = ap.parse_args()
    if a.keep is not None and a.keep.exists() and any(a.keep.iterdir()):
        ap.error(f"--keep {a.keep}: the folder exists and is not empty")
    with workspace("tprof-work-plants-", a.keep) as folder:
        return check(folder, a)


if __name__ == "__main__":
    raise SystemExit(main())
