"""``python -m tprof_engine``: the ``tprof`` command."""

from __future__ import annotations

import sys

from tprof_engine.cli import main

if __name__ == "__main__":
    sys.exit(main())
