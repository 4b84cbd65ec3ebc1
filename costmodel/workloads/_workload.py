"""The :class:`Workload` type: what one data-parallel worker computes and exchanges per step.

A workload is a list of parameter tensors in forward order, each with its
element count (the gradient that must be exchanged) and the forward/backward
FLOPs per sample attributed to it (when the gradient becomes ready during
backward). The iteration timeline packs the gradients into buckets in reverse
order and overlaps their communication with the remaining backward compute.

FLOP conventions (shared by the zoo and the loaders):

- FLOPs = 2 × MACs: one multiply-accumulate is two floating-point operations.
  Published "FLOPs" of CNNs (torchvision's ``GFLOPS``, most papers) are usually
  MACs; the zoo converts them and says so where it cites them.
- Attribution rule: each layer's FLOPs — its weights' multiply-adds and the
  non-parametric ops that belong to it (activation, pooling, attention
  score/value products, softmax, normalisation) — are attributed to that layer's
  LAST parameter tensor in forward order; its other tensors get 0.
  Non-parametric ops between layers go to the next layer that has parameters;
  ops after the last layer go to the last tensor.
- ``bwd_flops`` defaults to 2 × ``fwd_flops`` (gradients with respect to the
  inputs and to the weights each cost about one forward).
"""

from __future__ import annotations

import dataclasses
import math
import numbers

import numpy as np
from jaxtyping import Float, Int

__all__ = ["Workload", "TransformerShape", "WORKLOAD_KINDS", "CHECKPOINTING"]

#: Activation checkpointing modes (``Workload.activation_checkpointing``):
#: Korthikanti et al. 2022's none, selective (attention core) and full recompute.
CHECKPOINTING = ("none", "selective", "full")

#: Kinds of model a workload may declare (``Workload.kind``).
WORKLOAD_KINDS = ("cnn", "transformer", "mlp")


@dataclasses.dataclass(frozen=True)
class TransformerShape:
    """The shape of a transformer stack, for its activation memory.

    Attributes:
        layers: transformer layers L ≥ 1.
        hidden: model width h ≥ 1.
        heads: attention heads a ≥ 1.
        seq_len: tokens per sample s ≥ 1.
        ffn: MLP inner width f ≥ 1 (4h in GPT/BERT).
        gated: a gated MLP (SwiGLU: gate and up projections, Llama) instead of
            one activation (GeLU).
        vocab: vocabulary size v ≥ 1 (the output logits), 0 when the model has
            no LM head in the workload.
        dropout: the layers apply dropout (GPT/BERT pre-training) and keep
            its masks; Llama does not.
    """

    layers: int
    hidden: int
    heads: int
    seq_len: int
    ffn: int
    gated: bool = False
    vocab: int = 0
    dropout: bool = True

    def __post_init__(self):
        for f in ("layers", "hidden", "heads", "seq_len", "ffn"):
            _as_int(f"transformer.{f}", getattr(self, f), minimum=1)
        _as_int("transformer.vocab", self.vocab, minimum=0)


def _as_int(field: str, value, *, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ValueError(
            f"Workload.{field} must be an integer >= {minimum}, got {value!r} "
            f"({type(value).__name__})."
        )
    value = int(value)
    if value < minimum:
        raise ValueError(f"Workload.{field} must be >= {minimum}, got {value}.")
    return value


def _first_bad(mask: np.ndarray, values: np.ndarray, names: tuple[str, ...]) -> str:
    i = int(np.flatnonzero(mask)[0])
    name = names[i] if i < len(names) else "?"
    return f"index {i} ({name!r}) = {values[i]!r}"


def _read_only(array: np.ndarray) -> np.ndarray:
    array = np.array(array, copy=True)
    array.setflags(write=False)
    return array


def _check_tensor_names(tensor_names) -> tuple[str, ...]:
    """``Workload.tensor_names`` as a tuple: >= 1 distinct non-empty strings."""
    if isinstance(tensor_names, str):
        raise ValueError(
            "Workload.tensor_names must be a sequence of strings, got the single string "
            f"{tensor_names!r}."
        )
    names = tuple(tensor_names)
    if not names:
        raise ValueError("Workload.tensor_names is empty: a workload needs >= 1 tensor.")
    for i, n in enumerate(names):
        if not isinstance(n, str) or not n:
            raise ValueError(f"Workload.tensor_names[{i}] must be a non-empty string, got {n!r}.")
    if len(set(names)) != len(names):
        seen: set[str] = set()
        dup = next(n for n in names if n in seen or seen.add(n))
        raise ValueError(f"Workload.tensor_names has the duplicate name {dup!r}.")
    return names


def _check_param_counts(param_counts, names: tuple[str, ...]) -> np.ndarray:
    """``Workload.param_counts`` as int64, one integer >= 1 per tensor of ``names``."""
    t = len(names)
    counts = np.asarray(param_counts)
    if counts.shape != (t,):
        raise ValueError(
            f"Workload.param_counts must have shape ({t},) like tensor_names, "
            f"got shape {counts.shape}."
        )
    if counts.dtype.kind == "f":
        bad = ~np.isfinite(counts) | (counts != np.round(counts))
        if bad.any():
            raise ValueError(
                "Workload.param_counts must hold integers, got " + _first_bad(bad, counts, names)
            )
    elif counts.dtype.kind not in "iu":
        raise ValueError(
            f"Workload.param_counts must be an integer array, got dtype {counts.dtype}."
        )
    counts = counts.astype(np.int64)
    if (counts < 1).any():
        raise ValueError(
            "Workload.param_counts must be >= 1 for every tensor, got "
            + _first_bad(counts < 1, counts, names)
        )
    return counts


def _check_flops(field: str, value, names: tuple[str, ...]) -> np.ndarray:
    """``Workload.<field>`` (FLOPs per sample) as float64, finite and >= 0 per tensor."""
    t = len(names)
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"Workload.{field} must be a numeric array, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if arr.shape != (t,):
        raise ValueError(
            f"Workload.{field} must have shape ({t},) like tensor_names, got shape {arr.shape}."
        )
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        raise ValueError(
            f"Workload.{field} must be finite and >= 0 (FLOPs per sample), got "
            + _first_bad(bad, arr, names)
        )
    return arr


def gemm_groups(workload) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A workload's GEMMs grouped by shape: (q, r, w), each float64 (G,).

    q_g is the share of the forward FLOPs carried by tensors whose
    ``gemm_dims`` row is (r_g, w_g) (rows per sample, the smaller other
    dimension), over all forward FLOPs; tensors without a GEMM are left out
    (G = 0 when ``gemm_dims`` is None or there are no FLOPs). Backward FLOPs are
    2× forward per tensor in every workload built here, so one set serves both.
    """
    fwd = workload.fwd_flops
    total = float(fwd.sum())
    if workload.gemm_dims is None or total <= 0:
        return np.zeros(0), np.zeros(0), np.zeros(0)
    dims = workload.gemm_dims
    gemm = (dims[:, 0] > 0) & (dims[:, 1] > 0) & (fwd > 0)
    keys, inverse = np.unique(dims[gemm], axis=0, return_inverse=True)
    q = np.bincount(inverse.reshape(-1), weights=fwd[gemm], minlength=len(keys)) / total
    return q, keys[:, 0].copy(), keys[:, 1].copy()


def small_gemm_at(q, rows, width, micro_batch):
    """u = Σ_g q_g / min(b·r_g, w_g), 1/elements, at micro-batch b (an array, any shape).

    The FLOP-weighted mean of 1/m over a workload's GEMMs (:func:`gemm_groups`),
    m = min(b·r, w) the smallest dimension of each; the namespace of ``q``
    (numpy or jax.numpy, :mod:`costmodel._xp`). 0 where there are none (G = 0).
    """
    from .._xp import xp_of

    xp = xp_of(q, micro_batch)
    b = xp.asarray(micro_batch)
    if q.shape[-1] == 0:
        return xp.zeros_like(b)
    m = xp.minimum(b[..., None] * rows, width)
    return xp.sum(q / m, axis=-1)


def _check_gemm_dims(value, names: tuple[str, ...], fwd_flops: np.ndarray) -> np.ndarray:
    """``Workload.gemm_dims`` as float64 (T, 2): each row (0, 0), or two dimensions ≥ 1 on a
    tensor with forward FLOPs."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise ValueError(f"Workload.gemm_dims must be a numeric array, got dtype {arr.dtype}.")
    arr = arr.astype(np.float64)
    if arr.shape != (len(names), 2):
        raise ValueError(
            f"Workload.gemm_dims must have shape ({len(names)}, 2) (rows per sample, smaller "
            f"other dimension per tensor), got shape {arr.shape}."
        )
    none = (arr == 0).all(axis=1)
    dims = np.isfinite(arr).all(axis=1) & (arr >= 1).all(axis=1) & (fwd_flops > 0)
    bad = ~(none | dims)
    if bad.any():
        i = int(np.argmax(bad))
        raise ValueError(
            f"Workload.gemm_dims must be (0, 0) or two finite dimensions >= 1 on a tensor with "
            f"fwd_flops > 0, got {arr[i].tolist()} for tensor {names[i]!r} "
            f"(fwd_flops {fwd_flops[i]:g})."
        )
    return arr


def _check_step_time(s) -> float:
    """``Workload.step_time_s`` (when given) as a float: finite seconds > 0."""
    if isinstance(s, bool) or not isinstance(s, numbers.Real) or not math.isfinite(s):
        raise ValueError(
            f"Workload.step_time_s must be a finite number of seconds > 0 or None, got {s!r}."
        )
    if s <= 0:
        raise ValueError(f"Workload.step_time_s must be > 0 seconds, got {s!r}.")
    return float(s)


@dataclasses.dataclass(frozen=True)
class Workload:
    """One model's per-worker training step, as the cost model sees it.

    Attributes:
        name: short identifier (e.g. ``"resnet50"``), non-empty.
        tensor_names: names of the T parameter tensors in FORWARD order
            (T >= 1, unique), e.g. ``("conv1.weight", "bn1.weight", ...)``.
        param_counts: int64, shape (T,): elements per tensor, all >= 1. Tied
            tensors (GPT-2's embedding/LM head) appear once.
        fwd_flops: float64, shape (T,): forward FLOPs PER SAMPLE attributed to
            each tensor (FLOPs = 2 × MACs; see the module docstring for the
            attribution rule), finite and >= 0. May be all zero when
            ``step_time_s`` is given.
        bwd_flops: float64, shape (T,): backward FLOPs per sample, finite and
            >= 0. Passing ``None`` uses 2 × ``fwd_flops``.
        batch_size: samples per worker per step, >= 1.
        dtype_bytes: bytes per gradient element (fp32 = 4, bf16/fp16 = 2), >= 1.
        step_time_s: measured single-worker step time in seconds at
            ``batch_size`` (finite, > 0), or ``None``. When given it replaces the
            FLOP-based compute time; the per-tensor FLOPs then only say *when*
            each gradient becomes ready.
        source: citation of the layer shapes / published figures.
        kind: the kind of model, ``""`` (unknown), ``"cnn"``, ``"transformer"``
            or ``"mlp"``: the device presets' utilisation depends on it
            (:func:`costmodel.device_flops_per_s`).
        transformer: the shape of a transformer (:class:`TransformerShape`:
            layers, width, heads, tokens per sample, …), or ``None``: what its
            activation memory is computed from (:func:`costmodel.activation_bytes`).
        accumulation_steps: K ≥ 1 micro-batches per optimizer step: ``batch_size``
            samples per worker per step are K micro-batches of batch_size / K, and
            the timeline runs K forward/backward passes per step, exchanging as
            each architecture does under accumulation (:func:`costmodel.accumulated_workload`).
        activation_checkpointing: ``"none"``, ``"selective"`` or ``"full"``
            (:func:`costmodel.with_activation_checkpointing`, which also adds
            the recompute FLOPs): what :func:`costmodel.activation_bytes` keeps.
        gemm_dims: float64, shape (T, 2), or ``None`` (unknown): for the tensor
            that carries a layer's FLOPs, the matrix product's rows per sample
            r (1 for a dense layer on one vector, the tokens of a sequence, a
            convolution's output pixels H·W as its implicit GEMM) and the smaller
            of its other two dimensions w (a dense layer's min(in, out), a
            convolution's min(C_out, C_in·k_h·k_w)); 0 where the tensor carries
            no GEMM. The GEMM's smallest dimension at micro-batch b is
            min(b·r, w) (:meth:`small_gemm`, ``ClusterParams.gemm_half_dim``).

    The arrays are copied and made read-only, so a Workload is immutable.
    Equality compares every field (arrays element-wise); instances are hashable.

    Raises:
        ValueError: from the constructor, naming the field and the bad value,
            when any of the constraints above is violated.

    Example:
        >>> w = Workload("mlp", ("fc.weight", "fc.bias"), np.array([784 * 10, 10]),
        ...              np.array([0.0, 2 * 784 * 10 + 10]), None, batch_size=32)
        >>> w.total_params, w.total_param_bytes, w.total_bwd_flops
        (7850, 31400, 31380.0)
    """

    name: str
    tensor_names: tuple[str, ...]
    param_counts: Int[np.ndarray, " T"]
    fwd_flops: Float[np.ndarray, " T"]
    bwd_flops: Float[np.ndarray, " T"]
    batch_size: int
    dtype_bytes: int = 4
    step_time_s: float | None = None
    source: str = ""
    kind: str = ""
    transformer: TransformerShape | None = None
    accumulation_steps: int = 1
    activation_checkpointing: str = "none"
    gemm_dims: Float[np.ndarray, "T 2"] | None = None

    def __post_init__(self):
        set_ = object.__setattr__
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"Workload.name must be a non-empty string, got {self.name!r}.")
        names = _check_tensor_names(self.tensor_names)
        set_(self, "tensor_names", names)
        set_(self, "param_counts", _read_only(_check_param_counts(self.param_counts, names)))
        fwd = _check_flops("fwd_flops", self.fwd_flops, names)
        set_(self, "fwd_flops", _read_only(fwd))
        bwd_value = 2.0 * fwd if self.bwd_flops is None else self.bwd_flops
        set_(self, "bwd_flops", _read_only(_check_flops("bwd_flops", bwd_value, names)))
        set_(self, "batch_size", _as_int("batch_size", self.batch_size, minimum=1))
        set_(self, "dtype_bytes", _as_int("dtype_bytes", self.dtype_bytes, minimum=1))
        if self.step_time_s is not None:
            set_(self, "step_time_s", _check_step_time(self.step_time_s))
        if not isinstance(self.source, str):
            raise ValueError(f"Workload.source must be a string, got {self.source!r}.")
        if self.kind not in ("", *WORKLOAD_KINDS):
            raise ValueError(
                f"Workload.kind must be one of {', '.join(WORKLOAD_KINDS)} (or ''), "
                f"got {self.kind!r}."
            )
        set_(
            self,
            "accumulation_steps",
            _as_int("accumulation_steps", self.accumulation_steps, minimum=1),
        )
        if self.activation_checkpointing not in CHECKPOINTING:
            raise ValueError(
                f"Workload.activation_checkpointing must be one of {', '.join(CHECKPOINTING)}, "
                f"got {self.activation_checkpointing!r}."
            )
        if self.transformer is not None and not isinstance(self.transformer, TransformerShape):
            raise ValueError(
                f"Workload.transformer must be a TransformerShape or None, got {self.transformer!r}."
            )
        if self.gemm_dims is not None:
            dims = _check_gemm_dims(self.gemm_dims, names, self.fwd_flops)
            set_(self, "gemm_dims", _read_only(dims))

    # -- derived quantities ------------------------------------------------------------

    @property
    def num_tensors(self) -> int:
        """T, the number of parameter tensors."""
        return len(self.tensor_names)

    @property
    def param_bytes(self) -> Int[np.ndarray, " T"]:
        """int64, shape (T,): gradient bytes per tensor = param_counts × dtype_bytes."""
        return self.param_counts * np.int64(self.dtype_bytes)

    @property
    def total_params(self) -> int:
        """Total number of parameters (elements), an int."""
        return int(self.param_counts.sum())

    @property
    def total_param_bytes(self) -> int:
        """Total gradient bytes exchanged per step per worker (before any compression)."""
        return self.total_params * self.dtype_bytes

    @property
    def total_fwd_flops(self) -> float:
        """Forward FLOPs per sample (sum over tensors)."""
        return float(self.fwd_flops.sum())

    @property
    def total_bwd_flops(self) -> float:
        """Backward FLOPs per sample (sum over tensors)."""
        return float(self.bwd_flops.sum())

    def small_gemm(self, batch_size=None) -> float:
        """u = Σ F_l / m_l / Σ F_l, 1/elements: the FLOP-weighted mean of 1/m over the layers.

        m_l = min(b·r_l, w_l) is layer l's smallest GEMM dimension at the
        micro-batch b = ``batch_size`` / ``accumulation_steps`` (``gemm_dims``);
        tensors without a GEMM count as m = ∞. A step's compute then takes
        F·(1 + m½·u) / ``flops_per_s`` (:meth:`costmodel.ClusterParams.compute_time`:
        a GEMM of smallest dimension m runs at m / (m + m½) of the rate, Hockney's
        n½). 0 when ``gemm_dims`` is ``None`` or the workload has no FLOPs.

        Args:
            batch_size: samples per worker per step, ≥ 1 (default the workload's).

        Example:
            >>> w = Workload("fc", ("w",), np.array([512 * 10]), np.array([2.0 * 512 * 10]),
            ...              None, batch_size=64, gemm_dims=np.array([[1.0, 10.0]]))
            >>> w.small_gemm()      # min(64 · 1, 10) = 10
            0.1
        """
        b = (self.batch_size if batch_size is None else batch_size) / self.accumulation_steps
        return float(small_gemm_at(*gemm_groups(self), np.asarray(b, dtype=np.float64)))

    # -- copies with one thing changed ---------------------------------------------------

    def with_batch_size(self, batch_size: int) -> Workload:
        """The same workload at another per-worker batch size (>= 1).

        A measured ``step_time_s`` is rescaled in proportion to the batch size
        (constant time per sample). That is exact only when compute-bound with
        the device already saturated; re-measure for accurate results.

        Raises:
            ValueError: when ``batch_size`` is not an integer >= 1.
        """
        batch_size = _as_int("batch_size", batch_size, minimum=1)
        step = self.step_time_s
        if step is not None:
            step = step * batch_size / self.batch_size
        return dataclasses.replace(self, batch_size=batch_size, step_time_s=step)

    def with_step_time(self, step_time_s: float | None) -> Workload:
        """The same workload with a measured single-worker step time (s, > 0), or None to clear.

        Raises:
            ValueError: when ``step_time_s`` is not finite and > 0.
        """
        return dataclasses.replace(self, step_time_s=step_time_s)

    def with_dtype_bytes(self, dtype_bytes: int) -> Workload:
        """The same workload with another gradient element size in bytes (>= 1).

        Raises:
            ValueError: when ``dtype_bytes`` is not an integer >= 1.
        """
        return dataclasses.replace(self, dtype_bytes=dtype_bytes)

    # -- dunder methods (arrays make the generated ones unusable) ------------------------

    def __eq__(self, other) -> bool:
        if not isinstance(other, Workload):
            return NotImplemented
        return (
            self.name == other.name
            and self.tensor_names == other.tensor_names
            and np.array_equal(self.param_counts, other.param_counts)
            and np.array_equal(self.fwd_flops, other.fwd_flops)
            and np.array_equal(self.bwd_flops, other.bwd_flops)
            and self.batch_size == other.batch_size
            and self.dtype_bytes == other.dtype_bytes
            and self.step_time_s == other.step_time_s
            and self.source == other.source
            and self.kind == other.kind
            and self.transformer == other.transformer
            and self.accumulation_steps == other.accumulation_steps
            and self.activation_checkpointing == other.activation_checkpointing
            and (
                np.array_equal(self.gemm_dims, other.gemm_dims)
                if self.gemm_dims is not None and other.gemm_dims is not None
                else self.gemm_dims is other.gemm_dims
            )
        )

    def __hash__(self) -> int:
        return hash(
            (
                self.name,
                self.tensor_names,
                self.param_counts.tobytes(),
                self.fwd_flops.tobytes(),
                self.bwd_flops.tobytes(),
                self.batch_size,
                self.dtype_bytes,
                self.step_time_s,
                self.source,
                self.kind,
                self.transformer,
                self.accumulation_steps,
                self.activation_checkpointing,
                None if self.gemm_dims is None else self.gemm_dims.tobytes(),
            )
        )

    def __repr__(self) -> str:
        step = "None" if self.step_time_s is None else f"{self.step_time_s:.6g}"
        return (
            f"Workload(name={self.name!r}, tensors={self.num_tensors}, "
            f"params={self.total_params}, fwd_flops_per_sample={self.total_fwd_flops:.4g}, "
            f"batch_size={self.batch_size}, dtype_bytes={self.dtype_bytes}, step_time_s={step}"
            + (
                f", accumulation_steps={self.accumulation_steps})"
                if self.accumulation_steps > 1
                else ")"
            )
        )
