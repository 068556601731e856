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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def source_path() -> list[str]:
    """The folders that import this working tree uninstalled: the repository (``pytest_tprof``)
    and ``profiler/`` (``tprof_engine``)."""
    return [str(REPO), str(REPO / "profiler")]


SOURCE_PATH = source_path()
sys.path[:0] = SOURCE_PATH

SUITE = '''
"""GPU tests of the kinds users write, profiled with pytest-tprof's ``tprof`` fixture."""

import os
import time

import pytest
import torch

PLANT = os.environ.get("TPROF_PLANT", "")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
BIG = DEVICE == "cuda"  # device-sized shapes on a GPU, small ones for the CPU self-test
# TF32 for fp32 GEMMs, as many training codebases set it at import
torch.set_float32_matmul_precision("high")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_a_sets_precision():
    # Runs first and profiles nothing: an earlier test that changes a process-wide setting
    # every later test inherits (the settings-leak plant).
    if PLANT == "tf32_off":
        torch.set_float32_matmul_precision("highest")


def test_matmul(tprof):
    hidden = 1280 if PLANT == "wider" else 1024
    x = torch.randn(256, 512, device=DEVICE)
    w1 = torch.randn(512, hidden, device=DEVICE)
    w2 = torch.randn(hidden, 512, device=DEVICE)
    tprof(lambda: torch.relu(x @ w1) @ w2)


def test_copy_back(tprof):
    x = torch.randn(256, 256, device=DEVICE)
    w = torch.randn(256, 256, device=DEVICE)

    def step():
        y = torch.tanh(x @ w)
        if PLANT == "d2h":
            return y.cpu()
        return y

    tprof(step)


def test_loss_step(tprof):
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 256), torch.nn.GELU(), torch.nn.Linear(256, 10)
    ).to(DEVICE)
    x = torch.randn(64, 128, device=DEVICE)
    y = torch.randint(0, 10, (64,), device=DEVICE)

    def step():
        model.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        if PLANT == "sync":
            return loss.item()
        return loss

    tprof(step)


def test_gemm_fp32(tprof):
    n = 2048 if BIG else 64
    a = torch.randn(n, n, device=DEVICE)
    b = torch.randn(n, n, device=DEVICE)
    tprof(lambda: a @ b)


def test_elementwise(tprof):
    n = 4096 if BIG else 64
    a = torch.randn(n, n, device=DEVICE)
    b = torch.randn(n, n, device=DEVICE)
    if PLANT == "noncontig":  # the same values' shape, read across rows: a transposed view
        b = torch.randn(n, n, device=DEVICE).t()
    tprof(lambda: torch.sigmoid(a * b + a))


def test_gemm_bf16(tprof):
    n = 4096 if BIG else 64
    a = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=DEVICE, dtype=torch.bfloat16)
    if PLANT == "misalign":  # the same shape at an odd address: no 16-byte-aligned kernel
        held = torch.empty(n * n + 1, device=DEVICE, dtype=torch.bfloat16)
        a = held[1:].view(n, n).copy_(a)
    tprof(lambda: a @ b)


def test_conv_fp32(tprof):
    if PLANT == "cudnn_tf32_off":
        torch.backends.cudnn.conv.fp32_precision = "ieee"
    channels, size = (64, 56) if BIG else (4, 8)
    conv = torch.nn.Conv2d(channels, channels, 3, padding=1).to(DEVICE)
    x = torch.randn(32 if BIG else 2, channels, size, size, device=DEVICE)

    def step():
        conv.zero_grad()
        conv(x).sum().backward()

    tprof(step)


def test_launch_bound(tprof):
    x = torch.randn(64, 64, device=DEVICE)

    def step():
        y = x
        for _ in range(12):
            y = torch.softmax(y, dim=-1)
        if PLANT == "hostloop":  # ~300 µs of Python per step, between the launches
            end = time.perf_counter() + 300e-6
            while time.perf_counter() < end:
                pass
        return y

    tprof(step)
'''

TESTS = ("test_matmul", "test_copy_back", "test_loss_step", "test_gemm_fp32", "test_elementwise",
         "test_gemm_bf16", "test_conv_fp32", "test_launch_bound")  # fmt: skip


@dataclass(frozen=True)
class Plant:
    """A planted change: its test, whether it needs a device, and what must catch it: the
    layer, and for a timing plant the family that fails and the setting named (if any)."""

    test: str
    needs_device: bool
    layer: str
    family: str = ""
    setting: str = ""


PLANTS = {
    "wider": Plant("test_matmul", False, "work"),
    "d2h": Plant("test_copy_back", True, ""),  # any layer: calls, work or timing
    "sync": Plant("test_loss_step", True, ""),
    # timing-only: the same ops and work, slower kernels (or a slower host).  Any layer may
    # fail them too (another kernel can take other launch calls); the family must be named.
    "tf32_off": Plant("test_gemm_fp32", True, "", "cuda",
                      "float32 matmul precision high → highest"),
    "noncontig": Plant("test_elementwise", True, "", "cuda"),
    "misalign": Plant("test_gemm_bf16", True, "", "cuda"),
    "cudnn_tf32_off": Plant("test_conv_fp32", True, "", "cuda",
                            "cuDNN conv fp32 precision tf32 → ieee"),
    "hostloop": Plant("test_launch_bound", True, "", "host"),
}  # fmt: skip
PROFILE_ARGS = ("--tprof-rounds=12", "--tprof-warmup=2")
QUICK_ARGS = ("--tprof-rounds=6", "--tprof-warmup=1")
FAILED = ("regressed", "error")
JUDGED_SHARE = 0.9  # of unchanged test-runs with device time, judged on it


@dataclass(frozen=True)
class Verdict:
    """One test's verdict in one run, as the JSON report gives it."""

    verdict: str
    layer: str  # what failed it: work, calls, timing or error ("-" when it passed)
    reason: str
    device: str
    families: tuple[str, ...] = ()  # the families whose timing failed it
    kernel: str = ""  # the first kernel (copy, fill) row of its flagged ops
    settings: str = ""  # the settings cause, when its settings changed
    device_judged: bool = False  # its device time was judged (compared, gating, not noisy)
    has_device: bool = False  # it has a device family at all

    @property
    def failed(self) -> bool:
        return self.verdict in FAILED

    @property
    def shown(self) -> str:
        """The layer that failed the test, or the verdict of one that passed."""
        return self.layer if self.failed else f"({self.verdict})"


def verdict_of(test: dict[str, Any]) -> Verdict:
    """A JSON report test entry as a :class:`Verdict`."""
    work = test.get("work") or {}
    families = test.get("families", [])
    layer = "-"
    if test["verdict"] == "error":
        layer = "error"
    elif test["verdict"] == "regressed":
        if work.get("verdict") == "regressed":
            layer = "work"
        elif any(f.get("structure_regressed") for f in families):
            layer = "calls"
        else:
            layer = "timing"
    # the reason of the layer that failed the test (the test's reason starts with timing's),
    # or what the census saw in a test that passed with other work
    census_says = layer == "work" or (layer == "-" and work.get("verdict") == "changed")
    reasons = work.get("reasons") if census_says else None
    reason = reasons[0] if reasons else str(test.get("reason", ""))
    cuda = [f for f in families if f["family"] == "cuda"]
    slower = tuple(f["family"] for f in families if f.get("gates", True)
                   and (f.get("timing_regressed") or f.get("op_gate")))  # fmt: skip
    return Verdict(
        test["verdict"], layer, reason, str(test.get("device")), families=slower,
        kernel=next((r["name"] for r in test.get("device_rows", [])), ""),
        settings=next((c["text"] for c in test.get("causes", []) if c["kind"] == "settings"), ""),
        device_judged=bool(test.get("timing_compared")) and any(
            f.get("gates", True) and not f.get("too_noisy") for f in cuda
        ),
        has_device=bool(cuda),
    )  # fmt: skip


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
        for sub in ("reports", "logs", "traces"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        (folder / "test_gpu_suite.py").write_text(SUITE)
        (folder / "conftest.py").write_text("")
        (folder / "pytest.ini").write_text("[pytest]\n")

    def command(self, tag: str, args: list[str]) -> list[str]:
        plugins = ["-p", "pytest_tprof.plugin"]
        if importlib.util.find_spec("xdist") is not None:
            plugins += ["-p", "xdist.plugin"]
        return [
            sys.executable, "-m", "pytest", str(self.folder), "-p", "no:cacheprovider",
            *plugins, f"--tprof-baseline-dir={self.folder / 'baselines'}",
            f"--tprof-trace-dir={self.folder / 'traces' / tag}",
            f"--tprof-json={self.folder / 'reports' / f'{tag}.json'}",
            *self.extra, *args,
        ]  # fmt: skip

    def run(self, label: str, args: list[str], plant: str = "") -> Run:
        """One pytest run; prints one line of verdicts."""
        self.count += 1
        tag = f"{self.count:02d}-{label}"
        cmd = self.command(tag, args)
        env = {**working_tree_env(), "TPROF_PLANT": plant, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        done = subprocess.run(cmd, cwd=self.folder, env=env, capture_output=True, text=True)
        log = f"TPROF_PLANT={plant!r} {' '.join(cmd)}\nexit {done.returncode}\n\n"
        (self.folder / "logs" / f"{tag}.txt").write_text(log + done.stdout + done.stderr)
        report = self.folder / "reports" / f"{tag}.json"
        if done.returncode not in (0, 1) or not report.exists():
            sys.exit(f"pytest exited {done.returncode} in {tag}:\n"
                     f"{done.stdout[-3000:]}\n{done.stderr[-2000:]}")  # fmt: skip
        doc = json.loads(report.read_text())
        verdicts = {t["nodeid"].split("::")[-1]: verdict_of(t) for t in doc["tests"]}
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
    done = subprocess.run([sys.executable, "-m", "tprof_engine", "show", str(files[0])],
                          env=working_tree_env(), capture_output=True, text=True)  # fmt: skip
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
        return [(r.label, name, v) for r in self.unchanged or [] for name, v in r.verdicts.items()
                if v.failed]  # fmt: skip

    def problems(self) -> list[str]:
        out = [] if self.saves_ok else ["a --tprof-save run failed"]
        out += [f"false failure: {name} in {label} ({v.layer})"
                for label, name, v in self.false_failures()]  # fmt: skip
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
    run = suite.run("memory", ["--tprof-save", "--tprof-collect=memory",
                               f"--tprof-baseline-dir={folder}"])  # fmt: skip
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
    print(f"\nfalse failures in {len(unchanged)} unchanged runs: {len(false)} of {tested} "
          f"test-runs ({layers})")  # fmt: skip
    judged, with_device = found.device_judged()
    if with_device:
        print(f"device timing judged in {judged} of {with_device} unchanged test-runs with "
              f"device time (wanted: {JUDGED_SHARE:.0%})")  # fmt: skip
    linked, total = found.attributed
    if total > 0:
        print(f"kernel attribution: {100 * linked / total:.1f} % of {total:,.0f} µs of device "
              "time links to a CPU op")  # fmt: skip
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
    with tempfile.TemporaryDirectory(prefix="tprof-gpu-check-") as tmp:
        folder = opts.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        found = check(folder, sessions=sessions, runs=runs, extra=extra, xdist=not opts.quick)
        print_table(found, time.monotonic() - started)
    problems = found.problems()
    for p in problems:
        print(f"PROBLEM: {p}")
    print("\nresult:", "FAILED" if problems else "passed")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
