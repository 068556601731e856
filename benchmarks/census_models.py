"""The work census on model code this project didn't write: HF ``transformers``, ``torchvision``
and ``timm`` models from small configs (random init: nothing is downloaded), unchanged and
planted, through ``pytest --tprof``.

Writes a suite into a temporary folder, each test profiled through the ``tprof`` fixture and
skipped when its package is missing:

- ``test_gpt2_train``: GPT-2 (2 layers, width 64) language-model step with AdamW;
- ``test_bert_infer``: BERT (2 layers) inference with a padding mask;
- ``test_llama_train``: Llama (2 layers, grouped-query attention) forward and backward;
- ``test_llama_generate``: Llama ``generate`` of 6 tokens with its KV cache;
- ``test_resnet_train``: torchvision ResNet-18 (10 classes, 32×32 images) step with SGD;
- ``test_vit_infer``: timm ViT-Tiny (64×64 images) inference.

It records ``--sessions`` baselines with ``--tprof-save``, runs the suite unchanged ``--runs``
times (a test that fails is a false failure, by the layer that failed it), then each plant
``--plant-runs`` times.  A plant is caught when its test fails with a work regression and a
work reason matches the plant's pattern, which names the module that owns the change:

- ``gpt2_wider``: GPT-2's MLP 10 % wider (``n_inner`` 256 → 282): ``transformer.h.N.mlp``;
- ``gpt2_hook_copy``: a forward hook on ``transformer.h.0.mlp`` returning a ``.clone()`` of its
  output: ``aten::clone in transformer.h.0.mlp (forward hook)``;
- ``bert_float64``: BERT's first ``intermediate`` run in float64 (hooks cast in and out):
  ``encoder.layer.0.intermediate``;
- ``llama_no_cache``: ``generate(use_cache=False)``: every token recomputes the prefix;
- ``resnet_bn_float64``: ResNet's ``layer1.0.bn1`` run in float64 (hooks cast in and out):
  ``layer1.0.bn1``;
- ``vit_wider_mlp``: ViT's MLP ratio 4 → 4.4: ``blocks.N.mlp``.

Also, once each, with their work verdicts printed: two same-maths swaps, ``llama_eager``
(attention ``sdpa`` → ``eager``: the same FLOPs, but the attention weights are written and
read) and ``resnet_foreach_off`` (SGD without ``foreach``: the same work in other ops), and
``resnet_wider_head`` (an 11-class head sliced back to 10: under the default floors).
Prints a table; exits 1 on a false failure or a missed plant.

    python benchmarks/census_models.py [--sessions 3] [--runs 5] [--plant-runs 2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import os
import re
from collections import Counter
from pathlib import Path

from harness.runs import by_name, run_pytest
from harness.workspace import prepare, workspace

SUITE = """
import os

import pytest
import torch
from torch import nn

PLANT = os.environ.get("CENSUS_PLANT", "")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_gpt2_train(tprof):
    transformers = pytest.importorskip("transformers")
    config = transformers.GPT2Config(
        n_layer=2, n_embd=64, n_head=4, vocab_size=500, n_positions=64,
        n_inner=282 if PLANT == "gpt2_wider" else 256,
    )
    model = transformers.GPT2LMHeadModel(config)
    if PLANT == "gpt2_hook_copy":
        model.transformer.h[0].mlp.register_forward_hook(lambda m, i, out: out.clone())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 500, (2, 32))

    def step():
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()

    tprof(step)


def test_bert_infer(tprof):
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, intermediate_size=128,
        vocab_size=500,
    )
    model = transformers.BertModel(config).eval()
    if PLANT == "bert_float64":
        inner = model.encoder.layer[0].intermediate.double()
        inner.register_forward_pre_hook(lambda m, args: (args[0].double(),))
        inner.register_forward_hook(lambda m, i, out: out.float())
    ids = torch.randint(0, 500, (2, 24))
    mask = torch.ones(2, 24, dtype=torch.long)
    mask[1, 16:] = 0
    with torch.no_grad():
        tprof(model, input_ids=ids, attention_mask=mask)


def llama(**extra):
    transformers = pytest.importorskip("transformers")
    config = transformers.LlamaConfig(
        num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2,
        intermediate_size=128, vocab_size=500, **extra,
    )
    return transformers.LlamaForCausalLM(config)


def test_llama_train(tprof):
    model = llama(attn_implementation="eager" if PLANT == "llama_eager" else "sdpa")
    ids = torch.randint(0, 500, (2, 32))

    def step():
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()

    tprof(step)


def test_llama_generate(tprof):
    model = llama().eval()
    ids = torch.randint(0, 500, (1, 8))
    cache = PLANT != "llama_no_cache"
    with torch.no_grad():
        tprof(
            model.generate, ids, max_new_tokens=6, do_sample=False, pad_token_id=0,
            use_cache=cache,
        )


def test_resnet_train(tprof):
    torchvision = pytest.importorskip("torchvision")
    model = torchvision.models.resnet18(num_classes=10)
    if PLANT == "resnet_bn_float64":
        norm = model.layer1[0].bn1.double()
        norm.register_forward_pre_hook(lambda m, args: (args[0].double(),))
        norm.register_forward_hook(lambda m, i, out: out.float())
    if PLANT == "resnet_wider_head":
        model.fc = nn.Linear(512, 11)
        model.fc.register_forward_hook(lambda m, i, out: out[:, :10])
    foreach = PLANT != "resnet_foreach_off"
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, foreach=foreach)
    x = torch.randn(4, 3, 32, 32)
    y = torch.randint(0, 10, (4,))

    def step():
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()

    tprof(step)


def test_vit_infer(tprof):
    timm = pytest.importorskip("timm")
    ratio = 4.4 if PLANT == "vit_wider_mlp" else 4.0
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=64, mlp_ratio=ratio
    ).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        tprof(model, x)
"""

INI = "[pytest]\nfilterwarnings =\n    ignore::DeprecationWarning\n    ignore::UserWarning\n"
TESTS = (
    "test_gpt2_train",
    "test_bert_infer",
    "test_llama_train",
    "test_llama_generate",
    "test_resnet_train",
    "test_vit_infer",
)
PROFILE_ARGS = ["--tprof-rounds=12", "--tprof-warmup=2"]
# Plant → (its test, a pattern a work reason must match: the module that owns the change).
PLANTS = {
    "gpt2_wider": ("test_gpt2_train", r"in transformer\.h\.\d\.mlp"),
    "gpt2_hook_copy": (
        "test_gpt2_train",
        r"aten::clone in transformer\.h\.0\.mlp \(forward hook\)",
    ),
    "bert_float64": ("test_bert_infer", r"in encoder\.layer\.0\.intermediate"),
    "llama_no_cache": ("test_llama_generate", r"in model\.layers\.\d\."),
    "resnet_bn_float64": ("test_resnet_train", r"in layer1\.0\.bn1"),
    "vit_wider_mlp": ("test_vit_infer", r"in blocks\.\d+\.mlp"),
}
# Changes printed with their work verdict, not counted as plants: two same-maths swaps, and a
# change too small for the default floors (the head is 0.0005 % of the step's FLOPs).
SAME_MATHS = {
    "llama_eager": "test_llama_train",
    "resnet_foreach_off": "test_resnet_train",
    "resnet_wider_head": "test_resnet_train",
}


def layer_of(test: dict[str, object]) -> str:
    """The layer that failed a test: work, calls (structure), timing or error."""
    if test.get("verdict") == "error":
        return "error"
    work = test.get("work") or {}
    if isinstance(work, dict) and work.get("verdict") == "regressed":
        return "work"
    reason = str(test.get("reason", ""))
    return "calls" if "calls" in reason.split("|")[0] else "timing"


def failed(test: dict[str, object]) -> bool:
    return test.get("verdict") in ("regressed", "error")


def work_reasons(test: dict[str, object]) -> list[str]:
    work = test.get("work") or {}
    return list(work.get("reasons", [])) if isinstance(work, dict) else []


class Runs:
    """The folder and the pytest runs in it, numbered."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.count = 0
        prepare(folder, "test_models.py", SUITE, INI, ())

    def __call__(self, plant: str, *extra: str) -> dict[str, dict[str, object]]:
        self.count += 1
        tag = f"{self.count:02d}-{plant or 'unchanged'}"
        env, head = {**os.environ, "CENSUS_PLANT": plant}, f"CENSUS_PLANT={plant!r}"
        tests = run_pytest(self.folder, tag, [*PROFILE_ARGS, *extra], env=env, head=head, tests=())
        return by_name(tests)


def unchanged(run: Runs, runs: int) -> tuple[int, Counter[str]]:
    """``runs`` unchanged runs: the test-runs judged, and the false failures by layer."""
    false: Counter[str] = Counter()
    judged = 0
    for i in range(runs):
        found = run("", "--tprof")
        ran = {n: t for n, t in found.items() if t.get("verdict") != "skipped"}
        judged += len(ran)
        bad = {n: layer_of(t) for n, t in ran.items() if failed(t)}
        false.update(bad.values())
        print(f"unchanged {i + 1}: {len(ran)} tests, false failures {bad or 'none'}", flush=True)
    return judged, false


def planted(run: Runs, plant_runs: int) -> list[tuple[str, str, str]]:
    """Each plant's catches, then each same-maths change's work verdict: (name, result, reason)."""
    rows = []
    for plant, (test, pattern) in PLANTS.items():
        caught = 0
        seen = ""
        for _ in range(plant_runs):
            mine = run(plant, "--tprof").get(test)
            if mine is None or mine.get("verdict") == "skipped":
                break
            hits = [r for r in work_reasons(mine) if re.search(pattern, r)]
            caught += failed(mine) and layer_of(mine) == "work" and bool(hits)
            seen = (hits or work_reasons(mine) or [str(mine.get("reason", ""))])[0]
        rows.append((plant, f"{caught}/{plant_runs}", seen[:150]))
    for plant, test in SAME_MATHS.items():
        mine = run(plant, "--tprof").get(test, {})
        work = mine.get("work") or {}
        word = work.get("verdict", "?") if isinstance(work, dict) else "?"
        rows.append((plant, f"work {word}", "; ".join(work_reasons(mine))[:150]))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sessions", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--plant-runs", type=int, default=2)
    parser.add_argument("--keep", type=Path, default=None)
    args = parser.parse_args()
    with workspace("tprof-census-models-", args.keep) as folder:
        run = Runs(folder)
        for _ in range(args.sessions):
            run("", "--tprof-save")
        judged, false = unchanged(run, args.runs)
        rows = planted(run, args.plant_runs)
    print(f"\nunchanged: {judged} test-runs, false failures {sum(false.values())} {dict(false)}")
    width = max(len(r[0]) for r in rows)
    for plant, result, reason in rows:
        print(f"{plant:<{width}}  {result:<14}  {reason}")
    missed = [r for r in rows if r[0] in PLANTS and not r[1].startswith(f"{args.plant_runs}/")]
    return 1 if sum(false.values()) or missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
