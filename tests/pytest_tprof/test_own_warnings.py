"""The plugin's own warnings stay its own: torch's warnings from tprof's profiler calls never
reach a user's ``filterwarnings = error``, while the body's warnings still do.

torch 2.11 warns at a process's first profiler start ("Profiler clears events at the end of each
cycle…"); the releases after it don't, so the user's conftest here makes this torch's profiler
warn as 2.11 does, and at stop, export and metadata too.
"""

from __future__ import annotations

import pytest
from tprof_testing import small_args

WARNING_PROFILER = """
import warnings

import torch.profiler.profiler as torch_profiler


def _warning(method):
    def wrapped(self, *args, **kwargs):
        warnings.warn(f"torch's profiler warns in {method.__name__}", UserWarning)
        return method(self, *args, **kwargs)

    return wrapped


for name in ("prepare_trace", "stop_trace", "export_chrome_trace", "add_metadata_json", "events"):
    cls = torch_profiler._KinetoProfile
    setattr(cls, name, _warning(getattr(cls, name)))
"""

SUITE = """
import warnings

import torch


def test_a_quiet_body(tprof):
    x = torch.randn(16, 16)
    tprof(lambda: x @ x)


def test_a_body_that_warns(tprof):
    x = torch.randn(16, 16)

    def body():
        warnings.warn("the user's own warning", UserWarning)
        return x @ x

    tprof(body)
"""


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["--tprof-save", "--tprof"])
def test_a_warnings_as_errors_suite_sees_its_own_warnings_and_none_of_the_profilers(
    pytester: pytest.Pytester, mode: str
) -> None:
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(WARNING_PROFILER)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_subprocess(
        mode, "--tprof-collect=traces", *small_args(), "test_suite.py"
    )
    out = result.stdout.str()
    result.assert_outcomes(passed=1, failed=1)
    assert "FAILED test_suite.py::test_a_body_that_warns - UserWarning: the user's own" in out
    assert "torch's profiler warns" not in out


@pytest.mark.slow
def test_the_warning_profiler_fails_a_plain_profiled_run(pytester: pytest.Pytester) -> None:
    # The harness above is a real test: the same profiler used by hand errors under the filter.
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makeconftest(WARNING_PROFILER)
    pytester.makepyfile(
        test_by_hand="""
        import torch
        from torch.profiler import profile

        def test_by_hand():
            with profile():
                torch.ones(4) + 1
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "test_by_hand.py")
    result.assert_outcomes(failed=1)
    assert "torch's profiler warns in prepare_trace" in result.stdout.str()
