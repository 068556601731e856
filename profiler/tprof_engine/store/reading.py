"""A baseline file's bytes: read within bounds into a JSON document, with errors that name the
line and say what to do; and the compact, diffable JSON a baseline is written as.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.store import files

# A baseline of 5 sessions, 20 rounds and 500 ops is about 1.2 MB; past this a file is damage,
# and parsing it would take seconds and GBs.
MAX_BASELINE_BYTES = 256 * 2**20

SCHEMA = "pytest-tprof/baseline"

FIX = "restore it from git or re-record it with --tprof-save"
_CONFLICT = re.compile(r"^(<{7}|>{7}|\|{7})( |$)|^={7}$")
_CONSTANT = re.compile(r"(?<=[\[,:])\s*(-?Infinity|NaN)\b")


# A baseline is ``<test>.json``; a Chrome trace ``.pt.trace.json``, gzipped or not.
_KINDS = (".json", ".json.gz")
_TRACES = (".gz", ".pt.trace.json")


def check_kind(path: Path, give: str, *, traces: bool = True) -> None:
    """A :class:`ConfigError` when ``path`` is a file whose name is neither a baseline's nor
    (``traces``) a trace's, told before it is read.

    Such a file (``models.py``) isn't a damaged baseline, and reading it as one would only say
    to restore it from git.  ``give`` says what to pass instead.  Anything but a regular file
    is left to the reader, which names its kind (a FIFO, a device).
    """
    name = Path(path).name.lower()
    if not Path(path).is_file() or (
        name.endswith(_KINDS) and (traces or not name.endswith(_TRACES))
    ):
        return
    what = "a tprof baseline (.json) or a Chrome trace (.pt.trace.json[.gz])"
    raise ConfigError(f"{path} is not {what if traces else 'a tprof baseline (.json)'}; {give}")


def read_baseline_data(path: Path) -> Any:
    """The parsed JSON of a baseline file, not yet validated (:func:`baseline_from_dict` does).

    Damage a parser sees (unreadable, not UTF-8, empty, conflict-marked, malformed, NaN) is a
    :class:`BaselineError` naming the file.
    """
    path = Path(path)
    return _parsed_json(path, _baseline_text(path))


def _baseline_text(path: Path) -> str:
    """The file's text: readable, UTF-8, not empty, no merge left half done."""
    try:
        raw = files.read_regular(path, limit=MAX_BASELINE_BYTES)
    except FileNotFoundError:
        raise BaselineError(
            f"{path}: no such baseline file; record one with --tprof-save"
        ) from None
    except IsADirectoryError:
        raise BaselineError(
            f"{path}: is a folder, not a baseline file; move it away or re-record with --tprof-save"
        ) from None
    except files.NotRegularFileError as exc:
        raise BaselineError(
            f"{path}: is a {exc.kind}, not a baseline file; move it away or re-record with "
            "--tprof-save"
        ) from None
    except files.FileTooLargeError:
        raise BaselineError(
            f"{path}: larger than {MAX_BASELINE_BYTES // 2**20} MiB, so not a baseline this "
            f"version wrote; {FIX}"
        ) from None
    except OSError as exc:
        raise BaselineError(
            f"{path}: can't be read ({exc.strerror}); check its permissions"
        ) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BaselineError(f"{path}: not UTF-8 text (byte {exc.start}); {FIX}") from None
    if not text.strip():
        raise BaselineError(f"{path}: empty file; {FIX}")
    for no, line in enumerate(text.splitlines(), 1):
        if _CONFLICT.match(line):
            raise BaselineError(
                f"{path}: git conflict marker at line {no}; resolve the merge by keeping one "
                "side (or re-record with --tprof-save)"
            )
    return text


def _parsed_json(path: Path, text: str) -> Any:
    """The JSON value of ``text``; NaN, infinities and malformed JSON are errors naming ``path``."""

    def bad_constant(name: str) -> Any:
        found = _CONSTANT.search(text)
        at = ""
        if found is not None:
            line, col = _line_col(text, found.start(1))
            at = f" at line {line} col {col}"
        raise BaselineError(f"{path}: holds {name}{at}; times must be finite numbers; {FIX}")

    try:
        return json.loads(text, parse_constant=bad_constant)
    except BaselineError:
        raise
    except json.JSONDecodeError as exc:
        cut = exc.pos >= len(text.rstrip()) or exc.msg.startswith("Unterminated string")
        what = "truncated JSON" if cut else f"invalid JSON ({exc.msg})"
        raise BaselineError(f"{path}: {what} at line {exc.lineno} col {exc.colno}; {FIX}") from None
    except ValueError as exc:  # e.g. a number longer than Python's int digit limit
        reason = str(exc).split(":")[0]
        raise BaselineError(f"{path}: invalid JSON ({reason}); {FIX}") from None
    except RecursionError:
        raise BaselineError(f"{path}: JSON nested too deeply; {FIX}") from None


def read_nodeid(path: Path) -> str | None:
    """The node id a baseline file says it holds, or None if it can't tell; never raises.

    For listing stale baselines, where one unreadable stray file must not stop the listing
    (nor a FIFO stall it).
    """
    try:
        data = json.loads(files.read_regular(Path(path), limit=MAX_BASELINE_BYTES))
    except (OSError, ValueError, RecursionError):
        return None
    nodeid = data.get("nodeid") if isinstance(data, dict) else None
    return nodeid if isinstance(nodeid, str) and nodeid else None


def _line_col(text: str, pos: int) -> tuple[int, int]:
    line = text.count("\n", 0, pos) + 1
    return line, pos - (text.rfind("\n", 0, pos) + 1) + 1


def dumps(data: Any) -> str:
    """Stable JSON: sorted keys, one key per line, arrays of numbers on one line."""
    return _dump(data, 0) + "\n"


def _dump(v: Any, level: int) -> str:
    pad = "  " * (level + 1)
    if isinstance(v, dict):
        if not v:
            return "{}"
        items = [f"{pad}{json.dumps(str(k))}: {_dump(v[k], level + 1)}" for k in sorted(v)]
        return "{\n" + ",\n".join(items) + "\n" + "  " * level + "}"
    if isinstance(v, list):
        if all(_flat(x) for x in v):  # numbers, or a record's values: one line
            return "[" + ", ".join(json.dumps(x, allow_nan=False) for x in v) + "]"
        return "[\n" + ",\n".join(pad + _dump(x, level + 1) for x in v) + "\n" + "  " * level + "]"
    return json.dumps(v, allow_nan=False, ensure_ascii=False)


def _flat(v: Any) -> bool:
    """A scalar, or a list of scalars."""
    if isinstance(v, list):
        return all(not isinstance(x, (dict, list)) for x in v)
    return not isinstance(v, dict)


_SCHEMA_KEY = re.compile(rb'"schema"\s*:\s*"' + re.escape(SCHEMA.encode()) + rb'"')


def check_not_baseline(path: Path, root: Path | None = None) -> None:
    """Refuse to let a report replace a baseline: a :class:`ConfigError` when ``path`` lies under
    the baseline folder ``root`` or is a file that holds a baseline (damaged or moved ones too).
    """
    path = Path(path)
    why = ""
    if root is not None and real_path(path).is_relative_to(real_path(Path(root))):
        why = f"is inside the baseline folder {root}"
    else:
        try:
            head = files.read_regular(path, limit=MAX_BASELINE_BYTES)
        except OSError:  # nothing there, or nothing this version could read as a baseline
            head = b""
        if _SCHEMA_KEY.search(head):
            why = "is a pytest-tprof baseline"
    if why:
        raise ConfigError(
            f"{path}: {why}, and only --tprof-save writes baselines; write the report elsewhere"
        )


def real_path(path: Path) -> Path:
    """``path`` with symlinks resolved where they can be (a symlink loop can't)."""
    try:
        return path.resolve()
    except (OSError, RuntimeError):  # RuntimeError: a loop, before Python 3.13
        return Path(os.path.abspath(path))


def encoded(path: Path, data: Mapping[str, Any]) -> bytes:
    """The bytes of the baseline file; a value JSON can't hold is an error naming ``path``."""
    try:
        return dumps(dict(data)).encode("utf-8")
    except (TypeError, ValueError):  # NaN, a lone surrogate, a non-JSON value
        raise BaselineError(
            f"{path}: not saved, the baseline holds a value JSON can't store (NaN, infinity, "
            "invalid Unicode or a non-JSON type); please report this as a pytest-tprof bug"
        ) from None
