"""The torch matrix: each supported torch release in a virtualenv of its own, run for real.

    python benchmarks/torch_matrix.py [RELEASE ...] [--python PY] [--no-suite] [--no-workload]
                                      [--record] [--venvs DIR] [--keep] [--markdown FILE]

For each release (default: every one the package supports, ``tprof_engine.torch_support``):

1. a new virtualenv with ``pip install torch==RELEASE`` (timed; the CUDA builds run on the
   CPU, a ``+cpu`` build is taken where pip finds one), then the project, editable, with its
   ``test`` and ``html`` extras;
2. the whole suite, as ``make test`` runs it (``-n 2 -m "not serial"``, then ``-m serial``);
3. a short profiled workload of its own (an MLP training step, a conv block, attention, an
   LSTM) under ``filterwarnings = error``: three ``--tprof-save`` runs, two ``--tprof``
   compares of the same code (every failed test there is a false failure), then one compare
   with the MLP planted twice as wide, which must fail on its work;
4. the release's shape (``benchmarks/torch_shape.py``), kept under
   ``tests/data/torch-releases/`` with ``--record``.

It prints one table (release, Python, install seconds, the suite's counts, false failures, the
plant caught, the run header's notes) and writes it as Markdown with ``--markdown``.  Each
virtualenv takes 1-7 GB: it is removed once its release is done, unless ``--keep``; a kept one
is used again by a later run (no install).  Each release's row is kept in the virtualenvs'
folder (``row-RELEASE.json``, merged with an earlier run's), so the stages can run apart:
``--record --keep --no-suite --no-workload`` for every release first (their shapes are test
data the suite reads), then the rest.  Exits 1 when a release misses (a failed suite, a false
failure, the plant missed), 0 otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tprof_engine.torch_support import VERIFIED

ROOT = Path(__file__).resolve().parents[1]
RELEASES_DATA = ROOT / "tests" / "data" / "torch-releases"
DEFAULT_RELEASES = VERIFIED  # the releases the package states it supports

WORKLOAD = """\
import os

import torch
from torch import nn

WIDTH = 128 * (2 if os.environ.get("TPROF_MATRIX_PLANT") else 1)


def test_mlp_training_step(tprof):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, WIDTH), nn.ReLU(), nn.Linear(WIDTH, 10))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(32, 64), torch.randint(0, 10, (32,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tprof(step)


def test_conv_block(tprof):
    torch.manual_seed(0)
    block = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
    x = torch.randn(4, 3, 32, 32)
    tprof(lambda: block(x).sum().backward())


def test_attention(tprof):
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 64, 32) for _ in range(3))
    tprof(torch.nn.functional.scaled_dot_product_attention, q, k, v)


@torch.no_grad()
def test_lstm_inference(tprof):
    torch.manual_seed(0)
    lstm = nn.LSTM(32, 64, batch_first=True)
    x = torch.randn(4, 16, 32)
    tprof(lstm, x)
"""
INI = "[pytest]\nfilterwarnings =\n    error\n"


@dataclass
class Row:
    release: str
    python: str = ""
    torch: str = ""
    install_s: float = 0.0
    suite: str = "not run"
    suite_ok: bool = True
    suite_s: float = 0.0
    false_failures: int | None = None
    plant_caught: bool | None = None
    notes: list[str] = field(default_factory=list)
    problem: str = ""

    @property
    def ok(self) -> bool:
        return (
            not self.problem
            and self.suite_ok
            and self.false_failures == 0
            and bool(self.plant_caught)
        )


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None) -> tuple[int, str]:
    done = subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, check=False)
    return done.returncode, done.stdout + done.stderr


def install(row: Row, venv: Path, python: str) -> Path:
    """A virtualenv with torch ``row.release`` and the project; its Python.  One kept from an
    earlier run keeps its torch and gets the project again (its extras may have grown)."""
    py = venv / "bin" / "python"
    marker = venv / "installed"
    if marker.exists():  # its install's seconds, as that run timed them
        row.install_s = float(marker.read_text(encoding="utf-8"))
    else:
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([python, "-m", "venv", str(venv)], check=True)
        started = time.perf_counter()
        code, out = run([str(py), "-m", "pip", "install", "-q", f"torch=={row.release}"], ROOT)
        row.install_s = time.perf_counter() - started
        if code:
            raise RuntimeError(f"pip install torch=={row.release} failed:\n{out[-2000:]}")
        marker.write_text(f"{row.install_s:.1f}\n", encoding="utf-8")
    env = {**os.environ, "PYTHONWARNINGS": "ignore:Editable installation"}
    code, out = run([str(py), "-m", "pip", "install", "-q", "-e", ".[test,html]"], ROOT, env)
    if code:
        raise RuntimeError(f"installing the project failed:\n{out[-2000:]}")
    return _versions(row, py)


def _versions(row: Row, py: Path) -> Path:
    code, out = run(
        [
            str(py),
            "-c",
            "import platform, torch; print(torch.__version__, platform.python_version())",
        ],
        ROOT,
    )
    if code:
        raise RuntimeError(f"torch does not import:\n{out[-2000:]}")
    row.torch, row.python = out.split()[-2:]
    return py


# pytest's closing line, with -q: "1004 passed, 10 skipped, 1065 deselected in 83.81s"
_SUMMARY = re.compile(r"^=*\s*(\d+ (?:passed|failed|skipped|deselected|error).*?) in [\d.]+s", re.M)


# What the repository's own data holds, whatever torch runs it: every release's shape is
# recorded (make test checks it); a release's suite may run before the last shape is.
DATA_ONLY = (
    "tests/profiler/capture/test_torch_api.py::test_every_supported_release_has_its_shape_recorded"
)


def closing(out: str) -> str:
    """pytest's closing counts, less the deselected ones (the other part's tests)."""
    found = _SUMMARY.findall(out)
    return re.sub(r", \d+ deselected", "", found[-1]) if found else ""


def suite(row: Row, py: Path) -> None:
    """The whole suite as ``make test`` runs it."""
    started = time.perf_counter()
    parts, ok = [], True
    for args in (["-n", "2", "-m", "not serial"], ["-m", "serial"]):
        cmd = [str(py), "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args]
        cmd += ["--deselect", DATA_ONLY]
        code, out = run(cmd, ROOT)
        ok = ok and code == 0
        parts.append(closing(out) or f"exit {code}")
        with (py.parents[2] / f"suite-{row.release}.log").open("a", encoding="utf-8") as f:
            f.write(out)
    row.suite, row.suite_ok = " + ".join(parts), ok
    row.suite_s = time.perf_counter() - started


def workload(row: Row, py: Path) -> None:
    """Three saves, two unchanged compares, a planted work change."""
    with tempfile.TemporaryDirectory(prefix="tprof-matrix-") as tmp:
        where = Path(tmp)
        (where / "test_workload.py").write_text(WORKLOAD, encoding="utf-8")
        (where / "pytest.ini").write_text(INI, encoding="utf-8")
        base = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist"]
        env = {k: v for k, v in os.environ.items() if k != "TPROF_MATRIX_PLANT"}
        for _ in range(3):
            code, out = run([str(py), *base, "--tprof-save"], where, env)
            if code:
                raise RuntimeError(f"a save failed:\n{out[-3000:]}")
        row.notes = _header_notes(out)
        row.false_failures = 0
        for _ in range(2):
            code, out = run([str(py), *base, "--tprof", "--tprof-json=r.json"], where, env)
            row.false_failures += _failed(where / "r.json", out, code)
        env["TPROF_MATRIX_PLANT"] = "1"
        code, out = run([str(py), *base, "--tprof", "--tprof-json=r.json"], where, env)
        row.plant_caught = code == 1 and _plant_caught(where / "r.json")


def _failed(report: Path, out: str, code: int) -> int:
    if code not in (0, 1) or not report.exists():
        raise RuntimeError(f"a compare ended with exit {code}:\n{out[-3000:]}")
    tests = json.loads(report.read_text(encoding="utf-8"))["tests"]
    return sum(t["outcome"] == "failed" for t in tests)


def _plant_caught(report: Path) -> bool:
    tests = {t["nodeid"]: t for t in json.loads(report.read_text(encoding="utf-8"))["tests"]}
    mlp = tests.get("test_workload.py::test_mlp_training_step", {})
    others_pass = all(t["outcome"] != "failed" for n, t in tests.items() if t is not mlp)
    return mlp.get("outcome") == "failed" and "work" in mlp.get("reason", "") and others_pass


def _header_notes(out: str) -> list[str]:
    """The run header's lines on what this torch lacks."""
    return [
        line.strip().removeprefix("tprof: ")
        for line in out.splitlines()
        if "torch" in line and ("not available" in line or "carry no" in line or "lacks" in line)
    ]


def probe(row: Row, py: Path, record: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out, trace = Path(tmp, "shape.json"), Path(tmp, "trace.json.gz")
        script = str(ROOT / "benchmarks" / "torch_shape.py")
        code, text = run([str(py), script, str(out), str(trace)], ROOT)
        if code:
            raise RuntimeError(f"the shape probe failed:\n{text[-2000:]}")
        if record:
            RELEASES_DATA.mkdir(parents=True, exist_ok=True)
            minor = ".".join(row.release.split(".")[:2])
            shutil.copy(out, RELEASES_DATA / f"{minor}.json")
            shutil.copy(trace, RELEASES_DATA / f"{minor}.pt.trace.json.gz")


def _row(key: str, folder: Path) -> Row:
    """The row as an earlier run left it, or a new one."""
    kept = folder / f"row-{key}.json"
    if not kept.exists():
        return Row(key)
    return Row(**json.loads(kept.read_text(encoding="utf-8")))


def one(release: str, args: argparse.Namespace) -> Row:
    folder = Path(args.venvs)
    folder.mkdir(parents=True, exist_ok=True)
    key = f"{release}-{args.tag}" if args.tag else release
    row, venv = _row(key, folder), folder / f"torch-{key}"
    row.release = release
    row.problem = ""
    try:
        py = install(row, venv, args.python)
        print(f"[{release}] installed in {row.install_s:.0f} s: torch {row.torch}", flush=True)
        probe(row, py, args.record)
        if args.workload:
            workload(row, py)
            print(
                f"[{release}] workload: {row.false_failures} false failures, "
                f"plant caught: {row.plant_caught}",
                flush=True,
            )
        if args.suite:
            suite(row, py)
            print(f"[{release}] suite: {row.suite} ({row.suite_s:.0f} s)", flush=True)
    except (RuntimeError, subprocess.CalledProcessError, ValueError) as exc:
        row.problem = str(exc).splitlines()[0]
        print(f"[{release}] {exc}", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(venv, ignore_errors=True)
        (folder / f"row-{key}.json").write_text(json.dumps(asdict(row)), encoding="utf-8")
    return row


def kept_rows(folder: Path) -> list[Row]:
    """Every row kept in ``folder``, oldest release first."""
    rows = [_row(p.stem.removeprefix("row-"), folder) for p in folder.glob("row-*.json")]
    return sorted(rows, key=lambda r: (tuple(map(int, r.release.split(".")[:2])), r.python))


HEADER = (
    "release",
    "Python",
    "install s",
    "suite",
    "suite s",
    "false failures",
    "work plant caught",
    "run-header notes",
)


def cells(row: Row) -> tuple[str, ...]:
    caught = {True: "yes", False: "NO", None: "-"}[row.plant_caught]
    false = "-" if row.false_failures is None else str(row.false_failures)
    notes = "; ".join(row.notes) or "none"
    return (
        row.torch or row.release,
        row.python,
        f"{row.install_s:.0f}",
        row.problem or row.suite,
        f"{row.suite_s:.0f}",
        false,
        caught,
        notes,
    )


def markdown(rows: list[Row]) -> str:
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(cells(r)) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", default=list(DEFAULT_RELEASES))
    parser.add_argument("--python", default=sys.executable, help="the Python of each venv")
    parser.add_argument("--no-suite", dest="suite", action="store_false")
    parser.add_argument("--no-workload", dest="workload", action="store_false")
    parser.add_argument("--record", action="store_true", help="keep each release's shape")
    parser.add_argument("--venvs", default=str(ROOT / ".tprof" / "matrix"))
    parser.add_argument("--keep", action="store_true", help="keep each virtualenv")
    parser.add_argument("--tag", default="", help="kept apart from the same release's other rows")
    parser.add_argument("--markdown", help="also write the table here")
    parser.add_argument("--table", action="store_true", help="only the kept rows' table")
    args = parser.parse_args(argv)
    if args.table:
        rows = kept_rows(Path(args.venvs))
    else:
        rows = [one(release, args) for release in args.releases]
    table = markdown(rows)
    print("\n" + table)
    if args.markdown:
        Path(args.markdown).write_text(table, encoding="utf-8")
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
