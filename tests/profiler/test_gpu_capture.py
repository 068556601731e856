"""The capture side of the device table: kineto's events as a CUDA run delivers them.

No GPU here, so the events are built as torch 2.13's ``_KinetoEvent`` reports them on a device
run (activity types, correlation ids, the copy's metadata JSON); the torch options are real.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import SimpleNamespace

import torch

from tprof_engine.capture import export, kineto
from tprof_engine.model.records import KIND_ANNOTATION, KIND_DEVICE, KIND_OP, KIND_SYNC
from tprof_engine.reduce.ops import reduce_events

CPU = torch.autograd.DeviceType.CPU  # type: ignore[attr-defined]
CUDA = torch.autograd.DeviceType.CUDA  # type: ignore[attr-defined]


@dataclass
class KinetoLike:
    """The accessors ``events_from_kineto`` reads, with the values a CUDA run gives them."""

    n: str
    start: int
    end: int
    act: str
    corr: int = 0
    linked: int = 0
    stream: int = 0
    meta: str = ""
    annotation: bool = False

    def name(self) -> str:
        return self.n

    def start_ns(self) -> int:
        return self.start

    def end_ns(self) -> int:
        return self.end

    def device_type(self) -> object:
        return CPU if self.act in ("cpu_op", "user_annotation", "cuda_runtime") else CUDA

    def start_thread_id(self) -> int:
        return 7 if self.device_type() == CPU else 0

    end_thread_id = start_thread_id

    def is_async(self) -> bool:
        return False

    def is_user_annotation(self) -> bool:
        return self.annotation

    def is_hidden_event(self) -> bool:
        return False

    def correlation_id(self) -> int:
        return self.corr

    def linked_correlation_id(self) -> int:
        return self.linked

    def activity_type(self) -> str:
        return self.act

    def device_index(self) -> int:
        return 0 if self.device_type() == CUDA else -1

    def device_resource_id(self) -> int:
        return self.stream

    def metadata_json(self) -> str:
        return self.meta


def session(events: list[KinetoLike]) -> object:
    results = SimpleNamespace(events=lambda: events)
    return SimpleNamespace(profiler=SimpleNamespace(kineto_results=results))


STEP = [
    KinetoLike("ProfilerStep#0", 0, 100_000, "user_annotation", annotation=True),
    KinetoLike("aten::item", 1_000, 50_000, "cpu_op", corr=10),
    KinetoLike("cudaMemcpyAsync", 2_000, 3_000, "cuda_runtime", corr=77, linked=10),
    KinetoLike(
        "Memcpy DtoH (Device -> Pageable)",
        10_000,
        11_000,
        "gpu_memcpy",
        corr=77,
        linked=10,
        stream=7,
        meta='"device": 0, "context": 1, "stream": 7, "correlation": 77, "bytes": 4',
    ),
    KinetoLike("cudaStreamSynchronize", 3_000, 12_000, "cuda_runtime", corr=78, linked=10),
    KinetoLike("Stream Sync", 11_000, 11_500, "cuda_sync", corr=78, linked=10, stream=7),
]


def test_a_device_run_asks_kineto_for_sync_events_and_copy_metadata() -> None:
    assert export.device_config(False) is None
    config = export.device_config(True)
    assert isinstance(config, torch._C._profiler._ExperimentalConfig)


def test_kineto_copies_carry_bytes_stream_and_launch_and_syncs_are_their_own_kind() -> None:
    ev = kineto.events_from_kineto(session(STEP))  # type: ignore[arg-type]
    assert ev.kind.tolist() == [KIND_ANNOTATION, KIND_OP, KIND_OP, KIND_DEVICE, KIND_OP, KIND_SYNC]
    assert ev.nbytes is not None and ev.nbytes.tolist() == [0, 0, 0, 4, 0, 0]
    assert ev.launch_ns is not None and ev.launch_ns[[3, 5]].tolist() == [2_000, 3_000]
    assert ev.thread[[3, 5]].tolist() == [7, 7]  # device 0, stream 7


def test_a_kineto_device_run_reduces_to_the_op_that_waited() -> None:
    table = reduce_events(kineto.events_from_kineto(session(STEP)))  # type: ignore[arg-type]
    assert table.device is not None
    rows = {
        (o, k, n): (c.tolist(), b.tolist())
        for o, k, n, c, b in zip(
            table.device.ops,
            table.device.kinds,
            table.device.names,
            table.device.calls,
            table.device.bytes,
            strict=True,
        )
    }
    assert rows == {
        ("aten::item", "memcpy", "Memcpy DtoH (Device -> Pageable)"): ([1], [4]),
        ("aten::item", "sync", "Stream Sync"): ([1], [0]),
    }
    assert table.device.queue_depth.tolist() == [1.0]
