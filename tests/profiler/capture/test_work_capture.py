"""The work census of real torch code: exact FLOPs, bytes, modules and phases of small modules."""

from __future__ import annotations

import json
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import pytest
import torch
from torch import nn

from tprof_engine.capture.census import take_census
from tprof_engine.decide.gates.work import judge_work
from tprof_engine.model.errors import CaptureError, ConfigError
from tprof_engine.model.work import HostSync, WorkRow, WorkTable

F32 = 4  # bytes per float32 element


class Block(nn.Module):
    """A feed-forward block with the changes the census must see, each behind a switch."""

    def __init__(self, hidden: int = 20, *, copy: bool = False, hand_norm: bool = False) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc1 = nn.Linear(8, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.fc2 = nn.Linear(hidden, 8)
        self.copy = copy
        self.hand_norm = hand_norm

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        if self.copy:
            h = h.t().contiguous().t()
        if self.hand_norm:
            mean = h.mean(-1, keepdim=True)
            var = ((h - mean) ** 2).mean(-1, keepdim=True)
            h = (h - mean) / torch.sqrt(var + self.norm.eps) * self.norm.weight + self.norm.bias
        else:
            h = self.norm(h)
        out: torch.Tensor = self.fc2(h)
        return out


def training_step(model: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def step() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    return step


def census_of(**block: object) -> WorkTable:
    return take_census(training_step(Block(**block), torch.randn(4, 8)))  # type: ignore[arg-type]


def rows_of(table: WorkTable) -> dict[tuple[str, str, str], WorkRow]:
    return table.index()


# --------------------------------------------------------------------------- figures


def test_a_linear_layer_is_one_addmm_of_2mnk_flops_and_its_tensor_bytes() -> None:
    layer = nn.Linear(8, 16)
    with torch.no_grad():
        table = take_census(layer, (torch.randn(4, 8),))
    assert table.rows == (
        WorkRow(
            op="aten::addmm",
            module="",
            phase="forward",
            calls=1,
            flops=2 * 4 * 8 * 16,
            bytes_read=(16 + 4 * 8 + 8 * 16) * F32,
            bytes_written=4 * 16 * F32,
            dtypes=("float32",),
            signature="self=f32[16], mat1=f32[4, 8], mat2=f32[8, 16]ᵀ",
        ),
        # A view: its call counts, its bytes don't.
        WorkRow(
            op="aten::t",
            module="",
            phase="forward",
            calls=1,
            flops=0,
            bytes_read=0,
            bytes_written=0,
            dtypes=("float32",),
            signature="f32[16, 8]",
        ),
    )


def test_inference_mode_records_the_same_leaf_ops_as_no_grad() -> None:
    layer = nn.Linear(8, 16)
    x = torch.randn(4, 8)
    with torch.no_grad():
        plain = take_census(layer, (x,))
    with torch.inference_mode():
        inference = take_census(layer, (x,))
    assert inference == plain


def test_a_training_step_charges_backward_matmuls_to_the_module_whose_forward_made_them() -> None:
    rows = rows_of(census_of())
    assert rows["aten::addmm", "fc1", "forward"].flops == 2 * 4 * 8 * 20
    # fc1's input needs no gradient: one matmul, for the weight's gradient.
    assert (
        rows["aten::mm", "fc1", "backward"].calls,
        rows["aten::mm", "fc1", "backward"].flops,
    ) == (1, 2 * 20 * 4 * 8)
    # fc2 also passes the gradient on to its input: two matmuls.
    assert (
        rows["aten::mm", "fc2", "backward"].calls,
        rows["aten::mm", "fc2", "backward"].flops,
    ) == (2, 2 * (2 * 4 * 8 * 20))
    assert rows["aten::native_layer_norm_backward", "norm", "backward"].calls == 1
    assert rows["aten::threshold_backward", "", "backward"].bytes_written == 4 * 20 * F32


def test_a_backward_row_names_the_autograd_nodes_that_ran_it() -> None:
    rows = rows_of(census_of())
    assert rows["aten::mm", "fc2", "backward"].grad_fns == ("AddmmBackward0",)
    assert rows["aten::threshold_backward", "", "backward"].grad_fns == ("ReluBackward0",)
    assert rows["aten::addmm", "fc1", "forward"].grad_fns == ()
    assert (
        rows["aten::mm", "fc2", "backward"].label == "aten::mm in fc2 (backward of AddmmBackward0)"
    )
    # A description, not work: the table round-trips it and equality ignores it.
    table = census_of()
    again = WorkTable.from_dict(json.loads(json.dumps(table.to_dict())))
    assert again.index()["aten::mm", "fc2", "backward"].grad_fns == ("AddmmBackward0",)


def test_with_stack_each_row_keeps_the_users_source_line_of_its_first_call() -> None:
    model, x = Block(), torch.randn(4, 8)

    def step() -> None:
        model.zero_grad(set_to_none=True)
        out = model(x)  # the forward line
        out.sum().backward()  # the backward line

    lines = {
        text.split("#")[1].strip(): n
        for n, text in enumerate(Path(__file__).read_text(encoding="utf-8").splitlines(), 1)
        if "# the forward line" in text or "# the backward line" in text
    }
    rows = rows_of(take_census(step, stack=True))
    here = Path(__file__).name
    # fc1's matmul runs in Block.forward, this file's code; backward ops run from .backward().
    assert rows["aten::addmm", "fc1", "forward"].source.endswith(
        f"{here}:{Block.forward.__code__.co_firstlineno + 1} in forward"
    )
    assert rows["aten::mm", "fc2", "backward"].source.endswith(
        f"{here}:{lines['the backward line']} in step"
    )
    assert all(r.source == "" for r in census_of().rows)


def test_a_ten_percent_wider_layer_gives_exactly_ten_percent_more_matmul_flops() -> None:
    base, wide = rows_of(census_of(hidden=20)), rows_of(census_of(hidden=22))
    for key in [
        ("aten::addmm", "fc1", "forward"),
        ("aten::addmm", "fc2", "forward"),
        ("aten::mm", "fc1", "backward"),
        ("aten::mm", "fc2", "backward"),
    ]:
        assert Fraction(wide[key].flops, base[key].flops) == Fraction(11, 10), key


def test_a_wider_layer_regresses_naming_the_op_module_phase_and_input() -> None:
    verdict = judge_work(census_of(hidden=20), census_of(hidden=22))
    assert verdict.verdict == "regressed"
    assert verdict.reasons[0] == "total FLOPs +10.0% (6,400 → 7,040)"
    assert (
        "aten::addmm in fc1 (forward): FLOPs +10.0%, bytes +8.9% — "
        "self f32[20] → f32[22], mat2 f32[8, 20]ᵀ → f32[8, 22]ᵀ" in verdict.reasons
    )


def test_an_extra_transposed_copy_is_a_new_clone_of_the_tensors_size() -> None:
    base, copied = census_of(), census_of(copy=True)
    clone = rows_of(copied)["aten::clone", "", "forward"]
    assert (clone.bytes_read, clone.bytes_written) == (4 * 20 * F32, 4 * 20 * F32)
    assert clone.signature == "f32[20, 4]ᵀ"
    assert copied.total_bytes - base.total_bytes == 2 * 4 * 20 * F32
    verdict = judge_work(base, copied)
    assert verdict.verdict == "regressed"
    assert verdict.reasons[1] == (
        "aten::clone at top level (forward): new, bytes +640 (+6.7% of the test's) "
        "— input f32[20, 4]ᵀ"
    )


def test_a_float64_upcast_changes_dtypes_and_doubles_bytes() -> None:
    layer = nn.Linear(8, 16)
    x = torch.randn(4, 8)
    with torch.no_grad():
        single = rows_of(take_census(layer, (x,)))["aten::addmm", "", "forward"]
        double = rows_of(take_census(layer.double(), (x.double(),)))["aten::addmm", "", "forward"]
    assert (single.dtypes, double.dtypes) == (("float32",), ("float64",))
    assert (double.bytes_read, double.bytes_written) == (
        2 * single.bytes_read,
        2 * single.bytes_written,
    )
    assert double.flops == single.flops
    assert double.signature == "self=f64[16], mat1=f64[4, 8], mat2=f64[8, 16]ᵀ"


def test_a_hand_written_layer_norm_replaces_the_fused_op_with_more_work() -> None:
    base, hand = census_of(), census_of(hand_norm=True)
    verdict = judge_work(base, hand)
    status = {(r.op, r.module, r.phase): r.status for r in verdict.rows}
    assert status["aten::native_layer_norm", "norm", "forward"] == "deleted"
    assert status["aten::native_layer_norm_backward", "norm", "backward"] == "deleted"
    added = {op for (op, module, phase), s in status.items() if s == "added" and phase == "forward"}
    assert added == {
        "aten::mean",
        "aten::sub",
        "aten::pow",
        "aten::add",
        "aten::sqrt",
        "aten::div",
        "aten::mul",
    }
    assert verdict.verdict == "regressed"
    assert verdict.reasons[0] == "total bytes +165.7% (9,620 → 25,556)"


def test_item_is_a_host_sync() -> None:
    table = take_census(lambda: torch.ones(3).sum().item())
    assert table.syncs == (
        HostSync(op="aten::_local_scalar_dense", module="", phase="forward", device="cpu", calls=1),
    )


# --------------------------------------------------------------------------- determinism


def test_an_unchanged_body_gives_an_equal_census_and_it_round_trips() -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.Dropout(0.5), nn.Linear(16, 2))
    step = training_step(model, torch.randn(4, 8))
    first, second = take_census(step), take_census(step)
    assert first.to_dict() == second.to_dict()
    assert not any(r.varies for r in first.rows)  # dropout's random mask: same work
    assert WorkTable.from_dict(json.loads(json.dumps(first.to_dict()))) == first


def test_work_that_differs_between_rounds_is_marked_varies() -> None:
    positives = iter(range(1, 10))

    def data_dependent() -> None:
        mask = torch.arange(10) < next(positives)
        torch.nonzero(mask)

    rows = rows_of(take_census(data_dependent, rounds=2))
    assert rows["aten::nonzero", "", "forward"].varies
    assert not rows["aten::lt", "", "forward"].varies


def test_the_body_computes_the_same_results_under_the_census() -> None:
    layer = nn.Linear(8, 16)
    x = torch.randn(4, 8)
    seen: list[torch.Tensor] = []
    take_census(lambda: seen.append(layer(x).detach()), rounds=1)
    assert torch.equal(seen[0], layer(x).detach())


def test_setup_prepares_each_round_and_a_round_holds_all_its_iterations() -> None:
    made: list[int] = []

    def setup() -> tuple[tuple[torch.Tensor], dict[str, object]]:
        made.append(1)
        return (torch.ones(5),), {}

    table = take_census(torch.relu, setup=setup, iterations=3, rounds=2)
    assert made == [1, 1]
    (relu,) = table.rows
    assert (relu.calls, relu.bytes_read, table.iterations) == (3, 3 * 5 * F32, 3)


# --------------------------------------------------------------------------- modules


def test_module_paths_are_those_of_named_modules_of_the_model_the_body_holds() -> None:
    torch.manual_seed(0)
    model = nn.ModuleDict(
        {"encoder": nn.Sequential(nn.Linear(8, 8), nn.ReLU()), "head": nn.Linear(8, 2)}
    )
    x = torch.randn(4, 8)

    def step() -> None:
        model["head"](model["encoder"](x)).sum().backward()

    modules = {r.module for r in take_census(step).rows}
    # ModuleTracker alone names them "Sequential.0", "Sequential.1" and "Linear".
    assert modules == {"", "encoder.0", "encoder.1", "head"}


def test_separate_models_get_their_variable_names_as_prefix() -> None:
    encoder = nn.Sequential(nn.Linear(8, 8))
    head = nn.Linear(8, 2)
    x = torch.randn(4, 8)
    with torch.no_grad():
        modules = {r.module for r in take_census(lambda: head(encoder(x))).rows}
    assert modules == {"encoder.0", "head"}


# --------------------------------------------------------------------------- failures, compile


def test_a_failing_body_is_a_capture_error_and_leaves_no_mode_or_hook_behind() -> None:
    hooks = nn.modules.module
    before = (len(hooks._global_forward_pre_hooks), len(hooks._global_forward_hooks))

    def broken() -> None:
        nn.Linear(2, 2)(torch.ones(1, 2))
        raise RuntimeError("boom")

    with pytest.raises(CaptureError) as caught:
        take_census(broken)
    assert str(caught.value) == (
        "the work census could not run the test body under a TorchDispatchMode: RuntimeError: boom"
    )
    assert isinstance(caught.value.__cause__, RuntimeError)
    assert torch._C._len_torch_dispatch_stack() == 0
    assert (len(hooks._global_forward_pre_hooks), len(hooks._global_forward_hooks)) == before


@pytest.mark.parametrize(
    ("rounds", "iterations", "message"),
    [(0, 1, "'rounds' must be >= 1 (got 0)"), (1, 0, "'iterations' must be >= 1 (got 0)")],
)
def test_bad_census_options_are_config_errors(rounds: int, iterations: int, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        take_census(torch.relu, (torch.ones(2),), rounds=rounds, iterations=iterations)
    assert str(caught.value) == message


def test_compiled_code_runs_eagerly_in_the_census_and_is_counted() -> None:
    def body(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.relu(x @ w).sum()

    compiled = torch.compile(body, backend="eager", fullgraph=True)
    x, w = torch.randn(4, 8), torch.randn(8, 16)
    compiled(x, w)
    table = take_census(compiled, (x, w), iterations=2)
    eager = take_census(body, (x, w), iterations=2)
    assert (table.compiled, eager.compiled) == (2, 0)
    assert table.rows == eager.rows
    verdict = judge_work(eager, table)
    assert verdict.compiled
    assert verdict.reasons[-1].startswith("compiled code: 2 calls into torch.compile'd code")


def test_a_compiled_module_is_named_and_counted_like_the_module_it_wraps() -> None:
    block = Block()
    x = torch.randn(4, 8)
    compiled_step = training_step(torch.compile(block, backend="eager"), x)  # type: ignore[arg-type]
    compiled_step()
    table = take_census(compiled_step)
    assert table.compiled == 1
    assert table.rows == take_census(training_step(block, x)).rows
