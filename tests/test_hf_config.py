"""Workloads from Hugging Face config.json files: published parameter counts, FLOPs, errors.

Published parameter counts (sources in tests/data/hf/README.md):

- openai-community/gpt2: 124,439,808 (HF model page / ``num_parameters()``);
- google-bert/bert-base-uncased: 109,482,240 for ``BertModel`` (encoder + pooler);
- meta-llama/Llama-2-7b-hf: 6,738,415,616 (HF model page, "6.74B");
- mistralai/Mistral-7B-v0.1: 7,241,732,096 (HF model page, "7.24B");
- Qwen/Qwen2-0.5B: 494,032,768 (HF model page, "494M");
- TinyLlama/TinyLlama-1.1B-intermediate-step-1431k-3T: 1,100,048,384.

FLOPs: forward ≈ 2·N + 4·L·d·T per token (Kaplan et al. arXiv:2001.08361 Table 1;
PaLM arXiv:2204.02311 App. B), N the non-embedding parameters plus an untied
LM head's matmul.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import costmodel
from costmodel import InputFileError, get_workload, load_layers, workload_from_hf_config

DATA = pathlib.Path(__file__).parent / "data" / "hf"

PUBLISHED = {
    "gpt2.json": 124_439_808,
    "bert-base-uncased.json": 109_482_240,  # BertModel: tensors under "bert."
    "llama-2-7b-hf.json": 6_738_415_616,
    "mistral-7b-v0.1.json": 7_241_732_096,
    "qwen2-0.5b.json": 494_032_768,
    "tinyllama-1.1b.json": 1_100_048_384,
}


def _config(name: str) -> dict:
    return json.loads((DATA / name).read_text())


def _model_params(w) -> int:
    # BERT's published count is BertModel's; the workload adds the pre-training heads.
    return sum(
        int(c)
        for n, c in zip(w.tensor_names, w.param_counts, strict=True)
        if not n.startswith("cls.")
    )


@pytest.mark.parametrize("file", sorted(PUBLISHED))
def test_parameter_counts_match_published_within_half_a_percent(file):
    w = workload_from_hf_config(DATA / file, batch_size=2)
    assert abs(_model_params(w) / PUBLISHED[file] - 1) < 0.005
    # The shapes determine the count exactly; the band is the requirement.
    assert _model_params(w) == PUBLISHED[file]
    assert w.batch_size == 2 and w.dtype_bytes == 4 and w.step_time_s is None
    assert str(DATA / file) in w.source


def test_gpt2_and_bert_configs_give_the_zoo_workloads_exactly():
    for file, zoo in (("gpt2.json", "gpt2"), ("bert-base-uncased.json", "bert_base")):
        w, z = workload_from_hf_config(DATA / file, 8), get_workload(zoo, 8)
        assert w.tensor_names == z.tensor_names
        np.testing.assert_array_equal(w.param_counts, z.param_counts)
        np.testing.assert_array_equal(w.fwd_flops, z.fwd_flops)


def test_llama2_config_gives_the_zoo_llama2_exactly():
    assert "llama2_7b" in costmodel.WORKLOAD_NAMES  # renamed or dropped: fail, not skip
    w, z = workload_from_hf_config(DATA / "llama-2-7b-hf.json"), get_workload("llama2_7b", 1)
    assert w.tensor_names == z.tensor_names
    np.testing.assert_array_equal(w.param_counts, z.param_counts)
    np.testing.assert_allclose(w.fwd_flops, z.fwd_flops, rtol=1e-12)


def _decoder_palm_forward_per_token(cfg: dict, t: int) -> float:
    d, layers, ff, vocab = (
        cfg["hidden_size"],
        cfg["num_hidden_layers"],
        cfg["intermediate_size"],
        cfg["vocab_size"],
    )
    kv = cfg["num_key_value_heads"] * d // cfg["num_attention_heads"]
    per_layer = 2 * d * d + 2 * d * kv + 3 * d * ff  # the matmul weights of one block
    n = layers * per_layer + d * vocab  # plus the LM head's matmul (tied or not)
    return 2.0 * n + 4.0 * layers * d * t


@pytest.mark.parametrize(
    "file", ["llama-2-7b-hf.json", "mistral-7b-v0.1.json", "qwen2-0.5b.json", "tinyllama-1.1b.json"]
)
@pytest.mark.parametrize("seq_len", [512, 2048])
def test_decoder_forward_flops_per_token_match_the_palm_formula(file, seq_len):
    w = workload_from_hf_config(DATA / file, seq_len=seq_len)
    expected = _decoder_palm_forward_per_token(_config(file), seq_len)
    assert abs(w.total_fwd_flops / seq_len / expected - 1) < 0.03
    np.testing.assert_array_equal(w.bwd_flops, 2.0 * w.fwd_flops)


def test_gqa_shrinks_k_v_and_qwen2_has_qkv_biases_but_no_o_bias():
    w = workload_from_hf_config(DATA / "qwen2-0.5b.json", seq_len=64)
    counts = dict(zip(w.tensor_names, w.param_counts.tolist(), strict=True))
    p = "model.layers.0.self_attn"
    assert counts[f"{p}.q_proj.weight"] == 896 * 896
    assert counts[f"{p}.k_proj.weight"] == 896 * 2 * 64  # 2 KV heads of 64
    assert counts[f"{p}.k_proj.bias"] == counts[f"{p}.v_proj.bias"] == 128
    assert f"{p}.o_proj.bias" not in counts
    assert "lm_head.weight" not in counts  # tied to embed_tokens
    llama = workload_from_hf_config(DATA / "llama-2-7b-hf.json", seq_len=64).tensor_names
    assert not any(n.endswith(".bias") for n in llama)
    assert llama[-1] == "lm_head.weight"


def test_forward_order_of_a_decoder_block():
    names = workload_from_hf_config(DATA / "tinyllama-1.1b.json", seq_len=16).tensor_names
    block = [n.removeprefix("model.layers.0.") for n in names if n.startswith("model.layers.0.")]
    assert block == [
        "input_layernorm.weight",
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "post_attention_layernorm.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
    ]
    assert names[0] == "model.embed_tokens.weight" and names[-2] == "model.norm.weight"


def test_attention_flops_grow_quadratically_with_seq_len():
    # Per token: linear terms are constant, the score/value products grow with T.
    f = {
        t: workload_from_hf_config(DATA / "tinyllama-1.1b.json", seq_len=t).total_fwd_flops / t
        for t in (1024, 2048, 4096)
    }
    d, layers, heads = 2048, 22, 32
    # Per token and layer, one more token of context adds QKᵀ and A·V (2d + 2d FLOPs)
    # and, per head, a score's scale, mask and softmax (1 + 1 + 4): the zoo's counts.
    slope = (f[4096] - f[2048]) / 2048
    assert slope == pytest.approx((f[2048] - f[1024]) / 1024, rel=1e-9)
    assert slope == pytest.approx(layers * (4 * d + 6 * heads), rel=1e-9)


def test_default_sequence_lengths():
    def seq(file):
        w = workload_from_hf_config(DATA / file, seq_len=None)
        return int(w.source.split("-token")[0].rsplit(" ", 1)[-1])

    assert seq("gpt2.json") == 1024  # n_positions
    assert seq("llama-2-7b-hf.json") == 4096  # max_position_embeddings
    assert seq("tinyllama-1.1b.json") == 2048
    assert seq("qwen2-0.5b.json") == 8192  # 131072 capped at 8192
    assert seq("bert-base-uncased.json") == 128  # pre-training phase 1


def test_batch_and_dtype_scale_bytes_not_flops_per_sample():
    a = workload_from_hf_config(DATA / "gpt2.json", 1)
    b = workload_from_hf_config(DATA / "gpt2.json", 16, dtype_bytes=2)
    assert b.total_param_bytes * 2 == a.total_param_bytes
    assert b.total_fwd_flops == a.total_fwd_flops and b.batch_size == 16


def test_dict_input_and_name():
    cfg = _config("tinyllama-1.1b.json")
    w = workload_from_hf_config(cfg, 4, seq_len=128)
    assert w.name == "llama" and "a config dict" in w.source
    assert workload_from_hf_config(cfg, name="tiny").name == "tiny"
    assert workload_from_hf_config(DATA / "llama-2-7b-hf.json").name == "Llama-2-7b-hf"
    assert workload_from_hf_config(DATA / "mistral-7b-v0.1.json").name == "mistral-7b-v0.1"


def test_load_layers_reads_a_config_json_too():
    w = load_layers(DATA / "gpt2.json", batch_size=3)
    assert w == workload_from_hf_config(DATA / "gpt2.json", 3)


def _write(tmp_path, doc) -> pathlib.Path:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(doc, indent=2) if isinstance(doc, dict) else doc)
    return p


@pytest.mark.parametrize(
    ("edit", "key", "has_line"),
    [
        ({"hidden_size": None}, "hidden_size", False),  # missing
        ({"num_hidden_layers": "32"}, "num_hidden_layers", True),
        ({"intermediate_size": 0}, "intermediate_size", True),
        ({"num_key_value_heads": 5}, "num_key_value_heads", True),  # 32 % 5
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings", True),
        ({"model_type": "t5"}, "model_type", True),
        ({"model_type": None}, "model_type", False),
    ],
)
def test_bad_config_is_one_error_naming_the_file_and_the_key(tmp_path, edit, key, has_line):
    doc = _config("tinyllama-1.1b.json")
    for k, v in edit.items():
        if v is None:
            doc.pop(k)
        else:
            doc[k] = v
    path = _write(tmp_path, doc)
    with pytest.raises(InputFileError) as info:
        workload_from_hf_config(path)
    msg = str(info.value)
    assert msg.startswith(str(path)) and key in msg and "\n" not in msg
    if has_line:
        line = next(i for i, s in enumerate(path.read_text().splitlines(), 1) if f'"{key}"' in s)
        assert info.value.line == line
    with pytest.raises(ValueError, match=key):  # a dict: the key, no file
        workload_from_hf_config(doc)


def test_bad_files_and_arguments(tmp_path):
    with pytest.raises(InputFileError, match="no such file"):
        workload_from_hf_config(tmp_path / "missing.json")
    with pytest.raises(InputFileError, match="invalid JSON") as info:
        workload_from_hf_config(_write(tmp_path, '{\n  "model_type": "gpt2",\n}'))
    assert info.value.line == 3
    with pytest.raises(InputFileError, match="n_positions"):
        workload_from_hf_config(DATA / "gpt2.json", seq_len=2048)  # beyond the position table
    with pytest.raises(ValueError, match="seq_len"):
        workload_from_hf_config(DATA / "gpt2.json", seq_len=0)
    with pytest.raises(ValueError, match="batch_size"):
        workload_from_hf_config(DATA / "gpt2.json", 0)
    with pytest.raises(TypeError, match="config"):
        workload_from_hf_config(42)


def test_cli_hf_config_and_its_one_line_error(tmp_path):
    base = [sys.executable, "-m", "tuner.cli", "predict", "--preset", "ib-hdr-200g", "--json"]
    run = subprocess.run(
        [*base, "--hf-config", str(DATA / "qwen2-0.5b.json"), "--arch", "ring", "--workers", "8"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    doc = json.loads(run.stdout)
    assert doc["workload"]["parameters"] == PUBLISHED["qwen2-0.5b.json"]
    bad = _write(tmp_path, {"model_type": "gpt2", "n_embd": 768})
    run = subprocess.run(
        [*base, "--hf-config", str(bad), "--arch", "ring", "--workers", "8"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 1
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and "'n_positions'" in lines[0]
