"""Transformers of the zoo: BERT (pre-training), GPT-2 small and Llama decoders, from
their published shapes.

Tensor names and forward order follow Hugging Face ``transformers``
(``BertForPreTraining``, ``GPT2LMHeadModel``, ``LlamaForCausalLM``); one sequence
= one sample.

Conventions:

- BERT: pre-training, as data-parallel BERT jobs run it (Devlin et al. 2019;
  google-research/bert ``run_pretraining.py``): sequence length 128, masked-LM
  head applied to the ``max_predictions_per_seq = 20`` gathered positions,
  next-sentence head on the pooled [CLS] output. Parameters include the heads
  (the MLM decoder weight is tied to the word embeddings and counted once).
- GPT-2: 1024-token context, LM head (tied to ``wte``) applied to every
  position, as in HF ``GPT2LMHeadModel`` and nanoGPT training.
- Attention score/softmax/value products are full T×T (the causal mask is
  applied, not exploited), as the reference implementations compute them.

References:
    Devlin et al., "BERT", arXiv:1810.04805 (110M / 340M parameters).
    Hugging Face bert-base-uncased / bert-large-uncased (110M / 336M with heads).
    Jiao et al., "TinyBERT", arXiv:1909.10351, Table 1: BERT-base 109M, 22.5B FLOPs.
    Radford et al. 2019, GPT-2; HF ``gpt2``: 124,439,808 parameters.
    Kaplan et al., arXiv:2001.08361, Table 1 and Chowdhery et al. (PaLM),
    arXiv:2204.02311, Appendix B: forward FLOPs ≈ 2·N + 4·L·d·T per token
    (as in nanoGPT's ``estimate_mfu``, 6N + 12LHQT for forward + backward).
    Llama: Hugging Face ``config.json`` of meta-llama/Llama-3.2-1B and
    meta-llama/Llama-2-7b-hf (values quoted in each builder's source); Touvron
    et al., "Llama 2", arXiv:2307.09288; Dubey et al., "The Llama 3 Herd of
    Models", arXiv:2407.21783.
"""

from __future__ import annotations

from ._builder import GELU_FLOPS, SOFTMAX_FLOPS, LayerBuilder, layernorm, linear
from ._workload import TransformerShape


def _attention_ops(b: LayerBuilder, t: int, d: int, heads: int) -> None:
    """QKᵀ, scale, mask, softmax and attention·V for one layer (between QKV and out-proj)."""
    scores = heads * t * t
    b.between(2.0 * t * t * d + scores * (1 + 1 + SOFTMAX_FLOPS) + 2.0 * t * t * d)


def _bert(
    b: LayerBuilder,
    *,
    layers: int,
    d: int,
    heads: int,
    ff: int,
    vocab: int = 30522,
    max_positions: int = 512,
    seq: int = 128,
    masked: int = 20,
    type_vocab: int = 2,
) -> None:
    t = seq
    b.kind = "transformer"
    # no vocab: the MLM logits are on the `masked` gathered positions only
    b.transformer = TransformerShape(layers, d, heads, t, ff, vocab=0)
    e = "bert.embeddings"
    b.layer([(f"{e}.word_embeddings.weight", vocab * d)], 0.0)
    b.layer([(f"{e}.position_embeddings.weight", max_positions * d)], 0.0)
    b.layer([(f"{e}.token_type_embeddings.weight", type_vocab * d)], 0.0)
    b.between(2.0 * t * d)  # word + position + token type
    layernorm(b, f"{e}.LayerNorm", d, tokens=t)
    for i in range(layers):
        p = f"bert.encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            linear(b, f"{p}.attention.self.{proj}", d, d, tokens=t)
        _attention_ops(b, t, d, heads)
        linear(b, f"{p}.attention.output.dense", d, d, tokens=t)
        b.between(t * d)  # residual add
        layernorm(b, f"{p}.attention.output.LayerNorm", d, tokens=t)
        linear(b, f"{p}.intermediate.dense", d, ff, tokens=t)
        b.post(GELU_FLOPS * t * ff)
        linear(b, f"{p}.output.dense", ff, d, tokens=t)
        b.between(t * d)  # residual add
        layernorm(b, f"{p}.output.LayerNorm", d, tokens=t)
    linear(b, "bert.pooler.dense", d, d)  # on [CLS] only
    b.post(d)  # tanh
    # Masked-LM head on the gathered masked positions.
    linear(b, "cls.predictions.transform.dense", d, d, tokens=masked)
    b.post(GELU_FLOPS * masked * d)
    layernorm(b, "cls.predictions.transform.LayerNorm", d, tokens=masked)
    b.between(2.0 * masked * d * vocab)  # decoder matmul, weight tied to word_embeddings
    b.layer([("cls.predictions.bias", vocab)], masked * vocab)
    linear(b, "cls.seq_relationship", d, 2)  # next-sentence prediction


def bert_base(b: LayerBuilder) -> str:
    """BERT-base (L=12, d=768, 12 heads, FFN 3072) pre-training at sequence length 128.

    110,106,428 parameters with the pre-training heads (109,482,240 without).
    """
    _bert(b, layers=12, d=768, heads=12, ff=3072)
    return (
        "BERT-base pre-training (HF BertForPreTraining names), seq 128, MLM on 20 masked "
        "positions; Devlin et al. arXiv:1810.04805 (110M). Published: HF bert-base-uncased "
        "110M params (109,482,240 without heads); TinyBERT arXiv:1909.10351 Table 1: "
        "22.5B FLOPs for BERT-base."
    )


def bert_large(b: LayerBuilder) -> str:
    """BERT-large (L=24, d=1024, 16 heads, FFN 4096) pre-training at sequence length 128.

    336,226,108 parameters with the pre-training heads (335,141,888 without;
    the paper's "340M" is rounded).
    """
    _bert(b, layers=24, d=1024, heads=16, ff=4096)
    return (
        "BERT-large pre-training (HF BertForPreTraining names), seq 128, MLM on 20 masked "
        "positions; Devlin et al. arXiv:1810.04805 ('340M', rounded). Published: HF "
        "bert-large-uncased 336M params (335,141,888 without heads); forward FLOPs per "
        "Kaplan et al. arXiv:2001.08361 Table 1 / PaLM arXiv:2204.02311 App. B."
    )


def gpt2(
    b: LayerBuilder, *, layers=12, d=768, heads=12, vocab=50257, ctx=1024, seq=1024, ff=None
) -> str:
    """GPT-2 small (L=12, d=768, 12 heads, vocab 50257), 1024-token sequences.

    124,439,808 parameters (LM head tied to the token embedding). The keywords
    (layers, width, heads, vocabulary, position table ``ctx``, sequence length,
    FFN width ``ff``, default 4·d) give the other sizes of an HF ``GPT2Config``.
    """
    t, ff = seq, ff or 4 * d  # HF GPT2Config: n_inner None means 4 × n_embd
    b.kind = "transformer"
    b.transformer = TransformerShape(layers, d, heads, t, ff, vocab=vocab)
    # wte lookup is free; the position-embedding add is the embedding layer's op.
    b.layer([("transformer.wte.weight", vocab * d), ("transformer.wpe.weight", ctx * d)], t * d)
    for i in range(layers):
        p = f"transformer.h.{i}"
        layernorm(b, f"{p}.ln_1", d, tokens=t)
        linear(b, f"{p}.attn.c_attn", d, 3 * d, tokens=t)
        _attention_ops(b, t, d, heads)
        linear(b, f"{p}.attn.c_proj", d, d, tokens=t)
        b.between(t * d)  # residual add
        layernorm(b, f"{p}.ln_2", d, tokens=t)
        linear(b, f"{p}.mlp.c_fc", d, ff, tokens=t)
        b.post(GELU_FLOPS * t * ff)
        linear(b, f"{p}.mlp.c_proj", ff, d, tokens=t)
        b.between(t * d)  # residual add
    layernorm(b, "transformer.ln_f", d, tokens=t)
    # LM head (weight tied to wte): no tensor of its own, so it goes to the last
    # tensor, ln_f.bias -- which is also where its backward runs first.
    b.between(2.0 * t * d * vocab)
    return (
        "GPT-2 small (HF GPT2LMHeadModel names, tied LM head), 1024-token sequences; "
        "Radford et al. 2019. Published: 124,439,808 params (HF gpt2); forward FLOPs per "
        "PaLM arXiv:2204.02311 App. B as in nanoGPT estimate_mfu (2N + 4LdT per token)."
    )


# ---------------------------------------------------------------------------
# Llama decoders (Hugging Face LlamaForCausalLM)
# ---------------------------------------------------------------------------
#: RMSNorm FLOPs per element: square, mean (sum), multiply by the reciprocal
#: root, multiply by the weight (Zhang & Sennrich, NeurIPS 2019; HF LlamaRMSNorm).
RMSNORM_FLOPS = 4
#: SwiGLU FLOPs per intermediate element: SiLU (exp, add, divide, multiply) and
#: the product with the up projection (Shazeer, arXiv:2002.05202).
SWIGLU_FLOPS = 5
#: Rotary embedding FLOPs per rotated q/k element: two products and a sum
#: (Su et al., arXiv:2104.09864; HF ``apply_rotary_pos_emb``).
ROPE_FLOPS = 3


def _llama(
    b: LayerBuilder,
    *,
    layers: int,
    d: int,
    heads: int,
    kv_heads: int,
    ff: int,
    vocab: int,
    seq: int,
    tied: bool,
    head_dim: int | None = None,
    qkv_bias: bool = False,
    o_bias: bool = False,
    mlp_bias: bool = False,
) -> None:
    """A Llama decoder in forward order, one ``seq``-token sequence per sample.

    Forward order of the tensors (the order their forward runs, which for the
    norms differs from ``named_parameters()``, where HF registers them after
    the MLP): embed_tokens; per layer input_layernorm, q/k/v/o_proj,
    post_attention_layernorm, gate/up/down_proj; norm; lm_head (untied only).
    No biases by default (Llama's ``attention_bias = mlp_bias = false``;
    Qwen2 has ``qkv_bias``, Hugging Face's ``attention_bias`` sets q/k/v and
    o). Grouped-query attention: q projects to ``heads × head_dim``, k/v to
    ``kv_heads × head_dim`` (``head_dim`` default d/heads); the score and
    value products are full T×T per head as for the other transformers.
    Mistral and Qwen2 configurations (costmodel.workload_from_hf_config) use
    the same builder.
    """
    t = seq
    b.kind = "transformer"
    b.transformer = TransformerShape(
        layers, d, heads, t, ff, gated=True, vocab=vocab, dropout=False
    )
    head_dim = d // heads if head_dim is None else head_dim
    q, kv = heads * head_dim, kv_heads * head_dim
    b.layer([("model.embed_tokens.weight", vocab * d)], 0.0)  # a lookup: no FLOPs
    for i in range(layers):
        p = f"model.layers.{i}"
        b.layer([(f"{p}.input_layernorm.weight", d)], RMSNORM_FLOPS * t * d)
        linear(b, f"{p}.self_attn.q_proj", d, q, tokens=t, bias=qkv_bias)
        linear(b, f"{p}.self_attn.k_proj", d, kv, tokens=t, bias=qkv_bias)
        linear(b, f"{p}.self_attn.v_proj", d, kv, tokens=t, bias=qkv_bias)
        b.between(ROPE_FLOPS * t * (q + kv))  # rotary on q and k
        _attention_ops(b, t, q, heads)
        linear(b, f"{p}.self_attn.o_proj", q, d, tokens=t, bias=o_bias)
        b.between(t * d)  # residual add
        b.layer([(f"{p}.post_attention_layernorm.weight", d)], RMSNORM_FLOPS * t * d)
        linear(b, f"{p}.mlp.gate_proj", d, ff, tokens=t, bias=mlp_bias)
        linear(b, f"{p}.mlp.up_proj", d, ff, tokens=t, bias=mlp_bias)
        b.between(SWIGLU_FLOPS * t * ff)
        linear(b, f"{p}.mlp.down_proj", ff, d, tokens=t, bias=mlp_bias)
        b.between(t * d)  # residual add
    b.layer([("model.norm.weight", d)], RMSNORM_FLOPS * t * d)
    if tied:
        # LM head tied to embed_tokens: no tensor of its own, so its matmul goes
        # to the last tensor, model.norm.weight (as for GPT-2).
        b.post(2.0 * t * d * vocab)
    else:
        linear(b, "lm_head", d, vocab, tokens=t, bias=False)


def llama3_1b(b: LayerBuilder) -> str:
    """Llama 3.2 1B: L=16, d=2048, 32 heads, 8 KV heads, FFN 8192, vocab 128256, tied.

    1,235,814,400 parameters; 8192-token sequences (Llama 3's pre-training
    context length).
    """
    _llama(b, layers=16, d=2048, heads=32, kv_heads=8, ff=8192, vocab=128256, seq=8192, tied=True)
    return (
        "Llama 3.2 1B (HF LlamaForCausalLM names, forward order), config.json of "
        "meta-llama/Llama-3.2-1B: hidden_size 2048, num_hidden_layers 16, "
        "num_attention_heads 32, num_key_value_heads 8, intermediate_size 8192, "
        "vocab_size 128256, tie_word_embeddings true; 8192-token sequences (Llama 3 "
        "pre-training context, Dubey et al. arXiv:2407.21783 §3.4). Published: 1.24B params "
        "(model card; 1,235,814,400 exact); forward FLOPs per PaLM arXiv:2204.02311 App. B "
        "(2N + 4LdT per token)."
    )


def llama2_7b(b: LayerBuilder) -> str:
    """Llama 2 7B: L=32, d=4096, 32 heads (no GQA), FFN 11008, vocab 32000, untied.

    6,738,415,616 parameters; 4096-token sequences (Llama 2's context length).
    """
    _llama(b, layers=32, d=4096, heads=32, kv_heads=32, ff=11008, vocab=32000, seq=4096, tied=False)
    return (
        "Llama 2 7B (HF LlamaForCausalLM names, forward order), config.json of "
        "meta-llama/Llama-2-7b-hf: hidden_size 4096, num_hidden_layers 32, "
        "num_attention_heads 32, num_key_value_heads 32, intermediate_size 11008, "
        "vocab_size 32000, tie_word_embeddings false; 4096-token sequences (Touvron et al. "
        "arXiv:2307.09288 Table 1). Published: 6.74B params (6,738,415,616 exact); forward "
        "FLOPs per PaLM arXiv:2204.02311 App. B (2N + 4LdT per token)."
    )
