"""What ``--tprof`` adds to each test's time, measured side by side in one run.

Runs ``examples/`` (copied with its committed baselines into a temporary folder) without
``--tprof``, with ``--tprof`` (compare), and with ``--tprof-save``, each ``--repeat`` times,
alternating, and prints each test's median call-phase time per mode (from ``--durations``)
and the added seconds.  A fresh-process confirmation, when one runs, costs about one more
pytest start plus the test's profiling; it is listed separately when the run needed one.

    python benchmarks/overhead.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODES = {"plain": [], "--tprof": ["--tprof"], "--tprof-save": ["--tprof-save"]}
_DURATION = re.compile(r"^\s*([\d.]+)s call\s+(\S+)")


def durations(folder: Path, flags: list[str], save_dir: Path) -> dict[str, float]:
    """Call-phase seconds per test of one pytest run."""
    cmd = [
        sys.executable, "-m", "pytest", "examples", "-q", "-p", "no:cacheprovider",
        "--durations=0", "--durations-min=0", *flags,
    ]  # fmt: skip
    if "--tprof-save" in flags:  # a save must not touch the baselines the compare runs use
        cmd.append(f"--tprof-baseline-dir={save_dir}")
    done = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, check=False)
    out = {}
    for line in done.stdout.splitlines():
        m = _DURATION.match(line)
        if m:
            out[m.group(2)] = float(m.group(1))
    if not out:
        raise SystemExit(f"no durations from {' '.join(flags) or 'plain'}: {done.stdout[-500:]}")
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    seen: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory(prefix="tprof-overhead-") as tmp:
        folder = Path(tmp)
        shutil.copytree(ROOT / "examples", folder / "examples")
        shutil.copytree(ROOT / "baselines", folder / "baselines")
        (folder / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
        for _ in range(args.repeat):
            for mode, flags in MODES.items():
                for test, s in durations(folder, flags, folder / "saved").items():
                    seen[test][mode].append(s)
    print(f"{'test':<48} {'plain s':>8} {'--tprof s':>10} {'--tprof-save s':>15} {'added s':>8}")
    for test in sorted(seen):
        med = {m: statistics.median(seen[test][m]) if seen[test][m] else 0.0 for m in MODES}
        added = med["--tprof"] - med["plain"]
        print(
            f"{test.split('/')[-1]:<48} {med['plain']:>8.2f} {med['--tprof']:>10.2f} "
            f"{med['--tprof-save']:>15.2f} {added:>+8.2f}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
