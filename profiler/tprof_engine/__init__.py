"""pytest-tprof's engine: capture, reduce, decide, store and render per-op profiles of PyTorch code.

The package ``tprof_engine``, in the repository's ``profiler/`` folder
(``profiler/tprof_engine/``).  The stages, in the order a test's data flows through them
(docs/design.md §2-3):

- :mod:`.capture`: the body's rounds under ``torch.profiler`` and its work census (the only
  stage that imports torch);
- :mod:`.reduce`: raw events → per-op, per-round tables;
- :mod:`.decide`: the timing rule, the gates as entries (work, memory, compiled graphs,
  collectives, settings), the judging path, the confirmation policy and a test's outcome;
- :mod:`.store`: baselines, their schema, merges, traces and the file primitives (it keeps
  files and decides nothing: what joins a baseline's window is :mod:`.window`'s);
- :mod:`.render`: one row model rendered as terminal text, ``tprof show``, Markdown, HTML, JSON;
- :mod:`.model`: the records every stage passes on (tables, verdicts, fingerprint, limits,
  errors).

:mod:`.runner` drives one test through the stages for the pytest plugin, over three rooms:
:mod:`.recording` (its rounds), :mod:`.judging` (its verdict, confirmed by :mod:`.confirm`'s
loop over the policy's steps) and :mod:`.saving` (its baseline).  The plugin reaches the
engine through the front alone: these modules and :mod:`.api`, the records, words, errors and
calls a harness needs; :mod:`.cli` is the
``tprof`` command over the same library, reading its inputs through :mod:`.sources`;
:mod:`.window` says when a save restarts a baseline's window and when ``tprof accept`` may
drop its older sessions;
:mod:`.ab`, :mod:`.pairing` and :mod:`.paired_run` are ``tprof ab`` (the base commit measured
beside the working tree, docs/design.md §18); :mod:`.bisection` and its ``bisect_*`` modules are
``tprof bisect``, a front over the same machinery (docs/bisect.md).  Nothing here imports
pytest.
"""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = [  # the stages and the front's modules
    "ab",
    "api",
    "bisect_measure",
    "bisect_report",
    "bisect_search",
    "bisection",
    "capture",
    "cli",
    "config",
    "confirm",
    "decide",
    "diff_sides",
    "found",
    "in_process",
    "judging",
    "model",
    "paired_run",
    "pairing",
    "ranked",
    "recording",
    "reduce",
    "render",
    "runner",
    "saving",
    "sources",
    "store",
    "torch_support",
    "window",
]
