"""Other processes keeping the cores busy while a block runs, as another job on a shared CI
machine would.

- ``none``: nothing of ours (the shared machine's own load still applies);
- ``busy``: one pure-Python spin loop per core (``os.cpu_count()``);
- ``membw``: one process per core copying two 64 MiB numpy arrays back and forth;
- ``torch``: one process per core running an MLP training step (AdamW) on torch's default
  intra-op threads;
- ``busy1``, ``membw1``, ``torch1``: one such process alone.

Each process exits by itself after ``lifetime`` seconds or once the benchmark that started it
is gone, and the benchmark kills them when the block ends (``finally``, and ``atexit``), so
nothing outlives it.
"""

from __future__ import annotations

import atexit
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

LOADS = ("none", "busy", "membw", "torch", "busy1", "membw1", "torch1")

# Each load process: its work until `lifetime` seconds pass or its parent is gone.
_UNTIL = (
    "import os, sys, time\n"
    "parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
    "def alive():\n"
    "    return time.monotonic() < end and os.getppid() == parent\n"
)
LOAD_CODE = {
    "busy": _UNTIL + "while alive():\n    for _ in range(100_000):\n        pass\n",
    "membw": _UNTIL
    + "import numpy as np\n"
    + "a = np.ones(64 * 2**20 // 8)\n"
    + "b = np.zeros_like(a)\n"
    + "while alive():\n    np.copyto(b, a)\n    np.copyto(a, b)\n",
    # another CI job's torch code: a training step on torch's default intra-op threads
    "torch": _UNTIL
    + "import torch\n"
    + "m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),"
    + " torch.nn.Linear(1024, 512))\n"
    + "opt = torch.optim.AdamW(m.parameters())\n"
    + "x = torch.randn(256, 512)\n"
    + "while alive():\n    opt.zero_grad()\n    m(x).square().mean().backward()\n"
    + "    opt.step()\n",
}

_LOAD: list[subprocess.Popen[bytes]] = []


def stop_load() -> None:
    """Kills every load process still running (also at exit)."""
    while _LOAD:
        p = _LOAD.pop()
        if p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"warning: load process {p.pid} did not exit", file=sys.stderr)


atexit.register(stop_load)


@contextmanager
def load(kind: str, lifetime: float) -> Iterator[int]:
    """``kind``'s processes, one per core (``busy1``, ``membw1``: one process alone), running
    while the block runs; yields their count."""
    if kind == "none":
        yield 0
        return
    code = LOAD_CODE[kind.removesuffix("1")]
    n = 1 if kind.endswith("1") else os.cpu_count() or 1
    try:
        for _ in range(n):
            _LOAD.append(
                subprocess.Popen(
                    [sys.executable, "-c", code, str(os.getpid()), str(lifetime)],
                    stdin=subprocess.DEVNULL,
                )
            )
        time.sleep(2.0)  # numpy imported, the arrays touched, the spin loops spinning
        dead = [p.pid for p in _LOAD if p.poll() is not None]
        if dead:
            sys.exit(f"load {kind}: processes {dead} exited at once")
        yield n
    finally:
        stop_load()
