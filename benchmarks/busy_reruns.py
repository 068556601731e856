"""Busy re-runs: false failures and planted catches while other processes keep every core busy.

Writes a suite of its own into a temporary folder (none from ``examples/``): ``--suite models``
(the default), seven CPU model tests written with ``torch.nn``, or ``--suite hf``, four Hugging
Face ``transformers`` models (both below).  It records ``--sessions`` baseline sessions with
``--tprof-save`` on a quiet machine (no load of ours), then runs ``pytest --tprof`` on the
folder, each run a fresh process through ``suite_runs.run_pytest`` with the default
confirmations:

1. unchanged, ``--runs`` times under each load of ``--conditions``.  Each test's verdict is
   tallied: ``unchanged``, ``inconclusive`` split into ``inconclusive-busy`` (its reason says
   "machine busy") and ``inconclusive-other``, ``improved``, ``changed``, ``regressed`` and
   ``error`` (the two false failures), and ``other`` (no-baseline, incomparable, ...).  Every
   false failure is printed with the first 300 characters of its reason;
2. with each plant of ``--plants``, ``--plant-runs`` times under each load of
   ``--plant-conditions``.  A plant is caught when its test's verdict is ``regressed``; for
   ``pyloop`` and ``hf_pyloop`` the table also counts the catches whose reason names host time
   ("host").  Any other test failing in a planted run is a collateral failure.

The loads (``--load`` names them; ``--conditions`` picks them per phase), started with
``subprocess.Popen`` before that condition's runs and killed after them (``finally``, and
``atexit``; each also exits by itself after ``--load-timeout`` seconds or once this script is
gone, so nothing outlives it):

- ``none``: nothing of ours (the shared machine's own load still applies);
- ``busy``: one pure-Python spin loop per core (``os.cpu_count()``);
- ``membw``: one process per core copying two 64 MiB numpy arrays back and forth;
- ``torch``: one process per core running an MLP training step (AdamW) on torch's default
  intra-op threads, as another CI job's torch code would.

The tests of ``--suite models`` (plants switched by ``TPROF_PLANT`` in the test file, so one file
runs both ways), each body 0.3-2.5 ms on one thread:

- ``test_mlp_inference``: Linear / ReLU stack, ``torch.no_grad()``.  Plant ``denormal`` (not run
  by default): its input times 1e-39, denormal floats, the same work in slower kernels where
  the CPU traps on denormals.  On the AMD EPYC (AVX-512) this was written on the MLP
  and its first ``aten::addmm`` ran at the same speed either way (594 µs vs 594 µs, 185 vs 185),
  so the default timing-only plant is ``shuffled`` below;
- ``test_encoder_train``: ``nn.TransformerEncoderLayer`` training step with AdamW;
- ``test_conv_inference``: Conv2d, BatchNorm2d, ReLU, MaxPool2d, Conv2d in eval mode.  Plant
  ``mkldnn_off``: its forward under ``torch.backends.mkldnn.flags(enabled=False)`` (other
  convolution kernels, so other op names);
- ``test_layernorm_gelu``: Linear, LayerNorm, GELU, Linear, inference;
- ``test_embedding_topk``: ``nn.EmbeddingBag`` (mode "mean", a 1M x 32 table, 65,536 lookups
  in sorted order) and ``torch.topk`` of the bags' scores.  Plant ``shuffled``: the same
  lookups in random order, so every op's name, calls, shapes, dtypes, FLOPs and bytes stay
  the same while ``aten::embedding_bag`` misses the cache (1.6-1.8x slower alone, the body
  0.31 -> 0.56 ms, on the machine this was written on): a slowdown only timing can see;
- ``test_attention_inference``: ``nn.MultiheadAttention`` (batch first), inference;
- ``test_lstm_train``: LSTM and a Linear head, cross-entropy, Adam step.  Plant ``pyloop``: a
  pure-Python loop of about 0.5 ms (no torch op) between ``loss.backward()`` and
  ``opt.step()``: host time between ops, no op slower.

The tests of ``--suite hf``: ``transformers`` models built in the test from small configs (2
layers, hidden 64, 4 heads, vocabulary 1000, sequences of 32) with random weights, nothing
downloaded (the pytest processes run with ``HF_HUB_OFFLINE=1``); each body 1-5 ms on one thread.
Without ``transformers`` importable, ``--suite hf`` exits at once saying so.  Its plants, which
only this suite takes (and the plants above only ``--suite models``):

- ``test_gpt2_train_step``: ``GPT2LMHeadModel`` training step, batch 2, AdamW: ``zero_grad``,
  forward with labels, backward, ``step``.  Plant ``hf_pyloop``: a forward hook on the first
  block (``model.transformer.h[0]``) running a pure-Python loop of about 0.5 ms: host time
  outside every op, no op slower;
- ``test_bert_inference_masked``: ``BertModel`` inference under ``torch.no_grad()``, batch 4,
  with an attention mask that pads the last quarter of each sequence;
- ``test_llama_fwd_bwd``: ``LlamaForCausalLM`` forward with labels and backward (no optimizer),
  batch 2.  Plant ``hf_wider``: ``intermediate_size`` 25 % larger (128 -> 160), more work in
  the MLP's matmuls of other shapes, which the op census must catch;
- ``test_t5_inference``: ``T5ForConditionalGeneration`` (encoder-decoder) forward under
  ``torch.no_grad()`` with ``decoder_input_ids``, batch 4, 16 decoder positions;
- ``test_llama_generate``: ``LlamaForCausalLM.generate``, greedy, 8 prompt tokens and 8 new
  ones.  Plant ``hf_generate_loop``: a forward hook on the model running a pure-Python loop
  of about 0.3 ms in every decoding step: host time, no op slower.

``--pythonpath DIR`` puts DIR first on the ``PYTHONPATH`` of the pytest processes, so the same
benchmark runs another checkout of the project (a git worktree of an older commit): the plugin
is loaded through the installed ``pytest_tprof.plugin`` entry point, and ``PYTHONPATH`` makes
that checkout's ``pytest_tprof`` and engine the ones imported.  The checkout that ran is
printed.  ``--folder DIR`` works in DIR and keeps it (baselines, traces, each run's JSON report
in ``reports/`` and pytest output in ``logs/``); with ``--sessions 0`` it reuses the baselines
already there.  ``--out FILE`` writes every tally as JSON.

Prints every run's verdicts, a table per condition and per plant, and one summary line per
condition; exits 1 on any false or collateral failure, or a plant missed without load.  The
default run (3 saves, 9 unchanged runs under 3 loads, 3 plants x 2 loads x 2 runs: 42 pytest
runs) should take 10-20 min on a shared 2-core machine (estimated from the smoke run below: a
quiet run 6 s, one under ``busy`` 16 s, one that confirms a regression in a fresh process 19 s).
The smoke run, 5 pytest runs in 55 s:

    python benchmarks/busy_reruns.py --sessions 2 --runs 1 --conditions none,busy
        --plants pyloop --plant-runs 1 --plant-conditions none

and that of ``--suite hf``, 5 pytest runs in 57 s with no other process busy (a quiet run 9 s,
importing ``transformers`` included; the ``hf_pyloop`` run, confirmed in a fresh process, 17 s):

    python benchmarks/busy_reruns.py --suite hf --sessions 2 --runs 1 --conditions none
        --plants hf_pyloop,hf_wider --plant-runs 1 --plant-conditions none

    python benchmarks/busy_reruns.py [--suite models|hf] [--sessions 3] [--runs 9]
        [--conditions none,busy,membw,torch] [--plants LIST (default: the suite's own)]
        [--plant-conditions none,busy] [--plant-runs 2]
        [--only-plants | --skip-plants] [--load-timeout 3600] [--pythonpath DIR]
        [--folder DIR] [--out FILE] [--pytest-arg ARG ...]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from suite_runs import prepare, run_pytest, sessions_held

MODELS_SUITE = '''
"""Seven model tests of a new user, profiled with pytest-tprof's ``tprof`` fixture."""

import os

import pytest
import torch
from torch import nn

PLANT = os.environ.get("TPROF_PLANT", "")
PYLOOP_N = 20_000  # about 0.5 ms of pure Python (CPython 3.11, the machine this was written on)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_mlp_inference(tprof):
    model = nn.Sequential(
        nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 10)
    ).eval()
    x = torch.randn(64, 256)
    if PLANT == "denormal":
        x = x * 1e-39  # denormal floats: the same work, slower kernels where the CPU traps
    with torch.no_grad():
        out = tprof(model, x)
    assert out.shape == (64, 10)


def test_encoder_train(tprof):
    layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64)

    def step():
        opt.zero_grad()
        loss = layer(x).pow(2).mean()
        loss.backward()
        opt.step()
        return loss

    tprof(step)


def test_conv_inference(tprof):
    block = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
    ).eval()
    x = torch.randn(8, 3, 32, 32)

    def forward():
        with torch.no_grad():
            if PLANT == "mkldnn_off":
                with torch.backends.mkldnn.flags(enabled=False):
                    return block(x)
            return block(x)

    out = tprof(forward)
    assert out.shape == (8, 32, 16, 16)


def test_layernorm_gelu(tprof):
    model = nn.Sequential(
        nn.Linear(128, 256), nn.LayerNorm(256), nn.GELU(), nn.Linear(256, 128)
    ).eval()
    x = torch.randn(16, 32, 128)
    with torch.no_grad():
        out = tprof(model, x)
    assert out.shape == (16, 32, 128)


def test_embedding_topk(tprof):
    emb = nn.EmbeddingBag(1_000_000, 32, mode="mean")
    query = torch.randn(32)
    idx = torch.randint(0, 1_000_000, (65_536,))
    if PLANT == "shuffled":
        # the same lookups in random order: the same ops, calls, shapes, FLOPs and bytes, but
        # cache misses in the 128 MB table where sorted lookups walk it in order
        idx = idx[torch.randperm(idx.numel())]
    else:
        idx = idx.sort().values
    offsets = torch.arange(0, 65_536, 64)

    def body():
        with torch.no_grad():
            return torch.topk(emb(idx, offsets) @ query, 10)

    top = tprof(body)
    assert top.indices.shape == (10,)


def test_attention_inference(tprof):
    attn = nn.MultiheadAttention(64, 4, batch_first=True).eval()
    x = torch.randn(8, 64, 64)

    def body():
        with torch.no_grad():
            return attn(x, x, x, need_weights=False)[0]

    out = tprof(body)
    assert out.shape == (8, 64, 64)


def test_lstm_train(tprof):
    lstm = nn.LSTM(32, 64, batch_first=True)
    head = nn.Linear(64, 4)
    opt = torch.optim.Adam([*lstm.parameters(), *head.parameters()], lr=1e-3)
    x = torch.randn(16, 20, 32)
    y = torch.randint(0, 4, (16,))

    def step():
        opt.zero_grad()
        out, _ = lstm(x)
        loss = nn.functional.cross_entropy(head(out[:, -1]), y)
        loss.backward()
        if PLANT == "pyloop":
            s = 0
            for i in range(PYLOOP_N):
                s += i
        opt.step()
        return loss

    tprof(step)
'''

MODELS_TESTS = (
    "test_mlp_inference",
    "test_encoder_train",
    "test_conv_inference",
    "test_layernorm_gelu",
    "test_embedding_topk",
    "test_attention_inference",
    "test_lstm_train",
)

HF_SUITE = '''
"""Four Hugging Face transformers models from small configs, random weights, nothing downloaded,
profiled with pytest-tprof's ``tprof`` fixture."""

import os

import pytest
import torch
from transformers import (
    BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, T5Config,
    T5ForConditionalGeneration,
)

PLANT = os.environ.get("TPROF_PLANT", "")
PYLOOP_N = 20_000  # about 0.5 ms of pure Python (CPython 3.11)
VOCAB, HIDDEN, HEADS, LAYERS, SEQ = 1000, 64, 4, 2, 32


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _pyloop(module, args, output):
    s = 0
    for i in range(PYLOOP_N):
        s += i


def test_gpt2_train_step(tprof):
    config = GPT2Config(
        vocab_size=VOCAB, n_positions=SEQ, n_embd=HIDDEN, n_layer=LAYERS, n_head=HEADS,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, bos_token_id=0,
        eos_token_id=0,
    )
    model = GPT2LMHeadModel(config).train()
    if PLANT == "hf_pyloop":
        # host time outside every op: the block's ops run as before, then the hook's loop
        model.transformer.h[0].register_forward_hook(_pyloop)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (2, SEQ))

    def step():
        opt.zero_grad()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        return loss

    loss = tprof(step)
    assert loss.ndim == 0


def test_bert_inference_masked(tprof):
    config = BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN, max_position_embeddings=SEQ, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, VOCAB, (4, SEQ))
    mask = torch.ones(4, SEQ, dtype=torch.long)
    mask[:, SEQ * 3 // 4 :] = 0  # the last quarter of each sequence is padding

    def body():
        with torch.no_grad():
            return model(input_ids=ids, attention_mask=mask).last_hidden_state

    out = tprof(body)
    assert out.shape == (4, SEQ, HIDDEN)


def test_llama_fwd_bwd(tprof):
    intermediate = 2 * HIDDEN
    if PLANT == "hf_wider":
        intermediate = intermediate * 5 // 4  # 25 % more work in the MLP, matmuls of other shapes
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=intermediate,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        max_position_embeddings=SEQ, use_cache=False,
    )
    model = LlamaForCausalLM(config).train()
    ids = torch.randint(0, VOCAB, (2, SEQ))

    def step():
        model.zero_grad(set_to_none=True)  # each call's backward the same: no accumulation
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss

    loss = tprof(step)
    assert loss.ndim == 0


def test_t5_inference(tprof):
    config = T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=2 * HIDDEN,
        num_layers=LAYERS, num_decoder_layers=LAYERS, num_heads=HEADS, dropout_rate=0.0,
        use_cache=False, pad_token_id=0, decoder_start_token_id=0,
    )
    model = T5ForConditionalGeneration(config).eval()
    ids = torch.randint(1, VOCAB, (4, SEQ))
    decoder_ids = torch.randint(1, VOCAB, (4, SEQ // 2))

    def body():
        with torch.no_grad():
            return model(input_ids=ids, decoder_input_ids=decoder_ids).logits

    out = tprof(body)
    assert out.shape == (4, SEQ // 2, VOCAB)


def _generate_loop(module, args, output):
    s = 0
    for i in range(12_000):  # about 0.3 ms of pure Python
        s += i


def test_llama_generate(tprof):
    config = LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=HEADS,
        max_position_embeddings=2 * SEQ, bos_token_id=1, eos_token_id=2, pad_token_id=0,
    )
    model = LlamaForCausalLM(config).eval()
    if PLANT == "hf_generate_loop":
        # host time in every decoding step: the model's forward, then the hook's loop
        model.register_forward_hook(_generate_loop)
    ids = torch.randint(3, VOCAB, (1, 8))

    def body():
        with torch.no_grad():
            return model.generate(
                ids, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0
            )

    out = tprof(body)
    assert out.shape == (1, 16)
'''

HF_TESTS = (
    "test_gpt2_train_step",
    "test_bert_inference_masked",
    "test_llama_fwd_bwd",
    "test_t5_inference",
    "test_llama_generate",
)


@dataclass(frozen=True)
class SuiteSpec:
    """One suite of ``--suite``: its test file, its tests and its default plants."""

    name: str
    file: str
    source: str
    tests: tuple[str, ...]
    plants: tuple[str, ...]  # run by default; every plant whose test is here is allowed
    env: tuple[tuple[str, str], ...] = ()  # for the pytest processes


SUITES = {
    "models": SuiteSpec(
        "models", "test_busy_suite.py", MODELS_SUITE, MODELS_TESTS,
        ("pyloop", "mkldnn_off", "shuffled"),
    ),
    "hf": SuiteSpec(
        "hf", "test_busy_hf.py", HF_SUITE, HF_TESTS, ("hf_pyloop", "hf_wider", "hf_generate_loop"),
        env=(("HF_HUB_OFFLINE", "1"),),
    ),
}  # fmt: skip
# plant → the test it slows (a plant runs only in the suite that holds its test)
PLANTS = {
    "pyloop": "test_lstm_train",
    "mkldnn_off": "test_conv_inference",
    "shuffled": "test_embedding_topk",
    "denormal": "test_mlp_inference",
    "hf_pyloop": "test_gpt2_train_step",
    "hf_wider": "test_llama_fwd_bwd",
    "hf_generate_loop": "test_llama_generate",
}
HOST_PLANTS = (
    "pyloop",
    "hf_pyloop",
    "hf_generate_loop",
)  # host time, no op slower: the table counts "host" reasons
# what --suite hf's tests import, the version printed
HF_PROBE = (
    "import transformers\n"
    "from transformers import BertModel, GPT2LMHeadModel, LlamaForCausalLM\n"
    "from transformers import T5ForConditionalGeneration\n"
    "print(transformers.__version__)\n"
)
LOADS = ("none", "busy", "membw", "torch", "busy1", "membw1", "torch1")
FAILED = ("regressed", "error")
BUSY_WORDS = "machine busy"
HOST_WORD = "host"
REASON_CHARS = 300
# the verdict tallies, in the order the tables print them
KINDS = (
    "unchanged",
    "inconclusive-busy",
    "inconclusive-other",
    "improved",
    "changed",
    "regressed",
    "error",
    "other",
)

# Each load process: its work until --load-timeout seconds pass or its parent is gone.
_UNTIL = (
    "import os, sys, time\n"
    "parent, end = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])\n"
    "def alive():\n"
    "    return time.monotonic() < end and os.getppid() == parent\n"
)
LOAD_CODE = {
    "busy": _UNTIL + "while alive():\n    for _ in range(100_000):\n        pass\n",
    "membw": _UNTIL
    + "import numpy as np\n"
    + "a = np.ones(64 * 2**20 // 8)\n"
    + "b = np.zeros_like(a)\n"
    + "while alive():\n    np.copyto(b, a)\n    np.copyto(a, b)\n",
    # another CI job's torch code: a training step on torch's default intra-op threads
    "torch": _UNTIL
    + "import torch\n"
    + "m = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(),"
    + " torch.nn.Linear(1024, 512))\n"
    + "opt = torch.optim.AdamW(m.parameters())\n"
    + "x = torch.randn(256, 512)\n"
    + "while alive():\n    opt.zero_grad()\n    m(x).square().mean().backward()\n"
    + "    opt.step()\n",
}


# --------------------------------------------------------------------------- the load


_LOAD: list[subprocess.Popen[bytes]] = []


def stop_load() -> None:
    """Kills every load process still running (also at exit)."""
    while _LOAD:
        p = _LOAD.pop()
        if p.poll() is None:
            p.kill()
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            print(f"warning: load process {p.pid} did not exit", file=sys.stderr)


atexit.register(stop_load)


@contextmanager
def load(kind: str, lifetime: float) -> Iterator[int]:
    """``kind``'s processes, one per core (``busy1``, ``membw1``: one process alone), running
    while the block runs; yields their count."""
    if kind == "none":
        yield 0
        return
    code = LOAD_CODE[kind.removesuffix("1")]
    n = 1 if kind.endswith("1") else os.cpu_count() or 1
    try:
        for _ in range(n):
            _LOAD.append(
                subprocess.Popen(
                    [sys.executable, "-c", code, str(os.getpid()), str(lifetime)],
                    stdin=subprocess.DEVNULL,
                )
            )
        time.sleep(2.0)  # numpy imported, the arrays touched, the spin loops spinning
        dead = [p.pid for p in _LOAD if p.poll() is not None]
        if dead:
            sys.exit(f"load {kind}: processes {dead} exited at once")
        yield n
    finally:
        stop_load()


# --------------------------------------------------------------------------- one pytest run


def kind_of(t: dict[str, Any]) -> str:
    """The tally a test's verdict goes in."""
    verdict = str(t["verdict"])
    if verdict == "inconclusive":
        busy = BUSY_WORDS in str(t.get("reason") or "").lower()
        return "inconclusive-busy" if busy else "inconclusive-other"
    return verdict if verdict in KINDS else "other"


def label(t: dict[str, Any]) -> str:
    """A test's verdict as a run's line prints it: the tally, or the verdict (``saved``)."""
    kind = kind_of(t)
    return str(t["verdict"]) if kind == "other" else kind


def reason_head(reason: str) -> str:
    """A reason up to its first colon: what kind of reason it is."""
    return reason.split(":", 1)[0][:60]


def abbrev(test: str) -> str:
    return test.removeprefix("test_")


def pytest_env(spec: SuiteSpec, pythonpath: Path | None) -> dict[str, str]:
    """The environment of the pytest processes (and of the probes that run before them)."""
    env = {**os.environ, **dict(spec.env)}
    env.pop("TPROF_PLANT", None)
    if pythonpath is not None:
        path = [str(pythonpath), *filter(None, [os.environ.get("PYTHONPATH")])]
        env["PYTHONPATH"] = os.pathsep.join(path)
    return env


def transformers_version(env: dict[str, str]) -> str:
    """The version of ``transformers`` the hf suite's tests import; exits if they cannot."""
    done = subprocess.run(
        [sys.executable, "-c", HF_PROBE], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(
            f"--suite hf needs Hugging Face transformers (GPT-2, BERT, Llama and T5 models) in "
            f"{sys.executable}, and it does not import:\n{done.stderr.strip()[-1500:]}\n"
            f"install it with: {sys.executable} -m pip install transformers"
        )
    return done.stdout.strip()


class Suite:
    """The folder (pytest's rootdir), the pytest runs in it and their environment."""

    def __init__(
        self, spec: SuiteSpec, folder: Path, pythonpath: Path | None, extra: Sequence[str]
    ) -> None:
        self.spec = spec
        self.tests = spec.tests
        self.folder = folder
        self.count = 0
        self.extra = list(extra)
        self.env = pytest_env(spec, pythonpath)
        prepare(folder, spec.file, spec.source, "[pytest]\n", ())

    def run(self, tag: str, args: list[str], plant: str = "") -> dict[str, dict[str, Any]]:
        """One pytest run; its tests by name.  Prints one line of verdicts."""
        self.count += 1
        t0 = time.time()
        tests = run_pytest(
            self.folder, f"{self.count:03d}-{tag}", [*args, *self.extra],
            env={**self.env, "TPROF_PLANT": plant}, head=f"TPROF_PLANT={plant!r}",
            tests=self.tests,
        )  # fmt: skip
        found = {t["nodeid"].split("::")[-1]: t for t in tests}
        cells = "  ".join(f"{abbrev(n)}={label(t)}" for n, t in found.items())
        load1 = os.getloadavg()[0]
        print(f"  {tag:<24} {cells}  ({time.time() - t0:.0f} s, load {load1:.1f})", flush=True)
        return found

    def checkout(self) -> str:
        """Where the pytest processes import the plugin from, and that checkout's commit."""
        code = (
            "import importlib, os, pytest_tprof.plugin\n"
            "try:\n"
            "    engine = importlib.import_module('tprof_engine')\n"
            "except ImportError:  # a checkout from before the engine's own name\n"
            "    engine = importlib.import_module('profiler')\n"
            "for m in (pytest_tprof, engine):\n"
            "    print(os.path.dirname(os.path.dirname(os.path.abspath(m.__file__))))\n"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=self.folder, env=self.env,
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            sys.exit(f"the plugin does not import:\n{done.stderr[-2000:]}")
        roots = sorted(set(done.stdout.split()))
        if len(roots) != 1:
            return f"mixed: pytest_tprof and the engine from {roots}"
        root = roots[0]
        git = ["git", "-C", root]
        head = subprocess.run(
            [*git, "log", "-1", "--format=%h %s"], capture_output=True, text=True, check=False
        ).stdout.strip()
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
        state = f", {len(dirty.splitlines())} files modified" if dirty else ""
        return f"{root} ({head or 'not a git checkout'}{state})"


# --------------------------------------------------------------------------- the phases


@dataclass
class FalseFailure:
    condition: str
    run: int
    test: str
    verdict: str
    reason: str


@dataclass
class Condition:
    """The unchanged runs under one load."""

    name: str
    runs: int = 0
    per_test: dict[str, Counter[str]] = field(default_factory=dict)
    confirmed: int = 0  # test-runs whose timing regression went to a confirmation
    other_reasons: Counter[str] = field(default_factory=Counter)  # inconclusive-other's heads
    false_failures: list[FalseFailure] = field(default_factory=list)

    @property
    def totals(self) -> Counter[str]:
        out: Counter[str] = Counter()
        for c in self.per_test.values():
            out.update(c)
        return out

    @property
    def test_runs(self) -> int:
        return sum(self.totals.values())


def unchanged(suite: Suite, name: str, runs: int, lifetime: float) -> Condition:
    out = Condition(name=name, runs=runs, per_test={n: Counter() for n in suite.tests})
    with load(name, lifetime) as n:
        print(f"\n{name}: {runs} unchanged runs ({n} load processes)", flush=True)
        for i in range(1, runs + 1):
            for test, t in suite.run(f"{name}-unchanged{i}", ["--tprof"]).items():
                out.per_test[test][kind_of(t)] += 1
                out.confirmed += bool(t.get("confirmed"))
                if kind_of(t) == "inconclusive-other":
                    out.other_reasons[reason_head(str(t["reason"]))] += 1
                if t["verdict"] in FAILED:
                    ff = FalseFailure(name, i, test, t["verdict"], str(t["reason"]))
                    out.false_failures.append(ff)
                    print(f"    FALSE FAILURE {test}: {ff.reason[:REASON_CHARS]}", flush=True)
    return out


@dataclass
class Collateral:
    run: int
    test: str
    verdict: str
    reason: str


@dataclass
class PlantRow:
    """One plant's runs under one load."""

    plant: str
    condition: str
    test: str
    runs: int = 0
    verdicts: Counter[str] = field(default_factory=Counter)
    caught: int = 0
    host_named: int = 0
    collateral: list[Collateral] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)


def planted(
    suite: Suite, plants: Sequence[str], name: str, runs: int, lifetime: float
) -> list[PlantRow]:
    rows = []
    with load(name, lifetime) as n:
        print(f"\nplants under {name}: {runs} runs each ({n} load processes)", flush=True)
        for plant in plants:
            row = PlantRow(plant=plant, condition=name, test=PLANTS[plant], runs=runs)
            for i in range(1, runs + 1):
                found = suite.run(f"{name}-{plant}{i}", ["--tprof"], plant=plant)
                t = found[row.test]
                reason = str(t["reason"])
                row.verdicts[kind_of(t)] += 1
                row.caught += t["verdict"] == "regressed"
                row.host_named += t["verdict"] == "regressed" and HOST_WORD in reason.lower()
                row.reasons.append(reason)
                if t["verdict"] != "regressed":
                    print(f"    MISSED {plant}: {kind_of(t)}: {reason[:REASON_CHARS]}", flush=True)
                for other, o in found.items():
                    if other != row.test and o["verdict"] in FAILED:
                        c = Collateral(i, other, o["verdict"], str(o["reason"]))
                        row.collateral.append(c)
                        print(f"    COLLATERAL {other}: {c.reason[:REASON_CHARS]}", flush=True)
            rows.append(row)
    return rows


# --------------------------------------------------------------------------- the tables


def condition_table(c: Condition) -> None:
    print(f"\n{c.name}: {c.runs} runs x {len(c.per_test)} tests = {c.test_runs} test-runs")
    short = {
        "inconclusive-busy": "inc-busy",
        "inconclusive-other": "inc-other",
    }
    heads = [short.get(k, k) for k in KINDS]
    w = max(26, *map(len, c.per_test))
    print(f"  {'test':<{w}}" + "".join(f"{h:>11}" for h in heads))
    for test, counts in [*c.per_test.items(), ("total", c.totals)]:
        print(f"  {test:<{w}}" + "".join(f"{counts[k]:>11}" for k in KINDS))
    print(f"  a timing regression re-measured (confirmations run): {c.confirmed} test-runs")
    for head, n in c.other_reasons.most_common():
        print(f"  inconclusive-other x{n}: {head}")
    for ff in c.false_failures:
        print(f"  false failure, run {ff.run}, {ff.test}: {ff.reason[:REASON_CHARS]}")


def plant_table(rows: Sequence[PlantRow]) -> None:
    w = max(20, *(len(abbrev(r.test)) for r in rows))
    print(
        f"\n{'plant':<11} {'load':<6} {'test':<{w}} {'caught':>7} {'host':>6}  "
        f"{'verdicts':<36} collateral"
    )
    for r in rows:
        host = f"{r.host_named}/{r.runs}" if r.plant in HOST_PLANTS else "-"
        verdicts = ", ".join(f"{k} {v}" for k, v in r.verdicts.most_common())
        coll = ", ".join(f"{c.test} (run {c.run})" for c in r.collateral)
        print(
            f"{r.plant:<11} {r.condition:<6} {abbrev(r.test):<{w}} {r.caught:>3}/{r.runs:<3} "
            f"{host:>6}  {verdicts:<36} {len(r.collateral)} {coll}"
        )
    print("\nfirst reason per plant and load:")
    for r in rows:
        if r.reasons:
            print(f"  {r.plant} ({r.condition}): {r.reasons[0][:REASON_CHARS]}")


def summary_line(c: Condition) -> str:
    t = c.totals
    bad = t["regressed"] + t["error"]
    rest = {k: t[k] for k in KINDS if k not in ("unchanged", "inconclusive-busy", *FAILED)}
    other = sum(rest.values())
    detail = ", ".join(f"{k} {v}" for k, v in rest.items() if v)
    detail = f": {detail}" if detail else ""
    return (
        f"{c.name}: {bad} false failures in {c.test_runs} test-runs (unchanged {t['unchanged']}, "
        f"inconclusive-busy {t['inconclusive-busy']}, other {other}{detail})"
    )


# --------------------------------------------------------------------------- the benchmark


def csv(text: str, allowed: Sequence[str], what: str) -> list[str]:
    out = [x.strip() for x in text.split(",") if x.strip()]
    wrong = [x for x in out if x not in allowed]
    if wrong:
        raise argparse.ArgumentTypeError(f"{what} {wrong}: choose from {', '.join(allowed)}")
    return out


def record(suite: Suite, sessions: int) -> dict[str, int]:
    """``--tprof-save`` ``sessions`` times on a quiet machine; the sessions each baseline holds."""
    if sessions:
        print(f"baseline: --tprof-save x {sessions}, no load", flush=True)
    for i in range(1, sessions + 1):
        suite.run(f"save{i}", ["--tprof-save"])
    held = sessions_held(suite.folder / "baselines")
    missing = sorted(set(suite.tests) - set(held))
    if missing:
        sys.exit(f"no baseline for {missing} in {suite.folder / 'baselines'}")
    print(f"  sessions per baseline file: {held}", flush=True)
    return held


def check(folder: Path, a: argparse.Namespace, versions: str) -> int:
    t0 = time.time()
    suite = Suite(SUITES[a.suite], folder, a.pythonpath, a.pytest_arg)
    print(f"suite {a.suite} ({len(suite.tests)} tests{versions})", flush=True)
    print(f"folder {folder}\ncheckout {suite.checkout()}", flush=True)
    held = record(suite, a.sessions)
    conditions = [
        unchanged(suite, c, a.runs, a.load_timeout) for c in ([] if a.only_plants else a.conditions)
    ]
    rows: list[PlantRow] = []
    if not a.skip_plants and a.plants:
        for c in a.plant_conditions:
            rows += planted(suite, a.plants, c, a.plant_runs, a.load_timeout)
    print("\n" + "=" * 100)
    print(f"suite {a.suite}{versions}, checkout {suite.checkout()}")
    for c in conditions:
        condition_table(c)
    if rows:
        plant_table(rows)
    print()
    for c in conditions:
        print(summary_line(c))
    false = sum(len(c.false_failures) for c in conditions)
    coll = sum(len(r.collateral) for r in rows)
    missed_quiet = sum(r.runs - r.caught for r in rows if r.condition == "none")
    missed_load = sum(r.runs - r.caught for r in rows if r.condition != "none")
    wall = time.time() - t0
    print(
        f"false failures {false}, collateral failures {coll}, missed plants {missed_quiet} "
        f"without load (+{missed_load} under load); {suite.count} pytest runs, {wall:.0f} s"
    )
    bad = false + coll + missed_quiet
    target = "no false or collateral failure, every plant caught without load"
    print(f"target ({target}):", "MISSED" if bad else "met")
    if a.out:
        doc = {
            "suite": a.suite,
            "tests": list(suite.tests),
            "checkout": suite.checkout(),
            "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(a).items()},
            "baseline_sessions": held,
            "conditions": {
                c.name: {
                    "runs": c.runs,
                    "test_runs": c.test_runs,
                    "totals": dict(c.totals),
                    "per_test": {k: dict(v) for k, v in c.per_test.items()},
                    "confirmed": c.confirmed,
                    "inconclusive_other_reasons": dict(c.other_reasons),
                    "false_failures": [asdict(f) for f in c.false_failures],
                    "summary": summary_line(c),
                }
                for c in conditions
            },
            "plants": [{**asdict(r), "verdicts": dict(r.verdicts)} for r in rows],
            "pytest_runs": suite.count,
            "wall_s": round(wall, 1),
        }
        a.out.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"tallies written to {a.out}")
    return 1 if bad else 0


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    add = ap.add_argument
    add(
        "--suite",
        choices=tuple(SUITES),
        default="models",
        help="the tests: models (torch.nn, the default) or hf (Hugging Face transformers)",
    )
    add(
        "--sessions",
        metavar="N",
        type=int,
        default=3,
        help="baseline sessions saved (default 3; 0 reuses those in --folder)",
    )
    add("--runs", metavar="N", type=int, default=9, help="unchanged runs per condition (default 9)")
    add(
        "--conditions",
        metavar="LIST",
        type=lambda s: csv(s, LOADS, "load"),
        default=list(LOADS[:4]),
        help="loads of the unchanged runs (default none,busy,membw,torch; busy1, membw1 and "
        "torch1 are one such process alone)",
    )
    add(
        "--load",
        metavar="LOAD",
        dest="conditions",
        type=lambda s: csv(s, LOADS, "load"),
        help="one load (none|busy|membw|torch) for the unchanged runs: --conditions of one",
    )
    add(
        "--plants",
        metavar="LIST",
        type=lambda s: csv(s, tuple(PLANTS), "plant"),
        default=None,
        help=(
            "plants run (default the suite's own: "
            + "; ".join(f"{n} {','.join(s.plants)}" for n, s in SUITES.items())
            + f"; of {','.join(PLANTS)})"
        ),
    )
    add(
        "--plant-conditions",
        metavar="LIST",
        type=lambda s: csv(s, LOADS, "load"),
        default=["none", "busy"],
        help="loads of the planted runs (default none,busy)",
    )
    add(
        "--plant-runs", metavar="N", type=int, default=2, help="runs per plant and load (default 2)"
    )
    only = ap.add_mutually_exclusive_group()
    only.add_argument("--only-plants", action="store_true", help="no unchanged runs")
    only.add_argument("--skip-plants", action="store_true", help="no planted runs")
    add(
        "--load-timeout",
        metavar="S",
        type=float,
        default=3600.0,
        help="seconds after which a load process exits by itself (default 3600)",
    )
    add(
        "--pythonpath",
        metavar="DIR",
        type=Path,
        default=None,
        help="a checkout put first on the pytest processes' PYTHONPATH",
    )
    add("--folder", metavar="DIR", type=Path, default=None, help="work in this folder and keep it")
    add("--out", metavar="FILE", type=Path, default=None, help="write the tallies as JSON here")
    add(
        "--pytest-arg",
        metavar="ARG",
        action="append",
        default=[],
        help="one more argument for every pytest run (repeatable): --pytest-arg=-x",
    )
    a = ap.parse_args()
    spec = SUITES[a.suite]
    if a.plants is None:
        a.plants = list(spec.plants)
    wrong = [p for p in a.plants if PLANTS[p] not in spec.tests]
    own = ",".join(p for p, test in PLANTS.items() if test in spec.tests)
    if wrong:
        ap.error(f"plants {wrong} plant other suites' tests: --suite {a.suite} takes {own}")
    if a.pythonpath is not None:
        a.pythonpath = a.pythonpath.resolve()
        if not (a.pythonpath / "pytest_tprof").is_dir():
            ap.error(f"--pythonpath {a.pythonpath}: no pytest_tprof package there")
    if a.sessions == 0 and a.folder is None:
        ap.error("--sessions 0 reuses the baselines of --folder: name one")
    return a


def main() -> int:
    a = parse()
    versions = ""
    if a.suite == "hf":  # before any folder is made: without transformers nothing can run
        versions = f", transformers {transformers_version(pytest_env(SUITES['hf'], a.pythonpath))}"
    # a terminated benchmark still kills its load (finally, atexit)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if a.folder is None:
        with tempfile.TemporaryDirectory(prefix="tprof-busy-reruns-") as tmp:
            return check(Path(tmp), a, versions)
    if a.sessions and a.folder.exists() and any(a.folder.iterdir()):
        sys.exit(f"--folder {a.folder}: not empty (reuse its baselines with --sessions 0)")
    a.folder.mkdir(parents=True, exist_ok=True)
    return check(a.folder.resolve(), a, versions)


if __name__ == "__main__":
    raise SystemExit(main())
