"""New and gone ops taken together where one replaced the other (docs/design.md §8).

A hand-written op that replaces a library call moves work from one row to others, often from
the library's submodule (``0.fc``: ``aten::addmm``) to the module whose code now does it
(``0``: ``aten::mm``, ``aten::add``).  Such rows form one group, at the module that holds the
new or the gone code itself, with the other side in it or in its direct submodules; the
group's net change is what is gated and reported.  Changes in two sibling modules are never
taken together.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tprof_engine.model.work import RowKey, WorkRow, step_part
from tprof_engine.model.work_verdict import WorkDelta

Group = tuple[str, str]  # (module, phase)
_CHANGED = ("added", "deleted")


@dataclass(frozen=True, slots=True, kw_only=True)
class Replacements:
    """The new and gone rows of a comparison, by group, with each group's net change."""

    group_of: Mapping[RowKey, Group]
    nets: Mapping[Group, tuple[int, int]]  # (FLOPs, bytes) the group's new rows add net
    both: frozenset[Group]  # groups where ops went and others came: replacements

    @classmethod
    def of(cls, rows: Sequence[WorkDelta]) -> Replacements:
        changed = [r for r in rows if r.status in _CHANGED]
        group_of = {r.key: _group(r, changed) for r in changed}
        nets: dict[Group, tuple[int, int]] = {}
        kinds: dict[Group, set[str]] = {}
        for r in changed:
            group = group_of[r.key]
            flops, size = nets.get(group, (0, 0))
            nets[group] = (flops + r.flops_delta, size + r.bytes_delta)
            kinds.setdefault(group, set()).add(r.status)
        both = frozenset(g for g, k in kinds.items() if len(k) == 2)
        return cls(group_of=group_of, nets=nets, both=both)

    def net(self, r: WorkDelta) -> tuple[int, int]:
        """The net change of a new or gone row's group."""
        return self.nets[self.group_of[r.key]]

    def replaced(self, r: WorkDelta) -> bool:
        """Whether the row is part of a replacement (its group's line speaks for it)."""
        return r.key in self.group_of and self.group_of[r.key] in self.both

    def direction(self, r: WorkDelta) -> int:
        """+1 when a gated row's work grew, -1 when it shrank; new and gone rows by their
        group's net."""
        flops, size = self.net(r) if r.status in _CHANGED else (r.flops_delta, r.bytes_delta)
        return 1 if max(flops, size) > 0 else -1

    def members(self, rows: Sequence[WorkDelta], group: Group) -> list[WorkDelta]:
        return [r for r in rows if self.group_of.get(r.key) == group]


def parent(path: str) -> str | None:
    """The module holding ``path`` (``""`` for a top-level one); None for the top level."""
    if not path:
        return None
    return path.rpartition(".")[0]


def _group(r: WorkDelta, changed: Sequence[WorkDelta]) -> Group:
    """The row's group: its module or that module's parent, where new and gone rows of its
    phase meet with one side in the module itself; else its own module."""
    for owner in (r.module, parent(r.module)):
        if owner is None:
            continue
        near = [c for c in changed if c.phase == r.phase and owner in (c.module, parent(c.module))]
        inside = {c.status for c in near if c.module == owner}
        if len({c.status for c in near}) == 2 and inside:
            return (owner, r.phase)
    return (r.module, r.phase)


def subtree_work(rows: Iterable[WorkRow], module: str, phase: str) -> tuple[int, int]:
    """FLOPs and bytes of a module and its submodules (every row for ``""``) in the part of the
    step ``phase`` belongs to: a hook's ops are weighed against its module's forward, a
    backward op against its backward."""
    prefix = module + "."
    part = step_part(phase)
    inside = [
        r
        for r in rows
        if (not module or r.module == module or r.module.startswith(prefix))
        and step_part(r.phase) == part
    ]
    return sum(r.flops for r in inside), sum(r.bytes_total for r in inside)
