"""Today's two backends: CUDA (named ROCm on torch's HIP build) and the CPU alone, picked once
from what torch sees; what they tell the facts and the fingerprint is what stored baselines
were keyed by."""

from __future__ import annotations

import pytest
import torch
from torch.profiler import ProfilerActivity

from tprof_engine.capture import backends, facts, random_state
from tprof_engine.model import family_specs
from tprof_engine.model.environment import Fingerprint, device_used


def test_a_machine_where_torch_sees_a_gpu_gets_the_cuda_backend(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    found = backends.detect()
    assert isinstance(found, backends.CudaBackend)
    assert found.family == family_specs.device_spec().name
    assert found.activities() == [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    assert found.visible_devices == "CUDA_VISIBLE_DEVICES"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert backends.detect() is backends.CPU


@pytest.mark.parametrize(("hip", "label"), [(None, "CUDA"), ("6.2.41133", "ROCm")])
def test_rocm_is_named_where_torch_says_hip(
    monkeypatch: pytest.MonkeyPatch, hip: str | None, label: str
) -> None:
    monkeypatch.setattr(torch.version, "hip", hip, raising=False)
    assert backends.CudaBackend().label == label


def test_the_cpu_backend_records_the_cpu_and_waits_for_nothing() -> None:
    cpu = backends.CPU
    assert cpu.family is None and cpu.label == "CPU" and cpu.version() is None
    assert cpu.to_device(torch.ones(2)) is None and cpu.meter() is None
    with pytest.raises(ValueError, match="no device to set random generators on"):
        cpu.set_rng_states([b""])


def test_this_cpu_machines_facts_name_no_device() -> None:
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    found = facts.torch_facts()
    assert (found["device"], found["device_label"]) == ("cpu", "CPU")
    assert found["cuda"] is None
    assert "cuda" not in random_state.read()


def test_a_gpu_fingerprint_keeps_the_keys_stored_baselines_have() -> None:
    new = {"device": "cuda", "cuda_available": True, "cuda": "12.8", "gpu_used": "NVIDIA H100"}
    old = {k: v for k, v in new.items() if k != "device"}  # facts from before the backends
    for torch_facts in (new, old):
        fp = Fingerprint.collect(torch_facts)
        assert fp.hard["device"] == "cuda" and fp.hard["cuda"] == "12.8"
        assert "-cuda12.8-" in fp.key
        assert device_used(torch_facts, {}) == "cuda:0 NVIDIA H100"
    cpu = Fingerprint.collect({"cuda_available": False})
    assert cpu.hard["device"] == "cpu" and "-cpu-" in cpu.key
