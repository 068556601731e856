import pytest

# torch first: an in-process pytester run that imports torch for the first time crashes the next.
import torch

# torch.profiler imports inductor's config on first use; importing it once here keeps a second
# in-process pytester run from registering its op library twice.
import torch._inductor.config  # noqa: F401

pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest run a test starts is no xdist worker, even when the test runs in one (``make
    test`` runs most of this suite under ``-n 2``).  Inherited, the worker's variables turn
    pytest-benchmark off, hand the run a worker's GPU and count the other workers as its own
    load."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
