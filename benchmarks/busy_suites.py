"""The suites ``busy_reruns.py`` writes and runs (``ab_reruns.py`` runs the first too): their test
files, their tests, and the plants that slow one of them.

The tests and plants are described in ``busy_reruns.py``'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass

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


# Elements of numpy sine an optimizer step pre-hook computes, inside Optimizer.step#AdamW.step
# (a step's pre-hooks run in its annotation), so in that annotation's own time: tprof ab read
# the encoder step +15 to +18 % and +7 to +10 % slower.
OPTIM_HOOK_N = {"optim_hook": 37_800, "optim_hook_small": 12_600}.get(PLANT, 0)


def _optim_hook(optimizer, args, kwargs):
    import numpy as np

    np.sin(np.linspace(0.0, 1.0, OPTIM_HOOK_N))


def test_encoder_train(tprof):
    layer = nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    if OPTIM_HOOK_N:
        opt.register_step_pre_hook(_optim_hook)
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
    x = torch.randn(16, 3, 16, 16)
    # both sides enter the same context, so only the kernel path differs: at this shape
    # oneDNN's convolution takes ~570 µs a round and aten's own ~940 µs (+65 %, 2 cores)
    onednn = PLANT != "mkldnn_off"

    def forward():
        with torch.no_grad(), torch.backends.mkldnn.flags(enabled=onednn):
            return block(x)

    out = tprof(forward)
    assert out.shape == (16, 32, 8, 8)


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


MODELS_PLANTS = ("pyloop", "mkldnn_off", "shuffled")
HF_PLANTS = ("hf_pyloop", "hf_wider", "hf_generate_loop")
SUITES = {
    "models": SuiteSpec("models", "test_busy_suite.py", MODELS_SUITE, MODELS_TESTS, MODELS_PLANTS),
    "hf": SuiteSpec(
        "hf", "test_busy_hf.py", HF_SUITE, HF_TESTS, HF_PLANTS, env=(("HF_HUB_OFFLINE", "1"),)
    ),
}
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
