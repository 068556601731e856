"""Runs action.yml's composite steps as a runner would, on this machine: each step's ``if:``,
``env:`` and ``with:`` filled in from a recorded event payload and the job's contexts, each
``run:`` script run with bash (``GITHUB_OUTPUT``, ``GITHUB_STEP_SUMMARY``, ``GITHUB_ENV``
files as the runner gives them), each upload-artifact step checked instead of run: its
``path:`` must name files that exist (hidden ones included) and its name must be new in the
workflow run.

The expressions: contexts and their properties (``inputs.x``, ``github.event.y``,
``steps.id.outputs.z``), string, number and boolean literals, ``!``, ``==``, ``!=``, ``&&``,
``||``, parentheses, and ``always()``, ``success()``, ``failure()``, ``toJSON()``,
``format()`` -- what the Action uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, field
from io import StringIO
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
ACTION = ROOT / "action.yml"
DOCS = ROOT / "docs"
BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]
TOKEN = re.compile(
    r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+(?:\.\d+)?)"
    r"|(?P<op>\|\||&&|==|!=|[!().,\[\]])|(?P<name>[A-Za-z_][\w-]*))"
)
TEMPLATE = re.compile(r"\$\{\{(.*?)\}\}", re.S)


def load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


def load_text(source: str) -> Any:
    return YAML(typ="safe").load(StringIO(source))


def doc_workflows() -> dict[str, str]:
    """The YAML blocks of docs/*.md that are whole workflows (``on:`` and ``jobs:``)."""
    found = {}
    for page in sorted(DOCS.glob("*.md")):
        for n, match in enumerate(BLOCK.finditer(page.read_text(encoding="utf-8"))):
            block = match.group(1)
            parsed = load_text(block)
            if isinstance(parsed, dict) and {"on", "jobs"} <= set(parsed):
                found[f"{page.stem}-{n}.yml"] = block
    return found


def text(value: Any) -> str:
    """An expression's value as the runner writes it into a string."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2)
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def truthy(value: Any) -> bool:
    return value not in (None, "", 0, False) and not (isinstance(value, float) and value != value)


class Expression:
    """One ``${{ … }}`` expression, evaluated against the contexts."""

    def __init__(self, source: str, contexts: Mapping[str, Any], failed: bool) -> None:
        self.tokens = self._tokens(source)
        self.at = 0
        self.contexts = contexts
        self.failed = failed

    @staticmethod
    def _tokens(source: str) -> list[tuple[str, str]]:
        found, at = [], 0
        while source[at:].strip():
            match = TOKEN.match(source, at)
            if match is None:
                raise ValueError(f"expression {source!r}: can't read {source[at:]!r}")
            kind = match.lastgroup or ""
            found.append((kind, match.group(kind)))
            at = match.end()
        return found

    def value(self) -> Any:
        result = self._or()
        if self.at != len(self.tokens):
            raise ValueError(f"expression: unexpected {self.tokens[self.at][1]!r}")
        return result

    def _peek(self) -> str | None:
        return self.tokens[self.at][1] if self.at < len(self.tokens) else None

    def _take(self, expected: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.at]
        if expected is not None and token[1] != expected:
            raise ValueError(f"expression: expected {expected!r}, got {token[1]!r}")
        self.at += 1
        return token

    def _or(self) -> Any:
        left = self._and()
        while self._peek() == "||":
            self._take()
            right = self._and()
            left = left if truthy(left) else right
        return left

    def _and(self) -> Any:
        left = self._compare()
        while self._peek() == "&&":
            self._take()
            right = self._compare()
            left = right if truthy(left) else left
        return left

    def _compare(self) -> Any:
        left = self._unary()
        if self._peek() in ("==", "!="):
            op = self._take()[1]
            same = text(left).lower() == text(self._unary()).lower()
            return same if op == "==" else not same
        return left

    def _unary(self) -> Any:
        if self._peek() == "!":
            self._take()
            return not truthy(self._unary())
        return self._primary()

    def _primary(self) -> Any:
        kind, token = self._take()
        if kind == "str":
            return token[1:-1].replace("''", "'")
        if kind == "num":
            return float(token)
        if token == "(":
            inner = self._or()
            self._take(")")
            return inner
        if token in ("true", "false", "null"):
            return {"true": True, "false": False, "null": None}[token]
        if self._peek() == "(":
            return self._call(token)
        return self._path(self.contexts.get(token))

    def _path(self, value: Any) -> Any:
        while self._peek() in (".", "["):
            if self._take()[1] == ".":
                key = self._take()[1]
            else:
                key = text(self._or())
                self._take("]")
            value = value.get(key) if isinstance(value, dict) else None
        return value

    def _call(self, name: str) -> Any:
        self._take("(")
        args = []
        while self._peek() != ")":
            args.append(self._or())
            if self._peek() == ",":
                self._take()
        self._take(")")
        calls = {
            "always": lambda: True,
            "success": lambda: not self.failed,
            "failure": lambda: self.failed,
            "toJSON": lambda: text(
                args[0] if not isinstance(args[0], str) else json.dumps(args[0])
            ),
            "format": lambda: re.sub(r"\{(\d+)\}", lambda m: text(args[1 + int(m[1])]), args[0]),
        }
        return calls[name]()


def evaluate(source: str, contexts: Mapping[str, Any], failed: bool = False) -> Any:
    return Expression(source, contexts, failed).value()


def fill(value: Any, contexts: Mapping[str, Any]) -> str:
    """A YAML value with its ``${{ … }}`` parts replaced by their values' text."""
    return TEMPLATE.sub(lambda m: text(evaluate(m.group(1), contexts)), text(value))


def read_commands_file(path: Path) -> dict[str, str]:
    """``name=value`` lines and ``name<<DELIMITER`` blocks (GITHUB_OUTPUT, GITHUB_ENV)."""
    found: dict[str, str] = {}
    lines = path.read_text(encoding="utf-8").splitlines() if path.exists() else []
    while lines:
        line = lines.pop(0)
        if "<<" in line and ("=" not in line or line.index("<<") < line.index("=")):
            name, delimiter = line.split("<<", 1)
            block = []
            while lines and lines[0] != delimiter:
                block.append(lines.pop(0))
            lines = lines[1:]
            found[name] = "\n".join(block)
        elif "=" in line:
            name, value = line.split("=", 1)
            found[name] = value
    return found


@dataclass
class Workflow:
    """What the workflow run's uses of the Action share: the artifacts uploaded so far."""

    artifacts: dict[str, list[Path]] = field(default_factory=dict)


@dataclass
class Job:
    """One job running the Action: the checkout, the event and the job's contexts."""

    workspace: Path
    temp: Path
    event_name: str
    event: dict[str, Any]
    inputs: dict[str, str]
    job: str = "perf"
    matrix: dict[str, Any] | None = None
    job_index: int = 0
    env: dict[str, str] = field(default_factory=dict)
    workflow: Workflow = field(default_factory=Workflow)


@dataclass
class Result:
    status: int  # the first failing step's exit status, 0 when none failed
    outputs: dict[str, str]
    summary: str
    log: str
    steps: dict[str, dict[str, Any]]
    uploads: dict[str, list[Path]]


def github_context(job: Job, event_path: Path) -> dict[str, Any]:
    event, ref = job.event, str(job.env.get("GITHUB_REF", "refs/heads/feature"))
    return {
        "event_name": job.event_name,
        "event": event,
        "event_path": str(event_path),
        "job": job.job,
        "ref": ref,
        "ref_name": ref.rsplit("/", 1)[-1],
        "ref_type": "tag" if ref.startswith("refs/tags/") else "branch",
        "repository": "octo/project",
        "run_id": "4242",
        "run_attempt": job.env.get("GITHUB_RUN_ATTEMPT", "1"),
        "action_path": str(ROOT),
        "token": job.env.get("GITHUB_TOKEN", ""),
        "workspace": str(job.workspace),
    }


def runner_env(job: Job, github: Mapping[str, Any]) -> dict[str, str]:
    """The variables the runner sets for every step."""
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "RUNNER_"))}
    return {
        **keep,
        "GITHUB_ACTIONS": "true",
        "GITHUB_EVENT_NAME": job.event_name,
        "GITHUB_EVENT_PATH": github["event_path"],
        "GITHUB_REPOSITORY": github["repository"],
        "GITHUB_JOB": job.job,
        "GITHUB_REF": github["ref"],
        "GITHUB_WORKSPACE": str(job.workspace),
        "GITHUB_ACTION_PATH": str(ROOT),
        "GITHUB_API_URL": "http://127.0.0.1:9",  # nothing listens: a job without the API
        "RUNNER_TEMP": str(job.temp),
        **job.env,
    }


def run_script(
    step: Mapping[str, Any], env: dict[str, str], cwd: Path, files: Path
) -> tuple[int, dict[str, str], str, str]:
    """A ``run:`` step: its exit status, outputs, step-summary text and log."""
    files.mkdir(parents=True, exist_ok=True)
    output, summary, genv = files / "output", files / "summary", files / "env"
    for f in (output, summary, genv):
        f.write_text("")
    script = files / "script.sh"
    script.write_text(str(step["run"]))
    env = {**env, "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
    env["GITHUB_ENV"] = str(genv)
    done = subprocess.run(
        [*BASH, str(script)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    log = done.stdout + done.stderr
    return done.returncode, read_commands_file(output), summary.read_text(), log


def hidden(path: Path) -> bool:
    return any(part.startswith(".") for part in path.parts)


# actions/upload-artifact v4.6.2's inputs (its action.yml)
UPLOAD_INPUTS = {
    "name", "path", "if-no-files-found", "retention-days", "compression-level", "overwrite",
    "include-hidden-files",
}  # fmt: skip


def upload(job: Job, uses: str, values: Mapping[str, str]) -> tuple[int, dict[str, str], str]:
    """upload-artifact, checked: the paths' files (hidden ones when include-hidden-files is
    true), a name new in the run."""
    if not uses.startswith("actions/upload-artifact@") or not set(values) <= UPLOAD_INPUTS:
        raise ValueError(f"the harness runs only upload-artifact's inputs: {uses} {values}")
    name, found = values["name"], []
    for line in values["path"].splitlines():
        if line.strip():
            path = Path(line.strip())
            path = path if path.is_absolute() else job.workspace / path
            files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
            if values.get("include-hidden-files") != "true":  # v4.4 and later leave them out
                files = [f for f in files if not hidden(f.relative_to(path.parent))]
            found += files
    if name in job.workflow.artifacts:
        return 1, {}, f"upload: an artifact named {name} exists in this run (409 Conflict)"
    if not found and values.get("if-no-files-found", "warn") == "error":
        return 1, {}, f"upload: no files at {values['path']}"
    job.workflow.artifacts[name] = found
    url = f"https://github.example/octo/project/actions/runs/4242/artifacts/{len(found)}"
    outputs = {"artifact-id": str(len(job.workflow.artifacts)), "artifact-url": url}
    return 0, outputs, f"upload: {name}: {len(found)} file(s)"


def run_action(job: Job, *, until: str | None = None) -> Result:
    """Every step of action.yml in order, as a job using the Action runs them; ``until`` stops
    after the step with that id."""
    action = load(ACTION)
    event_path = job.temp / f"event-{job.job_index}.json"
    job.temp.mkdir(parents=True, exist_ok=True)
    event_path.write_text(json.dumps(job.event))
    github = github_context(job, event_path)
    defaults = {k: text(v.get("default", "")) for k, v in action["inputs"].items()}
    contexts: dict[str, Any] = {
        "github": github,
        "runner": {"temp": str(job.temp), "os": "Linux"},
        "strategy": {"job-index": job.job_index},
        "matrix": job.matrix,
        "steps": {},
    }
    contexts["inputs"] = {k: fill(v, contexts) for k, v in {**defaults, **job.inputs}.items()}
    result = Result(0, {}, "", "", contexts["steps"], {})
    base_env = runner_env(job, github)
    for n, step in enumerate(action["runs"]["steps"]):
        run_step(job, step, n, contexts, base_env, result)
        if until is not None and step.get("id") == until:
            break
    result.outputs = {k: fill(v["value"], contexts) for k, v in action["outputs"].items()}
    result.uploads = dict(job.workflow.artifacts)
    return result


def run_step(
    job: Job,
    step: Mapping[str, Any],
    n: int,
    contexts: dict[str, Any],
    base_env: dict[str, str],
    result: Result,
) -> None:
    condition = str(step.get("if", "success()")).strip()
    condition = TEMPLATE.sub(lambda m: m.group(1), condition)
    if not truthy(evaluate(condition, contexts, failed=result.status != 0)):
        result.log += f"-- {step.get('name')}: skipped\n"
        return
    env = {k: fill(v, contexts) for k, v in (step.get("env") or {}).items()}
    if "run" in step:
        cwd = job.workspace / fill(step.get("working-directory", "."), contexts)
        files = job.temp / "steps" / f"{job.job_index}-{n}"
        code, outputs, summary, log = run_script(step, {**base_env, **env}, cwd, files)
        result.summary += summary
    else:
        values = {k: fill(v, contexts) for k, v in (step.get("with") or {}).items()}
        code, outputs, log = upload(job, str(step["uses"]), values)
    result.log += f"-- {step.get('name')}: exit {code}\n{log}"
    if "id" in step:
        outcome = "success" if code == 0 else "failure"
        contexts["steps"][step["id"]] = {"outputs": outputs, "outcome": outcome}
    if code != 0 and not step.get("continue-on-error") and result.status == 0:
        result.status = code
