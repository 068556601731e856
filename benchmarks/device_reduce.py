"""What the device table costs ``reduce_events`` on the real GPU traces.

Run from the repository root::

    .venv/bin/python benchmarks/device_reduce.py [--repeat 7]

For each kineto trace in ``tests/data/gpu-traces/`` (recorded on A100 / V100), the trace is
read once and ``reduce_events`` timed ``--repeat`` times on its events; the table gives the
median and fastest seconds and the device table's rows.  Run it with ``PYTHONPATH`` at another
checkout to time that checkout's reduction on the same traces (a checkout without device tables
shows 0 rows).  Timings are wall-clock on a possibly shared machine: read the fastest column.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from tprof_engine.reduce.ops import reduce_events
from tprof_engine.store.traces import read_trace

TRACES = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpu-traces"


def _times(fn: object, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    if not TRACES.is_dir():
        raise SystemExit(f"{TRACES}: no GPU traces there; this benchmark needs them")
    print(f"{'trace':<36} {'events':>8} {'device rows':>11} {'median s':>9} {'fastest s':>9}")
    for path in sorted(TRACES.glob("*.json.gz")):
        ev = read_trace(path).events
        table = reduce_events(ev)
        rows = len(getattr(table, "device", None).ops) if getattr(table, "device", None) else 0
        times = _times(lambda ev=ev: reduce_events(ev), args.repeat)
        print(
            f"{path.name:<36} {len(ev):>8,} {rows:>11,} {statistics.median(times):>9.3f} "
            f"{min(times):>9.3f}"
        )


if __name__ == "__main__":
    main()
