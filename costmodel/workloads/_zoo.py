"""The model zoo: workloads of well-known networks, built from their published layer shapes."""

from __future__ import annotations

import functools

from .._errors import format_choices
from . import _cnn, _transformer
from ._builder import LayerBuilder
from ._names import WORKLOAD_NAMES
from ._workload import Workload

__all__ = ["WORKLOAD_NAMES", "get_workload"]

_BUILDERS = {
    "alexnet": _cnn.alexnet,
    "vgg16": _cnn.vgg16,
    "resnet18": _cnn.resnet("resnet18"),
    "resnet34": _cnn.resnet("resnet34"),
    "resnet50": _cnn.resnet("resnet50"),
    "resnet101": _cnn.resnet("resnet101"),
    "resnet152": _cnn.resnet("resnet152"),
    "inception_v3": _cnn.inception_v3,
    "bert_base": _transformer.bert_base,
    "bert_large": _transformer.bert_large,
    "gpt2": _transformer.gpt2,
    "llama3_1b": _transformer.llama3_1b,
    "llama2_7b": _transformer.llama2_7b,
}

# WORKLOAD_NAMES (the names accepted by get_workload) live in ._names, pure
# Python, so that listing them imports neither numpy nor this zoo.
assert tuple(_BUILDERS) == WORKLOAD_NAMES


def _canonical(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch not in "-_ ")


_BY_CANONICAL = {_canonical(n): n for n in WORKLOAD_NAMES}


@functools.cache
def _base(name: str) -> Workload:
    b = LayerBuilder()
    source = _BUILDERS[name](b)
    return b.build(name, batch_size=1, dtype_bytes=4, source=source, kind=b.kind or "cnn")


def get_workload(name: str, batch_size: int = 64, dtype_bytes: int = 4) -> Workload:
    """A zoo workload, built from the network's published layer shapes.

    Image models: ImageNet-1k, 224×224 input (Inception v3: 299×299), one image
    per sample, tensor names as torchvision's ``named_parameters()``. BERT:
    pre-training at sequence length 128 (MLM on 20 masked positions); GPT-2:
    1024-token sequences; Llama 3.2 1B: 8192; Llama 2 7B: 4096; one sequence
    per sample, names as Hugging Face's.
    Forward FLOPs are per sample, FLOPs = 2 × MACs, attributed to each layer's
    last tensor (see :class:`Workload`); ``bwd_flops`` = 2 × ``fwd_flops``.
    ``source`` cites the published parameter counts and FLOPs.

    Args:
        name: one of :data:`WORKLOAD_NAMES`, ignoring case, ``-`` and ``_`` (``"ResNet-50"``):
            alexnet, vgg16, resnet18/34/50/101/152, inception_v3, bert_base,
            bert_large, gpt2, llama3_1b (Llama 3.2 1B, 8192-token sequences),
            llama2_7b (Llama 2 7B, 4096-token sequences).
        batch_size: samples per worker per step, integer >= 1.
        dtype_bytes: bytes per gradient element, integer >= 1 (fp32 = 4, bf16 = 2).

    Returns:
        The :class:`Workload`, with ``step_time_s=None``.

    Raises:
        ValueError: on an unknown name (the message lists the valid names), or
            an invalid ``batch_size`` / ``dtype_bytes``.

    Example:
        >>> w = get_workload("resnet50", batch_size=32)
        >>> w.total_params  # torchvision: 25,557,032
        25557032
        >>> round(w.total_fwd_flops / 2e9, 2)  # GMACs per image; torchvision: 4.09
        4.14
        >>> w.tensor_names[:3], w.num_tensors
        (('conv1.weight', 'bn1.weight', 'bn1.bias'), 161)
    """
    key = _BY_CANONICAL.get(_canonical(name)) if isinstance(name, str) else None
    if key is None:
        raise ValueError(
            f"unknown model {name!r}; valid names: {format_choices(WORKLOAD_NAMES, name)}. "
            "For your own model use load_layers(path) or workload_from_pytree(params)."
        )
    base = _base(key)
    if batch_size == base.batch_size and dtype_bytes == base.dtype_bytes:
        return base
    return base.with_batch_size(batch_size).with_dtype_bytes(dtype_bytes)
