"""What ``--tprof`` adds to each test's time, and where it goes, measured side by side in one run.

Writes a suite of four model kinds into a temporary folder:

- ``test_mlp``: a small MLP's inference (3 layers, width 64, batch 32);
- ``test_conv``: a small conv net's training step with SGD (2 conv blocks, 8×3×32×32);
- ``test_transformer_step``: an HF GPT-2 (2 layers, width 64) language-model step with AdamW,
  or, without ``transformers``, a 2-layer ``nn.TransformerEncoder`` step of the same size;
- ``test_generate``: HF Llama (2 layers) ``generate`` of 6 tokens with its KV cache (skipped
  without ``transformers``).

It records ``--sessions`` baselines with ``--tprof-save``, then runs the suite plain and with
``--tprof`` (compare), alternating, ``--repeat`` times.  Per test it prints the median
call-phase time of each mode (``--durations``), what ``--tprof`` added, and the plugin's own
time per stage from the JSON report's ``costs`` (the profiled rounds are the body's; every
other stage is the plugin's), and the same split for the last save run.  The target is the
plugin's own time per test: median <= 0.3 s.

    python benchmarks/overhead.py [--sessions 3] [--repeat 3] [--keep DIR] [--before CHECKOUT]

With ``--before``, a checkout of an earlier commit (``git worktree add /tmp/before <commit>``),
each repetition also runs ``--tprof`` with that checkout's package (its ``tprof_engine`` and
``pytest_tprof/`` first on ``PYTHONPATH``) against the same baselines, in turn with this one,
and prints the plugin's own time per test before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from collections import defaultdict
from pathlib import Path

from harness.runs import PYTEST, QUIET, by_name
from harness.runs import run as run_command
from harness.tables import med
from harness.workspace import workspace

from tprof_engine.model.costs import BODY_STAGES, Costs
from tprof_engine.model.costs import STAGES as ALL_STAGES

SUITE = """
import pytest
import torch
from torch import nn


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_mlp(tprof):
    model = nn.Sequential(
        nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 10)
    ).eval()
    x = torch.randn(32, 64)
    with torch.no_grad():
        tprof(model, x)


def test_conv(tprof):
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10),
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 10, (8,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tprof(step)


def test_transformer_step(tprof):
    try:
        import transformers
    except ImportError:
        transformers = None
    ids = torch.randint(0, 500, (2, 32))
    if transformers is not None:
        config = transformers.GPT2Config(
            n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64, n_inner=256
        )
        model = transformers.GPT2LMHeadModel(config)
        loss = lambda: model(input_ids=ids, labels=ids).loss
    else:
        embed = nn.Embedding(500, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 256, batch_first=True)
        model = nn.Sequential(embed, nn.TransformerEncoder(layer, 2), nn.Linear(64, 500))
        loss = lambda: nn.functional.cross_entropy(model(ids).flatten(0, 1), ids.flatten())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        loss().backward()
        opt.step()

    tprof(step)


def test_generate(tprof):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=500,
    )
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 500, (1, 8))
    with torch.no_grad():
        tprof(model.generate, ids, max_new_tokens=6, do_sample=False, pad_token_id=0)
"""
STAGES = tuple(s for s in ALL_STAGES if s not in BODY_STAGES)  # the plugin's own
INI = "[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning\n    ignore::UserWarning\n"
TARGET_S = 0.3
STARTUP: list[float] = []  # each run's first profiler start, once per process
_DURATION = re.compile(r"^\s*([\d.]+)s call\s+\S+::(\S+)")


def package_path(checkout: Path, folder: Path) -> str:
    """A folder that imports a checkout's package: ``tprof_engine`` is its
    ``profiler/tprof_engine/`` (``profiler/`` in checkouts before that layout)."""
    links = folder / "before-package"
    links.mkdir(exist_ok=True)
    nested = (checkout / "profiler" / "tprof_engine").is_dir()
    engine = "profiler/tprof_engine" if nested else "profiler"
    for name, target in (("tprof_engine", engine), ("pytest_tprof", "pytest_tprof")):
        link = links / name
        if link.is_symlink():
            link.unlink()
        link.symlink_to((checkout / target).resolve(), target_is_directory=True)
    return str(links)


def run(
    folder: Path, tag: str, flags: list[str], pythonpath: str | None = None
) -> tuple[dict[str, float], dict[str, dict]]:
    """One pytest run: call-phase seconds per test, and each test's costs from its report."""
    report = folder / f"{tag}.json"
    cmd = [*PYTEST, "test_suite.py", *QUIET, "--durations=0", "--durations-min=0", *flags]
    if flags:
        cmd += [f"--tprof-json={report}", "--no-tprof-confirm"]
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [pythonpath, env.get("PYTHONPATH")]))
    done = run_command(cmd, folder, env=env, ok=None)
    seconds = {
        m.group(2): float(m.group(1)) for m in map(_DURATION.match, done.stdout.splitlines()) if m
    }
    if done.returncode not in (0, 1) or not seconds:
        raise SystemExit(
            f"{tag}: pytest exit {done.returncode}\n{done.stdout[-2000:]}{done.stderr[-1000:]}"
        )
    costs = {}
    if report.exists():
        doc = json.loads(report.read_text())
        costs = {name: t.get("costs") or {} for name, t in by_name(doc["tests"]).items()}
        STARTUP.append(doc.get("startup_s") or 0.0)
    return seconds, costs


def check(folder: Path, args: argparse.Namespace) -> int:
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "pytest.ini").write_text(INI)
    shutil.rmtree(folder / "baselines", ignore_errors=True)
    saved: dict[str, dict] = {}
    for i in range(args.sessions):
        _, saved = run(folder, f"save{i}", ["--tprof-save"])
    calls: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    split: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    before: dict[str, list[float]] = defaultdict(list)
    older = package_path(args.before, folder) if args.before else None
    for i in range(args.repeat):
        if older:
            for test, c in run(folder, f"before{i}", ["--tprof"], older)[1].items():
                before[test].append(Costs.from_dict(c).plugin_s)
        for test, s in run(folder, f"plain{i}", [])[0].items():
            calls[test]["plain"].append(s)
        seconds, costs = run(folder, f"tprof{i}", ["--tprof"])
        for test, s in seconds.items():
            calls[test]["tprof"].append(s)
        for test, c in costs.items():
            for stage in (*STAGES, "rounds"):
                split[test][stage].append(c.get(stage, 0.0))
            split[test]["plugin"].append(Costs.from_dict(c).plugin_s)
    print_tables(calls, split, saved)
    if before:
        print_before(before, split)
    plugin = [med(split[t]["plugin"]) for t in split]
    worst = med(plugin)
    print(f"\nonce per process, torch's first profiler start: {med(STARTUP):.3f} s (median)")
    print(f"plugin's own time per test, median over tests: {worst:.3f} s (target <= {TARGET_S} s)")
    return 0 if worst <= TARGET_S else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--keep", type=Path, help="a folder to keep the suite, reports and baselines in"
    )
    parser.add_argument("--before", type=Path, help="a checkout of an earlier commit to compare")
    args = parser.parse_args()
    with workspace("tprof-overhead-", args.keep) as folder:
        return check(folder, args)


def print_tables(calls: dict, split: dict, saved: dict[str, dict]) -> None:
    print(
        f"{'test':<24} {'plain s':>8} {'--tprof s':>10} {'added s':>8} "
        f"{'rounds s':>9} {'plugin s':>9}"
    )
    for test in sorted(calls):
        plain, tprof = med(calls[test]["plain"]), med(calls[test]["tprof"])
        rounds = med(split[test]["rounds"])
        print(
            f"{test:<24} {plain:>8.2f} {tprof:>10.2f} {tprof - plain:>+8.2f} {rounds:>9.3f} "
            f"{med(split[test]['plugin']):>9.3f}"
        )
    print("\n--tprof, the plugin's stages (s, medians):")
    print(f"{'test':<24} " + " ".join(f"{s:>9}" for s in STAGES))
    for test in sorted(split):
        print(f"{test:<24} " + " ".join(f"{med(split[test][s]):>9.3f}" for s in STAGES))
    print("\n--tprof-save, the last session's stages (s):")
    print(f"{'test':<24} " + " ".join(f"{s:>9}" for s in (*STAGES, "rounds")))
    for test in sorted(saved):
        print(
            f"{test:<24} "
            + " ".join(f"{saved[test].get(s, 0.0):>9.3f}" for s in (*STAGES, "rounds"))
        )


def print_before(before: dict[str, list[float]], split: dict) -> None:
    print("\nthe plugin's own time per test (s, medians), the earlier checkout and this one:")
    print(f"{'test':<24} {'before':>9} {'after':>9} {'ratio':>7}")
    for test in sorted(before):
        old, new = med(before[test]), med(split[test]["plugin"])
        print(f"{test:<24} {old:>9.3f} {new:>9.3f} {new / old:>6.2f}x")
    olds, news = [med(v) for v in before.values()], [med(split[t]["plugin"]) for t in before]
    print(f"{'median over tests':<24} {med(olds):>9.3f} {med(news):>9.3f}")


if __name__ == "__main__":
    raise SystemExit(main())
