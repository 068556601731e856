"""What this process's torch offers tprof, read off its own classes, as one JSON file.

    python benchmarks/torch_shape.py OUT.json [TRACE.pt.trace.json.gz]

Run inside a release's virtualenv (``benchmarks/torch_matrix.py`` does, and with ``--record``
keeps the file under ``tests/data/torch-releases/``).  The test data lets ``make test`` check
the adapter against every supported release's shape without installing it: the raw event's
accessors, the experimental config's options, ``FunctionEvent``'s device time, the flop
formulas, the autograd and Dynamo hooks, the settings switches, and the tail of a trace this
release's kineto writes.
"""

from __future__ import annotations

import gzip
import json
import platform
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch


def _public(cls: type) -> list[str]:
    return sorted(n for n in dir(cls) if not n.startswith("_"))


def _config_options() -> list[str]:
    """Every keyword the experimental config takes, from its constructor's signatures."""
    config = torch._C._profiler._ExperimentalConfig
    doc = config.__init__.__doc__ or ""
    names = set()
    for part in doc.replace("\n", " ").split(","):
        word = part.strip().split(":")[0].strip().lstrip("(").split("(")[-1].strip()
        if word.isidentifier() and word != "self":
            names.add(word)
    return sorted(names)


def _has(root: Any, dotted: str) -> bool:
    obj = root
    for part in dotted.split("."):
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


HOOKS = (
    "_C._autograd._get_sequence_nr",
    "_C._current_autograd_node",
    "_C._dispatch_has_kernel_for_dispatch_key",
    "_C.DispatchKey.CompositeImplicitAutograd",
    "_C._profiler._ExperimentalConfig",
    "autograd.profiler._is_profiler_enabled",
    "utils.module_tracker.ModuleTracker",
    "utils._python_dispatch.TorchDispatchMode",
    "compiler.is_compiling",
)
SWITCHES = (
    "backends.cuda.matmul.fp32_precision",
    "backends.cudnn.conv.fp32_precision",
    "backends.mkldnn.matmul.fp32_precision",
    "backends.fp32_precision",
    "backends.cuda.matmul.allow_bf16_reduced_precision_reduction",
    "backends.cuda.cudnn_sdp_enabled",
    "backends.mkldnn.enabled",
    "get_float32_matmul_precision",
)


def _trace() -> bytes:
    """A small CPU trace as this release's kineto writes it: twelve rounds of two ops, each
    round a ``ProfilerStep#N`` range as tprof's capture marks them."""
    x = torch.ones(256, 256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for r in range(12):
            with torch.profiler.record_function(f"ProfilerStep#{r}"):
                torch.relu(torch.mm(x, x))
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "t.json")
        prof.export_chrome_trace(str(path))
        return path.read_bytes()


def shape(trace: bytes) -> dict[str, Any]:
    import torch._dynamo.utils as dynamo_utils
    import torch.autograd.profiler_util as util
    import torch.utils.flop_counter as flop_counter
    from torch._C._autograd import _KinetoEvent

    return {
        "torch": str(torch.__version__),
        "python": platform.python_version(),
        "kineto_event": _public(_KinetoEvent),
        "experimental_config": _config_options(),
        "function_event": [n for n in _public(util.FunctionEvent) if "time" in n],
        "flop_formulas": sorted(str(op) for op in flop_counter.flop_registry),
        "hooks": {h: _has(torch, h) for h in HOOKS},
        "switches": {s: _has(torch, s) for s in SWITCHES},
        "dynamo_log": {
            n: hasattr(dynamo_utils, n) for n in ("graph_break_reasons", "guard_failures")
        },
        "trace_keys": sorted(json.loads(trace)),
        "trace_tail": trace[-300:].decode("utf-8", "replace"),
    }


def main() -> int:
    trace = _trace()
    Path(sys.argv[1]).write_text(json.dumps(shape(trace), indent=1, sort_keys=True) + "\n")
    if len(sys.argv) > 2:
        Path(sys.argv[2]).write_bytes(gzip.compress(trace, mtime=0))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
