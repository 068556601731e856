"""The ranks of a distributed test in one table: how an op of rank ``r`` is named.

A distributed test's ranks are profiled in their own processes and joined into one op table
and one work census (:mod:`tprof_engine.reduce.ranks`), each op named with its rank:
``[rank1] aten::addmm``.  Everything downstream (the rule, the gates, the store, the reports)
then judges each rank's ops as ops of the test, and a failure names the rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

_TAG: Final = re.compile(r"\[rank(\d+)\] ")


def tagged(rank: int, name: str) -> str:
    """``[rank1] aten::addmm``."""
    return f"[rank{rank}] {name}"


def split(name: str) -> tuple[int | None, str]:
    """The rank an op name carries (None for a single-process test) and the op itself."""
    found = _TAG.match(name)
    if found is None:
        return None, name
    return int(found.group(1)), name[found.end() :]


def bare(name: str) -> str:
    """The op without its rank: ``aten::addmm``."""
    return split(name)[1]


def ranks_in(names: Iterable[str]) -> set[int]:
    """The ranks whose ops a table holds (none for a single-process test)."""
    return {r for r in (split(n)[0] for n in names) if r is not None}


def ranks_text(ranks: Iterable[int | None]) -> str:
    """``rank 1``, ``ranks 0, 1``; empty for a single-process test."""
    known = sorted({r for r in ranks if r is not None})
    if not known:
        return ""
    if len(known) == 1:
        return f"rank {known[0]}"
    return "ranks " + ", ".join(map(str, known))


def said_once(found: Iterable[tuple[str, int | None]]) -> tuple[str, ...]:
    """Lines that read the same for several ranks, said once with the ranks named
    (``… (ranks 0, 1)``); a single process's lines as they are."""
    ranks: dict[str, list[int | None]] = {}
    for text, rank in found:
        ranks.setdefault(text, []).append(rank)
    return tuple(
        f"{text} ({who})" if (who := ranks_text(rs)) else text for text, rs in ranks.items()
    )
