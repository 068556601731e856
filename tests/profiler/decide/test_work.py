"""The work census as data and the work verdict: pure, synthetic tables, exact answers."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from tprof_engine.decide.gates.work import judge_work
from tprof_engine.model.errors import BaselineError, ConfigError
from tprof_engine.model.tensors import (
    copy_direction,
    distinct_elements,
    first_difference,
    format_tensor,
    format_tensor_list,
    is_host_sync,
    split_signature,
)
from tprof_engine.model.work import DeviceCopy, HostSync, WorkRow, WorkTable

LINEAR1 = "encoder.layers.0.linear1"


def row(op: str, module: str = LINEAR1, phase: str = "forward", **figures: Any) -> WorkRow:
    values: dict[str, Any] = {
        "calls": 1,
        "flops": 0,
        "bytes_read": 0,
        "bytes_written": 0,
        "dtypes": ("float32",),
        "signature": "",
    }
    values.update(figures)
    return WorkRow(op=op, module=module, phase=phase, **values)  # type: ignore[arg-type]


def encoder_table(hidden: int = 2048, **extra: Any) -> WorkTable:
    """A feed-forward block's census: its matmul, a copy-free activation and an optimizer op."""
    return WorkTable(
        rows=(
            row(
                "aten::addmm",
                flops=2 * 256 * 512 * hidden,
                bytes_read=4 * 256 * 512,
                bytes_written=4 * 256 * hidden,
                signature=f"f32[256, {hidden}], f32[{hidden}, 512]ᵀ",
            ),
            row(
                "aten::relu",
                module="encoder.layers.0",
                bytes_read=4 * 256 * hidden,
                bytes_written=4 * 256 * hidden,
                signature=f"f32[256, {hidden}]",
            ),
            row(
                "aten::mm",
                phase="backward",
                flops=2 * 256 * 512 * hidden,
                bytes_read=4 * 256 * 512,
                bytes_written=4 * 512 * hidden,
                signature="f32[256, 512]",
            ),
            row(
                "aten::add_",
                module="",
                bytes_read=8 * 512 * hidden,
                bytes_written=4 * 512 * hidden,
                signature=f"f32[{hidden}, 512], f32[{hidden}, 512]",
            ),
        ),
        **extra,
    )


# --------------------------------------------------------------------------- the table as data


def test_a_table_round_trips_through_its_dict_and_json() -> None:
    table = WorkTable(
        rows=encoder_table().rows,
        copies=(
            DeviceCopy(
                op="aten::_to_copy",
                module="",
                phase="forward",
                direction="cpu→cuda",
                calls=2,
                bytes=4096,
            ),
        ),
        syncs=(
            HostSync(
                op="aten::_local_scalar_dense", module="", phase="forward", device="cuda", calls=1
            ),
        ),
        compiled=3,
        iterations=2,
        census_us=1234.5,
    )
    data = json.loads(json.dumps(table.to_dict()))
    assert WorkTable.from_dict(data) == table
    assert "census_us" not in data


def test_rows_are_kept_in_module_then_phase_then_op_order_whatever_the_input_order() -> None:
    rows = encoder_table().rows
    assert WorkTable(rows=rows[::-1]) == WorkTable(rows=rows)
    assert [(r.module, r.phase, r.op) for r in WorkTable(rows=rows[::-1]).rows] == [
        ("", "forward", "aten::add_"),
        ("encoder.layers.0", "forward", "aten::relu"),
        (LINEAR1, "backward", "aten::mm"),
        (LINEAR1, "forward", "aten::addmm"),
    ]


def test_census_time_is_not_part_of_the_work() -> None:
    assert encoder_table(census_us=1.0) == encoder_table(census_us=2.0)
    assert encoder_table(census_us=1.0).differences(encoder_table(census_us=2.0)) == ()


def test_totals_add_flops_and_read_plus_written_bytes() -> None:
    table = WorkTable(
        rows=(
            row("aten::mm", flops=10, bytes_read=3, bytes_written=4),
            row("aten::add", flops=0, bytes_read=5, bytes_written=6),
        )
    )
    assert (table.total_flops, table.total_bytes) == (10, 18)


def test_differences_say_what_changed_in_words() -> None:
    before = encoder_table()
    kept = [r for r in before.rows if r.op not in ("aten::mm", "aten::addmm")]
    addmm = row(
        "aten::addmm",
        flops=7,
        bytes_read=4 * 256 * 512,
        bytes_written=4 * 256 * 2048,
        signature="f32[256, 2048], f32[2048, 512]ᵀ",
    )
    after = WorkTable(rows=(*kept, addmm, row("aten::clone")), compiled=1)
    assert before.differences(after) == (
        "calls into compiled code 0 → 1",
        f"aten::mm in {LINEAR1} (backward) only in the first table",
        f"aten::addmm in {LINEAR1} (forward): flops 536,870,912 → 7",
        f"aten::clone in {LINEAR1} (forward) only in the other table",
    )


def test_a_repeated_row_is_refused() -> None:
    with pytest.raises(ValueError, match=r"holds aten::mm in x \(forward\) more than once"):
        WorkTable(rows=(row("aten::mm", module="x"), row("aten::mm", module="x", calls=2)))


def _data() -> dict[str, Any]:
    return copy.deepcopy(encoder_table().to_dict())


def _broken(path: str, value: Any) -> dict[str, Any]:
    data = _data()
    *parents, last = path.split(".")
    target: Any = data
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return data


_DELETE = object()


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("rows.3.flops", -1, "'work.rows[3].flops' must be an integer >= 0 (got -1)"),
        ("rows.0.calls", True, "'work.rows[0].calls' must be an integer >= 0 (got True)"),
        ("rows.0.calls", 1.0, "'work.rows[0].calls' must be an integer >= 0 (got 1.0)"),
        (
            "rows.1.phase",
            "sideways",
            "'work.rows[1].phase' must be 'forward', 'backward', 'forward hook', "
            "'forward pre-hook' or an optimizer's step such as 'AdamW.step' (got 'sideways')",
        ),
        ("rows.1.op", "", "'work.rows[1].op' must be a non-empty string (got '')"),
        (
            "rows.2.dtypes",
            ["int64", "float32"],
            "'work.rows[2].dtypes' must be a sorted list of distinct names "
            "(got ['int64', 'float32'])",
        ),
        ("rows.2.varies", "no", "'work.rows[2].varies' must be true or false (got 'no')"),
        ("rows.0.bytes_read", _DELETE, "'work.rows[0]' is missing 'bytes_read'"),
        ("rows.0.speed", 3, "'work.rows[0]' has unknown keys 'speed'"),
        ("rows", {}, "'work.rows' must be a list (got a dict)"),
        ("iterations", 0, "'work.iterations' must be an integer >= 1 (got 0)"),
        ("compiled", None, "'work.compiled' must be an integer >= 0 (got None)"),
        ("syncs", [[1]], "'work.syncs[0]' must be an object (got a list)"),
        (
            "copies",
            [{"op": "aten::copy_"}],
            "'work.copies[0]' is missing 'module', 'phase', 'direction', 'calls', 'bytes'",
        ),
    ],
)
def test_a_malformed_census_is_an_error_naming_the_key_and_the_value(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(BaselineError) as caught:
        WorkTable.from_dict(_broken(path, value))
    assert str(caught.value) == message


def test_a_repeated_row_in_a_file_names_both_places() -> None:
    data = _data()
    data["rows"].append(dict(data["rows"][0]))
    with pytest.raises(BaselineError) as caught:
        WorkTable.from_dict(data, where="baseline.work")
    assert str(caught.value) == (
        "'baseline.work.rows[4]' repeats aten::add_ at top level (forward) of "
        "'baseline.work.rows[0]'"
    )


def test_a_census_that_is_not_an_object_is_an_error() -> None:
    with pytest.raises(BaselineError, match=r"^'work' must be an object \(got \[\]\)$"):
        WorkTable.from_dict([])


# --------------------------------------------------------------------------- pure facts of ops


@pytest.mark.parametrize(
    ("shape", "strides", "text"),
    [
        ((4, 8), (8, 1), "f32[4, 8]"),
        ((8, 16), (1, 8), "f32[8, 16]ᵀ"),
        ((2, 3, 4), (1, 2, 6), "f32[2, 3, 4]ᵀ"),
        ((4, 8), (0, 1), "f32[4, 8] (strides 0, 1)"),
        ((64, 512), (1024, 1), "f32[64, 512] (strides 1024, 1)"),
        ((1, 5), (99, 1), "f32[1, 5]"),  # a size-1 dimension's stride doesn't matter
        ((), (), "f32[]"),
    ],
)
def test_a_tensor_reads_as_dtype_shape_and_layout(
    shape: tuple[int, ...], strides: tuple[int, ...], text: str
) -> None:
    assert format_tensor("float32", shape, strides) == text


def test_dtype_codes_are_short_and_unknown_dtypes_keep_their_name() -> None:
    assert format_tensor("bfloat16", (2,), (1,)) == "bf16[2]"
    assert format_tensor("float8_e4m3fn", (2,), (1,)) == "float8_e4m3fn[2]"


def test_a_tensor_list_groups_equal_neighbours_and_abbreviates_long_lists() -> None:
    assert format_tensor_list(["f32[64]"] * 3 + ["f32[8]"]) == "[f32[64]×3, f32[8]]"
    many = [f"f32[{i}]" for i in range(10)]
    assert format_tensor_list(many) == (
        "[f32[0], f32[1], f32[2], f32[3], f32[4], f32[5], f32[6], f32[7], … 10 tensors]"
    )


def test_distinct_elements_count_a_broadcast_dimension_once() -> None:
    assert distinct_elements((4, 16), (0, 1)) == 16
    assert distinct_elements((4, 16), (16, 1)) == 64
    assert distinct_elements((4, 0), (0, 1)) == 0
    assert distinct_elements((), ()) == 1


def test_signatures_split_at_top_level_commas_only() -> None:
    sig = "[f32[64, 64]×2, f32[64]], f32[4, 8] (strides 1, 4), i64[]"
    assert split_signature(sig) == ["[f32[64, 64]×2, f32[64]]", "f32[4, 8] (strides 1, 4)", "i64[]"]
    assert split_signature("") == []


@pytest.mark.parametrize(
    ("a", "b", "said"),
    [
        ("f32[256, 2048], f32[2048, 512]ᵀ", "f32[256, 2048], f32[2048, 512]ᵀ", ""),
        (
            "f32[256, 2048], f32[2048, 512]ᵀ",
            "f32[256, 2250], f32[2250, 512]ᵀ",
            "input f32[256, 2048] → f32[256, 2250], input f32[2048, 512]ᵀ → f32[2250, 512]ᵀ",
        ),
        (
            "self=f32[512], mat1=f32[8, 64], mat2=f32[64, 512]ᵀ",
            "self=f32[563], mat1=f32[8, 64], mat2=f32[64, 563]ᵀ",
            "self f32[512] → f32[563], mat2 f32[64, 512]ᵀ → f32[64, 563]ᵀ",
        ),
        ("a=f32[1], b=f32[2]", "a=f32[1]", "b f32[2] removed"),
        ("f32[4, 8], f32[8, 16]ᵀ", "f32[4, 8], f32[8, 16]", "input f32[8, 16]ᵀ → f32[8, 16]"),
        ("f32[4, 8]", "f32[4, 8], f32[8]", "input f32[8] added"),
        ("f32[4, 8], f32[8]", "f32[4, 8]", "input f32[8] removed"),
        ("f32[4]", "f32[4] ", "signature 'f32[4]' → 'f32[4] '"),
    ],
)
def test_first_difference_names_each_input_that_differs_by_its_argument(
    a: str, b: str, said: str
) -> None:
    assert first_difference(a, b) == said


@pytest.mark.parametrize(
    ("read", "written", "direction"),
    [
        (["cpu"], ["cuda"], "cpu→cuda"),  # x.to("cuda")
        (["cuda", "cpu"], ["cuda"], "cpu→cuda"),  # dst.copy_(src): dst is read in place too
        (["cuda"], ["cpu"], "cuda→cpu"),
        (["cuda", "cuda"], ["cuda"], None),
        (["meta"], ["cpu"], None),
        (["cpu"], ["cuda", "cpu"], None),  # writes to two devices: not one copy
        (["cpu"], [], None),  # a view writes nothing
    ],
)
def test_a_copy_is_a_read_on_another_device_type_than_the_write(
    read: list[str], written: list[str], direction: str | None
) -> None:
    assert copy_direction(read, written) == direction


@pytest.mark.parametrize(
    ("op", "device", "sync"),
    [
        ("aten::_local_scalar_dense", "cpu", True),
        ("aten::_local_scalar_dense", "cuda", True),
        ("aten::nonzero", "cpu", False),
        ("aten::nonzero", "cuda", True),
        ("aten::masked_select", "cuda", True),
        ("aten::add", "cuda", False),
    ],
)
def test_host_syncs_are_value_reads_anywhere_and_data_dependent_sizes_on_a_device(
    op: str, device: str, sync: bool
) -> None:
    assert is_host_sync(op, device) is sync


# --------------------------------------------------------------------------- the verdict


def test_equal_work_is_unchanged_with_no_reasons() -> None:
    verdict = judge_work(encoder_table(), encoder_table())
    assert (verdict.verdict, verdict.reasons) == ("unchanged", ())
    assert {r.status for r in verdict.rows} == {"unchanged"}
    assert not any(r.gated for r in verdict.rows)


def test_a_wider_layer_regresses_naming_op_module_phase_measure_and_input() -> None:
    verdict = judge_work(encoder_table(2048), encoder_table(2250))
    assert verdict.verdict == "regressed"
    assert verdict.reasons == (
        "total FLOPs +9.9% (1,073,741,824 → 1,179,648,000)",
        "total bytes +9.4% (24,117,248 → 26,392,576)",
        # Largest share of the test's total first; the matmul's bytes grew 0.9 %: under the floor.
        "aten::add_ at top level (forward): bytes +9.9% — input f32[2048, 512] → f32[2250, 512]",
        "aten::mm in encoder.layers.0.linear1 (backward): FLOPs +9.9%, bytes +8.8%",
        "aten::addmm in encoder.layers.0.linear1 (forward): FLOPs +9.9% — "
        "input f32[256, 2048] → f32[256, 2250], input f32[2048, 512]ᵀ → f32[2250, 512]ᵀ",
        "aten::relu in encoder.layers.0 (forward): bytes +9.9% — "
        "input f32[256, 2048] → f32[256, 2250]",
    )
    assert (verdict.base_flops, verdict.cur_flops) == (1_073_741_824, 1_179_648_000)
    statuses = {r.op: r.status for r in verdict.rows}
    assert statuses == dict.fromkeys(
        ["aten::add_", "aten::addmm", "aten::mm", "aten::relu"], "increased"
    )


def test_one_op_growing_fails_the_test_even_when_the_total_does_not_move() -> None:
    base = WorkTable(
        rows=(
            row("aten::mm", flops=1000, signature="f32[10, 10]"),
            row("aten::bmm", flops=1000, signature="f32[2, 10, 10]"),
        )
    )
    cur = WorkTable(
        rows=(
            row("aten::mm", flops=1100, signature="f32[10, 11]"),
            row("aten::bmm", flops=900, signature="f32[2, 10, 9]"),
        )
    )
    verdict = judge_work(base, cur)
    assert verdict.verdict == "regressed"
    assert verdict.reasons == (
        f"aten::mm in {LINEAR1} (forward): FLOPs +10.0% — input f32[10, 10] → f32[10, 11]",
    )
    assert [r.status for r in verdict.rows] == ["decreased", "increased"]


def test_a_new_copy_regresses_with_its_bytes_and_share_of_the_test() -> None:
    base = encoder_table()
    clone = row(
        "aten::clone",
        module="encoder.layers.0",
        bytes_read=262_144,
        bytes_written=262_144,
        signature="f32[64, 1024]ᵀ",
    )
    verdict = judge_work(base, WorkTable(rows=(*base.rows, clone)))
    assert verdict.verdict == "regressed"
    assert verdict.reasons == (
        "total bytes +2.2% (24,117,248 → 24,641,536)",
        "aten::clone in encoder.layers.0 (forward): new, bytes +524,288 (+2.2% of the test's) "
        "— input f32[64, 1024]ᵀ",
    )
    assert [r.status for r in verdict.rows if r.op == "aten::clone"] == ["added"]


def test_work_below_the_floor_is_a_change_not_a_regression() -> None:
    base = encoder_table()
    small = row(
        "aten::clone", module="encoder.layers.0", bytes_read=4, bytes_written=4, signature="f32[1]"
    )
    verdict = judge_work(base, WorkTable(rows=(*base.rows, small)))
    assert verdict.verdict == "changed"
    assert verdict.reasons == (
        "aten::clone in encoder.layers.0 (forward): new, below the floor, bytes +8 — input f32[1]",
    )
    assert judge_work(base, WorkTable(rows=(*base.rows, small)), floor=0.0).verdict == "regressed"


def test_less_work_is_improved() -> None:
    verdict = judge_work(encoder_table(2048), encoder_table(1024))
    assert verdict.verdict == "improved"
    assert verdict.reasons[0] == "total FLOPs -50.0% (1,073,741,824 → 536,870,912)"


def test_a_cheaper_replacement_in_one_module_nets_out_and_does_not_regress() -> None:
    norm = row("aten::native_layer_norm", module="norm1", bytes_read=1000, bytes_written=1000)
    other = row("aten::mm", module="", flops=100, bytes_read=100, bytes_written=100)
    parts = (
        row("aten::mean", module="norm1", bytes_read=500, bytes_written=4),
        row("aten::div", module="norm1", bytes_read=500, bytes_written=500),
    )
    verdict = judge_work(WorkTable(rows=(norm, other)), WorkTable(rows=(*parts, other)))
    assert verdict.verdict == "improved"
    assert verdict.reasons[0] == "total bytes -22.5% (2,200 → 1,704)"
    by_op = {r.op: r.status for r in verdict.rows}
    assert by_op == {
        "aten::mm": "unchanged",
        "aten::native_layer_norm": "deleted",
        "aten::mean": "added",
        "aten::div": "added",
    }
    assert (verdict.base_bytes, verdict.cur_bytes) == (2200, 1704)


def test_a_dearer_replacement_in_one_module_regresses_naming_the_new_ops() -> None:
    norm = row("aten::native_layer_norm", module="norm1", bytes_read=500, bytes_written=500)
    other = row("aten::mm", module="", flops=100, bytes_read=600, bytes_written=600)
    parts = (
        row("aten::mean", module="norm1", bytes_read=500, bytes_written=4),
        row("aten::div", module="norm1", bytes_read=500, bytes_written=500),
    )
    verdict = judge_work(WorkTable(rows=(norm, other)), WorkTable(rows=(*parts, other)))
    assert verdict.verdict == "regressed"
    # One line for the replacement, naming the new ops; not each new op's own growth.
    assert verdict.reasons == (
        "total bytes +22.9% (2,200 → 2,704)",
        "in norm1 (forward): aten::native_layer_norm gone, 2 new ops (aten::div, aten::mean), "
        "bytes +504 net (+22.9% of the test's)",
    )


def test_a_new_op_in_another_module_does_not_net_against_a_gone_one() -> None:
    gone = row("aten::relu", module="a", bytes_read=500, bytes_written=500)
    other = row("aten::mm", module="", flops=100, bytes_read=500, bytes_written=500)
    new = row("aten::gelu", module="b", bytes_read=500, bytes_written=500)
    verdict = judge_work(WorkTable(rows=(gone, other)), WorkTable(rows=(new, other)))
    assert verdict.verdict == "regressed"
    assert "aten::gelu in b (forward): new, bytes +1,000 (+50.0% of the test's)" in verdict.reasons


def test_equal_work_with_another_signature_or_dtype_is_changed() -> None:
    base = WorkTable(rows=(row("aten::mm", flops=64, bytes_read=32, signature="f32[4, 8]"),))
    transposed = WorkTable(rows=(row("aten::mm", flops=64, bytes_read=32, signature="f32[4, 8]ᵀ"),))
    verdict = judge_work(base, transposed)
    assert (verdict.verdict, verdict.reasons) == (
        "changed",
        (f"aten::mm in {LINEAR1} (forward): input f32[4, 8] → f32[4, 8]ᵀ",),
    )
    assert verdict.rows[0].status == "changed"
    ints = WorkTable(
        rows=(row("aten::mm", flops=64, bytes_read=32, dtypes=("int32",), signature="i32[4, 8]"),)
    )
    assert judge_work(base, ints).reasons == (
        f"aten::mm in {LINEAR1} (forward): dtypes float32 → int32 — input f32[4, 8] → i32[4, 8]",
    )


def test_more_calls_at_equal_work_are_a_change() -> None:
    base = WorkTable(rows=(row("aten::view", calls=2),))
    verdict = judge_work(base, WorkTable(rows=(row("aten::view", calls=3),)))
    assert (verdict.verdict, verdict.reasons) == (
        "changed",
        (f"aten::view in {LINEAR1} (forward): calls 2 → 3",),
    )


def test_rows_whose_work_varies_are_reported_and_never_gated() -> None:
    steady = row("aten::mm", module="", flops=1000, bytes_read=10, bytes_written=10)
    base = WorkTable(rows=(steady, row("aten::nonzero", bytes_written=80, varies=True)))
    cur = WorkTable(rows=(steady, row("aten::nonzero", bytes_written=8000)))
    verdict = judge_work(base, cur)
    assert verdict.verdict == "unchanged"
    assert verdict.reasons == (
        f"aten::nonzero in {LINEAR1} (forward): work varies between census rounds "
        "(FLOPs 0 → 0, bytes 80 → 8,000); not gated",
    )
    assert (verdict.base_bytes, verdict.cur_bytes) == (20, 20)
    assert [r.status for r in verdict.rows] == ["unchanged", "varies"]


def test_syncs_and_copies_that_change_are_named() -> None:
    sync = HostSync(
        op="aten::_local_scalar_dense", module="", phase="forward", device="cuda", calls=1
    )
    base = encoder_table()
    verdict = judge_work(base, encoder_table(syncs=(sync,)))
    assert verdict.verdict == "changed"
    assert verdict.reasons == (
        "host syncs [] → [aten::_local_scalar_dense at top level (forward) on cuda ×1]",
    )


def test_compiled_code_on_either_side_is_said_not_counted_as_zero_work() -> None:
    verdict = judge_work(encoder_table(compiled=2), encoder_table(compiled=2))
    assert verdict.verdict == "unchanged"
    assert verdict.compiled
    assert verdict.reasons == (
        "compiled code: 2 calls into torch.compile'd code in this census (2 calls in the "
        "baseline's) ran eagerly for it; the census counts their eager ops and can't see "
        "inside compiled regions (fused kernels, generated code)",
    )
    assert judge_work(encoder_table(), encoder_table(compiled=1)).verdict == "changed"


def test_a_negative_floor_and_different_iterations_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"^'floor' must be >= 0 \(got -0.1\)$"):
        judge_work(encoder_table(), encoder_table(), floor=-0.1)
    with pytest.raises(ConfigError, match="different iterations per round"):
        judge_work(encoder_table(), encoder_table(iterations=2))


def test_a_layer_that_grew_past_its_modules_floor_is_named_though_under_the_tests() -> None:
    # Eight layers, two 5 % wider: each moves 0.6 % of the test's FLOPs, together 1.25 %.
    layers = [row("aten::mm", module=f"layers.{i}", flops=1000) for i in range(8)]
    wider = [
        row("aten::mm", module=f"layers.{i}", flops=1050 if i in (2, 5) else 1000) for i in range(8)
    ]
    verdict = judge_work(WorkTable(rows=tuple(layers)), WorkTable(rows=tuple(wider)))
    assert verdict.verdict == "regressed"
    assert verdict.reasons == (
        "total FLOPs +1.2% (8,000 → 8,100)",
        "aten::mm in layers.2 (forward): FLOPs +5.0% (0.62% of the test's)",
        "aten::mm in layers.5 (forward): FLOPs +5.0% (0.62% of the test's)",
    )


def test_when_only_the_totals_pass_the_floor_the_largest_growth_is_named() -> None:
    # Eight ops at the top level (whose module is the whole test), two 5 % dearer: each moves
    # 0.6 % of the test's FLOPs, together 1.25 %.
    layers = [row(f"aten::op{i}", module="", flops=1000) for i in range(8)]
    wider = [row(f"aten::op{i}", module="", flops=1050 if i in (2, 5) else 1000) for i in range(8)]
    verdict = judge_work(WorkTable(rows=tuple(layers)), WorkTable(rows=tuple(wider)))
    assert verdict.verdict == "regressed"
    assert verdict.reasons == (
        "total FLOPs +1.2% (8,000 → 8,100)",
        "largest growth: aten::op2 at top level (forward): FLOPs +5.0%",
        "largest growth: aten::op5 at top level (forward): FLOPs +5.0%",
    )
