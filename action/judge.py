"""The Action's verdict on a ``tprof ab`` run: the head report's counts as step outputs, and
whether a run that failed only on tprof regressions is accepted.

A regression is accepted by the pull request's accept label (read live through the API with
the job's token, else from the event) or by ``fail-on-regression: false``; never a test that
failed for another reason, and never an unjudged run under ``if-unjudged: fail``.  Inputs come
from the environment (action.yml's "Judge the run" step); the exit status the Action ends with
is the ``exit-code`` output, so this always exits 0 once it has written it.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tprof_engine.ab import timing_judged
from tprof_engine.model.verdicts import TEST_ORDER

# How the plugin's failure text of a regressed test starts (the JUnit failure's message).
REGRESSION_MESSAGE = "tprof: regressed"
PULL_REQUEST_EVENTS = ("pull_request", "pull_request_target")


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure:
    """A test pytest reported failed or errored, with the first line of its message."""

    test: str
    message: str

    @property
    def regression(self) -> bool:
        return self.message.startswith(REGRESSION_MESSAGE)


def report_tests(path: str) -> list[dict[str, Any]]:
    """The tests of the head's JSON report (none when it is missing)."""
    try:
        found: list[dict[str, Any]] = json.loads(Path(path).read_text(encoding="utf-8"))["tests"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return found


def junit_failures(path: str) -> list[Failure] | None:
    """Every failed or errored test of the head's JUnit file; None when pytest wrote none."""
    try:
        root = ElementTree.parse(path).getroot()
    except (OSError, ElementTree.ParseError):
        return None
    return [
        Failure(
            test=f"{case.get('classname', '')}.{case.get('name', '')}".lstrip("."),
            message=(element.get("message") or "").strip(),
        )
        for case in root.iter("testcase")
        for element in (*case.findall("failure"), *case.findall("error"))
    ]


def refusal(
    status: int, failures: list[Failure] | None, unjudged: Sequence[str], if_unjudged: str
) -> str | None:
    """Why a failed run can't be accepted as an intended change; None when it can."""
    if status != 1:
        return f"tprof ab exited {status} (the base or the run could not be measured)"
    if failures is None:
        return "pytest wrote no JUnit report"
    ordinary = [f.test for f in failures if not f.regression]
    if ordinary:
        shown = ", ".join(ordinary[:5]) + (" …" if len(ordinary) > 5 else "")
        return f"{len(ordinary)} test(s) failed for a reason other than a tprof regression: {shown}"
    if if_unjudged == "fail" and unjudged:
        return f"timing was not judged for {len(unjudged)} test(s) (if-unjudged: fail)"
    if not failures:
        return "no test failed on a tprof regression"
    return None


def api_get(path: str, token: str) -> Any:
    """A GitHub REST API answer (``GITHUB_API_URL`` names the server)."""
    url = os.environ.get("GITHUB_API_URL", "https://api.github.com").rstrip("/") + path
    request = urllib.request.Request(
        url,
        headers={
            "Accept": "application/vnd.github+json",
            "Authorization": f"Bearer {token}",
            "X-GitHub-Api-Version": "2022-11-28",
        },
    )
    with urllib.request.urlopen(request, timeout=30) as answer:
        return json.load(answer)


def live(path: str) -> Any:
    """The API's answer, or None without a token or when the request fails (said as a warning)."""
    token = os.environ.get("GH_TOKEN", "")
    if not token:
        return None
    try:
        return api_get(path, token)
    except (OSError, ValueError, urllib.error.URLError) as exc:
        print(f"::warning title=pytest-tprof ab::could not read {path} from the GitHub API: {exc}")
        return None


def pull_request_labels(event: Mapping[str, Any], repo: str) -> tuple[list[str], str]:
    """The pull request's labels as they are now (API), else as the event saw them."""
    number = event["pull_request"]["number"]
    answer = live(f"/repos/{repo}/issues/{number}/labels?per_page=100")
    if isinstance(answer, list):
        return [str(label.get("name")) for label in answer], "read when the job ran"
    return [str(label.get("name")) for label in event["pull_request"].get("labels", [])], (
        "as the event saw them"
    )


def labeller(event: Mapping[str, Any], repo: str, label: str) -> str | None:
    """Who added ``label`` last: the event's sender when this event added it, else the
    pull request's timeline; None when neither says."""
    if event.get("action") == "labeled" and (event.get("label") or {}).get("name") == label:
        return str((event.get("sender") or {}).get("login") or "") or None
    number = event["pull_request"]["number"]
    answer = live(f"/repos/{repo}/issues/{number}/events?per_page=100")
    added = [
        e
        for e in (answer if isinstance(answer, list) else [])
        if e.get("event") == "labeled" and (e.get("label") or {}).get("name") == label
    ]
    if not added:
        return None
    return str((added[-1].get("actor") or {}).get("login") or "") or None


def acceptance(event: Mapping[str, Any], env: Mapping[str, str]) -> str | None:
    """Who or what accepts tprof regressions on this run; None when nothing does."""
    if env.get("FAIL_ON_REGRESSION") == "false":
        return "the input fail-on-regression: false"
    label = env.get("ACCEPT_LABEL", "")
    if not label or env.get("GITHUB_EVENT_NAME") not in PULL_REQUEST_EVENTS:
        return None
    repo = env.get("GITHUB_REPOSITORY", "")
    labels, source = pull_request_labels(event, repo)
    if label not in labels:
        return None
    who = labeller(event, repo, label)
    by = f", added by @{who}" if who else ""
    return f"the pull request's label `{label}`{by} (labels {source})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Judgement:
    """The Action's outputs and the summary's lines for one run."""

    outputs: dict[str, str]
    lines: list[str]


def judge(env: Mapping[str, str], event: Mapping[str, Any]) -> Judgement:
    """The outputs and summary of the run ``env`` describes."""
    status = int(env["STATUS"])
    tests = report_tests(env["REPORT"])
    failures = junit_failures(env["JUNIT"])
    unjudged = [t["nodeid"] for t in tests if not timing_judged(t)]
    counts = Counter(str(t.get("verdict")) for t in tests)
    outputs: dict[str, str] = {word: str(counts[word]) for word in TEST_ORDER}
    outputs |= {"failed": str(len(failures or [])), "unjudged": str(len(unjudged))}
    said = ", ".join(f"{counts[w]} {w}" for w in TEST_ORDER if counts[w]) or "no profiled test"
    lines = [
        f"### tprof ab: {env.get('NAME', '')}",
        "",
        f"Base `{env.get('BASE', '')[:12]}` ({env.get('BASE_FROM', '')}). Verdicts: {said}; "
        f"{len(failures or [])} failed test(s).",
    ]
    exit_code, accepted = status, False
    if status != 0:
        by = acceptance(event, env)
        why_not = refusal(status, failures, unjudged, env.get("IF_UNJUDGED", "warn"))
        if by and why_not is None:
            exit_code, accepted = 0, True
            names = ", ".join(f.test for f in failures or [])
            lines.append(f"**Accepted**: the regression of {names}, by {by}.")
            print(f"::notice title=pytest-tprof ab::regressions accepted by {by}: {names}")
        elif by:
            lines.append(f"**Not accepted** (accepted only tprof regressions): {why_not}.")
    outputs |= {"accepted": str(accepted).lower(), "exit-code": str(exit_code)}
    return Judgement(outputs=outputs, lines=lines)


def main() -> int:
    env = os.environ
    try:
        event = json.loads(Path(env["GITHUB_EVENT_PATH"]).read_text(encoding="utf-8"))
    except (KeyError, OSError, ValueError):
        event = {}
    done = judge(env, event)
    with open(env["GITHUB_OUTPUT"], "a", encoding="utf-8") as out:
        out.writelines(f"{key}={value}\n" for key, value in done.outputs.items())
    summary = env.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as out:
            out.write("\n" + "\n".join(done.lines) + "\n\n")
    print("\n".join(done.lines[2:]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
