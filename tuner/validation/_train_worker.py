"""The training program of ``ddltune validate``: real synchronous data-parallel SGD.

Run as ``python -m tuner.validation._train_worker --config FILE`` in every process
of a run started by :func:`launch.launch_local` (the parent side is
:mod:`tuner.validation._harness`). Each worker process computes real gradients of a
real model (an equinox MLP or a small CNN, on synthetic inputs) and the
processes exchange them with one of three architectures, every exchange written
as JAX collectives inside one ``jax.shard_map`` program over a one-axis mesh
``"r"`` of one device per process (gloo on CPU):

* ``ring`` — gradients packed into buckets of at most ``bucket_bytes`` in
  reverse layer order (PyTorch DDP's rule: a tensor is never split, one larger
  than the cap is a bucket of its own, ``bucket_bytes = 0`` is one bucket per
  tensor), one all-reduce (``lax.psum``) per bucket, then the optimizer update
  on every worker (Sergeev & Del Balso 2018; Li et al., VLDB 2020).
* ``hierarchical`` — the ring's buckets, each all-reduced in three phases over
  a two-axis mesh ``("node", "local")`` of the hosts' ranks
  (:meth:`launch.Ranks.node_mesh`): a reduce-scatter within the node
  (``lax.all_to_all`` of the g shards and a sum: XLA:CPU's gloo
  ``psum_scatter`` returns wrong values when several groups run at once,
  jax-ml/jax#40830), a
  ``lax.psum`` of the node's 1/g shard across nodes (g such all-reduces side
  by side, one per local rank, sharing the node's NIC), ``lax.all_gather``
  within the node (Goyal et al., arXiv 1706.02677, §4; Horovod's
  ``HOROVOD_HIERARCHICAL_ALLREDUCE``).
* ``p2p`` — every worker owns 1/n of each bucket: ``lax.all_to_all`` of the
  gradient shards (or ``lax.psum_scatter`` with ``p2p_exchange:
  "reduce_scatter"``), the owner sums and updates its shard, then
  ``lax.all_gather`` of the parameters (Alqahtani & Demirbas, arXiv
  1909.02061, §3 P2P).
* ``ps`` — k parameter servers, each owning 1/k of each bucket; dedicated
  (processes ``n … n+k−1`` that only aggregate and update) or colocated on
  workers ``0 … k−1``. Workers push each gradient shard to its server and pull
  the updated parameter shard back; every transfer is a ``lax.ppermute`` into
  (push) or out of (pull) the servers — the collector's ``ps_push`` /
  ``ps_pull`` patterns, generalised to k servers as n rounds in which server j
  exchanges with worker (j + t) mod n (Li et al., OSDI 2014).

An exchange in which two ranks send to each other (P2P's all-to-all, its
all-gather at n = 2, a parameter-server round with a pair both ways) first
passes two small all-reduces (:func:`start_together`), so that no rank starts its
half of the swap late: XLA:CPU's gloo swap then runs one direction after the
other, twice its wire time, an artifact of that stack and not of any network.

The exchanged value is the mean gradient over workers (each worker's loss is
the mean over its batch), so one step equals single-process training on the
concatenated batch (:func:`reference_step`); the optimizer is optax SGD with
momentum, which acts element by element, so a sharded update equals the full one.

Timing (as the collector's): every configuration is compiled ahead of time
(``compile_s``); then, in ``repeats`` rounds over all configurations (so that
a burst of other load spreads over them), each runs ``warmup_steps`` times
untimed, then ``steps`` times; every
timed step is preceded by a barrier (a psum of a few floats) that carries every
rank's time of the previous step, and ``block_until_ready`` precedes each clock
read, so a sample is the slowest rank's step. Rank 0 sends one
``{"type": "step", ...}`` message per configuration with the raw samples.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
import time
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import PartitionSpec as P

from calibration import provenance
from costmodel.workloads import conv_gemm, dense_gemm
from launch import (
    Ranks,
    heartbeat,
    hierarchical_psum,
    start_together,
    worker_main,
)

__all__ = [
    "ARCHITECTURES",
    "MODELS",
    "DEFAULT_MODEL_SIZES",
    "build_model",
    "model_layers",
    "make_batch",
    "loss_fn",
    "bucket_indices",
    "reference_step",
    "run",
    "main",
]

#: Architectures the harness implements (names as in :data:`costmodel.ARCHITECTURE_NAMES`).
ARCHITECTURES = ("ps", "p2p", "ring", "hierarchical")
#: Models the harness trains.
MODELS = ("mlp", "cnn")
#: Default sizes of each model (any key can be overridden by a model spec).
DEFAULT_MODEL_SIZES = {
    "mlp": {"in": 784, "width": 512, "depth": 3, "classes": 10, "batch_size": 32},
    "cnn": {
        "image": 16,
        "in_channels": 3,
        "channels": 32,
        "depth": 3,
        "classes": 10,
        "batch_size": 16,
        "kernel": 3,
    },
}
_DTYPE_BYTES = 4  # float32 parameters and gradients


# --------------------------------------------------------------------------- models


def model_spec(spec: dict | str) -> dict:
    """A complete model spec: the defaults of its model with ``spec``'s keys on top.

    Args:
        spec: ``"mlp"``/``"cnn"`` or a dict with ``"model"`` and any of the size
            keys of :data:`DEFAULT_MODEL_SIZES` (all integers ≥ 1).

    Raises:
        ValueError: on an unknown model or key, a size that is not an integer in
            [1, its bound] (:data:`MAX_MODEL_SIZES`, else :data:`MAX_MODEL_SIZE`),
            or more than :data:`MAX_MODEL_PARAMS` parameters in all.

    Example:
        >>> model_spec({"model": "mlp", "width": 64})["width"]
        64
    """
    if isinstance(spec, str):
        spec = {"model": spec}
    name = spec.get("model")
    if name not in MODELS:
        raise ValueError(f"model must be one of {', '.join(MODELS)}, got {name!r}")
    out = {"model": name, **DEFAULT_MODEL_SIZES[name]}
    for key, value in spec.items():
        if key == "model":
            continue
        if key not in out:
            raise ValueError(
                f"unknown {name} size {key!r}; valid: {', '.join(DEFAULT_MODEL_SIZES[name])}"
            )
        top = MAX_MODEL_SIZES.get(key, MAX_MODEL_SIZE)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
            shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:20] + "…"
            raise ValueError(f"model size {key!r} must be an integer ≥ 1 and ≤ {top}, got {shown}")
        out[key] = int(value)
    params = _param_count(out)
    if params > MAX_MODEL_PARAMS:  # checked before a single array is allocated
        raise ValueError(
            f"the {name} spec has {params:.3g} parameters, more than the harness trains "
            f"({MAX_MODEL_PARAMS:.0e}, {MAX_MODEL_PARAMS * _DTYPE_BYTES / 1024**3:.0f} GiB of "
            "float32 per copy); give smaller sizes"
        )
    return out


#: Bounds on a model spec's sizes (checked before anything is built): a width
#: of at most 2**16, at most 1,000 layers, a batch of at most 2**16, and a
#: model of at most 2**28 parameters (1 GiB of float32 per copy).
MAX_MODEL_SIZE = 2**16
MAX_MODEL_SIZES = {"in": 2**20, "depth": 1000, "image": 1024, "kernel": 15}
MAX_MODEL_PARAMS = 2**28


def _param_count(s: dict) -> int:
    """Parameters of a complete spec, from its sizes alone (plain integers, no arrays)."""
    if s["model"] == "mlp":
        dims = [s["in"]] + [s["width"]] * s["depth"] + [s["classes"]]
        return sum(a * b + b for a, b in zip(dims[:-1], dims[1:], strict=True))
    c, k = s["channels"], s["kernel"]
    first = s["in_channels"] * c * k * k + c
    return first + (s["depth"] - 1) * (c * c * k * k + c) + c * s["classes"] + s["classes"]


def build_model(spec: dict | str, seed: int = 0):
    """The model of ``spec``, initialised from ``seed`` (float32, identical on every process).

    * ``mlp``: ``eqx.nn.MLP(in, classes, width, depth)`` with ReLU.
    * ``cnn``: ``depth`` 3×3 (``kernel``) SAME convolutions with ReLU
      (``in_channels`` → ``channels`` → … → ``channels``), global average
      pooling, then a linear classifier.

    The layers are built abstractly (``eqx.filter_eval_shape``) and every weight
    and bias is drawn with numpy (``np.random.default_rng(seed)``, in pytree
    order) from equinox's own default, U(−1/√fan_in, 1/√fan_in) with fan_in the
    inputs of one output (``in_features``; ``in_channels · k²`` for a
    convolution): jax's PRNG compiled a program per tensor shape, 2.5 s of
    every training process's start for the CNN on this machine, 0.9 s for the MLP.

    Raises:
        ValueError: see :func:`model_spec`.
    """
    s = model_spec(spec)
    model = eqx.filter_eval_shape(_layers, s)
    rng = np.random.default_rng(seed)

    def draw(layer):
        if not isinstance(layer, eqx.nn.Linear | eqx.nn.Conv):
            return layer
        w = layer.weight
        lim = 1.0 / np.sqrt(np.prod(w.shape[1:]))  # Linear (out, in); Conv (out, in, k, k)

        def uniform(shape):
            return jnp.asarray(rng.uniform(-lim, lim, shape).astype(np.float32))

        b = layer.bias
        return eqx.tree_at(
            lambda m: (m.weight, m.bias),
            layer,
            (uniform(w.shape), None if b is None else uniform(b.shape)),
            is_leaf=lambda x: x is None,
        )

    return jax.tree_util.tree_map(
        draw, model, is_leaf=lambda x: isinstance(x, eqx.nn.Linear | eqx.nn.Conv)
    )


def _layers(s: dict):
    """The layers of model spec ``s`` (for :func:`build_model`, which only takes their shapes)."""
    key = jax.random.PRNGKey(0)
    f32 = jnp.float32
    if s["model"] == "mlp":
        return eqx.nn.MLP(
            s["in"],
            s["classes"],
            s["width"],
            s["depth"],
            activation=jax.nn.relu,
            key=key,
            dtype=f32,
        )
    keys = jax.random.split(key, s["depth"] + 1)
    chans = [s["in_channels"]] + [s["channels"]] * s["depth"]
    convs = tuple(
        eqx.nn.Conv2d(chans[i], chans[i + 1], s["kernel"], padding="SAME", key=keys[i], dtype=f32)
        for i in range(s["depth"])
    )
    head = eqx.nn.Linear(s["channels"], s["classes"], key=keys[-1], dtype=f32)
    return CNN(convs, head)


class CNN(eqx.Module):
    """Convolutions with ReLU, global average pooling, a linear classifier.

    Attributes:
        convs: ``eqx.nn.Conv2d`` layers (SAME padding, stride 1), applied in order.
        head: the ``eqx.nn.Linear`` classifier on the pooled channels.
    """

    convs: tuple
    head: eqx.nn.Linear

    def __call__(self, x):
        """Logits of one sample x of shape (C, H, W)."""
        for conv in self.convs:
            x = jax.nn.relu(conv(x))
        return self.head(jnp.mean(x, axis=(1, 2)))


def model_layers(spec: dict | str) -> list[dict]:
    """The parameter tensors of the model in forward order, with their FLOPs per sample.

    FLOPs = 2 × MACs; a layer's FLOPs are attributed to its last tensor (the
    bias), following :mod:`costmodel.workloads`' rule: a dense layer
    2·in·out, a convolution 2·H·W·C_out·C_in·k² (SAME padding, stride 1);
    the ReLU and pooling are neglected (< 1%).

    Returns:
        One dict per tensor: ``name`` (the pytree path, e.g. ``layers.0.weight``),
        ``shape``, ``count`` (elements), ``fwd_flops`` (per sample) and ``gemm``
        (``costmodel.Workload.gemm_dims``' row: the layer's matrix product as rows
        per sample and the smaller other dimension; (0, 0) on the weight, whose
        layer's FLOPs the bias carries).

    Example:
        >>> [(t["name"], t["count"], t["fwd_flops"]) for t in model_layers(
        ...     {"model": "mlp", "in": 4, "width": 3, "depth": 1, "classes": 2})]
        [('layers.0.weight', 12, 0.0), ('layers.0.bias', 3, 24.0), ('layers.1.weight', 6, 0.0), ('layers.1.bias', 2, 12.0)]
    """
    s = model_spec(spec)
    out = []
    if s["model"] == "mlp":
        dims = [s["in"]] + [s["width"]] * s["depth"] + [s["classes"]]
        for i, (a, b) in enumerate(zip(dims[:-1], dims[1:], strict=True)):
            out.append({"name": f"layers.{i}.weight", "shape": (b, a), "fwd_flops": 0.0})
            out.append({"name": f"layers.{i}.bias", "shape": (b,), "fwd_flops": 2.0 * a * b,
                        "gemm": dense_gemm(a, b)})  # fmt: skip
    else:
        hw, k = s["image"], s["kernel"]
        chans = [s["in_channels"]] + [s["channels"]] * s["depth"]
        for i in range(s["depth"]):
            a, b = chans[i], chans[i + 1]
            out.append({"name": f"convs.{i}.weight", "shape": (b, a, k, k), "fwd_flops": 0.0})
            out.append(
                {
                    "name": f"convs.{i}.bias",
                    "shape": (b, 1, 1),
                    "fwd_flops": 2.0 * hw * hw * a * b * k * k,
                    "gemm": conv_gemm((hw, hw), a, b, k),
                }
            )
        c, m = s["channels"], s["classes"]
        out.append({"name": "head.weight", "shape": (m, c), "fwd_flops": 0.0})
        out.append({"name": "head.bias", "shape": (m,), "fwd_flops": 2.0 * c * m,
                    "gemm": dense_gemm(c, m)})  # fmt: skip
    for t in out:
        t["count"] = int(np.prod(t["shape"]))
        t.setdefault("gemm", (0, 0))
    return out


def make_batch(spec: dict | str, rank: int, seed: int = 0, batch_size: int | None = None):
    """Worker ``rank``'s synthetic batch: float32 inputs ~ N(0, 1) and integer labels.

    Deterministic in (seed, rank), so a test can rebuild every worker's batch.

    Returns:
        ``(x, y)`` numpy arrays: x of shape (B, in) for the MLP or (B, C, H, W)
        for the CNN, y int32 of shape (B,) in [0, classes).
    """
    s = model_spec(spec)
    b = int(s["batch_size"] if batch_size is None else batch_size)
    rng = np.random.default_rng([int(seed), int(rank)])
    if s["model"] == "mlp":
        x = rng.standard_normal((b, s["in"]), dtype=np.float32)
    else:
        x = rng.standard_normal((b, s["in_channels"], s["image"], s["image"]), dtype=np.float32)
    y = rng.integers(0, s["classes"], size=(b,)).astype(np.int32)
    return x, y


def loss_fn(model, x, y):
    """Mean softmax cross-entropy of ``model`` on the batch (x, y)."""

    logits = jax.vmap(model)(x)
    return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()


def optimizer(lr: float, momentum: float):
    """optax SGD with momentum (element-wise: a sharded update equals the full one)."""

    return optax.sgd(lr, momentum=momentum)


def bucket_indices(leaf_bytes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """Gradient buckets as lists of tensor indices (forward numbering), in reverse order.

    The rule of :func:`costmodel.bucketize` (PyTorch DDP): walk the tensors from
    the last to the first, close the current bucket when adding the next tensor
    would pass ``bucket_bytes``; a tensor is never split; ``bucket_bytes = 0``
    gives one bucket per tensor.

    Raises:
        ValueError: if ``bucket_bytes`` < 0.

    Example:
        >>> bucket_indices([4, 8, 12], 20)   # forward sizes in bytes: 12 + 8, then 4
        [[2, 1], [0]]
        >>> bucket_indices([4, 4, 4], 0)
        [[2], [1], [0]]
    """
    if bucket_bytes < 0:
        raise ValueError(f"bucket_bytes must be ≥ 0, got {bucket_bytes}")
    buckets: list[list[int]] = []
    cur: list[int] = []
    fill = 0
    for i in reversed(range(len(leaf_bytes))):
        nbytes = int(leaf_bytes[i])
        if cur and (bucket_bytes == 0 or fill + nbytes > bucket_bytes):
            buckets.append(cur)
            cur, fill = [], 0
        cur.append(i)
        fill += nbytes
    if cur:
        buckets.append(cur)
    return buckets


def reference_step(
    spec: dict | str,
    workers: int,
    *,
    seed: int = 0,
    lr: float = 0.05,
    momentum: float = 0.9,
    steps: int = 1,
):
    """Single-process training on the concatenated batch of ``workers`` workers.

    What every architecture must reproduce: ``steps`` SGD-with-momentum steps
    from the model of ``seed`` on the batches of ranks 0 … workers−1 joined.

    Returns:
        The parameter leaves (numpy float32 arrays) in forward order.
    """

    model = build_model(spec, seed)
    params, static = eqx.partition(model, eqx.is_array)
    xs, ys = zip(*(make_batch(spec, w, seed) for w in range(workers)), strict=True)
    x, y = jnp.asarray(np.concatenate(xs)), jnp.asarray(np.concatenate(ys))
    opt = optimizer(lr, momentum)
    state = opt.init(params)

    @jax.jit
    def step(params, state):
        grads = jax.grad(lambda p: loss_fn(eqx.combine(p, static), x, y))(params)
        updates, state = opt.update(grads, state, params)
        return eqx.apply_updates(params, updates), state

    for _ in range(steps):
        params, state = step(params, state)
    return [np.asarray(a) for a in jax.tree_util.tree_leaves(params)]


# --------------------------------------------------------------------------- exchanges


def _flat(leaves, idx, pad_to: int):
    flat = jnp.concatenate([leaves[i].ravel() for i in idx])
    extra = (-flat.size) % pad_to
    if extra:
        flat = jnp.concatenate([flat, jnp.zeros((extra,), flat.dtype)])
    return flat


def _after(x, token):
    """``x``, made to depend on ``token`` (the previous bucket's exchange result).

    Buckets are exchanged one after another, as DDP's communication stream
    does; the dependency also stops XLA from combining the per-bucket
    all-reduces into one (its all-reduce combiner pass), which would erase the
    bucket size being measured.
    """
    if token is None:
        return x
    # A true data dependency (XLA:CPU removes optimization barriers before
    # combining collectives): one element of x plus 0 × one element of token.
    return x.at[0].add(token.reshape(-1)[0] * 0.0)


def _unflat(flat, leaves, idx, out) -> None:
    off = 0
    for i in idx:
        size = leaves[i].size
        out[i] = flat[off : off + size].reshape(leaves[i].shape)
        off += size


def _unstack(t):
    """Drop the leading rank axis (length 1 inside ``shard_map``) of every leaf."""
    return jax.tree_util.tree_map(lambda a: a[0], t)


def _stack(t):
    """Put the leading rank axis back on every leaf."""
    return jax.tree_util.tree_map(lambda a: a[None], t)


@dataclasses.dataclass(frozen=True)
class _Parts:
    """What every architecture's step is built from.

    Attributes:
        opt: the optax optimizer.
        buckets: tensor indices of each bucket, exchange order (:func:`bucket_indices`).
        sizes: elements of each bucket.
        n: workers (ranks 0 … n−1 compute gradients); ``nproc``: all ranks.
        inv_n: 1/n in float32 (the mean over workers).
        grads_of: ``(parameter leaves, x, y) -> gradient leaves`` of one rank's batch.
    """

    opt: optax.GradientTransformation
    buckets: list[list[int]]
    sizes: list[int]
    n: int
    nproc: int
    inv_n: np.float32
    grads_of: Callable
    node_ranks: int = 1


def _bucketed_all_reduce(parts: _Parts, all_reduce: Callable, pad_to: int = 1):
    """One ``all_reduce(flat)`` per bucket (padded to a multiple of ``pad_to``), in
    order, then the full update on every worker: the ring's and the hierarchical's step."""
    opt, inv_n = parts.opt, parts.inv_n

    def init_state(leaves):
        return opt.init(list(leaves))

    def step(params, state, x, y):
        params, state, x, y = _unstack(params), _unstack(state), x[0], y[0]
        g = parts.grads_of(params, x, y)
        out = list(g)
        token = None
        for b in parts.buckets:
            flat = all_reduce(_after(_flat(g, b, pad_to), token))
            token = flat
            _unflat(flat * inv_n, g, b, out)
        updates, state = opt.update(out, state, params)
        params = optax_apply(params, updates)
        return _stack(params), _stack(state)

    return step, init_state


def _ring(parts: _Parts, cfg: dict):
    """Ring all-reduce: one ``lax.psum`` per bucket, then the full update on every worker."""
    return _bucketed_all_reduce(parts, lambda flat: lax.psum(flat, "r"))


def _hierarchical(parts: _Parts, cfg: dict):
    """Hierarchical all-reduce per bucket (reduce_scatter in the node, all-reduce across
    nodes, all_gather in the node), then the full update on every worker."""
    return _bucketed_all_reduce(parts, hierarchical_psum, pad_to=parts.node_ranks)


def _p2p(parts: _Parts, cfg: dict):
    """P2P: each worker reduces and updates its 1/n shard of every bucket, then all-gathers it."""
    opt, inv_n, n = parts.opt, parts.inv_n, parts.n
    mode = cfg.get("p2p_exchange", "all_to_all")
    shard = [-(-s // n) for s in parts.sizes]

    def init_state(leaves):
        return [opt.init(np.zeros((m,), np.float32)) for m in shard]

    def reduce_mine(flat, m):
        """The sum over workers of this rank's shard (m elements) of a bucket's gradients."""
        flat = start_together(flat, parts.nproc)  # every pair of workers swaps shards
        if mode == "reduce_scatter":
            return lax.psum_scatter(flat, "r", scatter_dimension=0, tiled=True)
        got = lax.all_to_all(flat.reshape(n, m), "r", 0, 0, tiled=True)
        return jnp.sum(got, axis=0)

    def step(params, state, x, y):
        params, state, x, y = _unstack(params), _unstack(state), x[0], y[0]
        me = lax.axis_index("r")
        g = parts.grads_of(params, x, y)
        out = list(params)
        new_state = []
        token = None
        for b, m, st in zip(parts.buckets, shard, state, strict=True):
            mine = reduce_mine(_after(_flat(g, b, n), token), m)
            p_flat = _flat(params, b, n)
            p_mine = lax.dynamic_slice_in_dim(p_flat, me * m, m)
            upd, st = opt.update(mine * inv_n, st, p_mine)
            new_state.append(st)
            mine_new = p_mine + upd
            if n == 2:  # gloo's ring all-gather: a swap between the two
                mine_new = start_together(mine_new, parts.nproc)
            full = lax.all_gather(mine_new, "r", axis=0, tiled=True)
            token = full
            _unflat(full, params, b, out)
        return _stack(out), _stack(new_state)

    return step, init_state


def _ps_roles(cfg: dict, workers: int) -> tuple[int, list[int]]:
    k = int(cfg["servers"])
    servers = list(range(k)) if cfg["colocated"] else [workers + j for j in range(k)]
    return k, servers


def _has_swap(pairs) -> bool:
    """Whether two ranks of ``pairs`` ((source, target), …) send to each other."""
    sent = {(int(a), int(b)) for a, b in pairs if a != b}
    return any((b, a) in sent for a, b in sent)


def _ps_rounds(workers: int, servers: list[int], colocated: bool) -> list[list[tuple[int, int]]]:
    """A parameter-server step's rounds: round t pairs server j with worker (j + t) mod n,
    as (worker, server) pairs; colocated servers keep their own worker's share (no round 0)."""
    n = int(workers)
    first = 1 if colocated else 0
    return [[((j + t) % n, s) for j, s in enumerate(servers)] for t in range(first, n)]


def sync_allreduces(
    architecture: str, workers: int, servers: int, colocated: bool, num_buckets: int
) -> int:
    """All-reduces per step that :func:`start_together` adds before the step's swaps (two each).

    P2P: before every bucket's all-to-all, and its all-gather at 2 workers;
    parameter servers: before every push and pull round in which two ranks send
    to each other (2 colocated servers at 2 workers; k = n colocated at even n);
    the ring and hierarchical: none. Each is an all-reduce of
    ``SYNC_FLOATS_PER_RANK`` floats a rank (fewer where a bucket's shard is
    smaller) over all the job's processes.

    Example:
        >>> sync_allreduces("p2p", 2, 0, False, 3), sync_allreduces("ps", 2, 2, True, 1)
        (12, 4)
        >>> sync_allreduces("ps", 4, 1, False, 2), sync_allreduces("ring", 2, 0, False, 5)
        (0, 0)
    """
    n, b = int(workers), int(num_buckets)
    if architecture == "p2p":
        return 2 * b * (2 if n == 2 else 1)
    if architecture == "ps":
        _, srv = _ps_roles({"servers": max(int(servers), 1), "colocated": bool(colocated)}, n)
        swaps = sum(_has_swap(pairs) for pairs in _ps_rounds(n, srv, bool(colocated)))
        return 2 * b * 2 * swaps  # push and pull: the reversed pairs swap alike
    return 0


class _PsLayout:
    """Who serves what in a parameter-server step.

    k servers (ranks ``servers``), each owning 1/k (``shard[b]`` elements) of
    bucket b; round t (``first_round`` … n−1) pairs server j with worker
    (j + t) mod n (``rounds[t - first_round]``: (worker, server) pairs);
    colocated servers keep their own worker's share local (no round 0).
    ``srv_index[r]`` is rank r's server number j, or −1.
    """

    def __init__(self, cfg: dict, parts: _Parts):
        n = parts.n
        self.k, self.servers = _ps_roles(cfg, n)
        self.colocated = bool(cfg["colocated"])
        self.shard = [-(-s // self.k) for s in parts.sizes]
        self.server_of = {r: j for j, r in enumerate(self.servers)}
        self.first_round = 1 if self.colocated else 0
        self.nproc = parts.nproc
        self.rounds = _ps_rounds(n, self.servers, self.colocated)
        srv_index = np.full((parts.nproc,), -1, np.int32)
        for r, j in self.server_of.items():
            srv_index[r] = j
        self.srv_index = jnp.asarray(srv_index)

    def push(self, shards, me, j, is_server, n: int):
        """Server j's sum of its shard (m,) over the workers; zeros on ranks that serve nothing.

        ``shards`` (k, m) is this rank's bucket gradient split by server; each
        round is one ``lax.ppermute`` worker → server (zeros where nothing arrives).
        """
        k = self.k
        acc = jnp.zeros((shards.shape[1],), jnp.float32)
        if self.colocated:  # own share stays local
            acc = jnp.where(is_server, shards[jnp.maximum(j, 0)], acc)
        for t, pairs in zip(range(self.first_round, n), self.rounds, strict=True):
            send = shards[jnp.clip((me - t) % n, 0, k - 1)]  # my server this round
            if _has_swap(pairs):  # after the previous round, not hoisted before it
                send = start_together(_after(send, acc), self.nproc)
            acc = acc + lax.ppermute(send, "r", pairs)  # zeros where nothing arrives
        return acc

    def pull(self, p_shard, me, j, is_server, n: int):
        """The bucket's updated parameters (k·m,) on every worker, from each server's shard (m,)."""
        k, m = self.k, p_shard.shape[0]
        full = jnp.zeros((k, m), jnp.float32)
        if self.colocated:
            full = jnp.where(is_server, full.at[jnp.maximum(j, 0)].set(p_shard), full)
        for t, pairs in zip(range(self.first_round, n), self.rounds, strict=True):
            back = [(s, w) for w, s in pairs]
            src = start_together(_after(p_shard, full), self.nproc) if _has_swap(back) else p_shard
            got = lax.ppermute(src, "r", back)
            full = full.at[jnp.clip((me - t) % n, 0, k - 1)].add(got)
        return full.reshape(-1)


def _ps(parts: _Parts, cfg: dict):
    """Parameter servers: push gradient shards to the k servers, update there, pull parameters."""
    opt, inv_n, n = parts.opt, parts.inv_n, parts.n
    lay = _PsLayout(cfg, parts)
    k, shard = lay.k, lay.shard

    def init_state(leaves):
        # Server j's parameter shard of every bucket, and its optimizer state.
        j = lay.server_of.get(jax.process_index(), 0)
        shards = []
        for b, m in zip(parts.buckets, shard, strict=True):
            flat = np.concatenate([np.asarray(leaves[i]).ravel() for i in b])
            flat = np.concatenate([flat, np.zeros(m * k - flat.size, np.float32)])
            shards.append(flat[j * m : (j + 1) * m])
        return {"params": shards, "opt": [opt.init(s) for s in shards]}

    def gradients(params, x, y, is_worker):
        g = parts.grads_of(params, x, y)
        if lay.colocated:
            return g
        # A dedicated server computes a gradient too and discards it, rather than
        # skipping it in a lax.cond: XLA:CPU runs a convolution inside a conditional
        # about 20× slower (the default CNN's backward, batch 16: 7.8 → 163 ms, jax
        # 0.10.2), so the workers' steps timed that, not the exchange (1PS dedicated
        # measured 88 ms against 14.6 ms colocated). Its throwaway compute shares the
        # machine's cores as a colocated server's own compute does.
        return [jnp.where(is_worker, a, jnp.zeros_like(a)) for a in g]

    def update(acc, p_shard, o_state, is_server):
        """The server's SGD update of its shard; other ranks keep theirs."""

        def server(p_shard=p_shard, o_state=o_state, acc=acc):
            upd, o2 = opt.update(acc * inv_n, o_state, p_shard)
            return p_shard + upd, o2

        return lax.cond(is_server, server, lambda p=p_shard, o=o_state: (p, o))

    def step(params, state, x, y):
        params, state, x, y = _unstack(params), _unstack(state), x[0], y[0]
        me = lax.axis_index("r")
        j = lay.srv_index[me]
        is_server = j >= 0
        is_worker = me < n
        g = gradients(params, x, y, is_worker)
        out = list(params)
        new_p, new_o = [], []
        token = None
        for bi, (b, m) in enumerate(zip(parts.buckets, shard, strict=True)):
            acc = lay.push(_after(_flat(g, b, k), token).reshape(k, m), me, j, is_server, n)
            p_shard, o_state = update(acc, state["params"][bi], state["opt"][bi], is_server)
            new_p.append(p_shard)
            new_o.append(o_state)
            flat = lay.pull(p_shard, me, j, is_server, n)
            token = flat
            new = list(out)
            _unflat(flat, params, b, new)
            for i in b:  # servers that are not workers keep their (unused) copy
                out[i] = jnp.where(is_worker, new[i], params[i])
        return _stack(out), _stack({"params": new_p, "opt": new_o})

    return step, init_state


#: Each architecture's step builder: ``(parts, cfg) -> (step, init_state)``.
_EXCHANGES = {"ring": _ring, "p2p": _p2p, "ps": _ps, "hierarchical": _hierarchical}


def build_step(
    cfg: dict,
    spec: dict,
    static,
    leaves_like,
    treedef,
    workers: int,
    nproc: int,
    lr: float,
    momentum: float,
    node_ranks: int = 1,
):
    """The per-rank step function of one configuration and its exchange-state builder.

    Composes the buckets and the gradient function with one architecture's
    exchange (:func:`_ring`, :func:`_p2p`, :func:`_ps`, :func:`_hierarchical`).

    Args:
        cfg: a configuration checked by :func:`check_config`.
        spec: the model spec; ``static``, ``leaves_like``, ``treedef``: the
            model's non-array part, its parameter leaves (forward order) and
            their tree structure.
        workers: n, ranks 0 … n−1 compute gradients.
        nproc: all ranks (n + k for dedicated servers).
        lr, momentum: the optimizer's settings.
        node_ranks: g, ranks per node of the ``("node", "local")`` mesh the
            hierarchical step runs on (the other architectures ignore it).

    Returns:
        ``(step, init_state, buckets)``: ``step(params, state, x, y) ->
        (params, state)`` runs inside ``shard_map`` on per-rank blocks (leading
        axis 1); ``init_state(params_leaves) -> state`` builds the
        architecture's optimizer state (numpy/jax pytree without the rank
        axis); ``buckets`` the tensor indices of each bucket (:func:`bucket_indices`).

    Raises:
        ValueError: on an unknown architecture or a negative bucket size.
    """
    arch = cfg["architecture"]
    leaf_bytes = [int(np.prod(a.shape)) * _DTYPE_BYTES for a in leaves_like]
    buckets = bucket_indices(leaf_bytes, int(cfg["bucket_bytes"]))
    sizes = [sum(int(np.prod(leaves_like[i].shape)) for i in b) for b in buckets]

    def grads_of(params_leaves, x, y):
        params = jax.tree_util.tree_unflatten(treedef, params_leaves)
        g = jax.grad(lambda p: loss_fn(eqx.combine(p, static), x, y))(params)
        return jax.tree_util.tree_leaves(g)

    if arch not in _EXCHANGES:
        raise ValueError(f"unknown architecture {arch!r}; valid: {', '.join(ARCHITECTURES)}")
    parts = _Parts(
        optimizer(lr, momentum), buckets, sizes, workers, nproc, np.float32(1.0 / workers),
        grads_of, int(node_ranks),
    )  # fmt: skip
    step, init_state = _EXCHANGES[arch](parts, cfg)
    return step, init_state, buckets


def optax_apply(params, updates):
    """params + updates, leaf by leaf (optax.apply_updates on lists)."""
    return optax.apply_updates(params, updates)


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def _beating(where: str, every_s: float = 1.0):
    """Send heartbeats from a thread while a long call (compilation) blocks this one."""
    done = threading.Event()

    def beat():
        while not done.wait(every_s):
            heartbeat(where, force=True)

    t = threading.Thread(target=beat, name="ddltune-compile-beat", daemon=True)
    t.start()
    try:
        yield
    finally:
        done.set()
        t.join()


def _on_mesh(mesh, spec, tree):
    """Every array of ``tree`` (split over the ranks on axis 0) as the same blocks on ``mesh``.

    No copy: the rank-order mesh ``"r"`` and ``("node", "local")`` put the
    same blocks on the same devices; only the sharding's mesh differs.
    """
    sharding = jax.sharding.NamedSharding(mesh, spec)

    def move(a):
        if a.sharding == sharding:
            return a
        return jax.make_array_from_single_device_arrays(
            a.shape, sharding, [s.data for s in a.addressable_shards]
        )

    return jax.tree_util.tree_map(move, tree)


def check_config(cfg: dict, workers: int, nproc: int) -> dict:
    """Validate and complete one configuration for ``workers`` workers in ``nproc`` processes.

    Keys: ``architecture`` (ps, p2p, ring, hierarchical), ``bucket_bytes`` (int ≥ 0),
    ``servers`` (ps: k ≥ 1; others 0), ``colocated`` (ps only), optional
    ``p2p_exchange`` (``all_to_all``/``reduce_scatter``).

    Raises:
        ValueError: naming the key and the bad value.
    """
    arch = cfg.get("architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {', '.join(ARCHITECTURES)}, got {arch!r}")
    bb = cfg.get("bucket_bytes", 0)
    if isinstance(bb, bool) or not isinstance(bb, int) or bb < 0:
        raise ValueError(f"bucket_bytes must be an integer ≥ 0, got {bb!r}")
    out = {"architecture": arch, "bucket_bytes": int(bb), "servers": 0, "colocated": False}
    if arch == "ps":
        k = cfg.get("servers", 1)
        colocated = bool(cfg.get("colocated", False))
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"servers must be an integer ≥ 1 for ps, got {k!r}")
        if colocated and k > workers:
            raise ValueError(f"colocated ps needs servers ≤ workers ({workers}), got {k}")
        if not colocated and workers + k != nproc:
            raise ValueError(
                f"dedicated ps with {workers} workers and {k} servers needs {workers + k} "
                f"processes, this run has {nproc}"
            )
        out.update(servers=int(k), colocated=colocated)
    elif nproc != workers:
        raise ValueError(
            f"{arch} runs on the {workers} workers only, this run has {nproc} processes"
        )
    if arch == "p2p":
        mode = cfg.get("p2p_exchange", "all_to_all")
        if mode not in ("all_to_all", "reduce_scatter"):
            raise ValueError(f"p2p_exchange must be all_to_all or reduce_scatter, got {mode!r}")
        out["p2p_exchange"] = mode
    return out


def run(config: dict, emit: Callable[[dict], None]) -> dict:
    """Train every configuration of ``config`` on the ranks of this JAX job and time it.

    Every process calls it (after ``jax.distributed`` is initialised, when
    there are several). Rank 0 emits ``{"type": "step", "config", "workers",
    "processes", "ranks_per_node", "model", "batch_size", "num_buckets",
    "sync_allreduces", "samples_s", "compile_s", "warmup_steps", "provenance"}`` per
    configuration; with ``return_params`` every
    rank also emits ``{"type": "params", "rank", "config_index", "initial",
    "final"}`` (lists of leaves, for the equal-parameters test).

    Every configuration is compiled first (and its first step checked), then
    all are timed in ``repeats`` interleaved rounds, so that a burst of other
    load on the machine spreads over all configurations instead of hitting one.

    Args:
        config: ``model`` (spec, see :func:`model_spec`), ``workers`` (n ≥ 1),
            ``configs`` (list, see :func:`check_config`), ``steps`` (≥ 1 timed
            per round), ``warmup_steps`` (≥ 0, per round), ``repeats`` (≥ 1
            rounds over all configurations, interleaved; default 1), ``seed``,
            ``lr``, ``momentum``,
            optional ``platform`` (jax platform name), ``return_params``,
            ``source``.
        emit: where messages go (the launcher's ``send`` or a list's append).

    Returns:
        ``{"configs": int, "processes": int}``.
    """
    job = _Job(config, Ranks(config.get("platform")))
    prepared = [job.compile(ci, emit) for ci in range(len(job.configs))]
    for rep in range(job.repeats):
        for ci, prep in enumerate(prepared):
            job.time_round(ci, prep, rep)
    if job.ranks.rank == 0:
        for ci, prep in enumerate(prepared):
            emit(job.step_message(ci, prep))
    return {"configs": len(job.configs), "processes": job.ranks.n}


class _Job:
    """One launch of the training program: the model, this rank's batch, the configurations.

    Args:
        config: see :func:`run`.
        ranks: one device per process (:class:`launch.Ranks`).
    """

    def __init__(self, config: dict, ranks: Ranks):
        self.ranks = ranks
        self.workers = int(config["workers"])
        self.spec = spec = model_spec(config["model"])
        self.seed = seed = int(config.get("seed", 0))
        self.lr, self.momentum = float(config.get("lr", 0.05)), float(config.get("momentum", 0.9))
        self.steps, self.warmup = int(config["steps"]), int(config.get("warmup_steps", 2))
        self.repeats = int(config.get("repeats", 1))
        self.configs = [check_config(c, self.workers, ranks.n) for c in config["configs"]]
        self.return_params = bool(config.get("return_params"))
        self.node_ranks = config.get("node_ranks")  # tests: nodes of this many ranks on one host
        self.rpn = int(self.node_ranks) if self.node_ranks else ranks.ranks_per_host()
        self._node_mesh = None
        self.prov = provenance(config.get("source", "ddltune validate"))
        with jax.default_device(ranks.device):
            model = build_model(spec, seed)
        params, self.static = eqx.partition(model, eqx.is_array)
        leaves, self.treedef = jax.tree_util.tree_flatten(params)
        self.leaves = [np.asarray(a) for a in leaves]
        if ranks.rank < self.workers:
            x, y = make_batch(spec, ranks.rank, seed)
        else:  # a dedicated server computes no gradient: zeros of a batch's shape
            x0, y0 = make_batch(spec, 0, seed)
            x, y = np.zeros_like(x0), np.zeros_like(y0)
        self.xg, self.yg = ranks.put(x[None]), ranks.put(y[None])

    def describe(self, ci: int) -> str:
        """Configuration ci in words, for progress and fault messages."""
        cfg = self.configs[ci]
        return (
            f"training {self.spec['model']} with {cfg['architecture']}"
            f"{' k=' + str(cfg['servers']) if cfg['servers'] else ''}, bucket "
            f"{cfg['bucket_bytes']} B (configuration {ci + 1}/{len(self.configs)})"
        )

    def compile(self, ci: int, emit: Callable[[dict], None]) -> dict:
        """Build and compile configuration ci (heartbeats while compiling); with
        ``return_params``, run one step and emit this rank's parameters."""
        ranks, leaves = self.ranks, self.leaves
        where = self.describe(ci)
        heartbeat(where, force=True)
        mesh, spec = ranks.mesh, P("r")
        if self.configs[ci]["architecture"] == "hierarchical":
            if self._node_mesh is None:
                self._node_mesh = ranks.node_mesh(self.node_ranks)
            mesh, spec = self._node_mesh, P(("node", "local"))
        step, init_state, buckets = build_step(
            self.configs[ci], self.spec, self.static, leaves, self.treedef, self.workers,
            ranks.n, self.lr, self.momentum, mesh.shape.get("local", 1),
        )  # fmt: skip
        p_g, s_g, xg, yg = _on_mesh(
            mesh, spec,
            (ranks.put_tree(list(leaves)), ranks.put_tree(init_state(leaves)), self.xg, self.yg),
        )  # fmt: skip
        fn = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False))
        t0 = time.perf_counter()
        with _beating(f"compiling: {where}"):
            compiled = fn.lower(p_g, s_g, xg, yg).compile()
        compile_s = time.perf_counter() - t0
        if self.return_params:
            p1, _ = compiled(p_g, s_g, self.xg, self.yg)
            emit(
                {
                    "type": "params",
                    "rank": ranks.rank,
                    "config_index": ci,
                    "final": [np.asarray(a).ravel().tolist() for a in ranks.local_block(p1)],
                    "initial": [a.ravel().tolist() for a in leaves],
                }
            )
        return {"compiled": compiled, "state": (p_g, s_g), "batch": (xg, yg), "buckets": buckets,
                "compile_s": compile_s, "samples": []}  # fmt: skip

    def time_round(self, ci: int, prep: dict, rep: int) -> None:
        """Configuration ci's round ``rep``: warm-up steps, then ``steps`` timed ones.

        Each timed step is preceded by the barrier, which carries every rank's
        time of the previous step: a sample is the slowest rank's step.
        """
        ranks = self.ranks
        where = self.describe(ci)
        if self.repeats > 1:
            where += f", round {rep + 1}/{self.repeats}"
        compiled, (p_g, s_g) = prep["compiled"], prep["state"]
        xg, yg = prep["batch"]
        for _ in range(self.warmup):
            ranks.sync(False, {})
            p_g, s_g = compiled(p_g, s_g, xg, yg)
            jax.block_until_ready((p_g, s_g))
            heartbeat(where)
        last = 0.0
        k = 0
        while True:
            stop, t_max, _ = ranks.sync(k >= self.steps, {ranks.rank: last})
            if k > 0:
                prep["samples"].append(max(t_max, 1e-9))
            if stop:
                break
            t0 = time.perf_counter()
            p_g, s_g = compiled(p_g, s_g, xg, yg)
            jax.block_until_ready((p_g, s_g))
            last = time.perf_counter() - t0
            k += 1
            heartbeat(where)
        prep["state"] = (p_g, s_g)

    def step_message(self, ci: int, prep: dict) -> dict:
        """Rank 0's ``{"type": "step", ...}`` message of configuration ci (raw samples)."""
        spec = self.spec
        return {
            "type": "step",
            "where": self.describe(ci),
            "config": self.configs[ci],
            "config_index": ci,
            "workers": self.workers,
            "processes": self.ranks.n,
            "ranks_per_node": self.rpn,
            "model": spec,
            "batch_size": spec["batch_size"],
            "num_buckets": len(prep["buckets"]),
            "sync_allreduces": sync_allreduces(
                self.configs[ci]["architecture"],
                self.workers,
                self.configs[ci].get("servers", 0),
                bool(self.configs[ci].get("colocated", False)),
                len(prep["buckets"]),
            ),
            "samples_s": prep["samples"],
            "compile_s": prep["compile_s"],
            "warmup_steps": self.warmup,
            "repeats": self.repeats,
            "provenance": self.prov,
        }


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tuner.validation._train_worker --config FILE`` (one process)."""
    return worker_main("python -m tuner.validation._train_worker", run, argv)


if __name__ == "__main__":
    sys.exit(main())
