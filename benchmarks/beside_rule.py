"""Stored mode beside one busy neighbour: an op alone failing a test on one route, against
both routes (docs/design.md §16), judged on the same tables.

Beside other busy processes, most of a run's rounds are kept for judging (the drift probe
didn't read them slower), yet a neighbour slows an op's fixed cost (dispatch, Python) more than
its arithmetic.  So the judge now asks an op that fails a test alone, its family's total not
regressed, to have slowed on both routes there: its own time and its time against the rest of
the test.  This script measures what that costs and saves.

Bodies, each captured with ``session.capture`` (20 rounds, as the plugin's default): three
quiet captures first as baseline sessions, then captures under each load, the loads taken in
turn ``--repeat`` times:

- unchanged: an encoder layer's training step (AdamW), and from Hugging Face ``transformers``
  small configs with random weights: GPT-2's training step (AdamW), BERT and T5 inference,
  Llama forward and backward;
- planted, one op alone slower: GPT-2's forward with a custom op (pure Python, about 15 % of
  the round) after its first block, the op +30 % (``spin30``) and +100 % (``spin100``) in the
  planted captures: the test's round grows about 4.5 % and 15 %.

Each capture is judged against its body's sessions (``decide.judge``) twice: as the judge now
does, and with the beside-others rule turned off (the rule before).  Per load, it prints the
captures whose timing was judged, the unchanged captures that failed and the planted ones
caught, before / now.  A first look only: the plugin would confirm a failure in a fresh
process.

    python benchmarks/beside_rule.py [--loads none,busy1,membw1,torch1] [--repeat 2]
        [--captures 3] [--keep FILE] [--why]
    python benchmarks/beside_rule.py --judge FILE [--why]   # the kept captures judged again
"""

from __future__ import annotations

import argparse
import pickle
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness.loads import LOADS, load

from tprof_engine.capture import session
from tprof_engine.decide import judge as judging
from tprof_engine.decide.judge import Recorded, judge
from tprof_engine.decide.timing.busy import probe_reference
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.records import OpTable
from tprof_engine.model.verdicts import INCONCLUSIVE, REGRESSED
from tprof_engine.recording import quiet_enough

ROUNDS = 20
VOCAB, HIDDEN, HEADS, LAYERS, SEQ = 1000, 64, 4, 2, 32
SPIN_SHARE = 0.15  # of the GPT-2 forward's round
PLANTS = {"spin30": 1.3, "spin100": 2.0}
Step = Callable[[], object]
# As the plugin runs outside xdist by default: one intra-op thread (``--tprof-threads 1``), so
# no task of the run's own counts as a neighbour, and a busy capture is taken again up to twice.
RULE = Rule(siblings=0)
BUSY_RETRIES = 2


class Spin:
    """A custom op whose body is pure Python: ``n`` loop turns (set, then planted)."""

    n = 1000


@torch.library.custom_op("besiderule::spin", mutates_args=())
def spin(x: torch.Tensor) -> torch.Tensor:
    s = 0
    for i in range(Spin.n):
        s += i
    return x + 1


def encoder() -> Step:
    layer = torch.nn.TransformerEncoderLayer(64, 4, 256, dropout=0.0, batch_first=True)
    opt = torch.optim.AdamW(layer.parameters(), lr=1e-3)
    x = torch.randn(8, 32, 64)

    def step() -> object:
        opt.zero_grad()
        layer(x).pow(2).mean().backward()
        opt.step()
        return None

    return step


def gpt2_model() -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=VOCAB,
        n_positions=SEQ,
        n_embd=HIDDEN,
        n_layer=LAYERS,
        n_head=HEADS,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        bos_token_id=0,
        eos_token_id=0,
    )
    return GPT2LMHeadModel(config)


def gpt2_train() -> Step:
    model = gpt2_model().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, VOCAB, (2, SEQ))

    def step() -> object:
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
        return None

    return step


def gpt2_spin() -> Step:
    model = gpt2_model().eval()
    model.transformer.h[0].mlp.register_forward_hook(lambda _m, _a, out: spin(out))
    ids = torch.randint(0, VOCAB, (4, SEQ))

    def body() -> object:
        with torch.no_grad():
            return model(input_ids=ids).logits

    return body


def bert() -> Step:
    from transformers import BertConfig, BertModel

    config = BertConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=4 * HIDDEN,
        max_position_embeddings=SEQ,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
    )
    model = BertModel(config).eval()
    ids = torch.randint(0, VOCAB, (4, SEQ))

    def body() -> object:
        with torch.no_grad():
            return model(input_ids=ids).last_hidden_state

    return body


def t5() -> Step:
    from transformers import T5Config, T5ForConditionalGeneration

    config = T5Config(
        vocab_size=VOCAB,
        d_model=HIDDEN,
        d_kv=HIDDEN // HEADS,
        d_ff=2 * HIDDEN,
        num_layers=LAYERS,
        num_decoder_layers=LAYERS,
        num_heads=HEADS,
        dropout_rate=0.0,
        use_cache=False,
        pad_token_id=0,
        decoder_start_token_id=0,
    )
    model = T5ForConditionalGeneration(config).eval()
    ids = torch.randint(1, VOCAB, (4, SEQ))
    decoder_ids = torch.randint(1, VOCAB, (4, SEQ // 2))

    def body() -> object:
        with torch.no_grad():
            return model(input_ids=ids, decoder_input_ids=decoder_ids).logits

    return body


def llama() -> Step:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=2 * HIDDEN,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=SEQ,
        use_cache=False,
    )
    model = LlamaForCausalLM(config).train()
    ids = torch.randint(0, VOCAB, (2, SEQ))

    def step() -> object:
        model.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=ids).loss.backward()
        return None

    return step


BODIES = {
    "encoder": encoder,
    "gpt2_train": gpt2_train,
    "bert": bert,
    "t5": t5,
    "llama": llama,
    "gpt2_spin": gpt2_spin,
}


def calibrate_spin(body: Step) -> int:
    """Loop turns that make the spin op about ``SPIN_SHARE`` of the body's round."""
    Spin.n = 0
    for _ in range(5):
        body()
    t0 = time.perf_counter()
    for _ in range(20):
        body()
    round_s = (time.perf_counter() - t0) / 20
    t0 = time.perf_counter()
    s = 0
    for i in range(200_000):
        s += i
    per_turn = (time.perf_counter() - t0) / 200_000
    return int(SPIN_SHARE / (1 - SPIN_SHARE) * round_s / per_turn)


@contextmanager
def planted(factor: float) -> Iterator[None]:
    base = Spin.n
    Spin.n = int(base * factor)
    try:
        yield
    finally:
        Spin.n = base


def captured(step: Step, base: tuple[OpTable, ...] = ()) -> OpTable:
    """One capture, taken again while too few rounds were undisturbed (a baseline's: once)."""

    def once() -> session.CaptureResult:
        return session.capture(step, rounds=ROUNDS, warmup=3)

    if not base:
        return once().table
    return quiet_enough(once, RULE, BUSY_RETRIES, probe_reference(base)).table


WHY: list[str] = []  # each failure's reason, printed with ``--why``


def judged(base: tuple[OpTable, ...], table: OpTable) -> tuple[bool, bool]:
    """Whether the capture's timing was judged (compared, and not inconclusive), and whether
    it failed."""
    v = judge(Recorded(tables=base), Recorded(tables=(table,)), RULE)
    if v.verdict == REGRESSED:
        WHY.append(v.reason[:240])
    return v.timing_compared and v.verdict != INCONCLUSIVE, v.verdict == REGRESSED


@contextmanager
def rule_before() -> Iterator[None]:
    """The judge without the beside-others rule."""
    kept = judging._beside_others
    judging._beside_others = lambda _b, _c, rule, _f: rule  # type: ignore[assignment]
    try:
        yield
    finally:
        judging._beside_others = kept  # type: ignore[assignment]


Seen = dict[str, list[tuple[str, OpTable]]]  # load -> (body or plant, capture)


def capture_all(
    steps: dict[str, Step],
    base: dict[str, tuple[OpTable, ...]],
    loads: list[str],
    repeat: int,
    captures: int,
) -> Seen:
    seen: Seen = defaultdict(list)
    for _ in range(repeat):
        for kind in loads:
            with load(kind, lifetime=900):
                for name, step in steps.items():
                    seen[kind] += [(name, captured(step, base[name])) for _ in range(captures)]
                    if name != "gpt2_spin":
                        continue
                    for plant, factor in PLANTS.items():
                        with planted(factor):
                            seen[kind] += [
                                (plant, captured(step, base[name])) for _ in range(captures)
                            ]
    return seen


def tally(base: dict[str, tuple[OpTable, ...]], seen: Seen) -> None:
    print(f"{'load':8s} {'what':10s} {'captures':>8s}   judged before / now   failed before / now")
    for kind, tables in seen.items():
        rows: dict[str, list[tuple[str, OpTable]]] = defaultdict(list)
        for name, t in tables:
            rows["unchanged" if name in BODIES else name].append((name, t))
        for what, group in rows.items():
            now = [judged(base[_body(n)], t) for n, t in group]
            with rule_before():
                before = [judged(base[_body(n)], t) for n, t in group]
            print(
                f"{kind:8s} {what:10s} {len(group):8d}   {sum(j for j, _ in before):13d} / "
                f"{sum(j for j, _ in now):<4d} {sum(f for _, f in before):12d} / "
                f"{sum(f for _, f in now)}"
            )
            _failed_bodies(kind, group, now, before)


def _body(name: str) -> str:
    return "gpt2_spin" if name in PLANTS else name


def _failed_bodies(
    kind: str,
    group: list[tuple[str, OpTable]],
    now: list[tuple[bool, bool]],
    before: list[tuple[bool, bool]],
) -> None:
    failed = [(n, b[1], a[1]) for (n, _), b, a in zip(group, before, now, strict=True)]
    named = [
        f"{n} ({'before' if b else ''}{'+' if b and a else ''}{'now' if a else ''})"
        for n, b, a in failed
        if b or a
    ]
    if named:
        print(f"{'':8s} {'':10s} failed: {', '.join(named)}")
    for why in WHY if SHOW_WHY else ():
        print(f"{'':8s} {'':10s}   {why}")
    WHY.clear()


SHOW_WHY = False


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", default="none,busy1,membw1,torch1")
    ap.add_argument("--repeat", type=int, default=2, help="passes over the loads, in turn")
    ap.add_argument("--captures", type=int, default=3, help="captures per body, load and pass")
    ap.add_argument("--keep", help="pickle the captures to this file (judge them again later)")
    ap.add_argument("--judge", help="judge the captures pickled in this file; capture nothing")
    ap.add_argument("--why", action="store_true", help="print each failure's reason")
    a = ap.parse_args()
    global SHOW_WHY
    SHOW_WHY = a.why
    if a.judge:
        base, seen = pickle.loads(Path(a.judge).read_bytes())
        tally(base, seen)
        return 0
    loads = [x for x in a.loads.split(",") if x]
    if any(x not in LOADS for x in loads):
        ap.error(f"--loads: a list of {', '.join(LOADS)}")
    torch.manual_seed(0)
    torch.set_num_threads(1)
    steps = {name: make() for name, make in BODIES.items()}
    Spin.n = calibrate_spin(steps["gpt2_spin"])
    start = time.monotonic()
    base = {name: tuple(captured(step) for _ in range(3)) for name, step in steps.items()}
    seen = capture_all(steps, base, loads, a.repeat, a.captures)
    if a.keep:
        Path(a.keep).write_bytes(pickle.dumps((base, dict(seen))))
    tally(base, seen)
    rounds = [t.wall_us.sum() / t.rounds for _, t in seen["none" if "none" in seen else loads[0]]]
    print(
        f"\n{ROUNDS} rounds a capture; spin op {Spin.n} loop turns; median round "
        f"{statistics.median(rounds) / 1e3:.1f} ms; {time.monotonic() - start:.0f} s of captures"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
