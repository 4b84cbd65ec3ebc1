"""Workloads from a Hugging Face ``config.json``: the user's transformer, with no weights.

Supported ``model_type`` values and the config keys read (everything else in
the file is ignored):

=====================  ==================================================================
model_type             keys
=====================  ==================================================================
llama, mistral, qwen2  hidden_size, intermediate_size, num_hidden_layers,
                       num_attention_heads, num_key_value_heads (default: heads),
                       head_dim (default hidden_size / heads), vocab_size,
                       tie_word_embeddings (default false), attention_bias (llama,
                       default false; qwen2: q/k/v always have a bias), mlp_bias
                       (default false), max_position_embeddings
gpt2                   n_embd, n_layer, n_head, n_positions (or n_ctx), vocab_size,
                       n_inner (default 4 × n_embd), tie_word_embeddings (must be true)
bert                   hidden_size, num_hidden_layers, num_attention_heads,
                       intermediate_size, vocab_size, max_position_embeddings,
                       type_vocab_size (default 2)
=====================  ==================================================================

Tensor names and their forward order follow ``transformers``
(``LlamaForCausalLM`` / ``MistralForCausalLM`` / ``Qwen2ForCausalLM``,
``GPT2LMHeadModel``, ``BertForPreTraining``), and FLOPs follow the zoo's
counting conventions (:mod:`._builder`): GPT-2 and BERT are built by the zoo's
own builders (:func:`._transformer.gpt2`, :func:`._transformer._bert`) with the
config's sizes, so a config of ``gpt2`` or ``bert-base-uncased`` gives exactly
the zoo's ``gpt2`` / ``bert_base``. One sequence of ``seq_len`` tokens is one
sample; FLOPs per token are ``workload.total_fwd_flops / seq_len``.

Decoders (Llama family): per layer RMSNorm, q/k/v/o projections (grouped-query
attention: k/v project to ``num_key_value_heads × head_dim``), rotary
embedding, full T×T score and value products (as the reference implementations
compute them, the causal mask applied, not exploited; Mistral's
``sliding_window`` is such a mask too), RMSNorm, SwiGLU MLP;
final RMSNorm; the LM head (its own tensor unless tied). BERT: pre-training as
the zoo's ``bert_base`` (masked-LM head on ``round(seq_len × 5/32)`` gathered
positions: google-research/bert ``run_pretraining.py`` uses 20 at 128 and 80
at 512; next-sentence head on the pooled output).

References:
    Hugging Face ``transformers`` ``LlamaConfig``, ``MistralConfig``,
    ``Qwen2Config``, ``GPT2Config``, ``BertConfig`` (the keys and their
    defaults) and the modeling files (the tensors). Touvron et al., "Llama 2",
    arXiv:2307.09288; Jiang et al., "Mistral 7B", arXiv:2310.06825; Qwen
    team, "Qwen2 technical report", arXiv:2407.10671 (q/k/v bias); Zhang &
    Sennrich 2019 (RMSNorm); Shazeer, arXiv:2002.05202 (SwiGLU); Su et al.,
    arXiv:2104.09864 (rotary embedding). Forward FLOPs ≈ 2·N + 4·L·d·T per token
    (Kaplan et al., arXiv:2001.08361, Table 1; PaLM arXiv:2204.02311, App. B).
"""

from __future__ import annotations

import dataclasses
import json
import numbers
import os
import re
from collections.abc import Mapping

from .._errors import InputFileError, read_text_bounded
from . import _transformer
from ._builder import LayerBuilder
from ._workload import Workload

__all__ = ["HF_MODEL_TYPES", "looks_like_hf_config", "workload_from_hf_config"]

#: ``model_type`` values :func:`workload_from_hf_config` reads.
HF_MODEL_TYPES: tuple[str, ...] = ("bert", "gpt2", "llama", "mistral", "qwen2")

#: Default sequence length cap for decoders: 8192 tokens, the pre-training
#: context of Llama 3 (Dubey et al., arXiv:2407.21783, §3.4) and Mistral 7B; a
#: longer ``max_position_embeddings`` comes from long-context continued training.
MAX_DEFAULT_SEQ_LEN = 8192

#: BERT's default: pre-training phase 1 at 128 tokens (Devlin et al. 2019, App. A.2).
BERT_DEFAULT_SEQ_LEN = 128


#: Bounds on a config's sizes, checked before anything is built: a width or
#: vocabulary above 10 million, or more than 10,000 layers, is no real model
#: (and 10**15 would overflow the int64 element counts).
MAX_CONFIG_INT = 10**7
MAX_LAYERS = 10**4
_LAYER_KEYS = ("num_hidden_layers", "n_layer")


def _short(v) -> str:
    """``repr(v)`` cut to 40 characters."""
    r = repr(v)
    return r if len(r) <= 40 else f"{r[:20]}…({len(r)} characters)"


class _Config:
    """Reads keys of one config with errors that name the file (and line) and the key."""

    def __init__(self, doc: Mapping, path: str | None, text: str | None):
        self.doc, self.path, self.text = doc, path, text

    def line(self, key: str) -> int | None:
        if self.text is None:
            return None
        m = re.search(r'"' + re.escape(key) + r'"\s*:', self.text)
        return self.text.count("\n", 0, m.start()) + 1 if m else None

    def fail(self, key: str | None, reason: str):
        if self.path is None:
            raise ValueError(f"Hugging Face config: {reason}")
        raise InputFileError(self.path, self.line(key) if key else None, reason)

    def int(self, key: str, default=None, *, minimum: int = 1) -> int:
        if key not in self.doc or self.doc[key] is None:
            if default is not None:
                return default
            mt = self.doc.get("model_type")
            self.fail(None, f"missing key {key!r} (needed for model_type {mt!r})")
        v = self.doc[key]
        top = MAX_LAYERS if key in _LAYER_KEYS else MAX_CONFIG_INT
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < minimum:
            self.fail(key, f"{key!r} must be an integer >= {minimum}, got {_short(v)}")
        if v > top:  # before any tensor is sized: 10**15 would overflow int64 products
            self.fail(key, f"{key!r} must be <= {top:.0e}, got {_short(v)}")
        return int(v)

    def bool(self, key: str, default: bool) -> bool:
        v = self.doc.get(key, default)
        if v is None:
            return default
        if not isinstance(v, bool):
            self.fail(key, f"{key!r} must be true or false, got {v!r}")
        return v


#: The largest config.json read (a real one is a few KiB).
MAX_CONFIG_BYTES = 4 * 1024**2


def _read(config) -> _Config:
    if isinstance(config, Mapping):
        return _Config(config, None, None)
    if not isinstance(config, str | os.PathLike):
        raise TypeError(
            "workload_from_hf_config: config must be a path to a config.json or a dict, "
            f"got {type(config).__name__}"
        )
    path = os.fspath(config)
    text = read_text_bounded(path, MAX_CONFIG_BYTES, "config.json")
    if not text.strip():
        raise InputFileError(path, None, "the file is empty: expected a Hugging Face config.json")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputFileError(path, e.lineno, f"invalid JSON: {e.msg} (column {e.colno})") from None
    if not isinstance(doc, dict):
        raise InputFileError(
            path, 1, f"expected a JSON object (a config.json), got {type(doc).__name__}"
        )
    return _Config(doc, path, text)


def _decoder(b: LayerBuilder, c: _Config, t: int, model_type: str) -> tuple[int, bool]:
    """A Llama/Mistral/Qwen2 decoder in forward order; returns (layers, tied)."""
    d = c.int("hidden_size")
    layers = c.int("num_hidden_layers")
    heads = c.int("num_attention_heads")
    kv_heads = c.int("num_key_value_heads", heads)
    ff = c.int("intermediate_size")
    vocab = c.int("vocab_size")
    if heads % kv_heads:
        c.fail(
            "num_key_value_heads",
            f"num_attention_heads ({heads}) must be a multiple of num_key_value_heads ({kv_heads})",
        )
    if "head_dim" not in c.doc or c.doc["head_dim"] is None:
        if d % heads:
            c.fail(
                "num_attention_heads",
                f"hidden_size ({d}) is not a multiple of num_attention_heads ({heads}); "
                "give head_dim",
            )
    head_dim = c.int("head_dim", d // heads)
    tied = c.bool("tie_word_embeddings", False)
    qkv_bias = True if model_type == "qwen2" else c.bool("attention_bias", False)
    o_bias = False if model_type == "qwen2" else qkv_bias
    mlp_bias = c.bool("mlp_bias", False)
    _transformer._llama(
        b, layers=layers, d=d, heads=heads, kv_heads=kv_heads, ff=ff, vocab=vocab, seq=t,
        tied=tied, head_dim=head_dim, qkv_bias=qkv_bias, o_bias=o_bias, mlp_bias=mlp_bias,
    )  # fmt: skip
    return layers, tied


def _default_seq(c: _Config, model_type: str) -> int:
    if model_type == "bert":
        return BERT_DEFAULT_SEQ_LEN
    key = "n_positions" if model_type == "gpt2" else "max_position_embeddings"
    if model_type == "gpt2" and key not in c.doc and "n_ctx" in c.doc:
        key = "n_ctx"
    return min(c.int(key), MAX_DEFAULT_SEQ_LEN)


def _name(c: _Config, name: str | None, model_type: str) -> str:
    if name:
        return name
    given = c.doc.get("_name_or_path")
    if isinstance(given, str) and given.strip("/ "):
        return given.rstrip("/").rsplit("/", 1)[-1]
    if c.path is not None:
        stem = os.path.splitext(os.path.basename(c.path))[0]
        if stem and stem != "config":
            return stem
    return model_type


def _model_type(c) -> str:
    """The config's ``model_type``, checked against :data:`HF_MODEL_TYPES`."""
    model_type = c.doc.get("model_type")
    if model_type is None:
        c.fail(None, f"missing key 'model_type' (one of {', '.join(HF_MODEL_TYPES)})")
    if model_type not in HF_MODEL_TYPES:
        c.fail(
            "model_type",
            f"model_type {model_type!r} is not supported; supported: "
            f"{', '.join(HF_MODEL_TYPES)} (or describe the model with a layer file)",
        )
    return model_type


def _seq_len(c, model_type: str, seq_len) -> int:
    """Tokens per sequence: ``seq_len`` checked, or the model type's default."""
    if seq_len is None:
        return _default_seq(c, model_type)
    if isinstance(seq_len, bool) or not isinstance(seq_len, numbers.Integral) or seq_len < 1:
        raise ValueError(f"seq_len must be an integer >= 1 (tokens), got {seq_len!r}")
    return int(seq_len)


def _gpt2(b: LayerBuilder, c, t: int) -> str:
    """GPT-2's layers from its config into ``b``; returns the naming note for ``source``."""
    ctx_key = "n_positions" if "n_positions" in c.doc else "n_ctx"
    d, ctx = c.int("n_embd"), c.int(ctx_key)
    heads = c.int("n_head")
    if d % heads:
        c.fail("n_head", f"n_embd ({d}) is not a multiple of n_head ({heads})")
    if not c.bool("tie_word_embeddings", True):
        c.fail(
            "tie_word_embeddings",
            "tie_word_embeddings false is not supported for gpt2 (GPT2LMHeadModel ties it)",
        )
    if t > ctx:
        c.fail(ctx_key, f"seq_len {t} exceeds the position table ({ctx_key} = {ctx})")
    layers = c.int("n_layer")
    _transformer.gpt2(
        b,
        layers=layers,
        d=d,
        heads=heads,
        vocab=c.int("vocab_size"),
        ctx=ctx,
        seq=t,
        ff=c.int("n_inner", 4 * d),
    )
    return "GPT2LMHeadModel names, tied LM head"


def _bert(b: LayerBuilder, c, t: int) -> str:
    """BERT's layers (pre-training heads) into ``b``; returns the naming note for ``source``."""
    d, positions = c.int("hidden_size"), c.int("max_position_embeddings")
    heads = c.int("num_attention_heads")
    if d % heads:
        c.fail(
            "num_attention_heads",
            f"hidden_size ({d}) is not a multiple of num_attention_heads ({heads})",
        )
    if t > positions:
        c.fail(
            "max_position_embeddings",
            f"seq_len {t} exceeds the position table (max_position_embeddings = {positions})",
        )
    layers = c.int("num_hidden_layers")
    _transformer._bert(
        b,
        layers=layers,
        d=d,
        heads=heads,
        ff=c.int("intermediate_size"),
        vocab=c.int("vocab_size"),
        max_positions=positions,
        seq=t,
        masked=max(1, round(t * 5 / 32)),
        type_vocab=c.int("type_vocab_size", 2),
    )
    return "BertForPreTraining names, MLM on round(seq x 5/32) positions"


def workload_from_hf_config(
    config,
    batch_size: int = 1,
    *,
    seq_len: int | None = None,
    dtype_bytes: int = 4,
    name: str | None = None,
) -> Workload:
    """A workload from a Hugging Face ``config.json`` alone (no weights, no network).

    Parameter tensors come in forward order with ``transformers``' names and
    element counts; forward FLOPs per sample (one sequence of ``seq_len``
    tokens) by the zoo's conventions (FLOPs = 2 × MACs, each layer's FLOPs on
    its last tensor, see :class:`Workload`); ``bwd_flops`` = 2 × ``fwd_flops``.
    The module docstring lists the keys read per ``model_type``.

    Args:
        config: path to a ``config.json``, or the parsed dict.
        batch_size: sequences per worker per step, integer >= 1.
        seq_len: tokens per sequence, integer >= 1; default: for decoders the
            config's context length (``max_position_embeddings``, GPT-2's
            ``n_positions``) capped at 8192; for BERT 128 (pre-training phase 1).
            GPT-2 and BERT must fit their position table (``seq_len`` <= it).
        dtype_bytes: bytes per gradient element, integer >= 1 (fp32 = 4, bf16 = 2).
        name: the workload's name; default: the config's ``_name_or_path``
            (last part), else the file's stem, else the model type.

    Returns:
        The :class:`Workload` (``step_time_s=None``); its ``source`` names the
        file, the model type, the sequence length and the forward FLOPs per token.

    Raises:
        InputFileError: (a ``ValueError``) naming the file and, where there is
            one, the line and the key: unreadable file, invalid JSON, an unknown
            ``model_type``, a missing key, a non-integer or < 1 size, heads that
            do not divide the width, ``seq_len`` beyond GPT-2's/BERT's position table.
        ValueError: the same problems in a dict (the message names the key),
            or an invalid ``batch_size`` / ``dtype_bytes`` / ``seq_len``.
        TypeError: when ``config`` is neither a path nor a dict.

    Example:
        >>> cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
        ...        "n_positions": 1024, "vocab_size": 50257}
        >>> w = workload_from_hf_config(cfg, batch_size=8)
        >>> w.total_params, w.tensor_names[0]    # HF gpt2: 124,439,808
        (124439808, 'transformer.wte.weight')
    """
    c = _read(config)
    model_type = _model_type(c)
    t = _seq_len(c, model_type, seq_len)
    b = LayerBuilder()
    if model_type == "gpt2":
        names = _gpt2(b, c, t)
    elif model_type == "bert":
        names = _bert(b, c, t)
    else:
        _layers, tied = _decoder(b, c, t, model_type)
        names = (
            f"{model_type} *ForCausalLM names, forward order, {'tied' if tied else 'own'} LM head"
        )

    where = c.path if c.path is not None else "a config dict"
    w = b.build(
        _name(c, name, model_type),
        batch_size=batch_size,
        dtype_bytes=dtype_bytes,
        source="",
    )
    per_token = w.total_fwd_flops / t
    source = (
        f"Hugging Face config {where} (model_type {model_type}, {names}), {t}-token "
        f"sequences: {w.total_params:,} params, {per_token / 1e9:.4g} GFLOPs forward per token"
    )
    return dataclasses.replace(w, source=source)


def looks_like_hf_config(text: str) -> bool:
    """Whether a JSON text is a Hugging Face config (has ``model_type``, no ``layers``).

    Used by :func:`load_layers` so that ``--layers``/``--hf-config`` accept a
    ``config.json``. Never raises: text that is not a JSON object is not a config.
    """
    try:
        doc = json.loads(text)
    except ValueError:
        return False
    return isinstance(doc, dict) and "model_type" in doc and "layers" not in doc
