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
import socket
import sys
import threading
import time
import zlib
from collections.abc import Callable, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

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
ARCHITECTURES = ("ps", "p2p", "ring")
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
        ValueError: on an unknown model or key, or a size that is not an integer ≥ 1.

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
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"model size {key!r} must be an integer ≥ 1, got {value!r}")
        out[key] = int(value)
    return out


def build_model(spec: dict | str, seed: int = 0):
    """The model of ``spec``, initialised from ``seed`` (float32, identical on every process).

    * ``mlp``: ``eqx.nn.MLP(in, classes, width, depth)`` with ReLU.
    * ``cnn``: ``depth`` 3×3 (``kernel``) SAME convolutions with ReLU
      (``in_channels`` → ``channels`` → … → ``channels``), global average
      pooling, then a linear classifier.

    Raises:
        ValueError: see :func:`model_spec`.
    """
    s = model_spec(spec)
    key = jax.random.PRNGKey(seed)
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
        ``shape``, ``count`` (elements) and ``fwd_flops`` (per sample).

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
            out.append({"name": f"layers.{i}.bias", "shape": (b,), "fwd_flops": 2.0 * a * b})
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
                }
            )
        c, m = s["channels"], s["classes"]
        out.append({"name": "head.weight", "shape": (m, c), "fwd_flops": 0.0})
        out.append({"name": "head.bias", "shape": (m,), "fwd_flops": 2.0 * c * m})
    for t in out:
        t["count"] = int(np.prod(t["shape"]))
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


# --------------------------------------------------------------------------- the ranks


class _Ranks:
    """The mesh of one device per process, per-rank arrays and the timing barrier."""

    def __init__(self, platform: str | None = None):
        from jax.sharding import Mesh, NamedSharding
        from jax.sharding import PartitionSpec as P

        devs = jax.devices(platform) if platform else jax.devices()
        first: dict[int, object] = {}
        for d in sorted(devs, key=lambda d: (d.process_index, d.id)):
            first.setdefault(d.process_index, d)
        self.devices = [first[p] for p in sorted(first)]
        self.n = len(self.devices)
        self.mesh = Mesh(np.array(self.devices, dtype=object), ("r",))
        self.sharding = NamedSharding(self.mesh, P("r"))
        me = jax.process_index()
        self.rank = next(i for i, d in enumerate(self.devices) if d.process_index == me)
        self.device = self.devices[self.rank]
        self.backend = self.device.platform

        def psum(a):
            return jax.lax.psum(a, "r")

        self._psum = jax.jit(jax.shard_map(psum, mesh=self.mesh, in_specs=P("r"), out_specs=P("r")))
        self._barrier = self._psum.lower(self.put(np.zeros((1, 1 + self.n), np.float32))).compile()

    def put(self, block):
        """A global (n·b, …) array from this rank's block (b, …) (a numpy array)."""
        block = np.asarray(block)
        shard = jax.device_put(block, self.device)
        shape = (self.n * block.shape[0],) + tuple(block.shape[1:])
        return jax.make_array_from_single_device_arrays(shape, self.sharding, [shard])

    def put_tree(self, tree):
        """Every leaf of a pytree of numpy/jax arrays as a per-rank stacked global array."""
        return jax.tree_util.tree_map(lambda a: self.put(np.asarray(a)[None]), tree)

    def local(self, tree):
        """This rank's block of every leaf (leading axis dropped), as numpy."""
        return jax.tree_util.tree_map(lambda a: np.asarray(a.addressable_shards[0].data)[0], tree)

    def sync(self, stop: bool, seconds: float) -> tuple[bool, float]:
        """Barrier: (rank 0's stop decision, the slowest rank's ``seconds``).

        One psum of a row per rank: column 0 carries rank 0's stop flag,
        column 1 + r rank r's time of the previous step.
        """
        row = np.zeros((1, 1 + self.n), np.float32)
        row[0, 0] = 1.0 if (stop and self.rank == 0) else 0.0
        row[0, 1 + self.rank] = seconds
        out = self._barrier(self.put(row))
        out.block_until_ready()
        table = np.asarray(out.addressable_shards[0].data)[0]
        return bool(table[0] > 0), float(table[1:].max())

    def processes_per_host(self) -> int:
        """Ranks on the busiest host (host names hashed, summed across ranks)."""
        if self.n == 1:
            return 1
        h = zlib.crc32(socket.gethostname().encode()) & 0xFFFFFF
        row = np.zeros((1, self.n), np.float32)
        row[0, self.rank] = float(h)
        out = self._psum(self.put(row))
        hashes = np.asarray(out.addressable_shards[0].data)[0].tolist()
        return max(hashes.count(x) for x in set(hashes))


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


def _ps_roles(cfg: dict, workers: int) -> tuple[int, list[int]]:
    k = int(cfg["servers"])
    servers = list(range(k)) if cfg["colocated"] else [workers + j for j in range(k)]
    return k, servers


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
):
    """The per-rank step function of one configuration and its exchange-state builder.

    Args:
        cfg: a configuration checked by :func:`check_config`.
        spec: the model spec; ``static``, ``leaves_like``, ``treedef``: the
            model's non-array part, its parameter leaves (forward order) and
            their tree structure.
        workers: n, ranks 0 … n−1 compute gradients.
        nproc: all ranks (n + k for dedicated servers).
        lr, momentum: the optimizer's settings.

    Returns:
        ``(step, init_state, buckets)``: ``step(params, state, x, y) ->
        (params, state)`` runs inside ``shard_map`` on per-rank blocks (leading
        axis 1); ``init_state(params_leaves) -> state`` builds the
        architecture's optimizer state (numpy/jax pytree without the rank
        axis); ``buckets`` the tensor indices of each bucket (:func:`bucket_indices`).
    """
    from jax import lax

    arch = cfg["architecture"]
    opt = optimizer(lr, momentum)
    leaf_bytes = [int(np.prod(a.shape)) * _DTYPE_BYTES for a in leaves_like]
    buckets = bucket_indices(leaf_bytes, int(cfg["bucket_bytes"]))
    sizes = [sum(int(np.prod(leaves_like[i].shape)) for i in b) for b in buckets]
    n = workers
    inv_n = np.float32(1.0 / n)

    def grads_of(params_leaves, x, y):
        params = jax.tree_util.tree_unflatten(treedef, params_leaves)
        g = jax.grad(lambda p: loss_fn(eqx.combine(p, static), x, y))(params)
        return jax.tree_util.tree_leaves(g)

    def unstack(t):
        return jax.tree_util.tree_map(lambda a: a[0], t)

    def stack(t):
        return jax.tree_util.tree_map(lambda a: a[None], t)

    if arch == "ring":

        def init_state(leaves):
            return opt.init(list(leaves))

        def step(params, state, x, y):
            params, state, x, y = unstack(params), unstack(state), x[0], y[0]
            g = grads_of(params, x, y)
            out = list(g)
            token = None
            for b in buckets:
                flat = lax.psum(_after(_flat(g, b, 1), token), "r")
                token = flat
                _unflat(flat * inv_n, g, b, out)
            updates, state = opt.update(out, state, params)
            params = optax_apply(params, updates)
            return stack(params), stack(state)

    elif arch == "p2p":
        mode = cfg.get("p2p_exchange", "all_to_all")
        shard = [-(-s // n) for s in sizes]

        def init_state(leaves):
            return [opt.init(np.zeros((m,), np.float32)) for m in shard]

        def step(params, state, x, y):
            params, state, x, y = unstack(params), unstack(state), x[0], y[0]
            me = lax.axis_index("r")
            g = grads_of(params, x, y)
            out = list(params)
            new_state = []
            token = None
            for b, m, st in zip(buckets, shard, state, strict=True):
                flat = _after(_flat(g, b, n), token)
                if mode == "reduce_scatter":
                    mine = lax.psum_scatter(flat, "r", scatter_dimension=0, tiled=True)
                else:
                    got = lax.all_to_all(flat.reshape(n, m), "r", 0, 0, tiled=True)
                    mine = jnp.sum(got, axis=0)
                p_flat = _flat(params, b, n)
                p_mine = lax.dynamic_slice_in_dim(p_flat, me * m, m)
                upd, st = opt.update(mine * inv_n, st, p_mine)
                new_state.append(st)
                full = lax.all_gather(p_mine + upd, "r", axis=0, tiled=True)
                token = full
                _unflat(full, params, b, out)
            return stack(out), stack(new_state)

    elif arch == "ps":
        k, servers = _ps_roles(cfg, n)
        colocated = bool(cfg["colocated"])
        shard = [-(-s // k) for s in sizes]
        server_of = {r: j for j, r in enumerate(servers)}
        first_round = 1 if colocated else 0

        def init_state(leaves):
            # Server j's parameter shard of every bucket, and its optimizer state.
            me = jax.process_index()
            j = server_of.get(me, 0)
            shards = []
            for b, m in zip(buckets, shard, strict=True):
                flat = np.concatenate([np.asarray(leaves[i]).ravel() for i in b])
                flat = np.concatenate([flat, np.zeros(m * k - flat.size, np.float32)])
                shards.append(flat[j * m : (j + 1) * m])
            return {"params": shards, "opt": [opt.init(s) for s in shards]}

        # Round t: server j exchanges with worker (j + t) mod n.
        rounds = [[((j + t) % n, servers[j]) for j in range(k)] for t in range(first_round, n)]
        srv_index = np.full((nproc,), -1, np.int32)
        for r, j in server_of.items():
            srv_index[r] = j
        srv_index = jnp.asarray(srv_index)

        def step(params, state, x, y):
            params, state, x, y = unstack(params), unstack(state), x[0], y[0]
            me = lax.axis_index("r")
            j = srv_index[me]
            is_server = j >= 0
            is_worker = me < n
            if colocated:
                g = grads_of(params, x, y)
            else:
                g = lax.cond(
                    is_worker,
                    lambda: grads_of(params, x, y),
                    lambda: [jnp.zeros_like(a) for a in params],
                )
            out = list(params)
            new_p, new_o = [], []
            token = None
            for bi, (b, m) in enumerate(zip(buckets, shard, strict=True)):
                shards = _after(_flat(g, b, k), token).reshape(k, m)
                acc = jnp.zeros((m,), jnp.float32)
                if colocated:  # own share stays local
                    acc = jnp.where(is_server, shards[jnp.maximum(j, 0)], acc)
                for t, pairs in zip(range(first_round, n), rounds, strict=True):
                    send = shards[jnp.clip((me - t) % n, 0, k - 1)]  # my server this round
                    acc = acc + lax.ppermute(send, "r", pairs)  # zeros where nothing arrives
                p_shard, o_state = state["params"][bi], state["opt"][bi]

                def update(p_shard=p_shard, o_state=o_state, acc=acc):
                    upd, o2 = opt.update(acc * inv_n, o_state, p_shard)
                    return p_shard + upd, o2

                p_shard, o_state = lax.cond(is_server, update, lambda p=p_shard, o=o_state: (p, o))
                new_p.append(p_shard)
                new_o.append(o_state)
                full = jnp.zeros((k, m), jnp.float32)
                if colocated:
                    full = jnp.where(is_server, full.at[jnp.maximum(j, 0)].set(p_shard), full)
                for t, pairs in zip(range(first_round, n), rounds, strict=True):
                    got = lax.ppermute(p_shard, "r", [(s, w) for w, s in pairs])
                    full = full.at[jnp.clip((me - t) % n, 0, k - 1)].add(got)
                flat = full.reshape(-1)
                token = flat
                new = list(out)
                _unflat(flat, params, b, new)
                for i in b:  # servers that are not workers keep their (unused) copy
                    out[i] = jnp.where(is_worker, new[i], params[i])
            return stack(out), stack({"params": new_p, "opt": new_o})

    else:
        raise ValueError(f"unknown architecture {arch!r}; valid: {', '.join(ARCHITECTURES)}")

    return step, init_state, buckets


def optax_apply(params, updates):
    """params + updates, leaf by leaf (optax.apply_updates on lists)."""
    return optax.apply_updates(params, updates)


# --------------------------------------------------------------------------- the run


@contextlib.contextmanager
def _beating(where: str, every_s: float = 1.0):
    """Send heartbeats from a thread while a long call (compilation) blocks this one."""
    from launch import heartbeat

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


def check_config(cfg: dict, workers: int, nproc: int) -> dict:
    """Validate and complete one configuration for ``workers`` workers in ``nproc`` processes.

    Keys: ``architecture`` (ps, p2p, ring), ``bucket_bytes`` (int ≥ 0),
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
    "samples_s", "compile_s", "warmup_steps", "provenance"}`` per configuration; with ``return_params`` every
    rank also emits ``{"type": "params", "rank", "config_index", "initial",
    "final"}`` (lists of leaves, for the equal-parameters test).

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
    from calibration import provenance
    from launch import heartbeat

    ranks = _Ranks(config.get("platform"))
    nproc = ranks.n
    workers = int(config["workers"])
    spec = model_spec(config["model"])
    seed = int(config.get("seed", 0))
    lr, momentum = float(config.get("lr", 0.05)), float(config.get("momentum", 0.9))
    steps, warmup = int(config["steps"]), int(config.get("warmup_steps", 2))
    repeats = int(config.get("repeats", 1))
    configs = [check_config(c, workers, nproc) for c in config["configs"]]
    rpn = ranks.processes_per_host()
    prov = provenance(config.get("source", "ddltune validate"))
    me = ranks.rank

    with jax.default_device(ranks.device):
        model = build_model(spec, seed)
    params, static = eqx.partition(model, eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    leaves = [np.asarray(a) for a in leaves]
    x, y = (
        make_batch(spec, me, seed)
        if me < workers
        else (
            np.zeros_like(make_batch(spec, 0, seed)[0]),
            np.zeros_like(make_batch(spec, 0, seed)[1]),
        )
    )
    xg, yg = ranks.put(x[None]), ranks.put(y[None])
    from jax.sharding import PartitionSpec as P

    def describe(ci: int, cfg: dict) -> str:
        return (
            f"training {spec['model']} with {cfg['architecture']}"
            f"{' k=' + str(cfg['servers']) if cfg['servers'] else ''}, bucket "
            f"{cfg['bucket_bytes']} B (configuration {ci + 1}/{len(configs)})"
        )

    # Compile every configuration first (and check its first step), then time
    # them in `repeats` interleaved rounds, so that a burst of other load on
    # the machine spreads over all configurations instead of hitting one.
    prepared = []
    for ci, cfg in enumerate(configs):
        where = describe(ci, cfg)
        heartbeat(where, force=True)
        step, init_state, buckets = build_step(
            cfg, spec, static, leaves, treedef, workers, nproc, lr, momentum
        )
        p_g = ranks.put_tree(list(leaves))
        s_g = ranks.put_tree(init_state(leaves))
        fn = jax.jit(
            jax.shard_map(step, mesh=ranks.mesh, in_specs=P("r"), out_specs=P("r"), check_vma=False)
        )
        t0 = time.perf_counter()
        with _beating(f"compiling: {where}"):
            compiled = fn.lower(p_g, s_g, xg, yg).compile()
        compile_s = time.perf_counter() - t0
        if config.get("return_params"):
            p1, _ = compiled(p_g, s_g, xg, yg)
            emit(
                {
                    "type": "params",
                    "rank": me,
                    "config_index": ci,
                    "final": [np.asarray(a).ravel().tolist() for a in ranks.local(p1)],
                    "initial": [a.ravel().tolist() for a in leaves],
                }
            )
        prepared.append(
            {"compiled": compiled, "state": (p_g, s_g), "buckets": buckets,
             "compile_s": compile_s, "samples": []}
        )  # fmt: skip
    for rep in range(repeats):
        for ci, (cfg, prep) in enumerate(zip(configs, prepared, strict=True)):
            where = describe(ci, cfg) + (f", round {rep + 1}/{repeats}" if repeats > 1 else "")
            compiled, (p_g, s_g) = prep["compiled"], prep["state"]
            for _ in range(warmup):
                ranks.sync(False, 0.0)
                p_g, s_g = compiled(p_g, s_g, xg, yg)
                jax.block_until_ready((p_g, s_g))
                heartbeat(where)
            last = 0.0
            k = 0
            while True:
                stop, t_max = ranks.sync(k >= steps, last)
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
    if me == 0:
        for ci, (cfg, prep) in enumerate(zip(configs, prepared, strict=True)):
            emit(
                {
                    "type": "step",
                    "where": describe(ci, cfg),
                    "config": cfg,
                    "config_index": ci,
                    "workers": workers,
                    "processes": nproc,
                    "ranks_per_node": rpn,
                    "model": spec,
                    "batch_size": spec["batch_size"],
                    "num_buckets": len(prep["buckets"]),
                    "samples_s": prep["samples"],
                    "compile_s": prep["compile_s"],
                    "warmup_steps": warmup,
                    "repeats": repeats,
                    "provenance": prov,
                }
            )
    return {"configs": len(configs), "processes": nproc}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m tuner.validation._train_worker --config FILE`` (one process)."""
    from launch import worker_main

    return worker_main("python -m tuner.validation._train_worker", run, argv)


if __name__ == "__main__":
    sys.exit(main())
