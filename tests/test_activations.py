"""Activation memory and checkpointing of transformers (issue 24, item 5).

Reference: Korthikanti et al., "Reducing Activation Recomputation in Large Transformer
Models", arXiv:2205.05198, §4.1: a GPT layer keeps s·b·h·(34 + 5·a·s/h) bytes of 16-bit
activations (no tensor or sequence parallelism); §5: selective recomputation keeps 34·sbh.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from costmodel import (
    TransformerShape,
    activation_bytes,
    get_workload,
    iteration_time,
    memory_per_rank,
    preset,
    with_activation_checkpointing,
)


def _gpt3_layer_workload(layers: int, batch: int):
    # GPT-3 175B's layer (Brown et al. 2020, Table 2.1: h 12288, 96 heads, s 2048)
    shape = TransformerShape(layers, 12288, 96, 2048, 4 * 12288, vocab=0, dropout=True)
    w = get_workload("gpt2", batch, dtype_bytes=2)
    return dataclasses.replace(w, transformer=shape)


@pytest.mark.parametrize("b", [1, 4])
def test_a_gpt3_layer_keeps_korthikantis_bytes(b):
    s, h, a = 2048, 12288, 96
    one = float(activation_bytes(_gpt3_layer_workload(1, b), flash_attention=False))
    two = float(activation_bytes(_gpt3_layer_workload(2, b), flash_attention=False))
    assert two - one == pytest.approx(s * b * h * (34 + 5 * a * s / h), rel=1e-12)
    # with flash attention (or selective recomputation) the s² term is not kept: 34·sbh
    flash = np.diff([float(activation_bytes(_gpt3_layer_workload(L, b))) for L in (1, 2)])[0]
    assert flash == pytest.approx(34 * s * b * h, rel=1e-12)
    sel = with_activation_checkpointing(_gpt3_layer_workload(1, b), "selective")
    sel2 = with_activation_checkpointing(_gpt3_layer_workload(2, b), "selective")
    per_layer = float(activation_bytes(sel2, flash_attention=False)) - float(
        activation_bytes(sel, flash_attention=False)
    )
    assert per_layer == pytest.approx(34 * s * b * h, rel=1e-12)
    # full recomputation keeps each layer's input, 2·sbh
    full = [with_activation_checkpointing(_gpt3_layer_workload(L, b), "full") for L in (1, 2)]
    assert float(activation_bytes(full[1]) - activation_bytes(full[0])) == pytest.approx(
        2 * s * b * h, rel=1e-12
    )


def test_activations_scale_with_the_micro_batch_and_only_transformers_have_them():
    w = get_workload("llama2_7b", 4, dtype_bytes=2)
    a4 = float(activation_bytes(w))
    assert float(activation_bytes(w, 8)) == pytest.approx(2 * a4)
    # 4 sequences of 4,096 tokens of Llama-2-7B: tens of GB (issue 24 counted none)
    assert 40e9 < a4 < 100e9
    from costmodel import accumulated_workload

    assert float(activation_bytes(accumulated_workload(w, 4))) == pytest.approx(a4)  # per micro
    assert float(activation_bytes(get_workload("resnet50", 64))) == 0.0
    m = memory_per_rank(w, "fsdp", 8)
    assert float(m.activation_bytes) == pytest.approx(a4)
    assert float(m.total_bytes) > 16 * w.total_params / 8 + a4 * 0.999


def test_full_checkpointing_costs_one_more_forward_and_fits_where_none_does_not():
    w = get_workload("llama2_7b", 4, dtype_bytes=2)
    p = preset("ib-hdr-200g,nvlink-a100", "a100", compute_dtype="bf16", model_kind=w.kind)
    full = with_activation_checkpointing(w, "full")
    b0 = iteration_time(p, w, "fsdp", 8, ranks_per_node=8)
    b1 = iteration_time(p, full, "fsdp", 8, ranks_per_node=8)
    assert float(b1.backward_s) == pytest.approx(
        float(b0.backward_s) + float(b0.forward_s), rel=1e-9
    )
    assert float(b1.forward_s) == pytest.approx(float(b0.forward_s), rel=1e-12)
    import tuner

    kw = dict(max_workers=64, ranks_per_node=8, optimizer_state_factor=2.0, refine=False,
              device_memory_bytes=80 * 2**30)  # fmt: skip
    rec = tuner.recommend(p, full, **kw)
    assert rec.config.memory_bytes_per_rank <= 80 * 2**30
    with pytest.raises(tuner.InfeasibleError, match="activations"):
        tuner.recommend(p, w.with_batch_size(16), **kw)
    with pytest.raises(ValueError, match="not a transformer"):
        with_activation_checkpointing(get_workload("resnet50"), "selective")
    with pytest.raises(ValueError, match="unknown activation checkpointing"):
        with_activation_checkpointing(w, "some")
