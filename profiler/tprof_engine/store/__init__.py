"""Store: what is kept between runs.

:mod:`.baselines` (load, save, the window of sessions, accept), :mod:`.schema` (the file's
records and their one loader), :mod:`.versions` (the file's fields, one table per schema
version), :mod:`.checks` (each field's strict check), :mod:`.packing` (the packed form),
:mod:`.reading` (its bytes to JSON and back), :mod:`.paths` (where a test's file lives),
:mod:`.merge` (several CI runs' folders into one), :mod:`.traces` (Chrome traces read and
written side by side), :mod:`.trace_files` (the trace folder: names, what is kept),
:mod:`.run_traces` and :mod:`.trace_writer` (one run's traces, written by a thread while the next
test sets up), :mod:`.trace_gzip` (a capture's export gzipped to its file, with the rounds'
counters), and :mod:`.files`, the one atomic write and bounded read everything goes through.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "baselines",
    "checks",
    "files",
    "merge",
    "packing",
    "paths",
    "reading",
    "run_traces",
    "schema",
    "trace_files",
    "trace_gzip",
    "trace_writer",
    "traces",
    "versions",
]
