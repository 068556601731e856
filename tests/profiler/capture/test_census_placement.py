"""The census on the code real models run: attention and RNN FLOPs, hooks, optimizer steps, the
backward of a module that returns a tensor it also used, and module paths beside a loss."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tprof_engine.capture.census import take_census
from tprof_engine.decide.gates.finding import applied
from tprof_engine.decide.gates.work import judge_work, work_finding
from tprof_engine.decide.timing.rule import Rule
from tprof_engine.model.verdicts import UNCHANGED, TestVerdict
from tprof_engine.model.work import (
    WorkRow,
    WorkTable,
    flops_unknown,
    flops_unknown_text,
    matrix_op,
)

B, H, L, D = 2, 4, 16, 8  # batch, heads, tokens, head width


class Attention(nn.Module):
    """Self-attention through SDPA or written out (the same maths), returning its weights
    beside its output as eager attention in HF models does."""

    def __init__(self, *, fused: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.qkv = nn.Linear(H * D, 3 * H * D)
        self.fused = fused

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        q, k, v = self.qkv(x).view(B, L, 3, H, D).permute(2, 0, 3, 1, 4)
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v), None
        weights = torch.softmax(q @ k.transpose(-1, -2) * D**-0.5, dim=-1)
        return weights @ v, weights


def flops_of(table: WorkTable, op: str | None = None) -> int:
    return sum(r.flops for r in table.rows if op is None or r.op == op)


def inference(model: nn.Module, *args: torch.Tensor) -> Callable[[], None]:
    def run() -> None:
        with torch.no_grad():
            model(*args)

    return run


def test_cpu_attention_counts_torchs_sdpa_flops_the_same_as_written_out() -> None:
    x = torch.randn(B, L, H * D)
    fused = take_census(inference(Attention(fused=True), x))
    eager = take_census(inference(Attention(fused=False), x))
    attention = 2 * (2 * B * H * L * L * D)  # q @ kᵀ and weights @ v
    assert flops_of(fused, "aten::_scaled_dot_product_flash_attention_for_cpu") == attention
    assert flops_of(fused) == flops_of(eager)
    assert flops_unknown(fused.rows) == ()


def test_an_lstm_counts_its_gate_projections_forward_and_backward() -> None:
    torch.manual_seed(0)
    lstm = nn.LSTM(32, 64, batch_first=True)
    x = torch.randn(4, 10, 32)

    def step() -> None:
        lstm.zero_grad(set_to_none=True)
        lstm(x)[0].sum().backward()

    table = take_census(step)
    rows = {r.op: r.flops for r in table.rows if r.flops}
    forward = 2 * 4 * 10 * (4 * 64) * (32 + 64)  # rows × gates × (inputs + hidden)
    if "aten::mkldnn_rnn_layer" not in rows:
        pytest.skip("this torch runs the LSTM without oneDNN's layer")
    assert rows == {
        "aten::mkldnn_rnn_layer": forward,
        "aten::mkldnn_rnn_layer_backward": 2 * forward,
    }


@pytest.mark.parametrize("layer", ["encoder", "attention"])
def test_the_fused_inference_layers_count_what_their_unfused_paths_count(layer: str) -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 16, 64)
    module: nn.Module = (
        nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, dropout=0.0)
        if layer == "encoder"
        else nn.MultiheadAttention(64, 4, batch_first=True)
    ).eval()
    args = (x,) if layer == "encoder" else (x, x, x)
    fused = take_census(inference(module, *args))
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        unfused = take_census(inference(module, *args))
    finally:
        torch.backends.mha.set_fastpath_enabled(True)
    assert {r.op for r in fused.rows if r.flops} <= {
        "aten::_transformer_encoder_layer_fwd",
        "aten::_native_multi_head_attention",
    }
    assert flops_of(fused) == flops_of(unfused) > 0


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.block = nn.Sequential(nn.Linear(8, 16), nn.ReLU())
        self.head = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out: torch.Tensor = self.head(self.block(x))
        return out


def test_a_modules_own_hooks_are_charged_to_it_in_a_phase_of_their_own() -> None:
    net = Net()
    x = torch.randn(4, 8)
    net.block.register_forward_hook(lambda _m, _i, out: out.clone())
    net.head.register_forward_pre_hook(lambda _m, args: (args[0].double().float(),))
    table = take_census(inference(net, x))
    hooked = {(r.op, r.module, r.phase): r.calls for r in table.rows if "hook" in r.phase}
    assert hooked == {
        ("aten::clone", "block", "forward hook"): 1,
        ("aten::_to_copy", "head", "forward pre-hook"): 2,
    }
    assert net.block._forward_hooks and all(  # the hooks are the user's again
        not hasattr(h, "__wrapped__") for h in net.block._forward_hooks.values()
    )


@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.AdamW])
def test_an_optimizer_steps_ops_are_in_its_own_phase(optimizer: type) -> None:
    net = Net()
    opt = optimizer(net.parameters(), lr=0.1)
    x = torch.randn(4, 8)

    def step() -> None:
        opt.zero_grad()
        net(x).sum().backward()
        opt.step()

    step()
    table = take_census(step)
    phases = {r.phase for r in table.rows}
    assert phases == {"forward", "backward", f"{optimizer.__name__}.step"}
    assert {r.module for r in table.rows if r.phase.endswith(".step")} == {""}


def test_backward_is_charged_to_the_module_whose_forward_made_it() -> None:
    # Attention that returns its weights: ModuleTracker enters it in backward only once the
    # weights have their gradient, after the first batched matmul's backward ran.
    model = nn.Sequential(Attention(fused=False))
    x = torch.randn(B, L, H * D)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        out, weights = model[0](x)
        (out.sum() + weights.sum()).backward()

    table = take_census(step)
    bmm = {r.module: r.calls for r in table.rows if r.op == "aten::bmm" and r.phase == "backward"}
    assert bmm == {"0": 4}


def test_a_loss_module_beside_the_model_leaves_the_models_paths_as_they_are() -> None:
    net, loss_fn = Net(), nn.MSELoss()
    x, y = torch.randn(4, 8), torch.randn(4, 4)

    def step() -> None:
        net.zero_grad(set_to_none=True)
        loss_fn(net(x), y).backward()

    modules = {r.module for r in take_census(step).rows}
    assert {"block.0", "head", "loss_fn"} <= modules
    assert not any(m.startswith("net") for m in modules)


def test_ops_of_matrix_work_without_a_formula_are_named_not_read_as_zero() -> None:
    assert [matrix_op(op) for op in ("aten::_cudnn_rnn", "aten::mm", "aten::cummax")] == [
        True,
        True,
        False,
    ]
    rows = (
        WorkRow(op="aten::_cudnn_rnn", module="", phase="forward", calls=1, flops=0,
                bytes_read=64, bytes_written=64),
        WorkRow(op="aten::relu", module="", phase="forward", calls=1, flops=0,
                bytes_read=64, bytes_written=64),
    )  # fmt: skip
    assert flops_unknown(rows) == ("aten::_cudnn_rnn",)
    assert flops_unknown_text(flops_unknown(rows)) == (
        "FLOPs unknown for 1 op (aten::_cudnn_rnn): no formula; bytes counted"
    )
    verdict = judge_work(WorkTable(rows=rows), WorkTable(rows=rows))
    assert verdict.reasons == (
        "FLOPs unknown for 1 op (aten::_cudnn_rnn): no formula; bytes counted",
    )


def test_a_census_taken_by_older_rules_is_not_compared_and_says_how_to_refresh_it() -> None:
    x = torch.randn(B, L, H * D)
    now = take_census(inference(Attention(fused=True), x))
    old = WorkTable.from_dict({k: v for k, v in now.to_dict().items() if k != "census"})
    assert (old.census, now.census) == (1, 2)
    verdict = applied(TestVerdict(verdict=UNCHANGED, reason=""), work_finding(old, now, Rule()))
    assert verdict.work is None
    assert any("census counted by older rules" in n and "--tprof-save" in n for n in verdict.notes)


class Projection(nn.Module):
    def __init__(self, *, by_hand: bool) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 64)
        self.by_hand = by_hand

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.by_hand:  # the same matmul as two ops: one more pass over the output
            return x @ self.fc.weight.t() + self.fc.bias
        out: torch.Tensor = self.fc(x)
        return out


def test_a_replaced_op_is_reported_by_its_modules_net_change_not_the_new_ops_own() -> None:
    x = torch.randn(32, 64)
    library = take_census(inference(nn.Sequential(Projection(by_hand=False)), x))
    by_hand = take_census(inference(nn.Sequential(Projection(by_hand=True)), x))
    verdict = judge_work(library, by_hand)
    assert verdict.verdict == "regressed"
    assert flops_of(library) == flops_of(by_hand)  # the same multiply-adds
    lines = [r for r in verdict.reasons if not r.startswith("total ")]
    assert lines == [
        "in 0 (forward): aten::addmm in 0.fc gone, 2 new ops (aten::mm, aten::add), "
        "bytes +16,384 net (+49.6% of the test's)"
    ]
    assert not any("new, FLOPs" in r for r in verdict.reasons), verdict.reasons


def deep_mlp() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(*(nn.Sequential(nn.Linear(256, 256), nn.ReLU()) for _ in range(8)))


def test_a_copy_of_one_activation_in_a_hook_fails_by_its_modules_share() -> None:
    # A training step: the module's backward work doesn't dilute what its forward hook adds.
    x = torch.randn(4, 256)
    plain, hooked = deep_mlp(), deep_mlp()
    hooked[3].register_forward_hook(lambda _m, _i, out: out.clone())

    def step(model: nn.Module) -> Callable[[], None]:
        def run() -> None:
            model.zero_grad(set_to_none=True)
            model(x).sum().backward()

        return run

    base, now = take_census(step(plain)), take_census(step(hooked))
    verdict = judge_work(base, now)
    share = 2 * 4 * 256 * 4 / base.total_bytes  # read and written once
    assert share < 0.001 * 10  # under the test's floor
    assert verdict.verdict == "regressed"
    assert verdict.reasons[0] == (
        "aten::clone in 3 (forward hook): new, bytes +8,192 (0.13% of the test's, 2.9% of 3's "
        "forward) — input f32[4, 256]"
    )


def test_a_new_scalar_read_at_top_level_is_a_change_not_a_regression() -> None:
    x = torch.randn(4, 256)
    model = deep_mlp()

    def with_item() -> None:
        with torch.no_grad():
            model(x).sum().item()

    def without() -> None:
        with torch.no_grad():
            model(x).sum()

    verdict = judge_work(take_census(without), take_census(with_item))
    assert verdict.verdict == "changed", verdict.reasons


def test_the_work_table_says_unknown_for_no_formula_shows_what_changed_and_drops_views() -> None:
    from tprof_engine.render.report import work_lines

    def rows(calls: int, size: int) -> tuple[WorkRow, ...]:
        return (
            WorkRow(op="aten::_cudnn_rnn", module="rnn", phase="forward", calls=1, flops=0,
                    bytes_read=size, bytes_written=size, signature=f"f32[{size}]"),
            WorkRow(op="aten::t", module="rnn", phase="forward", calls=calls, flops=0,
                    bytes_read=0, bytes_written=0),
            WorkRow(op="aten::mm", module="head", phase="forward", calls=1, flops=10_000,
                    bytes_read=40_000, bytes_written=40_000),
        )  # fmt: skip

    verdict = judge_work(WorkTable(rows=rows(1, 64)), WorkTable(rows=rows(2, 64)))
    assert verdict.verdict == "changed"
    short = "\n".join(work_lines(verdict))
    assert "aten::t" in short  # the reason line names it
    assert not any(line.startswith("aten::t ") for line in work_lines(verdict))
    table = [line for line in work_lines(verdict, verbose=True) if line.startswith("aten::t ")]
    assert table and table[0].endswith("changed  calls 1 → 2")
    grown = judge_work(WorkTable(rows=rows(1, 64)), WorkTable(rows=rows(1, 96)))
    rnn = [line for line in work_lines(grown) if line.startswith("aten::_cudnn_rnn")]
    assert rnn and " unknown " in rnn[0] and "f32[64] → f32[96]" not in rnn[0]
