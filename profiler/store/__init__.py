"""Store: what is kept between runs.

:mod:`.baselines` (load, save, the window of sessions, accept), :mod:`.schema` (the file's records
and strict validation), :mod:`.reading` (its bytes to JSON and back), :mod:`.paths` (where a test's
file lives), :mod:`.merge` (several CI runs' folders into one), :mod:`.traces` (Chrome traces read
and written side by side), and :mod:`.files`, the one atomic write and bounded read everything goes
through.
"""
