"""Which GPU a process profiles on, and how the fingerprint names it (no GPU needed)."""

from __future__ import annotations

import pytest

from tprof_engine.model.environment import (
    Fingerprint,
    device_for_worker,
    device_used,
    sharing_warning,
    visible_devices,
    worker_number,
)


def never_counted() -> int:
    raise AssertionError("a user's CUDA_VISIBLE_DEVICES list must be used as given")


def test_without_a_list_every_gpu_of_the_machine_is_visible_by_index() -> None:
    assert visible_devices({}, lambda: 3) == ("0", "1", "2")
    assert visible_devices({}, lambda: 0) == ()


@pytest.mark.parametrize(
    ("listed", "devices"),
    [
        ("2,3", ("2", "3")),
        (" 5 , 1 ", ("5", "1")),
        ("GPU-8c1f,MIG-4a2b", ("GPU-8c1f", "MIG-4a2b")),
        ("", ()),
        ("-1", ()),
    ],
)
def test_a_users_list_is_kept_as_given(listed: str, devices: tuple[str, ...]) -> None:
    assert visible_devices({"CUDA_VISIBLE_DEVICES": listed}, never_counted) == devices


def test_workers_take_the_visible_devices_round_robin() -> None:
    devices = ("2", "3")
    assert [device_for_worker(f"gw{k}", devices) for k in range(5)] == ["2", "3", "2", "3", "2"]
    assert device_for_worker("gw1", ()) is None
    assert device_for_worker(None, devices) is None
    assert device_for_worker("master", devices) is None
    assert worker_number("gw12") == 12


def test_fewer_gpus_than_workers_is_one_warning_naming_who_shares() -> None:
    assert sharing_warning(2, ("0", "1")) is None
    assert sharing_warning(4, ()) is None
    assert sharing_warning(3, ("0", "1")) == (
        "3 xdist workers share 2 GPUs round-robin (gw0, gw2 → 0; gw1 → 1); workers on one GPU "
        "disturb each other's timings: use -n 2 for one GPU per worker"
    )
    assert sharing_warning(2, ("7",)) == (
        "2 xdist workers share 1 GPU round-robin (gw0, gw1 → 7); workers on one GPU "
        "disturb each other's timings: use -n 1 for one GPU per worker"
    )


CUDA_FACTS = {
    "torch": "2.11.0+cu128",
    "cuda_available": True,
    "cuda": "12.8",
    "gpus": ["NVIDIA H100 80GB HBM3", "NVIDIA H100 80GB HBM3"],
    "gpu_index": 0,
    "gpu_used": "NVIDIA H100 80GB HBM3",
}


def test_the_fingerprint_names_the_device_used_not_every_gpu_of_the_machine(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    fp = Fingerprint.collect(CUDA_FACTS)
    assert fp.hard["gpus"] == ["NVIDIA H100 80GB HBM3"]
    assert fp.soft["device"] == "cuda:0 NVIDIA H100 80GB HBM3 (CUDA_VISIBLE_DEVICES=1)"
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    # a worker on its own GPU and a run that saw the whole machine compare their timings
    assert Fingerprint.collect(CUDA_FACTS).hard == fp.hard


def test_a_cpu_run_names_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    assert device_used({"cuda_available": False}, {}) == "cpu"
    assert (
        device_used({"cuda_available": False}, {"CUDA_VISIBLE_DEVICES": "0"})
        == "cpu (CUDA_VISIBLE_DEVICES=0)"
    )
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    fp = Fingerprint.collect({"torch": "2.13.0", "cuda_available": False})
    assert fp.hard["gpus"] == []
    assert fp.soft["device"] == "cpu"
