"""Busy re-runs: false failures and planted catches while other processes keep every core busy.

Writes a suite of its own into a temporary folder (none from ``examples/``): ``--suite models``
(the default), seven CPU model tests written with ``torch.nn``, or ``--suite hf``, four Hugging
Face ``transformers`` models (both below).  It records ``--sessions`` baseline sessions with
``--tprof-save`` on a quiet machine (no load of ours), then runs ``pytest --tprof`` on the
folder, each run a fresh process through ``harness.runs.run_pytest`` with the default
confirmations:

1. unchanged, ``--runs`` times under each load of ``--conditions``.  Each test's verdict is
   tallied: ``unchanged``, ``inconclusive`` split into ``inconclusive-busy`` (its reason says
   "machine busy") and ``inconclusive-other``, ``improved``, ``changed``, ``regressed`` and
   ``error`` (the two false failures), and ``other`` (no-baseline, incomparable, ...).  Every
   false failure is printed with the first 300 characters of its reason;
2. with each plant of ``--plants``, ``--plant-runs`` times under each load of
   ``--plant-conditions``.  A plant is caught when its test's verdict is ``regressed``; for
   ``pyloop`` and ``hf_pyloop`` the table also counts the catches whose reason names host time
   ("host").  Any other test failing in a planted run is a collateral failure.

The loads (``--load`` names them; ``--conditions`` picks them per phase; ``harness.loads``
starts them), started with ``subprocess.Popen`` before that condition's runs and killed after
them (``finally``, and ``atexit``; each also exits by itself after ``--load-timeout`` seconds or
once this script is gone, so nothing outlives it):

- ``none``: nothing of ours (the shared machine's own load still applies);
- ``busy``: one pure-Python spin loop per core (``os.cpu_count()``);
- ``membw``: one process per core copying two 64 MiB numpy arrays back and forth;
- ``torch``: one process per core running an MLP training step (AdamW) on torch's default
  intra-op threads, as another CI job's torch code would.

The tests of ``--suite models`` (plants switched by ``TPROF_PLANT`` in the test file, so one file
runs both ways), each body 0.3-2.5 ms on one thread:

- ``test_mlp_inference``: Linear / ReLU stack, ``torch.no_grad()``.  Plant ``denormal`` (not run
  by default): its input times 1e-39, denormal floats, the same work in slower kernels where
  the CPU traps on denormals.  On the AMD EPYC (AVX-512) this was written on the MLP
  and its first ``aten::addmm`` ran at the same speed either way (594 µs vs 594 µs, 185 vs 185),
  so the default timing-only plant is ``shuffled`` below;
- ``test_encoder_train``: ``nn.TransformerEncoderLayer`` training step with AdamW;
- ``test_conv_inference``: Conv2d, BatchNorm2d, ReLU, MaxPool2d, Conv2d in eval mode.  Plant
  ``mkldnn_off``: oneDNN turned off by ``torch.backends.mkldnn.flags`` (the base enters the
  same context with it on): aten's own convolution, other op names, some +65 % slower at
  this shape;
- ``test_layernorm_gelu``: Linear, LayerNorm, GELU, Linear, inference;
- ``test_embedding_topk``: ``nn.EmbeddingBag`` (mode "mean", a 1M x 32 table, 65,536 lookups
  in sorted order) and ``torch.topk`` of the bags' scores.  Plant ``shuffled``: the same
  lookups in random order, so every op's name, calls, shapes, dtypes, FLOPs and bytes stay
  the same while ``aten::embedding_bag`` misses the cache (1.6-1.8x slower alone, the body
  0.31 -> 0.56 ms, on the machine this was written on): a slowdown only timing can see;
- ``test_attention_inference``: ``nn.MultiheadAttention`` (batch first), inference;
- ``test_lstm_train``: LSTM and a Linear head, cross-entropy, Adam step.  Plant ``pyloop``: a
  pure-Python loop of about 0.5 ms (no torch op) between ``loss.backward()`` and
  ``opt.step()``: host time between ops, no op slower.

The tests of ``--suite hf``: ``transformers`` models built in the test from small configs (2
layers, hidden 64, 4 heads, vocabulary 1000, sequences of 32) with random weights, nothing
downloaded (the pytest processes run with ``HF_HUB_OFFLINE=1``); each body 1-5 ms on one thread.
Without ``transformers`` importable, ``--suite hf`` exits at once saying so.  Its plants, which
only this suite takes (and the plants above only ``--suite models``):

- ``test_gpt2_train_step``: ``GPT2LMHeadModel`` training step, batch 2, AdamW: ``zero_grad``,
  forward with labels, backward, ``step``.  Plant ``hf_pyloop``: a forward hook on the first
  block (``model.transformer.h[0]``) running a pure-Python loop of about 0.5 ms: host time
  outside every op, no op slower;
- ``test_bert_inference_masked``: ``BertModel`` inference under ``torch.no_grad()``, batch 4,
  with an attention mask that pads the last quarter of each sequence;
- ``test_llama_fwd_bwd``: ``LlamaForCausalLM`` forward with labels and backward (no optimizer),
  batch 2.  Plant ``hf_wider``: ``intermediate_size`` 25 % larger (128 -> 160), more work in
  the MLP's matmuls of other shapes, which the op census must catch;
- ``test_t5_inference``: ``T5ForConditionalGeneration`` (encoder-decoder) forward under
  ``torch.no_grad()`` with ``decoder_input_ids``, batch 4, 16 decoder positions;
- ``test_llama_generate``: ``LlamaForCausalLM.generate``, greedy, 8 prompt tokens and 8 new
  ones.  Plant ``hf_generate_loop``: a forward hook on the model running a pure-Python loop
  of about 0.3 ms in every decoding step: host time, no op slower.

``--pythonpath DIR`` puts DIR first on the ``PYTHONPATH`` of the pytest processes, so the same
benchmark runs another checkout of the project (a git worktree of an older commit): the plugin
is loaded through the installed ``pytest_tprof.plugin`` entry point, and ``PYTHONPATH`` makes
that checkout's ``pytest_tprof`` and engine the ones imported.  The checkout that ran is
printed.  ``--folder DIR`` works in DIR and keeps it (baselines, traces, each run's JSON report
in ``reports/`` and pytest output in ``logs/``); with ``--sessions 0`` it reuses the baselines
already there.  ``--out FILE`` writes every tally as JSON.

Prints every run's verdicts, a table per condition and per plant, and one summary line per
condition; exits 1 on any false or collateral failure, or a plant missed without load.  The
default run (3 saves, 9 unchanged runs under 3 loads, 3 plants x 2 loads x 2 runs: 42 pytest
runs) should take 10-20 min on a shared 2-core machine (estimated from the smoke run below: a
quiet run 6 s, one under ``busy`` 16 s, one that confirms a regression in a fresh process 19 s).
The smoke run, 5 pytest runs in 55 s:

    python benchmarks/busy_reruns.py --sessions 2 --runs 1 --conditions none,busy
        --plants pyloop --plant-runs 1 --plant-conditions none

and that of ``--suite hf``, 5 pytest runs in 57 s with no other process busy (a quiet run 9 s,
importing ``transformers`` included; the ``hf_pyloop`` run, confirmed in a fresh process, 17 s):

    python benchmarks/busy_reruns.py --suite hf --sessions 2 --runs 1 --conditions none
        --plants hf_pyloop,hf_wider --plant-runs 1 --plant-conditions none

    python benchmarks/busy_reruns.py [--suite models|hf] [--sessions 3] [--runs 9]
        [--conditions none,busy,membw,torch] [--plants LIST (default: the suite's own)]
        [--plant-conditions none,busy] [--plant-runs 2]
        [--only-plants | --skip-plants] [--load-timeout 3600] [--pythonpath DIR]
        [--folder DIR] [--out FILE] [--pytest-arg ARG ...]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from busy_suites import HF_PROBE, PLANTS, SUITES, SuiteSpec
from busy_tally import (
    FAILED,
    HOST_WORD,
    REASON_CHARS,
    Collateral,
    Condition,
    FalseFailure,
    PlantRow,
    abbrev,
    condition_doc,
    condition_table,
    kind_of,
    label,
    plant_doc,
    plant_table,
    reason_head,
    summary_line,
)
from harness.loads import LOADS, load
from harness.runs import by_name, checkout, run, run_pytest, sessions_held
from harness.tables import csv, rule
from harness.workspace import prepare, workspace

# --------------------------------------------------------------------------- one pytest run


def pytest_env(spec: SuiteSpec, pythonpath: Path | None) -> dict[str, str]:
    """The environment of the pytest processes (and of the probes that run before them)."""
    env = {**os.environ, **dict(spec.env)}
    env.pop("TPROF_PLANT", None)
    if pythonpath is not None:
        path = [str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def transformers_version(env: dict[str, str]) -> str:
    """The version of ``transformers`` the hf suite's tests import; exits if they cannot."""
    done = run([sys.executable, "-c", HF_PROBE], Path.cwd(), env=env, ok=None)
    if done.returncode != 0:
        sys.exit(
            f"--suite hf needs Hugging Face transformers (GPT-2, BERT, Llama and T5 models) in "
            f"{sys.executable}, and it does not import:\n{done.stderr.strip()[-1500:]}\n"
            f"install it with: {sys.executable} -m pip install transformers"
        )
    return done.stdout.strip()


class Suite:
    """The folder (pytest's rootdir), the pytest runs in it and their environment."""

    def __init__(
        self, spec: SuiteSpec, folder: Path, pythonpath: Path | None, extra: Sequence[str]
    ) -> None:
        self.spec = spec
        self.tests = spec.tests
        self.folder = folder
        self.count = 0
        self.extra = list(extra)
        self.env = pytest_env(spec, pythonpath)
        prepare(folder, spec.file, spec.source, "[pytest]\n", ())

    def run(self, tag: str, args: list[str], plant: str = "") -> dict[str, dict[str, Any]]:
        """One pytest run; its tests by name.  Prints one line of verdicts."""
        self.count += 1
        t0 = time.time()
        env = {**self.env, "TPROF_PLANT": plant}
        tag_n, head = f"{self.count:03d}-{tag}", f"TPROF_PLANT={plant!r}"
        tests = run_pytest(
            self.folder, tag_n, [*args, *self.extra], env=env, head=head, tests=self.tests
        )
        found = by_name(tests)
        cells = "  ".join(f"{abbrev(n)}={label(t)}" for n, t in found.items())
        load1 = os.getloadavg()[0]
        print(f"  {tag:<24} {cells}  ({time.time() - t0:.0f} s, load {load1:.1f})", flush=True)
        return found

    def checkout(self) -> str:
        """Where the pytest processes import the plugin from, and that checkout's commit."""
        return checkout(self.folder, self.env)


# --------------------------------------------------------------------------- the phases


def unchanged(suite: Suite, name: str, runs: int, lifetime: float) -> Condition:
    out = Condition(name=name, runs=runs, per_test={n: Counter() for n in suite.tests})
    with load(name, lifetime) as n:
        print(f"\n{name}: {runs} unchanged runs ({n} load processes)", flush=True)
        for i in range(1, runs + 1):
            for test, t in suite.run(f"{name}-unchanged{i}", ["--tprof"]).items():
                out.per_test[test][kind_of(t)] += 1
                out.confirmed += bool(t.get("confirmed"))
                if kind_of(t) == "inconclusive-other":
                    out.other_reasons[reason_head(str(t["reason"]))] += 1
                if t["verdict"] in FAILED:
                    ff = FalseFailure(name, i, test, t["verdict"], str(t["reason"]))
                    out.false_failures.append(ff)
                    print(f"    FALSE FAILURE {test}: {ff.reason[:REASON_CHARS]}", flush=True)
    return out


def tally_plant(row: PlantRow, i: int, found: dict[str, dict[str, Any]]) -> None:
    """One planted run's verdicts added to its row: the catch, and any collateral failure."""
    t = found[row.test]
    reason = str(t["reason"])
    row.verdicts[kind_of(t)] += 1
    row.caught += t["verdict"] == "regressed"
    row.host_named += t["verdict"] == "regressed" and HOST_WORD in reason.lower()
    row.reasons.append(reason)
    if t["verdict"] != "regressed":
        print(f"    MISSED {row.plant}: {kind_of(t)}: {reason[:REASON_CHARS]}", flush=True)
    for other, o in found.items():
        if other != row.test and o["verdict"] in FAILED:
            c = Collateral(i, other, o["verdict"], str(o["reason"]))
            row.collateral.append(c)
            print(f"    COLLATERAL {other}: {c.reason[:REASON_CHARS]}", flush=True)


def planted(
    suite: Suite, plants: Sequence[str], name: str, runs: int, lifetime: float
) -> list[PlantRow]:
    rows = []
    with load(name, lifetime) as n:
        print(f"\nplants under {name}: {runs} runs each ({n} load processes)", flush=True)
        for plant in plants:
            row = PlantRow(plant=plant, condition=name, test=PLANTS[plant], runs=runs)
            for i in range(1, runs + 1):
                tally_plant(row, i, suite.run(f"{name}-{plant}{i}", ["--tprof"], plant=plant))
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- the benchmark


def record(suite: Suite, sessions: int) -> dict[str, int]:
    """``--tprof-save`` ``sessions`` times on a quiet machine; the sessions each baseline holds."""
    if sessions:
        print(f"baseline: --tprof-save x {sessions}, no load", flush=True)
    for i in range(1, sessions + 1):
        suite.run(f"save{i}", ["--tprof-save"])
    held = sessions_held(suite.folder / "baselines")
    missing = sorted(set(suite.tests) - set(held))
    if missing:
        sys.exit(f"no baseline for {missing} in {suite.folder / 'baselines'}")
    print(f"  sessions per baseline file: {held}", flush=True)
    return held


def report(suite: Suite, conditions: list[Condition], rows: list[PlantRow], wall: float) -> int:
    """The tables, the summary lines and the target; the count of what missed it."""
    for c in conditions:
        condition_table(c)
    if rows:
        plant_table(rows)
    print()
    for c in conditions:
        print(summary_line(c))
    false = sum(len(c.false_failures) for c in conditions)
    coll = sum(len(r.collateral) for r in rows)
    missed_quiet = sum(r.runs - r.caught for r in rows if r.condition == "none")
    missed_load = sum(r.runs - r.caught for r in rows if r.condition != "none")
    print(
        f"false failures {false}, collateral failures {coll}, missed plants {missed_quiet} "
        f"without load (+{missed_load} under load); {suite.count} pytest runs, {wall:.0f} s"
    )
    bad = false + coll + missed_quiet
    target = "no false or collateral failure, every plant caught without load"
    print(f"target ({target}):", "MISSED" if bad else "met")
    return bad


def write_out(a: argparse.Namespace, suite: Suite, held: dict[str, int], tallies: dict) -> None:
    """Every tally as JSON in ``--out``."""
    doc = {
        "suite": a.suite,
        "tests": list(suite.tests),
        "checkout": suite.checkout(),
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
        "baseline_sessions": held,
        "conditions": {c.name: condition_doc(c) for c in tallies["conditions"]},
        "plants": [plant_doc(r) for r in tallies["rows"]],
        "pytest_runs": suite.count,
        "wall_s": round(tallies["wall"], 1),
    }
    a.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"tallies written to {a.out}")


def check(folder: Path, a: argparse.Namespace, versions: str) -> int:
    t0 = time.time()
    suite = Suite(SUITES[a.suite], folder, a.pythonpath, a.pytest_arg)
    print(f"suite {a.suite} ({len(suite.tests)} tests{versions})", flush=True)
    print(f"folder {folder}\ncheckout {suite.checkout()}", flush=True)
    held = record(suite, a.sessions)
    loads = [] if a.only_plants else a.conditions
    conditions = [unchanged(suite, c, a.runs, a.load_timeout) for c in loads]
    rows: list[PlantRow] = []
    if not a.skip_plants and a.plants:
        for c in a.plant_conditions:
            rows += planted(suite, a.plants, c, a.plant_runs, a.load_timeout)
    print("\n" + rule())
    print(f"suite {a.suite}{versions}, checkout {suite.checkout()}")
    wall = time.time() - t0
    bad = report(suite, conditions, rows, wall)
    if a.out:
        write_out(a, suite, held, {"conditions": conditions, "rows": rows, "wall": wall})
    return 1 if bad else 0


# --------------------------------------------------------------------------- the command line


def load_list(text: str) -> list[str]:
    return csv(text, LOADS, "load")


def plant_list(text: str) -> list[str]:
    return csv(text, tuple(PLANTS), "plant")


def suite_options(ap: argparse.ArgumentParser) -> None:
    """The options that choose the suite, its baseline and the loads of its unchanged runs."""
    add = ap.add_argument
    suite_help = "the tests: models (torch.nn, the default) or hf (Hugging Face transformers)"
    add("--suite", choices=tuple(SUITES), default="models", help=suite_help)
    sessions_help = "baseline sessions saved (default 3; 0 reuses those in --folder)"
    add("--sessions", metavar="N", type=int, default=3, help=sessions_help)
    add("--runs", metavar="N", type=int, default=9, help="unchanged runs per condition (default 9)")
    conditions_help = (
        "loads of the unchanged runs (default none,busy,membw,torch; busy1, membw1 and "
        "torch1 are one such process alone)"
    )
    default = list(LOADS[:4])
    add("--conditions", metavar="LIST", type=load_list, default=default, help=conditions_help)
    load_help = "one load (none|busy|membw|torch) for the unchanged runs: --conditions of one"
    add("--load", metavar="LOAD", dest="conditions", type=load_list, help=load_help)


def plant_options(ap: argparse.ArgumentParser) -> None:
    """The options that choose the plants and their loads."""
    add = ap.add_argument
    own = "; ".join(f"{n} {','.join(s.plants)}" for n, s in SUITES.items())
    plants_help = f"plants run (default the suite's own: {own}; of {','.join(PLANTS)})"
    add("--plants", metavar="LIST", type=plant_list, default=None, help=plants_help)
    where_help = "loads of the planted runs (default none,busy)"
    default = ["none", "busy"]
    add("--plant-conditions", metavar="LIST", type=load_list, default=default, help=where_help)
    add(
        "--plant-runs", metavar="N", type=int, default=2, help="runs per plant and load (default 2)"
    )
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--only-plants", action="store_true", help="no unchanged runs")
    only.add_argument("--skip-plants", action="store_true", help="no planted runs")


def run_options(ap: argparse.ArgumentParser) -> None:
    """The options of how and where the runs go: the load's lifetime, the checkout, the folder."""
    add = ap.add_argument
    timeout_help = "seconds after which a load process exits by itself (default 3600)"
    add("--load-timeout", metavar="S", type=float, default=3600.0, help=timeout_help)
    path_help = "a checkout put first on the pytest processes' PYTHONPATH"
    add("--pythonpath", metavar="DIR", type=Path, default=None, help=path_help)
    add("--folder", metavar="DIR", type=Path, default=None, help="work in this folder and keep it")
    add("--out", metavar="FILE", type=Path, default=None, help="write the tallies as JSON here")
    arg_help = "one more argument for every pytest run (repeatable): --pytest-arg=-x"
    add("--pytest-arg", metavar="ARG", action="append", default=[], help=arg_help)


def checked(ap: argparse.ArgumentParser, a: argparse.Namespace) -> argparse.Namespace:
    """``a`` with the suite's own plants filled in; an error for options that do not fit."""
    spec = SUITES[a.suite]
    if a.plants is None:
        a.plants = list(spec.plants)
    wrong = [p for p in a.plants if PLANTS[p] not in spec.tests]
    own = ",".join(p for p, test in PLANTS.items() if test in spec.tests)
    if wrong:
        ap.error(f"plants {wrong} plant other suites' tests: --suite {a.suite} takes {own}")
    if a.pythonpath is not None:
        a.pythonpath = a.pythonpath.resolve()
        if not (a.pythonpath / "pytest_tprof").is_dir():
            ap.error(f"--pythonpath {a.pythonpath}: no pytest_tprof package there")
    if a.sessions == 0 and a.folder is None:
        ap.error("--sessions 0 reuses the baselines of --folder: name one")
    return a


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    suite_options(ap)
    plant_options(ap)
    run_options(ap)
    return checked(ap, ap.parse_args())


def main() -> int:
    a = parse()
    versions = ""
    if a.suite == "hf":  # before any folder is made: without transformers nothing can run
        versions = f", transformers {transformers_version(pytest_env(SUITES['hf'], a.pythonpath))}"
    # a terminated benchmark still kills its load (finally, atexit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.folder is not None and a.sessions and a.folder.exists() and any(a.folder.iterdir()):
        sys.exit(f"--folder {a.folder}: not empty (reuse its baselines with --sessions 0)")
    with workspace("tprof-busy-reruns-", a.folder) as folder:
        return check(folder, a, versions)


if __name__ == "__main__":
    raise SystemExit(main())
