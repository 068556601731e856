"""Render: pure text of verdicts and tables.

:mod:`.rows` is the one row model; :mod:`.report` writes terminal text and the JSON document,
:mod:`.markdown` and :mod:`.html` render from that document, :mod:`.show` writes ``tprof
show``, :mod:`.work_rows` groups work rows by module and :mod:`.fmt` formats numbers.
"""

__all__ = [  # the stage's modules: its face (tests/test_house.py keeps it whole)
    "charts",
    "fmt",
    "html",
    "markdown",
    "report",
    "rows",
    "show",
    "work_rows",
]
