"""Build a workload layer by layer from published layer shapes, applying the attribution rule.

Counting conventions used by every network in the zoo (per sample, forward):

==========================  =====================================================
op                          FLOPs
==========================  =====================================================
convolution / matmul        2 × MACs (MACs = k_h·k_w·c_in/groups per output element)
bias add                    1 per output element
batch / layer norm          7 per element: mean 1, variance 2, normalise 2,
                            scale-and-shift 2 (training mode: batch statistics)
ReLU, residual add          1 per element
GELU (tanh approximation)   8 per element
tanh                        1 per element
max / average pool          k_h·k_w per output element
softmax                     4 per element (subtract max, exp, sum, divide)
attention scale / mask      1 per score each
embedding lookup, concat,   0
dropout, the loss
==========================  =====================================================

Matmuls dominate every network here (> 97 % of the FLOPs), so these choices
move totals by a percent or two at most; the tests check the totals against
published figures.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._workload import Workload

NORM_FLOPS = 7
GELU_FLOPS = 8
SOFTMAX_FLOPS = 4


class LayerBuilder:
    """Accumulates tensors in forward order and attributes FLOPs by the rule.

    - :meth:`layer` adds one parametric layer; its FLOPs, plus any pending
      non-parametric FLOPs, go to its last tensor.
    - :meth:`post` adds FLOPs of ops that directly follow the last layer and
      belong to it (its activation, the pooling right after it).
    - :meth:`between` adds FLOPs of ops between layers (residual adds before a
      norm, attention score/softmax/value products, a pooling that feeds a
      branch); they go to the NEXT layer with parameters, or to the last
      tensor if no layer follows.
    """

    def __init__(self):
        self._names: list[str] = []
        self._counts: list[int] = []
        self._flops: list[float] = []
        self._gemm: list[tuple[float, float]] = []
        self._pending = 0.0
        #: ``Workload.kind`` and ``Workload.transformer`` of what is built (a
        #: builder of the zoo sets them).
        self.kind = ""
        self.transformer = None

    def layer(
        self,
        tensors: Sequence[tuple[str, int]],
        flops: float,
        gemm: tuple[float, float] | None = None,
    ) -> None:
        """Add one layer: ``tensors`` = [(name, element count), ...] in forward order.

        ``gemm``: the layer's matrix product as (rows per sample, the smaller of
        its other two dimensions), ``Workload.gemm_dims`` of its last tensor; None
        for a layer without one (a norm).
        """
        if not tensors:
            raise ValueError("a layer needs at least one parameter tensor")
        for name, count in tensors:
            self._names.append(name)
            self._counts.append(int(count))
            self._flops.append(0.0)
            self._gemm.append((0.0, 0.0))
        self._flops[-1] = float(flops) + self._pending
        if gemm is not None:
            self._gemm[-1] = (float(gemm[0]), float(gemm[1]))
        self._pending = 0.0

    def post(self, flops: float) -> None:
        """FLOPs of ops that belong to the most recently added layer."""
        if not self._flops:
            raise ValueError("post() before any layer")
        self._flops[-1] += float(flops)

    def between(self, flops: float) -> None:
        """FLOPs of ops before the next layer (attributed to it)."""
        self._pending += float(flops)

    def build(
        self,
        name: str,
        *,
        batch_size: int,
        dtype_bytes: int,
        source: str,
        kind: str | None = None,
        transformer=None,
    ) -> Workload:
        flops = list(self._flops)
        flops[-1] += self._pending  # ops after the last layer go to the last tensor
        fwd = np.asarray(flops, dtype=np.float64)
        return Workload(
            name=name,
            tensor_names=tuple(self._names),
            param_counts=np.asarray(self._counts, dtype=np.int64),
            fwd_flops=fwd,
            bwd_flops=2.0 * fwd,
            batch_size=batch_size,
            dtype_bytes=dtype_bytes,
            source=source,
            kind=self.kind if kind is None else kind,
            transformer=self.transformer if transformer is None else transformer,
            gemm_dims=np.asarray(self._gemm, dtype=np.float64)
            if any(map(any, self._gemm))
            else None,
        )


def dense_gemm(fin: int, fout: int, tokens: int = 1) -> tuple[float, float]:
    """A dense layer's matrix product as ``Workload.gemm_dims``' row: (rows per sample,
    the smaller other dimension) = (tokens, min(in, out)); at batch b its smallest
    dimension is min(b·tokens, in, out)."""
    return float(tokens), float(min(fin, fout))


def conv_gemm(out_hw: tuple[int, int], cin: int, cout: int, kernel) -> tuple[float, float]:
    """A convolution's implicit GEMM, (N·H·W) × (C_in·k_h·k_w) by (C_in·k_h·k_w) × C_out
    (Chetlur et al., "cuDNN", arXiv:1410.0759, §3), as ``Workload.gemm_dims``' row:
    (output pixels H·W, min(C_out, C_in·k_h·k_w))."""
    kh, kw = _pair(kernel)
    return float(out_hw[0] * out_hw[1]), float(min(cout, cin * kh * kw))


def _pair(x) -> tuple[int, int]:
    return (x, x) if isinstance(x, int) else (int(x[0]), int(x[1]))


def conv2d(
    b: LayerBuilder,
    prefix: str,
    cin: int,
    cout: int,
    kernel,
    hw: tuple[int, int],
    *,
    stride=1,
    padding=0,
    bias: bool = False,
) -> tuple[int, int]:
    """Add a Conv2d layer (tensors ``prefix.weight`` [, ``prefix.bias``]); return output (h, w)."""
    kh, kw = _pair(kernel)
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    h = (hw[0] + 2 * ph - kh) // sh + 1
    w = (hw[1] + 2 * pw - kw) // sw + 1
    outputs = h * w * cout
    flops = 2.0 * outputs * kh * kw * cin
    tensors = [(f"{prefix}.weight", cout * cin * kh * kw)]
    if bias:
        tensors.append((f"{prefix}.bias", cout))
        flops += outputs
    b.layer(tensors, flops, gemm=conv_gemm((h, w), cin, cout, kernel))
    return h, w


def batchnorm(b: LayerBuilder, prefix: str, c: int, hw: tuple[int, int], *, relu: bool) -> None:
    """Add a BatchNorm2d layer (``prefix.weight``, ``prefix.bias``), optionally with its ReLU."""
    elements = c * hw[0] * hw[1]
    b.layer([(f"{prefix}.weight", c), (f"{prefix}.bias", c)], NORM_FLOPS * elements)
    if relu:
        b.post(elements)


def linear(
    b: LayerBuilder, prefix: str, fin: int, fout: int, *, tokens: int = 1, bias: bool = True
) -> None:
    """Add a Linear layer applied to ``tokens`` positions per sample."""
    tensors = [(f"{prefix}.weight", fin * fout)]
    flops = 2.0 * tokens * fin * fout
    if bias:
        tensors.append((f"{prefix}.bias", fout))
        flops += tokens * fout
    b.layer(tensors, flops, gemm=dense_gemm(fin, fout, tokens))


def layernorm(b: LayerBuilder, prefix: str, d: int, *, tokens: int) -> None:
    """Add a LayerNorm layer (``prefix.weight``, ``prefix.bias``) over ``tokens`` positions."""
    b.layer([(f"{prefix}.weight", d), (f"{prefix}.bias", d)], NORM_FLOPS * tokens * d)


def pool_out(hw: tuple[int, int], kernel: int, stride: int, padding: int = 0) -> tuple[int, int]:
    """Output (h, w) of a k×k pooling (floor mode, as PyTorch's default)."""
    return tuple((x + 2 * padding - kernel) // stride + 1 for x in hw)  # type: ignore[return-value]
