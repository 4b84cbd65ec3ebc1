"""Workloads: the zoo against published figures, the FLOP attribution rule, the loaders.

Published figures used below (each also cited in the zoo's ``source`` strings):

- torchvision weight metadata (pytorch/vision, torchvision/models/*.py): ``num_params``
  and ``_ops``. ``_ops`` ("GFLOPS" in torchvision's docs) counts multiply-accumulates
  of convolutions and linear layers, i.e. GMACs; FLOPs = 2 × MACs.
- BERT: Hugging Face model cards bert-base-uncased "110M" and bert-large-uncased "336M"
  (pre-training heads included); HF ``BertModel`` counts 109,482,240 / 335,141,888;
  Devlin et al. (arXiv:1810.04805) round to 110M / 340M. Forward FLOPs of BERT-base:
  TinyBERT (Jiao et al., arXiv:1909.10351) Table 1, 22.5B.
- GPT-2 small: 124,439,808 parameters (HF ``gpt2``, tied LM head). Forward FLOPs per
  token 2N + 4·L·d·T with N the parameters without position embeddings: PaLM
  (arXiv:2204.02311) Appendix B, as used by nanoGPT's ``estimate_mfu``.
- Llama 3.2 1B ("1.24B", HF meta-llama/Llama-3.2-1B: hidden 2048, 16 layers, 32 heads,
  8 KV heads, intermediate 8192, vocab 128256, tied embeddings): 1,235,814,400
  parameters. Llama 2 7B ("6.74B", HF meta-llama/Llama-2-7b-hf: hidden 4096, 32 layers,
  32 heads, intermediate 11008, vocab 32000, untied): 6,738,415,616. Forward FLOPs per
  token as PaLM App. B, N the parameters that multiply (the untied input embedding is
  a lookup).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel._errors import InputFileError
from costmodel.workloads import (
    WORKLOAD_NAMES,
    Workload,
    get_workload,
    load_layers,
    workload_from_pytree,
    workload_to_layers,
)

DATA = os.path.join(os.path.dirname(__file__), "data")

# name -> (published parameter count, published forward GMACs per sample or None)
PUBLISHED = {
    "alexnet": (61_100_840, 0.714),
    "vgg16": (138_357_544, 15.47),
    "resnet18": (11_689_512, 1.814),
    "resnet34": (21_797_672, 3.664),
    "resnet50": (25_557_032, 4.089),
    "resnet101": (44_549_160, 7.801),
    "resnet152": (60_192_808, 11.514),
    # torchvision counts the auxiliary classifier (trained); its _ops are eval mode (no aux).
    "inception_v3": (27_161_264, 5.713),
    "bert_base": (110_000_000, None),  # HF model card "110M"
    "bert_large": (336_000_000, None),  # HF model card "336M" (paper: "340M", rounded)
    "gpt2": (124_439_808, None),
    "llama3_1b": (1_240_000_000, None),  # model card "1.24B"
    "llama2_7b": (6_740_000_000, None),  # "6.74B" (Touvron et al. 2023, HF)
}


def test_zoo_lists_the_required_networks():
    required = {
        "alexnet",
        "vgg16",
        "resnet50",
        "resnet101",
        "resnet152",
        "inception_v3",
        "bert_base",
        "bert_large",
        "gpt2",
    }
    assert required <= set(WORKLOAD_NAMES)
    assert set(WORKLOAD_NAMES) == set(PUBLISHED)


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_parameter_totals_match_published(name):
    w = get_workload(name)
    published, _ = PUBLISHED[name]
    assert abs(w.total_params / published - 1) < 0.01
    assert w.param_counts.dtype == np.int64 and (w.param_counts >= 1).all()


@pytest.mark.parametrize(
    "name, prefix, exact",
    [
        # Exact counts of the published implementations, from sub-sets of the tensors.
        ("bert_base", "bert.", 109_482_240),  # HF BertModel (encoder + pooler)
        ("bert_large", "bert.", 335_141_888),
        ("inception_v3", "", 27_161_264),
        ("gpt2", "", 124_439_808),
        ("llama3_1b", "", 1_235_814_400),
        ("llama2_7b", "", 6_738_415_616),
    ],
)
def test_exact_counts_of_reference_implementations(name, prefix, exact):
    w = get_workload(name)
    total = sum(
        int(c) for n, c in zip(w.tensor_names, w.param_counts, strict=True) if n.startswith(prefix)
    )
    assert total == exact


def test_inception_without_aux_logits_is_23_8m():
    w = get_workload("inception_v3")
    no_aux = sum(
        int(c)
        for n, c in zip(w.tensor_names, w.param_counts, strict=True)
        if not n.startswith("AuxLogits.")
    )
    assert no_aux == 23_834_568  # torchvision with aux_logits=False


@pytest.mark.parametrize("name", [n for n, (_, g) in PUBLISHED.items() if g is not None])
def test_cnn_forward_flops_match_published_macs(name):
    w = get_workload(name)
    published_flops = 2e9 * PUBLISHED[name][1]  # FLOPs = 2 x MACs
    assert abs(w.total_fwd_flops / published_flops - 1) < 0.05
    # The published count is matmul-only; we add norms, activations and pooling,
    # so we must not be below it (0.2 % slack for the rounding of _ops).
    assert w.total_fwd_flops >= published_flops * (1 - 0.002)


def test_bert_base_forward_flops_match_tinybert():
    # TinyBERT Table 1: BERT-base (encoder + pooler + classifier) 22.5B FLOPs at seq 128.
    w = get_workload("bert_base")
    encoder = sum(
        float(f) for n, f in zip(w.tensor_names, w.fwd_flops, strict=True) if n.startswith("bert.")
    )
    assert abs(encoder / 22.5e9 - 1) < 0.05
    # Pre-training heads (MLM on 20 masked positions) add about 4 %.
    assert abs(w.total_fwd_flops / 22.5e9 - 1) < 0.05


def _palm_forward_flops(layers, d, seq, n_params):
    """PaLM App. B / Kaplan Table 1: forward FLOPs per sequence = T (2N + 4 L d T)."""
    return seq * (2 * n_params + 4 * layers * d * seq)


def test_bert_large_forward_flops_match_closed_form():
    layers, d, ff, seq, vocab, masked = 24, 1024, 4096, 128, 30522, 20
    encoder_params = layers * (4 * d * d + 2 * d * ff)  # matmul weights only
    expected = _palm_forward_flops(layers, d, seq, encoder_params)
    expected += 2 * d * d + masked * 2 * (d * d + d * vocab)  # pooler + MLM head
    w = get_workload("bert_large")
    assert abs(w.total_fwd_flops / expected - 1) < 0.05


def test_gpt2_forward_flops_match_palm_formula():
    w = get_workload("gpt2")
    n_non_embedding = 124_439_808 - 1024 * 768  # nanoGPT get_num_params(): minus wpe
    expected = _palm_forward_flops(12, 768, 1024, n_non_embedding)  # ~291.9 GFLOPs
    assert abs(w.total_fwd_flops / expected - 1) < 0.05


def _llama_layer_params(d, ff, kv):
    return 2 * d * d + 2 * d * kv + 3 * d * ff + 2 * d  # q, o; k, v; gate, up, down; 2 norms


@pytest.mark.parametrize(
    ("name", "layers", "d", "kv", "ff", "vocab", "seq", "tied"),
    [
        ("llama3_1b", 16, 2048, 512, 8192, 128256, 8192, True),
        ("llama2_7b", 32, 4096, 4096, 11008, 32000, 4096, False),
    ],
)
def test_llama_shapes_and_forward_flops(name, layers, d, kv, ff, vocab, seq, tied):
    w = get_workload(name)
    counts = dict(zip(w.tensor_names, w.param_counts.tolist(), strict=True))
    assert counts["model.embed_tokens.weight"] == vocab * d
    assert counts["model.layers.0.self_attn.k_proj.weight"] == d * kv  # grouped-query K/V
    assert ("lm_head.weight" in counts) is not tied
    n = layers * _llama_layer_params(d, ff, kv) + d + vocab * d * (1 if tied else 2)
    assert w.total_params == n
    assert w.num_tensors == 1 + 9 * layers + 1 + (0 if tied else 1)
    # forward order: the input norm runs before the attention, the MLP after its norm
    names = w.tensor_names
    p = "model.layers.3"
    order = [
        "input_layernorm",
        "self_attn.q_proj",
        "self_attn.o_proj",
        "post_attention_layernorm",
        "mlp.gate_proj",
        "mlp.down_proj",
    ]
    idx = [names.index(f"{p}.{m}.weight") for m in order]
    assert idx == sorted(idx)
    matmul = n - (0 if tied else vocab * d)  # an untied input embedding is a lookup
    expected = _palm_forward_flops(layers, d, seq, matmul)
    assert abs(w.total_fwd_flops / expected - 1) < 0.03


# -- the attribution rule ---------------------------------------------------------------


@pytest.mark.parametrize("name", WORKLOAD_NAMES)
def test_flops_sum_and_only_last_tensor_of_each_module_carries_flops(name):
    w = get_workload(name)
    assert w.total_fwd_flops == pytest.approx(float(np.sum(w.fwd_flops)), rel=1e-12)
    np.testing.assert_array_equal(w.bwd_flops, 2.0 * w.fwd_flops)
    assert np.isfinite(w.fwd_flops).all() and (w.fwd_flops >= 0).all()
    # Group contiguous tensors by module ("layer4.2.bn3.weight" -> "layer4.2.bn3").
    modules = [n.rsplit(".", 1)[0] for n in w.tensor_names]
    for i in range(len(modules) - 1):
        if modules[i] == modules[i + 1]:
            assert w.fwd_flops[i] == 0.0, f"{w.tensor_names[i]} is not its layer's last tensor"
    # Every conv / linear / norm layer does work, so its last tensor carries FLOPs.
    for i, n in enumerate(w.tensor_names):
        last_of_module = i == len(modules) - 1 or modules[i] != modules[i + 1]
        lookup = "embeddings" in n or n.startswith(("transformer.w", "model.embed_tokens"))
        if last_of_module and not lookup:
            assert w.fwd_flops[i] > 0, n


def test_resnet50_first_conv_and_bn_by_the_rule():
    w = get_workload("resnet50")
    flops = dict(zip(w.tensor_names, w.fwd_flops, strict=True))
    # conv1: 7x7, 3 -> 64, stride 2 on 224x224 -> 112x112; FLOPs = 2 x MACs.
    assert flops["conv1.weight"] == 2 * 112 * 112 * 64 * 3 * 7 * 7 == 236_027_904
    assert flops["bn1.weight"] == 0.0
    # bn1: norm (7/element) + its ReLU (1/element) + the max-pool right after (9/output).
    assert flops["bn1.bias"] == 7 * 64 * 112 * 112 + 64 * 112 * 112 + 9 * 64 * 56 * 56
    assert w.param_counts[0] == 64 * 3 * 7 * 7 == 9408


def test_attention_products_go_to_the_output_projection():
    # Score/softmax/value products sit between the Q/K/V and output projections:
    # by the rule they go to the next layer with parameters.
    t, d, h = 128, 768, 12
    w = get_workload("bert_base")
    flops = dict(zip(w.tensor_names, w.fwd_flops, strict=True))
    p = "bert.encoder.layer.0.attention"
    attention = 4 * t * t * d + 6 * h * t * t  # QK^T + AV, scale, mask, softmax (4)
    assert flops[f"{p}.output.dense.bias"] == 2 * t * d * d + t * d + attention
    assert flops[f"{p}.self.query.bias"] == 2 * t * d * d + t * d


def test_gpt2_tied_lm_head_goes_to_the_last_tensor():
    w = get_workload("gpt2")
    assert w.tensor_names[0] == "transformer.wte.weight"
    assert w.tensor_names[-1] == "transformer.ln_f.bias"
    assert w.fwd_flops[-1] >= 2 * 1024 * 768 * 50257


def test_forward_order():
    inc = get_workload("inception_v3").tensor_names
    aux = inc.index("AuxLogits.conv0.conv.weight")
    assert (
        inc.index("Mixed_6e.branch_pool.bn.bias")
        < aux
        < inc.index("Mixed_7a.branch3x3_1.conv.weight")
    )
    res = get_workload("resnet50").tensor_names
    assert res[0] == "conv1.weight" and res[-1] == "fc.bias"
    assert res.index("layer1.0.bn3.bias") < res.index("layer1.0.downsample.0.weight")
    bert = get_workload("bert_base").tensor_names
    assert bert.index("bert.pooler.dense.bias") < bert.index("cls.predictions.bias")


# -- the Workload type ------------------------------------------------------------------


def _tiny(**overrides):
    kwargs = dict(
        name="tiny",
        tensor_names=("a.weight", "a.bias"),
        param_counts=np.array([6, 2]),
        fwd_flops=np.array([0.0, 26.0]),
        bwd_flops=None,
        batch_size=4,
    )
    kwargs.update(overrides)
    return Workload(**kwargs)


def test_workload_derived_quantities():
    w = _tiny(dtype_bytes=2)
    np.testing.assert_array_equal(w.bwd_flops, [0.0, 52.0])
    np.testing.assert_array_equal(w.param_bytes, [12, 4])
    assert w.param_bytes.dtype == np.int64
    assert (w.total_params, w.total_param_bytes) == (8, 16)
    assert (w.total_fwd_flops, w.total_bwd_flops) == (26.0, 52.0)
    assert w.fwd_flops.dtype == np.float64


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(name=""), "name"),
        (dict(tensor_names=()), "tensor_names"),
        (dict(tensor_names=("a", "a")), "tensor_names"),
        (dict(param_counts=np.array([6])), "param_counts"),
        (dict(param_counts=np.array([6, 0])), "param_counts"),
        (dict(param_counts=np.array([6.5, 2.0])), "param_counts"),
        (dict(fwd_flops=np.array([0.0, np.nan])), "fwd_flops"),
        (dict(fwd_flops=np.array([0.0, -1.0])), "fwd_flops"),
        (dict(fwd_flops=np.array([0.0, 1.0, 2.0])), "fwd_flops"),
        (dict(bwd_flops=np.array([np.inf, 0.0])), "bwd_flops"),
        (dict(batch_size=0), "batch_size"),
        (dict(batch_size=2.5), "batch_size"),
        (dict(dtype_bytes=0), "dtype_bytes"),
        (dict(step_time_s=0.0), "step_time_s"),
        (dict(step_time_s=float("nan")), "step_time_s"),
    ],
)
def test_workload_validation_names_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        _tiny(**overrides)


def test_workload_is_immutable_equal_and_hashable():
    w = _tiny()
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.batch_size = 8  # type: ignore[misc]
    with pytest.raises(ValueError):
        w.param_counts[0] = 1
    assert w == _tiny() and hash(w) == hash(_tiny())
    assert w != _tiny(fwd_flops=np.array([0.0, 27.0]))
    assert "tiny" in repr(w)


def test_with_methods():
    w = _tiny().with_step_time(0.2)
    assert w.step_time_s == 0.2
    w8 = w.with_batch_size(8)  # time per sample held constant
    assert (w8.batch_size, w8.step_time_s) == (8, pytest.approx(0.4))
    assert w.with_dtype_bytes(2).total_param_bytes == w.total_param_bytes // 2
    assert w.with_step_time(None).step_time_s is None
    with pytest.raises(ValueError, match="step_time_s"):
        w.with_step_time(-1.0)


def test_get_workload_arguments():
    w = get_workload("ResNet-50", batch_size=32, dtype_bytes=2)
    assert (w.name, w.batch_size, w.dtype_bytes) == ("resnet50", 32, 2)
    assert w.total_param_bytes == 2 * 25_557_032
    assert get_workload("resnet50").batch_size == 64  # the cached base is untouched
    with pytest.raises(ValueError, match="resnet50") as info:
        get_workload("resnet49")
    assert "gpt2" in str(info.value) and "bert_large" in str(info.value)
    with pytest.raises(ValueError, match="batch_size"):
        get_workload("alexnet", batch_size=0)


# -- loaders ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["resnet50", "gpt2", "inception_v3"])
def test_json_round_trip(tmp_path, name):
    w = get_workload(name, batch_size=16, dtype_bytes=2)
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(workload_to_layers(w), indent=1))
    assert load_layers(path, batch_size=16, dtype_bytes=2) == w


def test_csv_and_json_examples_describe_lenet5():
    j = load_layers(os.path.join(DATA, "layers_example.json"), batch_size=8)
    c = load_layers(os.path.join(DATA, "layers_example.csv"), batch_size=8)
    assert j.name == "lenet5" and c.name == "layers_example"  # JSON name key, else file stem
    assert j.total_params == c.total_params == 61_706  # LeNet-5's classic count
    assert j.tensor_names == c.tensor_names
    np.testing.assert_array_equal(j.param_counts, c.param_counts)
    np.testing.assert_array_equal(j.fwd_flops, c.fwd_flops)
    # conv1 forward: 2 x MACs + bias + ReLU + 2x2 max-pool, on conv1.bias.
    out = 28 * 28 * 6
    assert j.fwd_flops[1] == 2 * out * 25 + out + out + 4 * 14 * 14 * 6
    # CSV: empty bwd_flops -> 2 x fwd; conv1 gives bwd = fwd (no input gradient).
    assert c.bwd_flops[1] == c.fwd_flops[1]
    np.testing.assert_array_equal(c.bwd_flops[2:], 2 * c.fwd_flops[2:])
    np.testing.assert_array_equal(j.bwd_flops, 2 * j.fwd_flops)


def test_fwd_flops_are_optional(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"layers": [{"name": "w", "params": 10}]}')
    w = load_layers(path, name="mine")
    assert (w.name, w.total_fwd_flops) == ("mine", 0.0)
    assert w.with_step_time(0.1).step_time_s == 0.1


_HEADER = "name,params,fwd_flops\n"
_BAD_INPUTS = [
    # (file name, content, expected line, fragment of the reason)
    ("syntax.json", '{"layers": [\n  {"name": "a", "params": 1},\n  oops\n]}', 3, "invalid JSON"),
    ("toplist.json", '[{"name": "a", "params": 1}]', 1, "JSON object"),
    ("nolayers.json", '{\n "name": "x"\n}', 1, "missing key 'layers'"),
    ("layersdict.json", '{\n "layers": {"a": 1}\n}', 2, "must be a list"),
    ("empty.json", '{\n "layers": []\n}', 2, "empty"),
    (
        "noparams.json",
        '{"layers": [\n {"name": "a", "params": 1},\n {"name": "b"}\n]}',
        3,
        "missing key 'params'",
    ),
    ("noname.json", '{"layers": [\n {"params": 1}\n]}', 2, "missing key 'name'"),
    ("floatparams.json", '{"layers": [\n {"name": "a",\n  "params": 9.5}\n]}', 3, "integer"),
    ("strparams.json", '{"layers": [\n {"name": "a", "params": "12"}\n]}', 2, "integer"),
    ("zeroparams.json", '{"layers": [\n {"name": "a", "params": 0}\n]}', 2, ">= 1"),
    ("nan.json", '{"layers": [\n {"name": "a", "params": 1,\n  "fwd_flops": NaN}\n]}', 3, "finite"),
    ("negative.json", '{"layers": [\n {"name": "a", "params": 1, "bwd_flops": -5}\n]}', 2, ">= 0"),
    (
        "dup.json",
        '{"layers": [\n {"name": "a", "params": 1},\n {"name": "a", "params": 2}\n]}',
        3,
        "duplicate",
    ),
    (
        "typo.json",
        '{"layers": [\n {"name": "a", "params": 1,\n  "fwd_flop": 3}\n]}',
        3,
        "unknown key",
    ),
    ("empty.csv", "", 1, "empty file"),
    ("blank.json", " \n", 1, "the file is empty"),  # was 'invalid JSON: Expecting value'
    ("header.csv", "# a comment\nname,fwd_flops\n", 2, "missing column 'params'"),
    ("noflopscol.csv", "name,params\na,1\n", 1, "missing column 'fwd_flops'"),
    ("unknown.csv", "name,params,fwd_flops,flops\n", 1, "unknown column"),
    ("norows.csv", _HEADER, 1, "no layers"),
    ("fields.csv", _HEADER + "a,1,0\nb,2\n", 3, "expected 3 fields"),
    ("floatparams.csv", _HEADER + "a,1,0\nb,2.5,0\n", 3, "integer"),
    ("emptyparams.csv", _HEADER + "a,,0\n", 2, "integer"),
    ("nan.csv", _HEADER + "\na,1,nan\n", 3, "finite"),
    ("negative.csv", _HEADER + "a,1,-1\n", 2, ">= 0"),
    ("word.csv", _HEADER + "a,1,lots\n", 2, "number"),
    (
        "dup.csv",
        _HEADER + "a,1,0\nb,1,0\na,1,0\n",
        4,
        "duplicate tensor name 'a' (first on line 2)",
    ),
]


@pytest.mark.parametrize(
    "file_name, content, line, fragment", _BAD_INPUTS, ids=[b[0] for b in _BAD_INPUTS]
)
def test_bad_layer_files_raise_input_file_error_with_line(
    tmp_path, file_name, content, line, fragment
):
    path = tmp_path / file_name
    path.write_text(content)
    with pytest.raises(InputFileError) as info:
        load_layers(path)
    err = info.value
    assert err.line == line
    assert f"{file_name}:{line}:" in str(err)
    assert fragment in str(err)
    assert isinstance(err, ValueError)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputFileError, match="nothere.json") as info:
        load_layers(tmp_path / "nothere.json")
    assert info.value.line is None
    with pytest.raises(InputFileError, match="directory"):
        load_layers(tmp_path)


# -- pytrees ----------------------------------------------------------------------------


def test_pytree_from_equinox_mlp():
    mlp = eqx.nn.MLP(784, 10, width_size=256, depth=2, key=jax.random.key(0))
    w = workload_from_pytree(eqx.filter(mlp, eqx.is_array), name="mlp", batch_size=32)
    assert w.total_params == 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10
    assert w.tensor_names == tuple(f"layers.{i}.{p}" for i in range(3) for p in ("weight", "bias"))
    leaf = mlp.layers[0].weight
    assert w.dtype_bytes == leaf.dtype.itemsize
    assert w.total_fwd_flops == 0.0
    # The model itself (non-array leaves such as the activation are skipped) gives the same.
    assert workload_from_pytree(mlp, name="mlp", batch_size=32) == w


def test_pytree_flax_style_dict_and_flops_spread():
    params = {
        "params": {
            "Dense_0": {"kernel": np.zeros((4, 3), np.float32), "bias": np.zeros(3, np.float32)},
            "Dense_1": {"kernel": np.zeros((3, 2), np.float32), "bias": np.zeros(2, np.float32)},
        }
    }
    w = workload_from_pytree(params, fwd_flops_per_sample=100.0)
    assert w.tensor_names == (
        "params.Dense_0.bias",
        "params.Dense_0.kernel",
        "params.Dense_1.bias",
        "params.Dense_1.kernel",
    )
    assert w.dtype_bytes == 4
    np.testing.assert_allclose(w.fwd_flops, 100.0 * np.array([3, 12, 2, 6]) / 23)
    assert w.total_fwd_flops == pytest.approx(100.0)
    np.testing.assert_array_equal(w.bwd_flops, 2 * w.fwd_flops)


def test_pytree_of_shapes_and_errors():
    shapes = jax.eval_shape(lambda: {"w": jnp.zeros((1000, 1000), jnp.bfloat16)})
    w = workload_from_pytree(shapes)
    assert (w.total_params, w.dtype_bytes) == (1_000_000, 2)
    with pytest.raises(ValueError, match="no non-empty array leaf"):
        workload_from_pytree({"a": None, "b": np.zeros(0)})
    with pytest.raises(ValueError, match="fwd_flops_per_sample"):
        workload_from_pytree(shapes, fwd_flops_per_sample=math.nan)


def test_gemm_dims_give_each_layers_smallest_dimension_at_the_micro_batch():
    """A builder's dense and conv layers carry their GEMM (rows per sample, smaller
    other dimension): u = Σ F_l/min(b·r_l, w_l) / Σ F, computed independently here;
    u falls as the batch grows until the width binds; accumulation steps divide the
    batch; a workload without dims has u = 0."""
    w = get_workload("vgg16", batch_size=2)
    dims = w.gemm_dims
    assert dims.shape == (w.num_tensors, 2)
    carried = dims[:, 1] > 0
    # conv1_1: 3 → 64 channels, 3×3, 224² output pixels; the classifier: 4096 → 1000
    assert tuple(dims[np.argmax(carried)]) == (224 * 224, min(64, 3 * 9))
    assert tuple(dims[-1]) == (1.0, 1000.0)
    for b in (1, 4, 64):
        m = np.minimum(b * dims[carried, 0], dims[carried, 1])
        want = float(np.sum(w.fwd_flops[carried] / m) / np.sum(w.fwd_flops))
        assert w.small_gemm(b) == pytest.approx(want, rel=1e-12)
    us = [w.small_gemm(b) for b in (1, 2, 8, 64, 4096)]
    assert all(a >= b for a, b in zip(us, us[1:], strict=False)) and us[0] > us[-1]
    acc = dataclasses.replace(w, batch_size=8, accumulation_steps=4)
    assert acc.small_gemm() == pytest.approx(w.small_gemm(2), rel=1e-12)
    assert dataclasses.replace(w, gemm_dims=None).small_gemm() == 0.0


def test_layer_files_carry_gemm_dims_and_refuse_bad_ones(tmp_path):
    """gemm_rows/gemm_width round-trip through JSON and CSV; a negative, non-numeric
    or infinite value is refused naming the file, the line and the key."""
    j = tmp_path / "m.json"
    j.write_text(json.dumps({"layers": [
        {"name": "fc.weight", "params": 7840},
        {"name": "fc.bias", "params": 10, "fwd_flops": 15690, "gemm_rows": 1, "gemm_width": 10},
    ]}))  # fmt: skip
    wj = load_layers(j, batch_size=32)
    assert wj.gemm_dims.tolist() == [[0.0, 0.0], [1.0, 10.0]]
    assert wj.small_gemm() == pytest.approx(1 / 10)
    c = tmp_path / "m.csv"
    c.write_text("name,params,fwd_flops,gemm_rows,gemm_width\nfc.weight,7840,0,,\n"
                 "fc.bias,10,15690,1,10\n")  # fmt: skip
    assert load_layers(c, batch_size=32) == dataclasses.replace(
        wj, name="m", source=f"layer file {c}"
    )
    w = get_workload("resnet50", batch_size=16)
    (tmp_path / "r.json").write_text(json.dumps(workload_to_layers(w)))
    assert load_layers(tmp_path / "r.json", batch_size=16) == w
    for bad, text in (("-1", "'gemm_rows' must be finite, >= 0"),
                      ("x", "'gemm_rows' must be a number"), ("inf", "'gemm_rows' must be finite"),
                      ("0.5", "'gemm_rows' must be a matrix dimension >= 1"),
                      ("1e-300", "'gemm_rows' must be a matrix dimension >= 1"),
                      ("5_12", "'gemm_rows' must be a number"),
                      ("", "'gemm_width' without 'gemm_rows'")):  # fmt: skip
        c.write_text(f"name,params,fwd_flops,gemm_rows,gemm_width\nfc.bias,10,15690,{bad},10\n")
        with pytest.raises(InputFileError, match=rf"m\.csv:2: .*{text}"):
            load_layers(c)
    # one key alone, and keys on a tensor that carries no FLOPs, in JSON (its own line)
    j.write_text('{"layers": [\n{"name": "w", "params": 70, "gemm_rows": 1, "gemm_width": 7},\n'
                 '{"name": "b", "params": 7, "fwd_flops": 140, "gemm_rows": 1}\n]}')  # fmt: skip
    with pytest.raises(InputFileError, match=r"m\.json:2: .*'w'.*carries the layer's FLOPs"):
        load_layers(j)
    j.write_text('{"layers": [\n{"name": "b", "params": 7, "fwd_flops": 140,\n"gemm_rows": 1}]}')
    with pytest.raises(InputFileError, match=r"m\.json:3: .*'gemm_rows' without 'gemm_width'"):
        load_layers(j)
    with pytest.raises(ValueError, match="gemm_dims must be .0, 0. or two finite dimensions"):
        dataclasses.replace(wj, gemm_dims=np.array([[1.0, 10.0], [1.0, 10.0]]))  # no FLOPs
