"""torch.compile's regions and graphs under stable names: keyed by their order of first appearance
in the session instead of process-global ids and content hashes, so a slower graph compares
with the graph it replaced (docs/design.md §9).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from tprof_engine.model.arrays import IntArray
from tprof_engine.model.records import EventArrays

if TYPE_CHECKING:
    from tprof_engine.reduce.ops import _CpuEvents

# torch.compile: a compiled region and the compiled graph it calls carry process-global frame
# and compile ids and a content hash.  Keyed by their order of first appearance in the session
# instead, a slower graph compares with the graph it replaced (docs/design.md §9).
_REGION = re.compile(r"^Torch-Compiled Region: (\d+)/\d+$")


_GRAPH = re.compile(r"^## Call CompiledFxGraph (\S+) ##$")


REGION_KEY = "Torch-Compiled Region #{}"


GRAPH_KEY = "## Call CompiledFxGraph #{} ##"


def with_stable_names(ev: EventArrays) -> EventArrays:
    """``ev`` with compiled regions keyed by frame and compiled graphs by their order of first
    appearance (``Torch-Compiled Region #1``, ``## Call CompiledFxGraph #1 ##``)."""
    firsts = _first_starts(ev)
    regions: dict[str, int] = {}
    graphs: dict[str, int] = {}
    stable = list(ev.names)
    for i in sorted(range(len(ev.names)), key=lambda k: (firsts[k], k)):
        if (m := _REGION.match(stable[i])) is not None:
            stable[i] = REGION_KEY.format(regions.setdefault(m.group(1), len(regions) + 1))
        elif (m := _GRAPH.match(stable[i])) is not None:
            stable[i] = GRAPH_KEY.format(graphs.setdefault(m.group(1), len(graphs) + 1))
    if not regions and not graphs:
        return ev
    names = tuple(dict.fromkeys(stable))
    position = {n: k for k, n in enumerate(names)}
    remap = np.asarray([position[n] for n in stable], dtype=np.int64)
    return replace(ev, names=names, name_idx=remap[ev.name_idx])


def _first_starts(ev: EventArrays) -> list[int]:
    """Each name's earliest start (ns); names no event uses come last."""
    first = np.full(len(ev.names), np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, ev.name_idx, ev.start_ns)
    return [int(v) for v in first]


# Compilation (Dynamo tracing, AOT, Inductor) as the profiler sees it: these ranges and all
# they hold are compile time, never op rows; one that starts in a measured round is counted
# as a call of COMPILE_OP (a recompilation while measuring is itself a finding).
_COMPILE_ROOTS = frozenset({"dynamo", "entire_frame_compile", "entire_backward_compile"})


_COMPILE_SUFFIX = " (dynamo_timed)"


_COMPILE_MARK = "compile_id="  # the ``…_data: fn_name=…, compile_id=0/0`` companions


COMPILE_OP = "tprof::compile"


def with_compiles(
    names: tuple[str, ...],
    cpu: _CpuEvents,
    compile_root: Any,
    counted: Any,
    c_round: IntArray,
    self_cpu: Any,
) -> tuple[tuple[str, ...], Any, Any, Any]:
    """Compilations in rounds as one ``COMPILE_OP`` call each, with their whole time: the op
    names, each CPU event's name, which events count and their self time."""
    if not compile_root.any():
        return names, cpu.name, counted, self_cpu
    names = (*names, COMPILE_OP)
    cpu_names = np.where(compile_root, len(names) - 1, cpu.name)
    counted = counted | (compile_root & (c_round >= 0))
    return names, cpu_names, counted, np.where(compile_root, cpu.dur, self_cpu)


def compile_time(
    names: Sequence[str], cpu: _CpuEvents
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Which CPU events are compile time, and which of them are outermost (one per compile)."""
    is_compile_name = np.fromiter(
        (n in _COMPILE_ROOTS or n.endswith(_COMPILE_SUFFIX) or _COMPILE_MARK in n for n in names),
        dtype=bool,
        count=len(names),
    )
    compiling = is_compile_name[cpu.name]
    if not compiling.any():
        return compiling, compiling
    for d in range(1, int(cpu.depth.max(initial=0)) + 1):  # descendants of a compile range
        at = np.flatnonzero((cpu.depth == d) & cpu.has_parent)
        compiling[at] |= compiling[cpu.parent[at]]
    root = compiling.copy()
    root[cpu.has_parent] &= ~compiling[cpu.parent[cpu.has_parent]]
    return compiling, root
