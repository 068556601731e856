"""The option set: one name per setting, switches that can be turned off again, nothing in an
ini file that makes every run a recording run, and the old spellings working with a warning."""

from __future__ import annotations

import json

import pytest

from pytest_tprof.options import read_settings

BODY = """
import pytest
import torch

x = torch.ones(64, 64)


def test_mm(tprof):
    tprof(torch.mm, x, x)
"""
QUICK = ("-p", "no:cacheprovider", "--tprof-rounds=4", "--tprof-warmup=0")


def settings_of(pytester: pytest.Pytester, ini: str, *args: str):  # type: ignore[no-untyped-def]
    pytester.makeini(f"[pytest]\n{ini}\n")
    return read_settings(pytester.parseconfig(*args))


def test_help_lists_each_option_once_in_a_phrase(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    listed = [s for s in result.stdout.lines if s.startswith(("  --tprof", "  --no-tprof"))]
    # 22 before --tprof-collect and the on/off switches brought it to 20; the trace switch
    # and how many runs' traces a test keeps are two more
    assert 15 <= len(listed) <= 22
    for old in ("--tprof-no-census", "--tprof-no-confirm", "--tprof-memory", "--tprof-stack"):
        assert not any(s.startswith(f"  {old}") for s in listed)


@pytest.mark.parametrize(
    ("ini", "args", "census", "confirm"),
    [
        ("tprof_census = false\ntprof_confirm = false", (), False, False),
        ("tprof_census = false\ntprof_confirm = false", ("--tprof-census", "--tprof-confirm"),
         True, True),
        ("", ("--no-tprof-census", "--no-tprof-confirm"), False, False),
    ],
)  # fmt: skip
def test_a_switch_set_in_the_ini_file_can_be_turned_off_again(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...], census: bool, confirm: bool
) -> None:
    run = settings_of(pytester, ini, *args).run
    assert (run.census, run.confirm) == (census, confirm)


def test_collect_names_what_else_to_collect(pytester: pytest.Pytester) -> None:
    run = settings_of(pytester, "tprof_collect = stack", "--tprof-collect=memory,nvtx").run
    assert (run.profile_memory, run.nvtx, run.stack, run.counters) == (True, True, False, False)
    run = settings_of(pytester, "tprof_collect = stack,counters").run
    assert (run.stack, run.counters, run.profile_memory) == (True, True, False)
    run = settings_of(pytester, "", "--tprof-collect=stack", "--tprof-memory").run
    assert (run.stack, run.profile_memory) == (True, True)  # the old flag adds, with a warning
    with pytest.raises(pytest.UsageError, match="'--tprof-collect' got 'memroy'; valid: memory"):
        settings_of(pytester, "", "--tprof-collect=memroy")


def test_a_save_in_the_ini_file_is_not_read_and_says_so(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\ntprof_save = true\n")
    pytester.makepyfile(test_body=BODY)
    result = pytester.runpytest(*QUICK, "--tprof", "--tprof-json=report.json")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*ini option 'tprof_save' is not read: give --tprof-save*"])
    (test,) = json.loads((pytester.path / "report.json").read_text())["tests"]
    assert test["verdict"] == "no-baseline"  # compared, not recorded
    assert not (pytester.path / "baselines").exists()


@pytest.mark.parametrize(
    ("ini", "args", "warned"),
    [
        ("", ("--tprof-no-census", "--tprof-memory"),
         ["*--tprof-no-census is deprecated*use --no-tprof-census*",
          "*--tprof-memory is deprecated*use --tprof-collect=memory*"]),
        ("tprof_no_census = true\ntprof_memory = true",  (),
         ["*tprof_no_census is deprecated*use tprof_census = false*",
          "*tprof_memory is deprecated*use tprof_collect = memory*"]),
    ],
)  # fmt: skip
def test_the_old_spellings_still_work_and_warn(
    pytester: pytest.Pytester, ini: str, args: tuple[str, ...], warned: list[str]
) -> None:
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_body=BODY)
    result = pytester.runpytest(*QUICK, "--tprof-save", *args)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(warned, consecutive=False)
    (path,) = (pytester.path / "baselines").rglob("*.json")
    saved = json.loads(path.read_text())
    assert saved["protocol"]["profile_memory"] is True
    assert "work" not in saved["sessions"][0]


def test_the_markers_old_rel_floor_still_works_and_warns(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_body=BODY.replace("def test_mm", "@pytest.mark.tprof(rel_floor=0.5)\ndef test_mm")
    )
    result = pytester.runpytest(*QUICK, "--tprof-save")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*tprof(rel_floor=...) is deprecated*use floor=...*"])


@pytest.mark.parametrize(
    ("version", "said"),
    [
        (
            "2.5.1+cu121",
            "pytest-tprof needs torch >= 2.6 and this environment has torch 2.5.1+cu121",
        ),
        (None, "pytest-tprof needs torch, and this environment has none"),
    ],
)
def test_an_unsupported_torch_is_one_usage_error_at_start_up(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, version: str | None, said: str
) -> None:
    from importlib import metadata

    from tprof_engine import torch_support

    real = metadata.version

    def installed(name: str) -> str:
        if name != "torch":
            return real(name)
        if version is None:
            raise metadata.PackageNotFoundError(name)
        return version

    monkeypatch.setattr(torch_support.metadata, "version", installed)
    pytester.makepyfile(test_body=BODY)
    result = pytester.runpytest_inprocess("--tprof", *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert said in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    plain = pytester.runpytest_inprocess(*QUICK)  # without --tprof the suite runs as ever
    plain.assert_outcomes(passed=1)


def test_the_supported_releases_are_the_ones_pyproject_states() -> None:
    from pathlib import Path

    from tprof_engine import torch_support

    project = (Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    wanted = ".".join(map(str, torch_support.MINIMUM))
    assert f'\n    "torch>={wanted}",\n' in project
    assert torch_support.torch_problem(f"{wanted}.0") is None
    assert torch_support.torch_problem("2.5.1+cpu") is not None
    assert torch_support.torch_problem("2.15.0") is None  # runs, its header says it is newer
    assert torch_support.parse_version(torch_support.VERIFIED[0]) == torch_support.MINIMUM
