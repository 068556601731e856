"""What a path given to ``tprof`` holds: a baseline file, a folder of them, a Chrome trace or
a JSON report, read strictly; and which baseline pairs with which.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tprof_engine.decide import judge as judging
from tprof_engine.model.errors import TprofError
from tprof_engine.model.limits import is_count
from tprof_engine.model.results import Source
from tprof_engine.store import baselines, files, paths, reading, trace_files

# How far into a ``.json`` file to look for the marks of a Chrome trace.
_SNIFF_BYTES = 65536


def is_trace(path: Path) -> bool:
    """Whether ``path`` looks like a Chrome trace rather than a baseline file.

    ``.gz`` files are traces (baselines are plain JSON); a ``.json`` file is a trace when
    its first bytes hold a trace's keys or it is a JSON array (the Chrome "array format").
    """
    name = path.name.lower()
    if name.endswith(".gz") or name.endswith(".pt.trace.json"):
        return True
    if not path.is_file():  # a FIFO would block the read below; the reader names the problem
        return False
    try:
        with path.open("rb") as f:
            head = f.read(_SNIFF_BYTES)
    except OSError:
        return False  # let the baseline reader name the problem
    text = head.decode("utf-8", errors="replace").lstrip()
    return text.startswith("[") or '"traceEvents"' in text or '"schemaVersion"' in text


def load_source(path: Path) -> Source:
    """A baseline file or a Chrome trace, read strictly; errors name the file."""
    path = Path(path)
    if is_trace(path):
        from tprof_engine.store import traces

        data = traces.read_trace(path)
        table = traces.table_from_trace(data)
        info = data.metadata.get("tprof_test")
        nodeid = info.get("nodeid") if isinstance(info, dict) else None
        recorded = data.metadata.get("tprof")
        iterations = recorded.get("iterations") if isinstance(recorded, dict) else None
        return Source(
            path=path,
            kind="trace",
            nodeid=nodeid if isinstance(nodeid, str) and nodeid else None,
            tables=(table,),
            protocol={"iterations": iterations} if isinstance(iterations, int) else {},
            device_names=data.device_names,
        )
    base = baselines.load_baseline(path)
    return Source(
        path=path,
        kind="baseline",
        nodeid=base.nodeid,
        tables=tuple(base.tables),
        fingerprint=base.fingerprint,
        protocol=base.protocol,
        work=base.work,
        hosts=base.hosts,
        settings=base.settings,
    )


@dataclass(frozen=True, slots=True)
class Damaged:
    """A file of a folder that could not be read, and the error naming it."""

    path: Path
    error: str


def load_folder(folder: Path) -> tuple[list[Source], list[Damaged]]:
    """Every baseline and gzipped trace under ``folder`` (recursive) that stands for a test
    (a run's newest trace of each test; a baseline, not the trace kept beside it:
    ``trace_files.one_per_test``), and each file that could not be read."""
    sources: list[Source] = []
    damaged: list[Damaged] = []
    gzipped = (p for p in Path(folder).rglob("*.json.gz") if not p.name.startswith("."))
    for path in trace_files.one_per_test({*paths.iter_baselines(folder), *gzipped}):
        try:
            sources.append(load_source(path))
        except TprofError as exc:
            damaged.append(Damaged(path, str(exc)))
    return sources, damaged


def recorded_in(source: Source) -> judging.Recorded:
    return judging.Recorded(
        tables=source.tables,
        fingerprint=source.fingerprint,
        protocol=source.protocol,
        device_names=source.device_names if source.kind == "trace" else None,
        work=source.work,
        hosts=source.hosts,
        settings=source.settings,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class Pairing:
    """Tests found on both sides, and those found on one side only."""

    pairs: list[tuple[Source, Source]]
    only_baseline: list[Source]
    only_current: list[Source]


def pair_sources(baseline: Sequence[Source], current: Sequence[Source]) -> Pairing:
    """Pair tests by the node id inside the files.

    When a side holds one test in several environments (several environment folders),
    the files are paired by environment key; a single file per side pairs regardless and
    the comparability check says what differs.
    """
    by_b: dict[str, list[Source]] = {}
    by_c: dict[str, list[Source]] = {}
    for s in baseline:
        by_b.setdefault(s.label, []).append(s)
    for s in current:
        by_c.setdefault(s.label, []).append(s)
    pairs: list[tuple[Source, Source]] = []
    only_b: list[Source] = []
    only_c: list[Source] = []
    for nodeid in sorted(set(by_b) | set(by_c)):
        bs, cs = by_b.get(nodeid, []), by_c.get(nodeid, [])
        if len(bs) == 1 and len(cs) == 1:
            pairs.append((bs[0], cs[0]))
            continue
        left = list(cs)
        for b in bs:
            match = next((c for c in left if _env_key(c) == _env_key(b)), None)
            if match is None:
                only_b.append(b)
            else:
                left.remove(match)
                pairs.append((b, match))
        only_c.extend(left)
    return Pairing(pairs=pairs, only_baseline=only_b, only_current=only_c)


def _env_key(s: Source) -> str:
    return s.fingerprint.key if s.fingerprint is not None else s.path.parent.name


REPORT_FIX = "pass the file written by pytest --tprof-json=PATH or tprof diff --json PATH"


def load_report(path: Path) -> dict[str, Any]:
    """Read and check a ``--tprof-json`` report; problems are errors naming the file."""
    doc = _report_json(Path(path))
    if not isinstance(doc, dict) or not isinstance(doc.get("tests"), list):
        raise TprofError(f"{path}: not a pytest-tprof JSON report (no 'tests' list); {REPORT_FIX}")
    from tprof_engine.render.report import JSON_SCHEMA_VERSION

    version = doc.get("schema_version")
    if not is_count(version):
        raise TprofError(
            f"{path}: 'schema_version' must be an integer >= 1 (got {version!r}); {REPORT_FIX}"
        )
    if version > JSON_SCHEMA_VERSION:
        raise TprofError(
            f"{path}: written by a newer pytest-tprof (schema_version {version} > "
            f"{JSON_SCHEMA_VERSION}); upgrade pytest-tprof to read it"
        )
    for i, t in enumerate(doc["tests"]):
        _check_report_test(path, f"tests[{i}]", t)
    return doc


def _report_json(path: Path) -> Any:
    """The report file's JSON document; a file that can't be read or parsed names why."""
    try:  # a regular file only: a FIFO would block
        text = files.read_regular(path, limit=reading.MAX_BASELINE_BYTES).decode("utf-8")
    except FileNotFoundError:
        raise TprofError(f"{path}: no such report file; {REPORT_FIX}") from None
    except UnicodeDecodeError as exc:
        raise TprofError(f"{path}: not UTF-8 text (byte {exc.start}); {REPORT_FIX}") from None
    except files.NotRegularFileError as exc:
        raise TprofError(f"{path}: is a {exc.kind}, not a report file; {REPORT_FIX}") from None
    except files.FileTooLargeError as exc:
        raise TprofError(f"{path}: {exc.strerror}, not a report; {REPORT_FIX}") from None
    except OSError as exc:
        raise TprofError(f"{path}: can't be read ({exc.strerror}); check its permissions") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TprofError(
            f"{path}: invalid JSON ({exc.msg}) at line {exc.lineno} col {exc.colno}; {REPORT_FIX}"
        ) from None


def _check_report_test(path: Path, where: str, t: Any) -> None:
    if not isinstance(t, dict):
        raise TprofError(f"{path}: '{where}' must be an object; {REPORT_FIX}")
    for key in ("nodeid", "verdict"):
        if not isinstance(t.get(key), str):
            raise TprofError(f"{path}: '{where}.{key}' must be a string; {REPORT_FIX}")
    ops = t.get("ops", [])
    if not isinstance(ops, list) or not all(isinstance(o, dict) for o in ops):
        raise TprofError(f"{path}: '{where}.ops' must be a list of objects; {REPORT_FIX}")
