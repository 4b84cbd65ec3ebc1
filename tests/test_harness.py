"""The training harness: bucketing, models, the reference step, and real multi-process training.

Physics checked: the buckets are costmodel.bucketize's; the model descriptions
match the equinox modules; one synchronous step of every architecture (ring
all-reduce, P2P with all_to_all and with reduce-scatter, parameter servers
dedicated and colocated with k = 1, 2) from the same initial parameters gives
the parameters of single-process training on the concatenated batch; every
worker process is gone afterwards.
"""

from __future__ import annotations

import os

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from calibration import read_records, record_key, validate_record
from costmodel import bucketize
from tuner.validation import (
    StepConfig,
    model_name,
    model_workload,
    processes_needed,
    run_training,
)
from tuner.validation._train_worker import (
    bucket_indices,
    build_model,
    loss_fn,
    make_batch,
    model_layers,
    model_spec,
    reference_step,
)

TINY = {"model": "mlp", "in": 8, "width": 16, "depth": 1, "classes": 3, "batch_size": 4}
TINY_CNN = {
    "model": "cnn",
    "image": 4,
    "in_channels": 2,
    "channels": 3,
    "depth": 1,
    "classes": 3,
    "batch_size": 2,
}


def _gone(pid: int) -> bool:
    """True when ``pid`` no longer exists (or is a zombie of another parent)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state == "Z"


def _children() -> list[int]:
    me = os.getpid()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == me and fields[0] != "Z":
                out.append(int(d))
    return out


# --------------------------------------------------------------------------- no processes


@pytest.mark.parametrize("spec", ["mlp", "cnn", TINY, TINY_CNN])
@pytest.mark.parametrize("cap", [0, 1, 4096, 1 << 20, 3 * 2**19, 1 << 30])
def test_buckets_are_costmodels(spec, cap):
    # Independent implementations of DDP's rule must give the same bucket sizes.
    layers = model_layers(spec)
    nbytes = [4 * t["count"] for t in layers]
    got = [sum(nbytes[i] for i in b) for b in bucket_indices(nbytes, cap)]
    want, _ = bucketize(model_workload(spec), cap)
    np.testing.assert_array_equal(np.asarray(got, dtype=np.float64), want)
    # Every tensor exactly once, in reverse (backward) order.
    flat = [i for b in bucket_indices(nbytes, cap) for i in b]
    assert flat == list(reversed(range(len(layers))))


def test_bucket_limits():
    sizes = [100, 200, 300]
    assert bucket_indices(sizes, 0) == [[2], [1], [0]]  # one per tensor
    assert bucket_indices(sizes, 10**9) == [[2, 1, 0]]  # all in one
    assert bucket_indices(sizes, 250) == [[2], [1], [0]]  # 300 > cap stands alone
    assert bucket_indices(sizes, 500) == [[2, 1], [0]]
    with pytest.raises(ValueError, match="bucket_bytes"):
        bucket_indices(sizes, -1)


@pytest.mark.parametrize("spec", [TINY, TINY_CNN, "mlp"])
def test_model_description_matches_module(spec):
    model = build_model(spec)
    leaves = jax.tree_util.tree_leaves_with_path(eqx.filter(model, eqx.is_array))
    layers = model_layers(spec)
    assert len(leaves) == len(layers)
    for (path, leaf), t in zip(leaves, layers, strict=True):
        name = ".".join(str(getattr(k, "name", getattr(k, "idx", k))) for k in path)
        assert name == t["name"]
        assert tuple(leaf.shape) == tuple(t["shape"])
        assert leaf.dtype == jnp.float32
    w = model_workload(spec)
    assert w.total_params == sum(int(np.prod(a.shape)) for _, a in leaves)
    assert w.tensor_names == tuple(t["name"] for t in layers)


@pytest.mark.parametrize("spec", ["mlp", "cnn"])
def test_initial_weights_follow_equinoxs_default_and_the_seed(spec):
    """Every tensor is U(−1/√fan_in, 1/√fan_in) (equinox's default for Linear and Conv;
    fan_in the inputs of one output): it spans most of that range and stays inside it, the
    same seed gives the same model on every process, another seed another one."""

    def leaves(seed):
        return jax.tree_util.tree_leaves(eqx.filter(build_model(spec, seed), eqx.is_array))

    a, b, c = leaves(0), leaves(0), leaves(1)
    # pytree order: each layer's weight (out, in[, k, k]), then its bias, of the same fan-in
    fans = [int(np.prod(a[i - i % 2].shape[1:])) for i in range(len(a))]
    for x, fan in zip(a, fans, strict=True):
        lim = 1.0 / np.sqrt(fan)
        assert np.abs(x).max() <= lim and np.abs(x).max() > 0.8 * lim
        if x.size >= 1000:  # a uniform's mean and spread
            assert abs(float(x.mean())) < 0.05 * lim
            assert float(x.std()) == pytest.approx(lim / np.sqrt(3), rel=0.05)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
    assert not any(np.array_equal(x, y) for x, y in zip(a, c, strict=True))


def test_mlp_flops_closed_form():
    s = model_spec({"model": "mlp", "in": 100, "width": 30, "depth": 2, "classes": 7})
    dims = [100, 30, 30, 7]
    want = sum(2.0 * a * b for a, b in zip(dims[:-1], dims[1:], strict=False))
    assert model_workload(s).total_fwd_flops == want


def test_cnn_flops_closed_form():
    s = model_spec(TINY_CNN)
    want = 2.0 * 4 * 4 * 2 * 3 * 3 * 3 + 2.0 * 3 * 3  # one 3x3 conv 2->3 on 4x4, head 3->3
    assert model_workload(s).total_fwd_flops == want


def test_reference_step_is_mean_of_worker_gradients():
    # SGD on the concatenated batch of n equal batches = SGD on the mean of the
    # n per-worker mean gradients (the quantity every architecture exchanges).
    n, lr = 3, 0.05
    model = build_model(TINY)
    params, static = eqx.partition(model, eqx.is_array)
    grad = jax.jit(jax.grad(lambda p, x, y: loss_fn(eqx.combine(p, static), x, y)))
    grads = [jax.tree_util.tree_leaves(grad(params, *make_batch(TINY, w))) for w in range(n)]
    mean = [sum(gs) / n for gs in zip(*grads, strict=True)]
    # First momentum step: trace = g, update = −lr · g.
    want = [p - lr * g for p, g in zip(jax.tree_util.tree_leaves(params), mean, strict=True)]
    got = reference_step(TINY, n, lr=lr, momentum=0.9)
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, np.asarray(b), rtol=2e-5, atol=1e-6)


def test_batches_differ_by_rank_and_repeat_by_seed():
    a, b, a2 = make_batch(TINY, 0), make_batch(TINY, 1), make_batch(TINY, 0)
    assert not np.array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[0], a2[0])
    assert a[0].shape == (4, 8) and a[1].dtype == np.int32 and a[1].max() < 3


def test_model_spec_errors():
    with pytest.raises(ValueError, match="model must be one of"):
        model_spec("resnet")
    with pytest.raises(ValueError, match="unknown mlp size 'channels'"):
        model_spec({"model": "mlp", "channels": 3})
    with pytest.raises(ValueError, match="'width' must be an integer ≥ 1"):
        model_spec({"model": "mlp", "width": 0})
    assert model_name(TINY) == "mlp-8-16x1-3"


def test_step_config_errors():
    with pytest.raises(ValueError, match="architecture must be one of"):
        StepConfig("hybrid")
    with pytest.raises(ValueError, match="bucket_bytes must be ≥ 0"):
        StepConfig("ring", -1)
    with pytest.raises(ValueError, match="apply to the ps architecture only"):
        StepConfig("ring", 0, servers=2)
    with pytest.raises(ValueError, match="p2p_exchange"):
        StepConfig("p2p", 0, p2p_exchange="tree")
    assert StepConfig("ps").servers == 1
    assert processes_needed(StepConfig("ps", servers=3), 2) == 5


def test_run_training_argument_errors():
    with pytest.raises(ValueError, match="different numbers of processes"):
        run_training(TINY, 2, [StepConfig("ring"), StepConfig("ps", servers=1)])
    with pytest.raises(ValueError, match="needs at least 3 workers"):
        run_training(TINY, 2, [StepConfig("ps", servers=3, colocated=True)])
    with pytest.raises(ValueError, match="workers must be an integer ≥ 1"):
        run_training(TINY, 0, [StepConfig("ring")])
    with pytest.raises(ValueError, match="configs is empty"):
        run_training(TINY, 2, [])
    with pytest.raises(ValueError, match="steps must be an integer ≥ 1"):
        run_training(TINY, 2, [StepConfig("ring")], steps=0)


# --------------------------------------------------------------------------- real processes


def _check_equal_parameters(run, configs, workers, tmp_path, steps, spec=TINY):
    ref = reference_step(spec, workers)
    init = [
        np.asarray(a)
        for a in jax.tree_util.tree_leaves(eqx.filter(build_model(spec), eqx.is_array))
    ]
    for rank in range(workers):
        per_config = run.params[rank]
        assert len(per_config) == len(configs)
        for (initial, final), cfg in zip(per_config, configs, strict=True):
            for a, b in zip(initial, init, strict=True):
                np.testing.assert_array_equal(a.reshape(b.shape), b)
            moved = max(float(np.abs(f - i).max()) for f, i in zip(final, initial, strict=True))
            assert moved > 1e-3, f"{cfg}: parameters did not move"
            for f, r in zip(final, ref, strict=True):
                np.testing.assert_allclose(
                    f.reshape(r.shape), r, rtol=1e-5, atol=1e-6, err_msg=f"rank {rank}, {cfg}"
                )
    # Timing and records: one record per configuration, valid and distinct.
    assert [m.config for m in run.measurements] == list(configs)
    keys = set()
    for m in run.measurements:
        validate_record(m.record)
        assert len(m.samples_s) == steps and min(m.samples_s) > 0
        assert m.record["kind"] == "step" and m.record["workers"] == workers
        keys.add(record_key(m.record))
    assert len(keys) == len(configs)
    recs = read_records(tmp_path / "steps.jsonl")
    assert len(recs) == len(configs)


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_every_architecture_equals_single_process_training(tmp_path):
    from calibration import RecordWriter

    configs = [
        StepConfig("ring", 0),
        StepConfig("ring", 1 << 20),
        StepConfig("p2p", 64),
        StepConfig("p2p", 128, p2p_exchange="reduce_scatter"),  # distinct record key
        StepConfig("ps", 0, servers=1, colocated=True),
        StepConfig("ps", 200, servers=2, colocated=True),
    ]
    pids: list[int] = []
    with RecordWriter(tmp_path / "steps.jsonl") as writer:
        run = run_training(
            TINY,
            2,
            configs,
            steps=2,
            warmup_steps=1,
            return_params=True,
            writer=writer,
            on_spawn=lambda rank, pid: pids.append(pid),
            timeout_s=120,
        )
    assert len(pids) == 2 and all(_gone(p) for p in pids)
    assert not _children()
    _check_equal_parameters(run, configs, 2, tmp_path, 2)
    # Bucket counts are the costmodel's.
    assert [m.num_buckets for m in run.measurements][:2] == [4, 1]
    # the records declare the small all-reduces before their swaps (p2p, 2 colocated
    # servers at 2 workers), for the prediction to add; the ring and 1 server none
    from tuner.validation._train_worker import sync_allreduces

    for m in run.measurements:
        r = m.record
        want = sync_allreduces(r["architecture"], 2, r["servers"], r["colocated"], r["num_buckets"])
        assert (r.get("sync") or {}).get("allreduces", 0) == want, r
        assert (want > 0) == (r["architecture"] == "p2p" or r["servers"] == 2)
        if want:
            assert r["sync"]["num_ranks"] == 2 and r["sync"]["message_bytes"] == 4 * 8 * 2


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def test_hierarchical_all_reduce_on_two_nodes_of_two_equals_single_process_training(tmp_path):
    # 4 processes as 2 nodes × 2 ranks: reduce_scatter within the node, psum across
    # the nodes, all_gather within the node — every phase moves real data
    from calibration import RecordWriter

    configs = [StepConfig("hierarchical", 0), StepConfig("hierarchical", 1 << 20)]
    pids: list[int] = []
    with RecordWriter(tmp_path / "steps.jsonl") as writer:
        run = run_training(
            TINY, 4, configs, steps=1, warmup_steps=0, return_params=True, writer=writer,
            on_spawn=lambda rank, pid: pids.append(pid), timeout_s=120, node_ranks=2,
        )  # fmt: skip
    assert len(pids) == 4 and all(_gone(p) for p in pids)
    _check_equal_parameters(run, configs, 4, tmp_path, 1)
    assert [(m.ranks_per_node, m.num_buckets) for m in run.measurements] == [(2, 4), (2, 1)]
    with pytest.raises(ValueError, match="node_ranks must be an integer ≥ 1 dividing the 4"):
        run_training(TINY, 4, configs, node_ranks=3)


def test_node_mesh_refuses_hosts_without_whole_blocks():
    import types

    from launch import Ranks

    def fake(hosts):
        return types.SimpleNamespace(n=len(hosts), devices=list(range(len(hosts))),
                                     host_hashes=lambda: list(hosts))  # fmt: skip

    with pytest.raises(ValueError, match=r"host 1: ranks 0, 1; host 2: ranks 2"):
        Ranks.node_mesh(fake([7, 7, 9]))
    with pytest.raises(ValueError, match=r"host 1: ranks 0, 2; host 2: ranks 1, 3"):
        Ranks.node_mesh(fake([7, 9, 7, 9]))  # round-robin placement
    with pytest.raises(ValueError, match="ranks_per_node must be ≥ 1 and divide the 4 ranks"):
        Ranks.node_mesh(fake([7] * 4), 3)


@pytest.mark.multiprocess
@pytest.mark.timeout(240)
def _convolutions_under_cond(jaxpr, under: bool = False) -> list[bool]:
    """For each convolution in ``jaxpr`` (nested ones included): whether a ``cond`` holds it."""
    out = []
    for e in jaxpr.eqns:
        if e.primitive.name == "conv_general_dilated":
            out.append(under)
        inside = under or e.primitive.name == "cond"
        for p in e.params.values():
            for sub in p if isinstance(p, list | tuple) else [p]:
                j = getattr(sub, "jaxpr", sub)
                if hasattr(j, "eqns"):
                    out += _convolutions_under_cond(j, inside)
    return out


def _step_jaxpr(spec: dict, cfg: dict, workers: int, nproc: int):
    """The jaxpr of one configuration's training step over ``nproc`` ranks (traced, not run)."""
    from jax.sharding import AbstractMesh, PartitionSpec

    from tuner.validation._train_worker import build_step

    params, static = eqx.partition(build_model(spec), eqx.is_array)
    leaves, treedef = jax.tree_util.tree_flatten(params)
    step, init_state, _ = build_step(cfg, spec, static, leaves, treedef, workers, nproc, 0.1, 0.9)
    fn = jax.shard_map(
        step, mesh=AbstractMesh((nproc,), ("r",)), in_specs=PartitionSpec("r"),
        out_specs=PartitionSpec("r"), check_vma=False,
    )  # fmt: skip
    x, y = make_batch(spec, 0)
    stacked = jax.tree_util.tree_map(
        lambda a: jnp.stack([jnp.asarray(a)] * nproc), (list(leaves), init_state(leaves), x, y)
    )
    return jax.make_jaxpr(fn)(*stacked).jaxpr


@pytest.mark.parametrize("colocated", [False, True])
def test_parameter_server_workers_compute_outside_a_conditional(colocated):
    """XLA:CPU runs a convolution inside ``lax.cond`` about 20× slower (the default CNN's
    backward: 7.8 → 163 ms, jax 0.10.2): a dedicated server's step that skipped its
    gradient in a cond timed that on every worker (1PS dedicated 88 ms against 14.6 ms
    colocated on the emulated 4 × 1 cluster). Every rank's convolutions run unconditionally."""

    cfg = {"architecture": "ps", "bucket_bytes": 0, "servers": 1, "colocated": colocated}
    convs = _convolutions_under_cond(_step_jaxpr(TINY_CNN, cfg, 2, 2 if colocated else 3))
    assert convs and not any(convs), convs


def test_dedicated_parameter_server_equals_single_process_training(tmp_path):
    # The CNN here (the MLP above): both models go through every exchange code path.
    from calibration import RecordWriter

    configs = [StepConfig("ps", 0, servers=1), StepConfig("ps", 1 << 20, servers=1)]
    pids: list[int] = []
    with RecordWriter(tmp_path / "steps.jsonl") as writer:
        run = run_training(
            TINY_CNN,
            2,
            configs,
            steps=2,
            warmup_steps=1,
            return_params=True,
            writer=writer,
            on_spawn=lambda rank, pid: pids.append(pid),
            timeout_s=120,
        )
    assert len(pids) == 3 and all(_gone(p) for p in pids)
    assert not _children()
    _check_equal_parameters(run, configs, 2, tmp_path, 2, spec=TINY_CNN)
    m = run.measurements[0]
    assert (m.processes, m.ranks_per_node, m.record["servers"]) == (3, 3, 1)
    # The server process does not train: its model copy never moves.
    initial, final = run.params[2][0]
    for i, f in zip(initial, final, strict=True):
        np.testing.assert_array_equal(i, f)


def _collectives(jaxpr) -> list[tuple[str, int]]:
    """(primitive name, operand size) of every collective in ``jaxpr``, in program order."""
    out = []
    for eqn in jaxpr.eqns:
        name = eqn.primitive.name
        if name in ("psum", "psum2", "ppermute", "all_to_all", "all_gather", "reduce_scatter"):
            out.append((name, int(np.prod(eqn.invars[0].aval.shape))))
        for v in eqn.params.values():
            for sub in v if isinstance(v, (list, tuple)) else [v]:
                j = getattr(sub, "jaxpr", sub)
                if hasattr(j, "eqns"):
                    out += _collectives(j)
    return out


@pytest.mark.parametrize(
    "cfg,workers,nproc,want",
    [
        # (arch, servers, colocated), workers, processes, [exchange preceded by 2 small psums]
        (("p2p", 0, False), 2, 2, ["all_to_all", "all_gather"]),  # both phases swap at n = 2
        (("p2p", 0, False), 3, 3, ["all_to_all"]),  # gloo's ring all-gather: no swap at n ≥ 3
        (("ps", 2, True), 2, 2, ["ppermute", "ppermute"]),  # push and pull swap
        (("ps", 1, True), 2, 2, []),  # 1 → 0, then 0 → 1: one way each
        (("ps", 1, False), 2, 3, []),  # workers → dedicated server and back: no swap
        (("ps", 4, True), 4, 4, ["ppermute", "ppermute"]),  # round 2 of 3: 0 ↔ 2, 1 ↔ 3
        (("ps", 2, True), 4, 4, []),  # rounds 1 → 0, 2 → 1; 2 → 0, 3 → 1; 3 → 0, 0 → 1
        (("ring", 0, False), 2, 2, []),
    ],
)
def test_swaps_start_together_and_one_way_exchanges_do_not_wait(cfg, workers, nproc, want):
    """Every exchange in which two ranks send to each other follows two small all-reduces
    (``start_together``: XLA:CPU's gloo swap doubles when one rank comes late,
    benchmarks/emulated_swaps.py), and nothing else gets them: one bucket, so each
    exchange appears once."""

    from tuner.validation._train_worker import sync_allreduces

    arch, servers, colocated = cfg
    conf = {"architecture": arch, "bucket_bytes": 1 << 30, "servers": servers,
            "colocated": colocated}  # fmt: skip
    ops = _collectives(_step_jaxpr(TINY, conf, workers, nproc))
    small = [
        i for i, (name, size) in enumerate(ops) if name.startswith("psum") and size <= 8 * nproc
    ]
    # each pair of small psums is followed by the exchange it synchronises
    assert len(small) == 2 * len(want), ops
    got = [ops[small[2 * i + 1] + 1][0] for i in range(len(want))]
    assert got == want, ops
    assert all(small[2 * i + 1] == small[2 * i] + 1 for i in range(len(want))), ops
    # what the step record declares for the prediction to add (calibration.sync_time)
    assert sync_allreduces(arch, workers, servers, colocated, 1) == len(small)
