"""The torch adapter against each supported release's shape, without installing it or a GPU.

Each release's shape is read off its own classes by ``benchmarks/torch_shape.py`` (run by
``benchmarks/torch_matrix.py --record`` in a virtualenv of that release) and kept under
``tests/data/torch-releases/``: the ``_KinetoEvent`` accessors, the experimental config's
options, ``FunctionEvent``'s time attributes, and a small trace its kineto wrote.  A fake event
class of each shape carries exactly that release's accessors, so the CUDA reading path meets
what the release offers and nothing more; the adapter's table of what each release offers
(:data:`torch_api.OFFERS`) is checked against every shape.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from tprof_engine import torch_support
from tprof_engine.capture import kineto, torch_api
from tprof_engine.model.records import KIND_ANNOTATION, KIND_DEVICE, KIND_OP, KIND_SYNC
from tprof_engine.reduce.ops import reduce_events

CPU = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
CUDA = torch.autograd.DeviceType.CUDA  # type: ignore[attr-defined]

RELEASES_DATA = Path(__file__).resolve().parents[2] / "data" / "torch-releases"


def _shapes() -> dict[str, dict[str, Any]]:
    found = {}
    for path in sorted(RELEASES_DATA.glob("*.json")):
        found[path.stem] = json.loads(path.read_text(encoding="utf-8"))
    return found


SHAPES = _shapes()
ACCESSORS = {release: frozenset(shape["kineto_event"]) for release, shape in SHAPES.items()}


def _minor(version: str) -> tuple[int, int]:
    parsed = torch_support.parse_version(version)
    assert parsed is not None, version
    return parsed


def test_every_supported_release_has_its_shape_recorded() -> None:
    recorded = {_minor(r) for r in SHAPES}
    wanted = {_minor(v) for v in torch_support.VERIFIED}
    assert recorded == wanted, "record with: benchmarks/torch_matrix.py --record RELEASE"
    for release, shape in SHAPES.items():
        assert shape["torch"].startswith(release + "."), (release, shape["torch"])


def test_the_installed_torch_matches_its_recorded_shape() -> None:
    from torch._C._autograd import _KinetoEvent

    have = {n for n in dir(_KinetoEvent) if not n.startswith("_")}
    release = ".".join(torch.__version__.split(".")[:2])
    if release in ACCESSORS:
        assert have == ACCESSORS[release]
    assert torch_api.FEATURES.raw_events
    assert torch_api.event_features(_KinetoEvent).activity_type == ("activity_type" in have)


@pytest.mark.parametrize("release", sorted(SHAPES, key=_minor))
def test_every_release_has_the_hooks_the_adapter_uses_without_a_fallback(release: str) -> None:
    """Module tracking, autograd's sequence numbers and running node, the dispatch-key check,
    the experimental config and Dynamo's compile log: no supported release lacks one, so the
    table of offers has no entry for them; a release recorded without one fails here."""
    shape = SHAPES[release]
    assert [hook for hook, has in shape["hooks"].items() if not has] == []
    assert all(shape["dynamo_log"].values())
    assert {"aten.mm", "aten.addmm", "aten.bmm", "aten.convolution"} <= set(shape["flop_formulas"])


def features_of(release: str) -> torch_api.Features:
    """What the adapter detects on ``release``, from its recorded shape alone."""
    shape = SHAPES[release]
    names = shape["function_event"]
    return torch_api.Features(
        torch=shape["torch"],
        events=torch_api.event_features(event_class(release)),
        config=tuple(o for o in torch_api.CONFIG_OPTIONS if o in shape["experimental_config"]),
        device_time=next((a for a in torch_api.DEVICE_TIME_NAMES if a in names), ""),
    )


@pytest.mark.parametrize("release", sorted(SHAPES, key=_minor))
def test_the_table_of_offers_says_what_each_release_has(release: str) -> None:
    features = features_of(release)
    assert features.raw_events and features.device_time == "self_device_time_total"
    for offer in torch_api.OFFERS:
        expected = _minor(release) >= _minor(offer.since)
        assert (offer.key in features.offered) == expected, (release, offer.key, offer.since)
    said = torch_api.notes(features, cuda=True)
    lacking = [o for o in torch_api.OFFERS if o.key not in features.offered and o.without]
    assert len(said) == len(lacking)
    for note, offer in zip(said, lacking, strict=True):
        assert note.startswith(f"not available with torch {features.torch}: {offer.feature}")
        assert f"torch {offer.since} and later" in note
    assert torch_api.notes(features, cuda=False) == ()  # a CPU run reads all it uses


def test_a_torch_newer_than_the_table_is_said_once_in_the_header() -> None:
    newest = torch_support.parse_version(torch_support.VERIFIED[-1])
    assert newest == torch_api.NEWEST_KNOWN
    everything = torch_api.Features(
        torch="2.14.1",
        events=torch_api.event_features(event_class(max(SHAPES, key=_minor))),
        config=torch_api.CONFIG_OPTIONS,
        device_time="self_device_time_total",
    )
    assert torch_api.notes(everything, cuda=True) == ()
    later = dataclasses.replace(everything, torch="2.15.0+cu130")
    (said,) = torch_api.notes(later, cuda=False)
    assert said.startswith("torch 2.15.0+cu130 is newer than the releases pytest-tprof was")


class _Record:
    """One event's values, as a CUDA run gives them; read through a release's accessors."""

    def __init__(self, name: str, start: int, end: int, act: str, **kw: Any) -> None:
        self.values = {
            "name": name,
            "start_ns": start,
            "end_ns": end,
            "activity_type": act,
            "device_type": CPU if act in ("cpu_op", "user_annotation", "cuda_runtime") else CUDA,
            "correlation_id": kw.get("corr", 0),
            "linked_correlation_id": kw.get("linked", 0),
            "device_resource_id": kw.get("stream", 0),
            "metadata_json": kw.get("meta", ""),
            "is_user_annotation": kw.get("annotation", False),
            "is_async": False,
            "is_hidden_event": False,
        }
        on_cpu = self.values["device_type"] == CPU
        self.values["start_thread_id"] = self.values["end_thread_id"] = 7 if on_cpu else 0
        self.values["device_index"] = -1 if on_cpu else 0


def event_class(release: str, without: frozenset[str] = frozenset()) -> type:
    """A ``_KinetoEvent`` of ``release``: its accessors (less ``without``) and no others."""

    def accessor(name: str) -> Any:
        return lambda self: self.record.values.get(name, 0)

    methods = {n: accessor(n) for n in ACCESSORS[release] - without}
    methods["__init__"] = lambda self, record: setattr(self, "record", record)
    return type(f"KinetoEvent{release.replace('.', '_')}", (), methods)


def session(release: str, records: list[_Record]) -> Any:
    cls = event_class(release)
    events = [cls(r) for r in records]
    return SimpleNamespace(
        profiler=SimpleNamespace(kineto_results=SimpleNamespace(events=lambda: events))
    )


COPY_META = '{"device": 0, "context": 1, "stream": 7, "correlation": 77, "bytes": 4096}'
FILL_META = '{"device": 0, "context": 1, "stream": 7, "correlation": 80, "bytes": 64}'
SYNC_META = '{"cuda_sync_kind": "Stream Sync", "stream": 7, "correlation": 78}'


def on_stream_7(corr: int, linked: int, meta: str) -> dict[str, Any]:
    """A device event's keywords on stream 7: its runtime call's correlation id, the op's."""
    return {"corr": corr, "linked": linked, "stream": 7, "meta": meta}


STEP = [
    _Record("ProfilerStep#0", 0, 100_000, "user_annotation", annotation=True),
    _Record("aten::mm", 500, 900, "cpu_op", corr=9),
    _Record("cudaLaunchKernel", 600, 800, "cuda_runtime", corr=79, linked=9),
    _Record("sm90_xmma_gemm_f32f32_tf32f32", 5_000, 9_000, "kernel", **on_stream_7(79, 9, "")),
    _Record("aten::item", 1_000, 50_000, "cpu_op", corr=10),
    _Record("cudaMemcpyAsync", 2_000, 3_000, "cuda_runtime", corr=77, linked=10),
    _Record(
        "Memcpy DtoH (Device -> Pageable)",
        10_000,
        11_000,
        "gpu_memcpy",
        **on_stream_7(77, 10, COPY_META),
    ),
    _Record("cudaStreamSynchronize", 3_000, 12_000, "cuda_runtime", corr=78, linked=10),
    _Record("Stream Sync", 11_000, 11_500, "cuda_sync", **on_stream_7(78, 10, SYNC_META)),
    _Record("aten::zero_", 60_000, 61_000, "cpu_op", corr=11),
    _Record("cudaMemsetAsync", 60_100, 60_400, "cuda_runtime", corr=80, linked=11),
    _Record("Memset (Device)", 62_000, 62_100, "gpu_memset", **on_stream_7(80, 11, FILL_META)),
]


@pytest.mark.parametrize("release", sorted(ACCESSORS, key=_minor))
def test_each_release_reads_a_device_run_to_the_same_table(release: str) -> None:
    ev = kineto.events_from_kineto(session(release, STEP))
    annotation, op, device, sync = KIND_ANNOTATION, KIND_OP, KIND_DEVICE, KIND_SYNC
    expected = [annotation, op, op, device, op, op, device, op, sync, op, op, device]
    assert ev.kind.tolist() == expected
    # a copy's and a fill's bytes come from kineto's metadata, where the release has it
    copied, filled = (4096, 64) if "metadata_json" in ACCESSORS[release] else (0, 0)
    assert ev.nbytes is not None and ev.nbytes.tolist() == [0] * 6 + [copied] + [0] * 4 + [filled]
    on_device = [3, 6, 8, 11]  # kernel, copy, sync, fill: launched by their runtime call
    assert ev.launch_ns is not None and ev.launch_ns[on_device].tolist() == [600, 2000, 3000, 60100]
    assert ev.thread[on_device].tolist() == [7] * 4  # device 0, stream 7
    table = reduce_events(ev)
    assert table.device is not None
    d = table.device
    rows = {
        (o, k, n): (c.tolist(), b.tolist())
        for o, k, n, c, b in zip(d.ops, d.kinds, d.names, d.calls, d.bytes, strict=True)
    }
    assert rows == {
        ("aten::mm", "kernel", "sm90_xmma_gemm_f32f32_tf32f32"): ([1], [0]),
        ("aten::item", "memcpy", "Memcpy DtoH (Device -> Pageable)"): ([1], [copied]),
        ("aten::item", "sync", "Stream Sync"): ([1], [0]),
        ("aten::zero_", "memset", "Memset (Device)"): ([1], [filled]),
    }
    assert table.op("aten::mm")["self_device_us"].tolist() == [4.0]
    # at each launch, the launched and unfinished activities: the kernel alone, the kernel
    # and the copy, the fill alone (syncs are no queued work)
    assert table.device.queue_depth.tolist() == [pytest.approx(4 / 3)]


def test_torch_2_11_events_are_typed_by_name_once_per_name() -> None:
    records = [
        _Record("Context Sync", 0, 1, "cuda_sync", stream=-1),
        _Record("Stream Wait Event", 0, 1, "cuda_sync"),
        _Record("Event Sync", 0, 1, "cuda_sync"),
        _Record("a sync kineto may name anew", 0, 1, "cuda_sync", meta=SYNC_META),
        _Record("Memcpy HtoD (Pageable -> Device)", 0, 1, "gpu_memcpy"),
        _Record("Memset (Device)", 0, 1, "gpu_memset"),
        _Record("void at::native::vectorized_elementwise_kernel<4>", 0, 1, "kernel"),
        _Record("Memcpy HtoD (Pageable -> Device)", 2, 3, "gpu_memcpy"),
    ]
    old, new = event_class("2.11"), event_class("2.13")
    assert not hasattr(old, "activity_type") and hasattr(new, "activity_type")
    on_device = np.ones(len(records), bool)
    name_idx = np.asarray([0, 1, 2, 3, 4, 5, 6, 4])
    by_name = torch_api.device_activities([old(r) for r in records], name_idx, on_device)
    by_type = torch_api.device_activities([new(r) for r in records], name_idx, on_device)
    assert by_name.tolist() == by_type.tolist() == [r.values["activity_type"] for r in records]


def test_a_release_without_metadata_reads_copies_as_zero_bytes_and_its_header_says_so() -> None:
    bare = event_class("2.11", without=frozenset({"metadata_json"}))
    assert torch_api.copy_bytes(bare(STEP[6])) == 0
    assert torch_api.device_activities([bare(STEP[8])], np.zeros(1, int), np.ones(1, bool))[0] == (
        "cuda_sync"  # by its name alone
    )
    features = torch_api.Features(
        torch="2.x", events=torch_api.event_features(bare), config=(), device_time=""
    )
    said = " ".join(torch_api.notes(features, cuda=True))
    assert "activity type" in said and "copies read 0 bytes" in said and "sync events" in said
    assert torch_api.notes(features, cuda=False) == ()


class _Config:
    """An experimental config taking the keywords in ``takes`` (pybind raises TypeError)."""

    takes: frozenset[str] = frozenset()

    def __init__(self, **kw: bool) -> None:
        unknown = set(kw) - self.takes
        if unknown:
            raise TypeError(f"__init__(): incompatible keyword arguments {unknown}")
        self.kw = kw


def test_the_experimental_config_asks_for_what_this_torch_takes() -> None:
    both = type("Both", (_Config,), {"takes": frozenset(torch_api.CONFIG_OPTIONS)})
    sync_only = type("SyncOnly", (_Config,), {"takes": frozenset({"enable_cuda_sync_events"})})
    assert torch_api.config_options(both) == torch_api.CONFIG_OPTIONS
    assert torch_api.config_options(sync_only) == ("enable_cuda_sync_events",)
    assert torch_api.config_options(None) == ()
    real = torch_api.experimental_config(True)
    assert isinstance(real, torch._C._profiler._ExperimentalConfig)
    assert torch_api.experimental_config(False) is None
    none = torch_api.Features(torch="x", events=None, config=(), device_time="")
    assert torch_api.experimental_config(True, none) is None


def test_function_events_read_device_time_under_either_name() -> None:
    new = SimpleNamespace(self_device_time_total=3.0, device_time_total=5.0)
    old = SimpleNamespace(self_cuda_time_total=2.0, cuda_time_total=4.0)

    def features(attr: str) -> torch_api.Features:
        return torch_api.Features(torch="x", events=None, config=(), device_time=attr)

    assert torch_api.function_event_device_us(new, features("self_device_time_total")) == (3, 5)
    assert torch_api.function_event_device_us(old, features("self_cuda_time_total")) == (2, 4)
    assert torch_api.function_event_device_us(old, features("")) == (0, 0)


def test_warnings_of_tprofs_own_calls_are_kept_from_the_users_filters() -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with torch_api.own_warnings_quiet():
            warnings.warn("the profiler's own", UserWarning, stacklevel=1)
        with pytest.raises(UserWarning):
            warnings.warn("the user's", UserWarning, stacklevel=1)


def test_device_events_recorded_on_real_gpus_are_typed_by_name_as_their_trace_says() -> None:
    import gzip
    import json

    from tprof_testing import GPU_TRACES

    seen: dict[str, int] = {}
    for path in sorted(GPU_TRACES.glob("*.pt.trace.json.gz")):
        for e in json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]:
            cat = e.get("cat")
            if cat not in ("kernel", "gpu_memcpy", "gpu_memset", "cuda_sync"):
                continue
            meta = json.dumps(e.get("args", {}))
            with_meta = SimpleNamespace(name=lambda e=e: e["name"], metadata_json=lambda m=meta: m)
            bare = SimpleNamespace(name=lambda e=e: e["name"])
            assert torch_api._by_name(with_meta) == cat, (path.name, e["name"])
            assert torch_api._by_name(bare) == cat, (path.name, e["name"])
            seen[cat] = seen.get(cat, 0) + 1
    # H100 (torch 2.11), A100 and V100 traces: every kind of device event, 26,398 in all
    assert seen == {"kernel": 19_594, "cuda_sync": 84, "gpu_memset": 1_620, "gpu_memcpy": 5_100}


@pytest.mark.parametrize(
    "ending",
    [
        b'\n  }\n],"traceName": "/tmp/x/trace.json"\n}',  # torch 2.13, 2.14
        b'\n  }\n  ],\n  "traceName": "/tmp/a]b/trace.json"\n}\n',  # torch 2.11
        # kineto's own log lines, where it had any (a CUDA build on a machine with no GPU)
        b'\n  }\n  ],\n      "ERROR": ["ERROR: gpuGetDeviceCount failed"],\n  "traceName": "t"\n}',
    ],
)
def test_the_round_counters_go_into_each_releases_trace_events(ending: bytes) -> None:
    import io
    import json

    from tprof_engine.store import trace_gzip

    head = (
        b'{\n  "baseTimeNanoseconds": 1000000,\n  "traceEvents": [\n  {\n    "name": "x", "ts": 1'
    )
    for data in (head + ending, head[: -len(b'{\n    "name": "x", "ts": 1')] + ending[5:]):
        at, extra = trace_gzip._counter_events(io.BytesIO(data), [(3_000_000, {"wall_us": 5.0})])
        assert at is not None
        whole = json.loads(data[:at] + extra + data[at:])
        counter = whole["traceEvents"][0]
        assert (counter["ph"], counter["ts"], counter["args"]) == ("C", 2000.0, {"wall_us": 5.0})


TRACES = sorted(RELEASES_DATA.glob("*.pt.trace.json.gz"))


@pytest.mark.parametrize("recorded", TRACES, ids=lambda p: p.name.split(".pt.")[0])
def test_each_releases_trace_takes_the_counter_track_and_reads_in_tprof_diff(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import gzip

    from tprof_engine.cli import main
    from tprof_engine.store import trace_gzip, traces

    plain = gzip.decompress(recorded.read_bytes())
    exported = json.loads(plain)
    base_ns = int(exported["baseTimeNanoseconds"])
    out = tmp_path / "t.pt.trace.json.gz"
    written, why = trace_gzip.write_gzipped(
        out,
        export=lambda p: p.write_bytes(plain),
        counters=[(base_ns + 2_000_000, {"wall_us": 5.0})],
    )
    assert written == out, why
    whole = json.loads(gzip.decompress(out.read_bytes()))
    counters = [e for e in whole["traceEvents"] if e.get("ph") == "C"]
    assert [(c["ts"], c["args"]) for c in counters] == [(2000.0, {"wall_us": 5.0})]
    assert len(whole["traceEvents"]) == len(exported["traceEvents"]) + 1
    table = traces.table_from_trace(out)
    assert {"aten::mm", "aten::relu"} <= set(table.names) and table.calls.shape[1] == 12
    assert main(["diff", str(out), str(out)]) == 0  # read and judged: no error
    assert "tprof diff: 1 test compared" in capsys.readouterr().out
