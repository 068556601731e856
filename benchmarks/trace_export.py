"""Is there a cheaper trace export than torch's?  Side by side in one run, on one capture.

Captures the training step of ``new_user_benchmark.py``'s workload (a 7-layer
TransformerEncoder with AdamW, 20 measured rounds: about 142k events) ``--repeat`` times and
exports each capture both ways (kineto saves a session's trace once: the array export goes
first, reading the same events the reduction reads):

- ``torch``: what tprof writes (``store.trace_gzip.write_gzipped``): torch's native
  ``export_chrome_trace`` to a scratch file, then one gzip pass at level 3, atomically;
- ``arrays``: the smallest trace the reduction's arrays could give (``kineto.events_from_kineto``
  already read them: names, start, end, thread, kind): one complete event (``"ph": "X"``) per
  event, formatted with numpy and gzipped the same way.  It lacks what the native export
  writes beside (op arguments and shapes, correlation and flow events linking kernels to their
  launches, device and stream rows, the profiler's metadata), so it would not load in
  Holistic Trace Analysis or TensorBoard as torch's does; it bounds from below what an export
  of our own could cost.

    python benchmarks/trace_export.py [--repeat 5] [--layers 7]

Prints each way's median seconds and bytes, and the ratio arrays / torch.
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from tprof_engine.capture import session
from tprof_engine.capture.backends import CPU
from tprof_engine.capture.export import export_plain
from tprof_engine.capture.kineto import events_from_kineto
from tprof_engine.store.trace_gzip import TRACE_GZIP_LEVEL, write_gzipped


def by_torch(prof: Any, path: Path) -> tuple[Path | None, str]:
    """What tprof writes: kineto's export, gzipped by the store's writer."""
    return write_gzipped(path, export=lambda plain: export_plain(prof, plain))


def make_step(layers: int) -> Any:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.1, batch_first=True)
    model = nn.Sequential(nn.TransformerEncoder(layer, layers, enable_nested_tensor=False))
    head = nn.Linear(64, 10)
    opt = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-3)
    x = torch.randn(8, 32, 64)
    y = torch.randint(0, 10, (8,))

    def step() -> float:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(head(model(x).mean(1)), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    return step


def from_arrays(prof: Any, path: Path) -> None:
    """The events as complete events, formatted from arrays, gzipped."""
    ev = events_from_kineto(prof)
    names = np.asarray([json.dumps(n) for n in ev.names], dtype=object)[ev.name_idx]
    t0 = int(ev.start_ns.min())
    ts = (ev.start_ns - t0) / 1000.0
    dur = (ev.end_ns - ev.start_ns) / 1000.0
    rows = [
        f'{{"ph":"X","name":{n},"pid":0,"tid":{t},"ts":{a:.3f},"dur":{d:.3f}}}'
        for n, t, a, d in zip(
            names.tolist(), ev.thread.tolist(), ts.tolist(), dur.tolist(), strict=True
        )
    ]
    body = '{"traceEvents":[\n' + ",\n".join(rows) + "\n]}"
    with gzip.open(path, "wb", compresslevel=TRACE_GZIP_LEVEL) as f:
        f.write(body.encode())


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--layers", type=int, default=7)
    opts = parser.parse_args()
    torch.set_num_threads(1)
    step = make_step(opts.layers)
    took: dict[str, list[float]] = {"torch": [], "arrays": []}
    sizes = {"torch": 0, "arrays": 0}
    events = 0
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(opts.repeat):  # kineto saves a session once: a capture per export
            result = session.capture(
                step, rounds=20, warmup=3, device=CPU, write_trace=write_gzipped
            )
            prof = result.write_trace.keywords["export"].args[0]  # type: ignore[union-attr]
            events = int(result.table.meta.get("events", 0))
            for way, write in (("arrays", from_arrays), ("torch", by_torch)):
                path = Path(tmp) / f"{way}{k}.json.gz"
                t0 = time.perf_counter()
                write(prof, path)
                took[way].append(time.perf_counter() - t0)
                sizes[way] = path.stat().st_size
    t_torch, t_arrays = (statistics.median(took[w]) for w in ("torch", "arrays"))
    sizes_mb = sizes["torch"] / 1e6, sizes["arrays"] / 1e6
    print(f"{events:,} events, {opts.repeat} exports each (medians)\n")
    print(f"{'export':<8} {'s':>7} {'MB':>7}")
    print(f"{'torch':<8} {t_torch:7.3f} {sizes_mb[0]:7.2f}")
    print(f"{'arrays':<8} {t_arrays:7.3f} {sizes_mb[1]:7.2f}")
    print(f"\narrays / torch: {t_arrays / t_torch:.2f}x the time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
