"""GPU check: ``pytest --tprof`` on a small GPU suite, unchanged and with planted regressions.

Run it with the Python that has the machine's CUDA torch, from a copy of the repository; it
installs nothing.  Each pytest run is ``python -m pytest FOLDER -p pytest_tprof.plugin`` with
the repository on ``PYTHONPATH`` and plugin autoloading off (``-p xdist.plugin`` is added
where xdist is importable), so the plugin loads from the working tree as it would on a
machine where it is not installed; the CLI runs as ``python -m tprof_engine``.

It writes eight tests of its own into a temporary folder, each profiled through the
``tprof`` fixture on the GPU (an fp32 MLP, a copy back, a loss step, an fp32 and a bf16 GEMM,
an elementwise chain, an fp32 conv forward and backward, a launch-bound softmax chain), with
TF32 on for fp32 GEMMs as many codebases set it at import, and runs:

1. ``--tprof-save`` ``--sessions`` times (default 3);
2. ``--tprof`` unchanged ``--runs`` times (default 3): any test verdict ``regressed`` or
   ``error`` is a false failure, counted by the layer that failed it; and the share of
   test-runs whose device time was judged (compared, gating, not too noisy: at least 90 %);
3. each plant in its own ``--tprof`` run (``TPROF_PLANT`` switches it in the test file):

   - ``wider``: the hidden layer of ``test_matmul`` 25 % wider (more FLOPs: the work census);
   - ``d2h``: ``test_copy_back`` adds a device-to-host copy of its output (``.cpu()``);
   - ``sync``: ``test_loss_step`` reads its loss with ``.item()`` each step (a host sync);
   - timing-only, the same ops and work with slower kernels, each caught on CUDA time naming
     a kernel: ``tf32_off`` (an earlier test turns TF32 off for every later one: the
     settings-leak check; the fp32 GEMM must name the setting and every later test still
     compares its timing), ``noncontig`` (one operand of the elementwise chain a transposed
     view), ``misalign`` (a bf16 GEMM operand at an odd address), ``cudnn_tf32_off`` (the
     conv turns cuDNN's TF32 off itself, named as a setting);
   - ``hostloop``: ~300 µs of Python per step in the launch-bound chain, caught on host time.

   A plant is caught when its test's verdict is ``regressed``; the table names the layer
   that failed it (work, calls or timing), the family, the first kernel row, the settings
   named and the first reason;
4. with more than one run planned, ``-n 2`` unchanged when pytest-xdist is importable: the
   devices each test ran on (the JSON report's ``device``) and the controller's GPU header;
   one unchanged run with ``--tprof-collect=nvtx`` (NVTX ranges for Nsight), and one
   ``--tprof-save --tprof-collect=memory`` into a folder of its own (allocations per op);
5. ``python -m tprof_engine show`` on one saved baseline.

The kernel-attribution rate is the share of the unchanged runs' device time (kernels,
memcpy, memset) that links to a CPU op (``tprof_engine.reduce.device_attribution`` over their
traces): what the op rows can hold of what ran.

Without CUDA it is a self-test of the same flow on CPU tensors: the ``wider`` plant must be
caught by the work census; the device plants are skipped.  ``--quick`` (2 saves, 1 unchanged
run, no xdist run, 6 rounds + 1 warm-up instead of 12 + 2) is what the project's tests run;
``--floor F`` passes ``--tprof-floor=F``, for a self-test on a busy machine, where timing is
not what is checked.  Exits 1 on a missed plant, a false failure or a run that didn't finish;
prints a table.

    python benchmarks/gpu_check.py [--sessions 3] [--runs 3] [--quick] [--floor F] [--keep DIR]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def source_path() -> list[str]:
    """The folders that import this working tree uninstalled: the repository (``pytest_tprof``)
    and ``profiler/`` (``tprof_engine``)."""
    return [str(REPO), str(REPO / "profiler")]


SOURCE_PATH = source_path()
sys.path[:0] = [*SOURCE_PATH, str(REPO / "benchmarks")]  # the engine, and the harness beside it

from gpu_suite import PLANTS, SUITE, TESTS, Verdict, verdict_of  # noqa: E402
from harness.runs import PYTEST, by_name  # noqa: E402
from harness.runs import run as run_command  # noqa: E402
from harness.workspace import prepare, workspace  # noqa: E402

PROFILE_ARGS = ("--tprof-rounds=12", "--tprof-warmup=2")
QUICK_ARGS = ("--tprof-rounds=6", "--tprof-warmup=1")
JUDGED_SHARE = 0.9  # of unchanged test-runs with device time, judged on it


@dataclass
class Run:
    """One pytest run: its verdicts by test name, its header lines and its exit status."""

    label: str
    verdicts: dict[str, Verdict]
    header: list[str]
    status: int


class Suite:
    """The folder (pytest's rootdir) and the pytest runs in it."""

    def __init__(self, folder: Path, extra: list[str]) -> None:
        self.folder = folder
        self.extra = extra
        self.count = 0
        prepare(folder, "test_gpu_suite.py", SUITE, "[pytest]\n", ("traces",))

    def command(self, tag: str, args: list[str]) -> list[str]:
        plugins = ["-p", "pytest_tprof.plugin"]
        if importlib.util.find_spec("xdist") is not None:
            plugins += ["-p", "xdist.plugin"]
        where = [f"--tprof-baseline-dir={self.folder / 'baselines'}"]
        where += [f"--tprof-trace-dir={self.folder / 'traces' / tag}"]
        where += [f"--tprof-json={self.folder / 'reports' / f'{tag}.json'}"]
        return [*PYTEST, str(self.folder), "-p", "no:cacheprovider", *plugins, *where]

    def run(self, label: str, args: list[str], plant: str = "") -> Run:
        """One pytest run; prints one line of verdicts."""
        self.count += 1
        tag = f"{self.count:02d}-{label}"
        cmd = [*self.command(tag, args), *self.extra, *args]
        env = {**working_tree_env(), "TPROF_PLANT": plant, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        report = self.folder / "reports" / f"{tag}.json"
        done = run_command(cmd, self.folder, env=env, ok=None)
        log = f"TPROF_PLANT={plant!r} {' '.join(cmd)}\nexit {done.returncode}\n\n"
        (self.folder / "logs" / f"{tag}.txt").write_text(log + done.stdout + done.stderr)
        if done.returncode not in (0, 1) or not report.exists():
            sys.exit(f"pytest exited {done.returncode} in {tag}:\n{done.tail()}")
        verdicts = {
            n: verdict_of(t) for n, t in by_name(json.loads(report.read_text())["tests"]).items()
        }
        missing = [name for name in TESTS if name not in verdicts]
        if missing:
            sys.exit(f"{tag}: no verdict for {missing} in {report}:\n{done.stdout[-3000:]}")
        header = [line for line in done.stdout.splitlines() if line.startswith("tprof: ")]
        cells = "  ".join(f"{n[5:]}={v.verdict}" for n, v in verdicts.items())
        print(f"  {label:<14} exit {done.returncode}  {cells}", flush=True)
        return Run(label, verdicts, header, done.returncode)

    def traces(self, label: str) -> list[Path]:
        return sorted(self.folder.glob(f"traces/*-{label}/*.pt.trace.json.gz"))


def working_tree_env() -> dict[str, str]:
    """This process's environment with the repository first on ``PYTHONPATH``."""
    path = [*SOURCE_PATH, *filter(None, [os.environ.get("PYTHONPATH")])]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path)}


def attribution(traces: list[Path]) -> tuple[float, float]:
    """Device µs linked to a CPU op and all device µs, over the traces."""
    from tprof_engine.reduce.ops import device_attribution
    from tprof_engine.store.traces import read_trace

    linked = total = 0.0
    for path in traces:
        a, t = device_attribution(read_trace(path).events)
        linked, total = linked + a, total + t
    return linked, total


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def check_cli(suite: Suite) -> tuple[bool, str]:
    """``python -m tprof_engine show`` on one saved baseline, from the working tree."""
    files = sorted(suite.folder.glob("baselines/*/*.json"))
    if not files:
        return False, "no baseline file was saved"
    show = [sys.executable, "-m", "tprof_engine", "show", str(files[0])]
    done = run_command(show, suite.folder, env=working_tree_env(), ok=None)
    first = (done.stdout.strip().splitlines() or [done.stderr.strip()[-200:]])[0]
    return done.returncode == 0, f"exit {done.returncode}: {first[:70]}"


@dataclass
class Findings:
    """What the runs showed, for the table and the exit status."""

    cuda: bool
    saves_ok: bool = True
    unchanged: list[Run] | None = None
    plants: dict[str, Run | str] | None = None  # a run, or why the plant was skipped
    extras: list[tuple[str, bool, str]] | None = None  # (check, passed, what it showed)
    attributed: tuple[float, float] = (0.0, 0.0)

    def false_failures(self) -> list[tuple[str, str, Verdict]]:
        return [
            (r.label, name, v)
            for r in self.unchanged or []
            for name, v in r.verdicts.items()
            if v.failed
        ]

    def problems(self) -> list[str]:
        out = [] if self.saves_ok else ["a --tprof-save run failed"]
        out += [
            f"false failure: {name} in {label} ({v.layer})"
            for label, name, v in self.false_failures()
        ]
        for plant, run in (self.plants or {}).items():
            if isinstance(run, Run):
                out += plant_problems(plant, run.verdicts[PLANTS[plant].test], cuda=self.cuda)
        judged, with_device = self.device_judged()
        if self.cuda and with_device and judged < JUDGED_SHARE * with_device:
            out.append(f"device timing judged in only {judged} of {with_device} test-runs")
        out += [f"{check}: {shown}" for check, ok, shown in self.extras or [] if not ok]
        return out

    def device_judged(self) -> tuple[int, int]:
        """Unchanged test-runs with device time judged on it, and those with device time."""
        runs = [v for r in self.unchanged or [] for v in r.verdicts.values() if v.has_device]
        return sum(v.device_judged for v in runs), len(runs)


def plant_problems(plant: str, v: Verdict, *, cuda: bool) -> list[str]:
    """What a plant's run missed: the failure, and on a GPU the layer, family, kernel and
    setting that must name it (on the CPU only the work census is expected to catch one)."""
    spec = PLANTS[plant]
    if not v.failed:
        return [f"plant {plant} not caught"]
    if not cuda:
        return [] if v.layer == spec.layer else [f"plant {plant} not caught by the {spec.layer}"]
    out = []
    if spec.layer and v.layer != spec.layer:
        out.append(f"plant {plant} caught by the {v.layer}, not by {spec.layer}")
    if spec.family and spec.family not in v.families:
        out.append(f"plant {plant} not caught on {spec.family} time ({v.families})")
    if spec.family == "cuda" and not v.kernel:
        out.append(f"plant {plant}: no kernel named")
    if spec.setting and spec.setting not in v.settings:
        out.append(f"plant {plant}: setting not named ({v.settings or 'none'})")
    return out


def run_plants(suite: Suite, cuda: bool) -> dict[str, Run | str]:
    out: dict[str, Run | str] = {}
    for plant, spec in PLANTS.items():
        if spec.needs_device and not cuda:
            out[plant] = "skipped: needs a CUDA device"
            continue
        out[plant] = suite.run(f"plant-{plant}", ["--tprof"], plant=plant)
    return out


def leak_check(plants: dict[str, Run | str]) -> tuple[str, bool, str] | None:
    """The settings-leak plant's run: every test after the one that changed the precision
    names it, and still compares its timing (none reads "not compared")."""
    run = plants.get("tf32_off")
    if not isinstance(run, Run):
        return None
    setting = PLANTS["tf32_off"].setting
    named = [n for n, v in run.verdicts.items() if setting in v.settings]
    failed = sorted(n for n, v in run.verdicts.items() if v.failed)
    shown = f"{len(named)} of {len(run.verdicts)} later tests name it; failed: {', '.join(failed)}"
    return ("settings leak", len(named) == len(run.verdicts), shown)


def memory_check(suite: Suite) -> tuple[str, bool, str]:
    """One ``--tprof-save --tprof-collect=memory`` run into a baseline folder of its own: every
    test's session holds its allocations per op (on the device, with CUDA)."""
    folder = suite.folder / "memory-baselines"
    args = ["--tprof-save", "--tprof-collect=memory", f"--tprof-baseline-dir={folder}"]
    run = suite.run("memory", args)
    from tprof_engine.store.baselines import load_baseline

    held = {}
    for path in sorted(folder.glob("*/*.json")):
        base = load_baseline(path)
        memory = base.tables[-1].memory
        if memory is not None and memory.alloc_bytes.sum() > 0:
            per_round = memory.alloc_bytes.sum(axis=0).mean() / 2**20
            held[base.nodeid.split("::")[-1]] = per_round
    shown = ", ".join(f"{n} {mb:,.1f} MiB" for n, mb in sorted(held.items())[:3])
    ok = run.status == 0 and len(held) == len(TESTS)
    return ("--tprof-collect=memory", ok, f"{len(held)} of {len(TESTS)} tests allocate: {shown}")


def run_extras(suite: Suite, with_xdist: bool) -> list[tuple[str, bool, str]]:
    """The -n 2 run, the --tprof-collect=nvtx run and the CLI: (check, passed, what it showed)."""
    out: list[tuple[str, bool, str]] = []
    if with_xdist:
        run = suite.run("xdist", ["--tprof", "-n", "2"])
        devices = sorted({v.device for v in run.verdicts.values()})
        gpu_lines = " ".join(h[7:] for h in run.header if " GPU" in h) or "no GPU header line"
        passed = not any(v.failed for v in run.verdicts.values())
        out.append(("-n 2 devices", passed, f"{'; '.join(devices)} | {gpu_lines}"))
    run = suite.run("nvtx", ["--tprof", "--tprof-collect=nvtx"])
    notes = [h[7:] for h in run.header if h.startswith("tprof: --tprof-collect=nvtx")]
    shown = notes[0] if notes else "ranges emitted (see them with nsys profile)"
    out.append(("--tprof-collect=nvtx", not any(v.failed for v in run.verdicts.values()), shown))
    out.append(("python -m tprof_engine show", *check_cli(suite)))
    out.append(memory_check(suite))
    return out


def check(folder: Path, *, sessions: int, runs: int, extra: list[str], xdist: bool) -> Findings:
    cuda = cuda_available()
    suite = Suite(folder, extra)
    found = Findings(cuda=cuda)
    for k in range(sessions):
        found.saves_ok &= suite.run(f"save{k + 1}", ["--tprof-save"]).status == 0
    found.unchanged = [suite.run(f"unchanged{k + 1}", ["--tprof"]) for k in range(runs)]
    found.plants = run_plants(suite, cuda)
    with_xdist = xdist and importlib.util.find_spec("xdist") is not None
    leak = leak_check(found.plants)
    found.extras = [*([leak] if leak else []), *run_extras(suite, with_xdist)]
    traces = [p for k in range(runs) for p in suite.traces(f"unchanged{k + 1}")]
    found.attributed = attribution(traces)
    return found


def print_table(found: Findings, seconds: float) -> None:
    import torch

    where = f"CUDA {torch.version.cuda}, {torch.cuda.get_device_name()}" if found.cuda else "CPU"
    print(f"\nGPU check: torch {torch.__version__} on {where}; {seconds:.0f} s\n")
    print(f"{'plant':<14} {'test':<17} {'caught':<6} {'layer':<7} {'family':<7} kernel / reason")
    for plant, run in (found.plants or {}).items():
        test = PLANTS[plant].test
        if isinstance(run, str):
            print(f"{plant:<14} {test:<17} {'-':<6} {'-':<7} {'-':<7} {run}")
            continue
        v = run.verdicts[test]
        said = " | ".join(filter(None, [v.kernel[:60], v.settings, v.reason[:90]]))
        caught = "yes" if v.failed else "NO"
        family = ",".join(v.families) or "-"
        print(f"{plant:<14} {test:<17} {caught:<6} {v.shown:<7} {family:<7} {said}")
    unchanged = found.unchanged or []
    tested = sum(len(r.verdicts) for r in unchanged)
    false = found.false_failures()
    layers = ", ".join(f"{v.layer}: {name} in {label}" for label, name, v in false) or "none"
    print(
        f"\nfalse failures in {len(unchanged)} unchanged runs: {len(false)} of {tested} "
        f"test-runs ({layers})"
    )
    judged, with_device = found.device_judged()
    if with_device:
        print(
            f"device timing judged in {judged} of {with_device} unchanged test-runs with "
            f"device time (wanted: {JUDGED_SHARE:.0%})"
        )
    linked, total = found.attributed
    if total > 0:
        print(
            f"kernel attribution: {100 * linked / total:.1f} % of {total:,.0f} µs of device "
            "time links to a CPU op"
        )
    else:
        print("kernel attribution: n/a (no device time in the traces)")
    for name, ok, shown in found.extras or []:
        print(f"{name}: {'ok' if ok else 'FAILED'}: {shown}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=3, help="baseline saves (default: 3)")
    parser.add_argument("--runs", type=int, default=3, help="unchanged runs (default: 3)")
    parser.add_argument(
        "--quick", action="store_true", help="2 saves, 1 unchanged run, no -n 2, 6 rounds"
    )
    parser.add_argument("--floor", type=float, help="pass --tprof-floor=F to every run")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it")
    opts = parser.parse_args()
    sessions, runs = (2, 1) if opts.quick else (opts.sessions, opts.runs)
    extra = list(QUICK_ARGS if opts.quick else PROFILE_ARGS)
    extra += [] if opts.floor is None else [f"--tprof-floor={opts.floor}"]
    started = time.monotonic()
    with workspace("tprof-gpu-check-", opts.keep) as folder:
        found = check(folder, sessions=sessions, runs=runs, extra=extra, xdist=not opts.quick)
        print_table(found, time.monotonic() - started)
    problems = found.problems()
    for p in problems:
        print(f"PROBLEM: {p}")
    print("\nresult:", "FAILED" if problems else "passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
