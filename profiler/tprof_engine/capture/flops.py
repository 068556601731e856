"""The census's FLOP formulas: torch's registry, and torch's own formulas applied to the ops
that registry lacks (docs/design.md §8, "FLOPs").

torch's registry counts the matrix work of ``mm``, ``bmm``, convolutions and the CUDA
attention kernels.  The ops a CPU run dispatches to instead (the CPU flash attention and its
backward, oneDNN's LSTM layer, the fused ``nn.MultiheadAttention`` and
``nn.TransformerEncoderLayer`` inference paths) are counted here with the same formulas, so
that switching an attention implementation (``sdpa`` → ``eager``) reads as no change in
FLOPs.  An op that does matrix work and still has no formula counts 0 FLOPs, and the census
says so (:func:`tprof_engine.model.work.flops_unknown`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Final

import torch

from tprof_engine.capture.torch_api import OpOverload, flop_registry, mm_flop, sdpa_flop_count

Formula = Callable[..., Any]
_aten = torch.ops.aten


def formula_for(func: OpOverload) -> Formula | None:
    """The FLOP formula of an op overload, called as torch's are: ``f(*args, out_val=out,
    **kwargs)``; None for an op with no matrix work to count."""
    found = flop_registry.get(func._overloadpacket)
    if found is not None:
        return found  # type: ignore[no-any-return]
    return _EXTRA.get(func._schema.name)


def _registry(packet_name: str) -> Formula | None:
    packet = getattr(_aten, packet_name, None)
    return None if packet is None else flop_registry.get(packet)


def _shape(t: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in t.shape)


def _rows(t: Any) -> int:
    """Rows of a tensor seen as a matrix over its last dimension."""
    shape = _shape(t)
    return math.prod(shape[:-1])


def _mv(mat: Any, vec: Any, *_: Any, **__: Any) -> int:
    n, m = _shape(mat)
    return int(mm_flop((n, m), (m, 1)))


def _addmv(_self: Any, mat: Any, vec: Any, *_: Any, **__: Any) -> int:
    return _mv(mat, vec)


def _dot(a: Any, b: Any, *_: Any, **__: Any) -> int:
    (n,) = _shape(a)
    return int(mm_flop((1, n), (n, 1)))


def _addbmm(_self: Any, batch1: Any, batch2: Any, *_: Any, out_val: Any = None, **__: Any) -> int:
    bmm = flop_registry[_aten.bmm]
    return int(bmm(batch1, batch2, out_val=out_val))


def _rnn_layer(x: Any, w_ih: Any, w_hh: Any, *_: Any, **__: Any) -> int:
    """oneDNN's RNN layer (LSTM, GRU): per step and row, the input and hidden projections."""
    steps = _rows(x)
    gates, inputs = _shape(w_ih)
    hidden = _shape(w_hh)[1]
    return int(
        mm_flop((steps, inputs), (inputs, gates)) + mm_flop((steps, hidden), (hidden, gates))
    )


def _rnn_layer_backward(x: Any, w_ih: Any, w_hh: Any, *_: Any, **__: Any) -> int:
    """Each projection's gradients with respect to its input and its weight: two matmuls."""
    return 2 * _rnn_layer(x, w_ih, w_hh)


def _attention(batch: int, heads: int, lq: int, lk: int, embed: int) -> int:
    head = embed // heads
    return int(
        sdpa_flop_count(
            (batch, heads, lq, head), (batch, heads, lk, head), (batch, heads, lk, head)
        )
    )


def _mha_flops(query: Any, key: Any, embed: int, heads: int) -> int:
    """The fused multi-head attention: q, k, v projections, attention, output projection."""
    batch, lq = _shape(query)[0], _shape(query)[-2]
    lk = _shape(key)[-2]
    project = mm_flop((batch * lq, embed), (embed, embed))
    project_kv = 2 * mm_flop((batch * lk, embed), (embed, embed))
    return int(2 * project + project_kv + _attention(batch, heads, lq, lk, embed))


def _native_mha(q: Any, k: Any, _v: Any, embed: int, heads: int, *_: Any, **__: Any) -> int:
    return _mha_flops(q, k, int(embed), int(heads))


def _encoder_layer(src: Any, embed: int, heads: int, *args: Any, **kwargs: Any) -> int:
    """``nn.TransformerEncoderLayer``'s fused inference path: attention and its two-layer MLP."""
    ffn_in = args[11] if len(args) > 11 else kwargs["ffn_weight_1"]
    width = _shape(ffn_in)[0]
    tokens = _rows(src)
    mlp = mm_flop((tokens, embed), (embed, width)) + mm_flop((tokens, width), (width, embed))
    return int(_mha_flops(src, src, int(embed), int(heads)) + mlp)


def _extra() -> dict[str, Formula]:
    aliases: Sequence[tuple[str, str]] = (
        ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention"),
        (
            "_scaled_dot_product_flash_attention_for_cpu_backward",
            "_scaled_dot_product_flash_attention_backward",
        ),
        ("_scaled_dot_product_fused_attention_overrideable", "_scaled_dot_product_flash_attention"),
        (
            "_scaled_dot_product_fused_attention_overrideable_backward",
            "_scaled_dot_product_flash_attention_backward",
        ),
        ("_scaled_dot_product_attention_math_for_mps", "_scaled_dot_product_flash_attention"),
        ("_int_mm", "mm"),
    )
    found = {f"aten::{op}": f for op, like in aliases if (f := _registry(like)) is not None}
    own: dict[str, Formula] = {
        "aten::mv": _mv,
        "aten::addmv": _addmv,
        "aten::dot": _dot,
        "aten::addbmm": _addbmm,
        "aten::mkldnn_rnn_layer": _rnn_layer,
        "aten::mkldnn_rnn_layer_backward": _rnn_layer_backward,
        "aten::_native_multi_head_attention": _native_mha,
        "aten::_transformer_encoder_layer_fwd": _encoder_layer,
    }
    return found | own


_EXTRA: Final = _extra()
