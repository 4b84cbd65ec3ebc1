"""The iteration timeline: bucketing rules, a hand-computed 3-bucket timeline,
breakdown identities, gradients, jit/vmap parity and retracing.

The recursion under test (../shared/DESIGN.md, "Iteration timeline"; Li et al.,
VLDB 2020 for DDP's buckets; Zhang et al., ATC 2017 for wait-free backprop):

    start_b = max(r_b, end_{b−1}),  end_b = start_b + c_b
    T = T_fwd + max(T_bwd, end_K) + T_update + T_overhead        (overlapping)
    T = T_fwd + T_bwd + Σ c1_b + T_update + Σ c2_b + T_overhead   (not overlapping)

It is computed below by an explicit Python loop over buckets — not the suffix-sum
form the model uses — with collective times from their closed forms.
"""

from __future__ import annotations

import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

import costmodel._timeline as timeline_module
from costmodel import (
    ARCHITECTURE_NAMES,
    Breakdown,
    ClusterParams,
    Workload,
    bucket_schedule,
    bucket_table,
    bucketize,
    fluid_iteration_time,
    get_architecture,
    get_workload,
    iteration_time,
    preset,
)

TINY = 1e-30
MB = 1e6

# Hand-example cluster: a slow network (100 MB/s) so that communication queues.
ALPHA = (5e-6, 50e-6)
BETA = (1 / 10e9, 1 / 0.1e9)
GAMMA = 1 / 100e9
OVERHEAD = 20e-6  # per collective call
FLOPS = 1e12
STEP_OVERHEAD = 1e-3
UPDATE = 1e-11  # s per parameter byte
INTERFERENCE = 0.1
FANIN_E = 0.2


def hand_params(**kw) -> ClusterParams:
    args = dict(
        alpha_s=ALPHA,
        beta_s_per_byte=BETA,
        node_beta_s_per_byte=TINY,
        gamma_s_per_byte=GAMMA,
        call_overhead_s=OVERHEAD,
        fanin_exponent=FANIN_E,
        node_compute_slots=1e6,
        flops_per_s=FLOPS,
        step_overhead_s=STEP_OVERHEAD,
        update_s_per_byte=UPDATE,
        overlap_interference=INTERFERENCE,
    )
    args.update(kw)
    return ClusterParams.create(**args)


def toy(batch_size=8, counts=(250_000, 500_000, 1_000_000), fwd=(1e9, 2e9, 3e9), name="toy3"):
    """Tensors A, B, C in forward order: 1, 2, 4 MB (fp32); backward = 2 × forward."""
    names = tuple(f"t{i}" for i in range(len(counts)))
    return Workload(name, names, np.array(counts), np.array(fwd, dtype=float), None, batch_size)


# ---------------------------------------------------------------------------
# Bucketing
# ---------------------------------------------------------------------------
def _random_workload(rng, T):
    counts = rng.integers(1, 3_000_000, T)
    counts[rng.integers(0, T, 3)] = rng.integers(10_000_000, 30_000_000, 3)  # a few huge ones
    fwd = rng.uniform(0, 1e9, T) * (rng.uniform(size=T) < 0.6)
    fwd[-1] += 1e6
    return Workload("rand", tuple(f"p{i}" for i in range(T)), counts, fwd, None, 4)


def _check_bucketing(w, cap, first=None):
    sizes, ready = bucketize(w, cap, first)
    rev = np.asarray(w.param_bytes, dtype=float)[::-1]
    bwd = np.asarray(w.bwd_flops, dtype=float)[::-1]
    # never split, reverse order: bucket boundaries are boundaries between tensors
    # taken in reverse (backward) order, and all bytes are there
    edges = np.cumsum(rev)
    bucket_edges = np.cumsum(sizes)
    assert bucket_edges[-1] == edges[-1]
    pos = np.searchsorted(edges, bucket_edges)
    assert np.all(edges[pos] == bucket_edges)
    ntensors = np.diff(np.concatenate([[-1], pos]))
    # ready when the bucket's last tensor's gradient exists (cumulative backward FLOPs)
    np.testing.assert_allclose(ready, np.cumsum(bwd)[pos] / bwd.sum(), rtol=1e-12)
    assert ready[-1] == 1.0
    if cap == 0:
        assert np.all(ntensors == 1)
        return sizes
    caps = np.full(len(sizes), float(cap))
    if first is not None:
        caps[0] = first
    # cap respected, except by a single oversize tensor alone in its bucket
    over = sizes > caps
    assert np.all(ntensors[over] == 1)
    # greedy: a bucket closes only when the next tensor would not fit
    nxt = rev[pos[:-1] + 1]
    assert np.all(sizes[:-1] + nxt > caps[:-1])
    return sizes


def test_bucketing_rules_on_random_workloads():
    rng = np.random.default_rng(20240611)
    for _ in range(30):
        w = _random_workload(rng, int(rng.integers(1, 80)))
        for cap in (0, 1, 4 * 1024**2, 25 * 1024**2, 1e12):
            sizes = _check_bucketing(w, cap)
            if cap >= w.total_param_bytes:
                assert len(sizes) == 1
            if cap == 1:  # every tensor is oversize: one bucket each
                assert len(sizes) == w.num_tensors
        _check_bucketing(w, 25 * 1024**2, first=1024**2)
        _check_bucketing(w, 25 * 1024**2, first=0)


def test_bucketing_of_the_toy_by_hand():
    w = toy()  # forward A 1 MB, B 2 MB, C 4 MB → backward C, B, A
    s, r = bucketize(w, 0)
    np.testing.assert_array_equal(s, [4 * MB, 2 * MB, 1 * MB])
    np.testing.assert_allclose(r, [6 / 12, 10 / 12, 1.0])
    s, r = bucketize(w, 5 * MB)  # C; then B + A (C + B would be 6 MB)
    np.testing.assert_array_equal(s, [4 * MB, 3 * MB])
    np.testing.assert_allclose(r, [0.5, 1.0])
    s, _ = bucketize(w, 6 * MB)  # C + B fit exactly; A alone
    np.testing.assert_array_equal(s, [6 * MB, 1 * MB])
    s, _ = bucketize(w, 3 * MB)  # C is oversize and alone; B + A = 3 MB fit
    np.testing.assert_array_equal(s, [4 * MB, 3 * MB])
    s, _ = bucketize(w, 6 * MB, first_bucket_bytes=1 * MB)  # C alone (first cap), B + A
    np.testing.assert_array_equal(s, [4 * MB, 3 * MB])


def test_resnet50_with_ddp_defaults():
    w = get_workload("resnet50", 64)
    sizes = _check_bucketing(w, 25 * 1024**2, first=1024**2)
    assert sizes[0] <= 1024**2
    # 102 MB of gradients in 25 MiB buckets: at least ⌈G / cap⌉ buckets, and greedy
    # packing never needs more than twice that
    lower = math.ceil(w.total_param_bytes / (25 * 1024**2))
    assert lower <= len(sizes) - 1 <= 2 * lower
    assert len(bucketize(w, 0)[0]) == w.num_tensors == 161


def test_bucket_table_pads_rows_consistently():
    w = toy()
    table = bucket_table(w, [0, 5 * MB, 6 * MB])
    assert table.sizes.shape == (4, 3)  # rows padded to a power of two; K = most buckets
    np.testing.assert_array_equal(table.counts[:3], [3, 2, 2])
    np.testing.assert_array_equal(table.sizes[table.index([5 * MB])[0]], [4 * MB, 3 * MB, 0])
    np.testing.assert_array_equal(table.sizes.sum(1), np.full(4, w.total_param_bytes))


@pytest.mark.parametrize(
    ("cap", "first", "pattern"),
    [
        (-1, None, "bucket_bytes must be a finite number of bytes ≥ 0, got -1"),
        (float("nan"), None, "bucket_bytes must be a finite number"),
        (1e6, -5, "first_bucket_bytes must be a finite number of bytes ≥ 0, got -5"),
    ],
)
def test_bucketize_rejects_bad_caps(cap, first, pattern):
    with pytest.raises(ValueError, match=pattern):
        bucketize(toy(), cap, first)


# ---------------------------------------------------------------------------
# The timeline, by hand
# ---------------------------------------------------------------------------
def ring_c(s, n):
    """Ring all_reduce of s bytes over n ranks, one per node (Patarasuk & Yuan), + call overhead."""
    f = (n - 1) / n
    return 2 * (n - 1) * ALPHA[1] + 2 * f * s * BETA[1] + f * s * GAMMA + OVERHEAD


def ps_c(s, n, k):
    """Push (with the servers' sum) and pull of one bucket, n workers, k dedicated servers.

    The server link carries n·s/k, a worker's link s (Alqahtani & Demirbas §3):
    α + max(s, n·s/k)·β·(n/k)ᵉ each way, plus the servers' reduction n·s/k·γ.
    """
    move = ALPHA[1] + max(s, n * s / k) * BETA[1] * (n / k) ** FANIN_E + OVERHEAD
    return move + n * s / k * GAMMA, move


def test_overlapping_timeline_matches_the_recursion_by_hand():
    w, n, batch = toy(), 4, 8
    p = hand_params()
    got = iteration_time(p, w, "ring", n, bucket_bytes=0, batch_size=batch)

    sizes = [4 * MB, 2 * MB, 1 * MB]  # backward order: C, B, A
    ready = [6 / 12, 10 / 12, 12 / 12]  # cumulative backward FLOPs
    fwd = batch * 6e9 / FLOPS
    bwd = batch * 12e9 / FLOPS
    c = [ring_c(s, n) for s in sizes]
    # backward slows by the interference fraction while communication overlaps it,
    # which it can only do after the first bucket is ready (the window 1 − r₁)
    bwd_eff = bwd * (1 + INTERFERENCE * min(sum(c) / bwd, 1.0 - ready[0]))
    end = 0.0
    starts = []
    for r, cb in zip(ready, c, strict=True):
        start = max(r * bwd_eff, end)
        starts.append(start)
        end = start + cb
    update = 7 * MB * UPDATE
    total = fwd + max(bwd_eff, end) + update + STEP_OVERHEAD
    # the example exercises the recursion: buckets 2 and 3 wait for their predecessor,
    # and communication outlasts the backward pass
    assert starts[1] > ready[1] * bwd_eff and starts[2] > ready[2] * bwd_eff
    assert end > bwd_eff

    assert float(got.forward_s) == pytest.approx(fwd, rel=1e-13)
    assert float(got.backward_s) == pytest.approx(bwd, rel=1e-13)
    assert float(got.communication_s) == pytest.approx(sum(c), rel=1e-13)
    assert float(got.update_s) == pytest.approx(update, rel=1e-13)
    assert float(got.overhead_s) == pytest.approx(STEP_OVERHEAD, rel=1e-13)
    assert float(got.iteration_s) == pytest.approx(total, rel=1e-13)
    assert float(got.exposed_communication_s) == pytest.approx(
        total - fwd - bwd - update - STEP_OVERHEAD, rel=1e-12
    )
    assert float(got.exposed_communication_s) < float(got.communication_s)
    assert float(got.throughput_samples_per_s) == pytest.approx(n * batch / total, rel=1e-13)
    single = fwd + bwd + update + STEP_OVERHEAD  # one worker, no communication at all
    assert float(got.scaling_efficiency) == pytest.approx(single / total, rel=1e-13)
    assert float(got.num_buckets) == 3


def test_overlap_hides_communication_that_fits_behind_backward():
    # A fast network: every bucket finishes before the next one is ready and the last
    # one right after backward: only the last bucket's time is exposed (and the
    # interference slowdown of backward).
    w, n, batch = toy(), 4, 8
    p = hand_params(beta_s_per_byte=(1 / 10e9, 1 / 10e9))
    got = iteration_time(p, w, "ring", n, bucket_bytes=0, batch_size=batch)
    f = (n - 1) / n
    c = [
        2 * (n - 1) * ALPHA[1] + 2 * f * s / 10e9 + f * s * GAMMA + OVERHEAD
        for s in (4e6, 2e6, 1e6)
    ]
    bwd = batch * 12e9 / FLOPS
    bwd_eff = bwd * (1 + INTERFERENCE * sum(c) / bwd)
    assert c[0] < (10 / 12 - 6 / 12) * bwd_eff and c[1] < (2 / 12) * bwd_eff
    exposed = (bwd_eff - bwd) + c[2]
    assert float(got.exposed_communication_s) == pytest.approx(exposed, rel=1e-12)


def test_non_overlapping_timeline_by_hand():
    # 1PS: push after backward, servers sum and update, pull; nothing overlaps.
    w, n, k, batch = toy(), 4, 1, 8
    p = hand_params()
    got = iteration_time(p, w, "ps", n, servers=k, bucket_bytes=5 * MB, batch_size=batch)
    sizes = [4 * MB, 3 * MB]  # C; then B + A
    fwd, bwd = batch * 6e9 / FLOPS, batch * 12e9 / FLOPS
    push = [ps_c(s, n, k)[0] for s in sizes]
    pull = [ps_c(s, n, k)[1] for s in sizes]
    update = 7 * MB / k * UPDATE  # on the server, its shard
    total = fwd + bwd + sum(push) + update + sum(pull) + STEP_OVERHEAD
    assert float(got.iteration_s) == pytest.approx(total, rel=1e-13)
    assert float(got.communication_s) == pytest.approx(sum(push) + sum(pull), rel=1e-13)
    # nothing is hidden: exposed communication is all of it
    assert float(got.exposed_communication_s) == pytest.approx(sum(push) + sum(pull), rel=1e-12)
    assert float(got.update_s) == pytest.approx(update, rel=1e-13)
    assert float(got.num_buckets) == 2
    # two dedicated servers halve the server-link bytes and the update
    two = iteration_time(p, w, "ps", n, servers=2, bucket_bytes=5 * MB, batch_size=batch)
    total2 = fwd + bwd + STEP_OVERHEAD + 7 * MB / 2 * UPDATE
    total2 += sum(ps_c(s, n, 2)[0] + ps_c(s, n, 2)[1] for s in sizes)
    assert float(two.iteration_s) == pytest.approx(total2, rel=1e-13)


def test_measured_step_time_replaces_flops():
    # One worker, no communication: the iteration is the measured step, whatever the
    # FLOP estimate; per-sample time scales it with the batch.
    w = get_workload("resnet50", 32).with_step_time(0.25)
    p = preset("ethernet-10g", "v100")
    one = iteration_time(p, w, "ring", 1)
    assert float(one.iteration_s) == pytest.approx(0.25, rel=1e-13)
    assert float(one.scaling_efficiency) == pytest.approx(1.0, rel=1e-13)
    two = iteration_time(p, w, "ring", 1, batch_size=64)
    assert float(two.iteration_s) == pytest.approx(0.5, rel=1e-13)
    # forward/backward split as the FLOPs say (1 : 2)
    assert float(one.backward_s) == pytest.approx(2 * float(one.forward_s), rel=1e-12)


# ---------------------------------------------------------------------------
# Breakdown identities over every architecture
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet_sweep():
    p = preset("ethernet-25g", "v100")
    w = get_workload("resnet50", 64)
    n = np.array([1, 2, 4, 8, 16, 32, 64, 8, 8])
    g = np.array([1, 1, 1, 4, 4, 8, 8, 8, 2])
    bb = np.array([25, 25, 25, 25, 4, 64, 25, 0, 1e-6]) * 1024**2
    out = {}
    for a in ARCHITECTURE_NAMES:
        out[a] = iteration_time(p, w, a, n, ranks_per_node=g, bucket_bytes=bb, servers=2)
    return n, out


@pytest.mark.parametrize("arch", ARCHITECTURE_NAMES)
def test_breakdown_identities(resnet_sweep, arch):
    n, out = resnet_sweep
    b = {k: np.asarray(v) for k, v in out[arch].to_dict().items()}
    total = b["forward_s"] + b["backward_s"] + b["exposed_communication_s"]
    total += b["update_s"] + b["overhead_s"]
    np.testing.assert_allclose(b["iteration_s"], total, rtol=1e-12)
    np.testing.assert_allclose(b["throughput_samples_per_s"], n * 64 / b["iteration_s"], rtol=1e-13)
    assert np.all(b["exposed_communication_s"] >= 0)
    eff = b["scaling_efficiency"]
    assert np.all(eff <= 1 + 1e-12) and np.all(eff > 0)
    if get_architecture(arch).overlaps:
        # overlapping hides part of the communication (it is not all exposed)
        assert np.all(b["exposed_communication_s"][n > 1] < b["communication_s"][n > 1])
    else:
        np.testing.assert_allclose(
            b["exposed_communication_s"], b["communication_s"], rtol=1e-12, atol=1e-15
        )


def test_hybrid_update_on_one_node():
    # Servers sit on the nodes: on one node there is one, whatever --servers says
    # (was: the update divided by k unclipped, so one worker beat the baseline).
    p, w = preset("ethernet-10g", "v100"), toy()
    for k in (1, 2, 4):
        b = iteration_time(p, w, "hybrid", 1, servers=k)
        assert float(b.scaling_efficiency) == pytest.approx(1.0, rel=1e-12), k
        b = iteration_time(p, w, "hybrid", 8, ranks_per_node=8, servers=k)
        assert float(b.update_s) == pytest.approx(w.total_param_bytes * 5 / 900e9, rel=1e-12)
        # two nodes: at most two servers share the update
        b = iteration_time(p, w, "hybrid", 16, ranks_per_node=8, servers=k)
        want = w.total_param_bytes / min(k, 2) * 5 / 900e9
        assert float(b.update_s) == pytest.approx(want, rel=1e-12), k


def test_breakdown_to_dict_and_indexing():
    p, w = preset(), toy()
    b = iteration_time(p, w, "ring", np.array([1, 2, 4]))
    d = b.to_dict()
    assert set(d) == set(Breakdown.FIELDS) and len(d["iteration_s"]) == 3
    one = b[1]
    assert isinstance(one, Breakdown)
    assert float(one.iteration_s) == d["iteration_s"][1]
    assert isinstance(one.to_dict()["iteration_s"], float)


# ---------------------------------------------------------------------------
# Smooth version, gradients
# ---------------------------------------------------------------------------
def test_smooth_max_is_a_close_upper_bound():
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    n = np.array([2, 4, 8, 16, 32])
    hard = np.asarray(iteration_time(p, w, "ring", n).iteration_s)
    soft = np.asarray(iteration_time(p, w, "ring", n, smooth=True).iteration_s)
    # log-sum-exp with τ = 1e-3 × scale over K + 1 candidates: 0 ≤ soft − hard ≤ τ log(K+1)
    # (hard and soft sum the buckets in different orders: equal to 1e-12 where the max dominates)
    K = len(bucketize(w, 25 * 1024**2)[0])
    assert np.all(soft >= hard * (1 - 1e-12))
    assert np.all(soft - hard <= 1e-3 * soft * math.log(K + 1))


@pytest.mark.parametrize(
    ("arch", "n_regimes"), [("ring", 1), ("ring", 2), ("tree", 2), ("ps", 1), ("ps", 2), ("p2p", 2)]
)
def test_check_grads_of_the_smooth_iteration_model_wrt_params(arch, n_regimes):
    w = toy()
    p = hand_params(n_regimes=n_regimes, node_beta_s_per_byte=(1e-12, 1e-9))

    @jax.jit
    def f(params):
        b = iteration_time(params, w, arch, 4, servers=2, bucket_bytes=5 * MB, smooth=True)
        return b.iteration_s

    check_grads(f, (p,), order=1, modes=("fwd", "rev"), eps=1e-5)
    # and the gradient says what physics says: a slower network, a slower step
    g = jax.grad(f)(p)
    assert float(g.log_beta[1]) > 0 and float(g.log_alpha[1]) > 0
    assert float(g.log_flops) < 0  # faster compute, shorter iteration


def test_check_grads_of_the_fluid_model_wrt_log_bucket_size():
    w = toy()  # G = 7 MB; boundaries (reverse) at 4, 6, 7 MB
    p = hand_params()

    @jax.jit
    def f(log_b):
        return fluid_iteration_time(p, w, "ring", 4.0, log_b, num_slots=8).iteration_s

    # b = 1.3 MB: bucket ends (1.3, 2.6, 3.9, 5.2, 6.5, 7) stay clear of the tensor
    # boundaries and of G/j, where the relaxation has kinks
    check_grads(f, (jnp.asarray(math.log(1.3 * MB)),), order=1, modes=("fwd", "rev"), eps=1e-5)


def test_fluid_model_equals_the_exact_one_at_commensurate_bucket_sizes():
    # Six equal tensors: a bucket of two tensors is the same in both models.
    w = toy(counts=(250_000,) * 6, fwd=(1e9, 2e9, 1e9, 3e9, 1e9, 2e9), name="six")
    p = hand_params()
    t = 2 * 250_000 * 4
    for arch in ("ring", "ps", "p2p"):
        exact = iteration_time(p, w, arch, 8, bucket_bytes=t, smooth=True)
        fluid = fluid_iteration_time(p, w, arch, 8.0, jnp.log(float(t)), num_slots=5)
        for field in ("iteration_s", "communication_s", "exposed_communication_s"):
            assert float(getattr(fluid, field)) == pytest.approx(
                float(getattr(exact, field)), rel=1e-12
            ), (arch, field)
        assert float(fluid.num_buckets) == pytest.approx(3.0)


@pytest.mark.parametrize("arch", ARCHITECTURE_NAMES)
def test_one_regime_shortcut_equals_per_bucket_evaluation(arch):
    # Two regimes whose second line is 10⁶× slower: the soft envelope returns the
    # first line to the last bit (10⁻⁶ to the power k = 4 vanishes), but the model
    # evaluates it bucket by bucket — so this compares whatever the one-regime
    # path does (e.g. using that a bucket's cost is affine in its bytes) with the
    # general per-bucket evaluation, on the same configurations.
    one = preset("ethernet-25g", "v100")
    two = ClusterParams.from_dict(
        one.to_dict()
        | {
            "n_regimes": 2,
            "regime_alpha_factor": [[[1.0, 1e6]] * 2] * 9,
            "regime_beta_factor": [[[1.0, 1e6]] * 2] * 9,
            "regime_sharpness": [4.0] * 9,
        }
    )
    assert two.n_regimes == 2
    w = get_workload("resnet50", 64)
    n = np.array([1, 2, 3, 8, 16, 64, 8, 32])
    g = np.array([1, 1, 1, 4, 8, 8, 2, 4])
    k = np.array([1, 2, 1, 2, 4, 8, 3, 1])
    bb = np.array([0, 1, 4, 25, 25, 100, 1e-6, 1e3]) * 1024**2
    for smooth in (False, True):
        a = iteration_time(
            one, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=bb, smooth=smooth
        )
        b = iteration_time(
            two, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=bb, smooth=smooth
        )
        for f in Breakdown.FIELDS:
            np.testing.assert_allclose(
                np.asarray(getattr(a, f)),
                np.asarray(getattr(b, f)),
                rtol=1e-12,
                atol=1e-18,
                err_msg=f,
            )


def test_gradient_signs_of_the_iteration():
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)

    def t(params, n):
        return iteration_time(params, w, "ring", n, smooth=True).iteration_s

    g = jax.grad(t)(p, 16)
    assert float(g.log_beta[1]) > 0 and float(g.log_alpha[1]) > 0
    assert float(g.log_step_overhead) > 0 and float(g.log_update) > 0
    assert float(g.log_flops) < 0


# ---------------------------------------------------------------------------
# jit / vmap parity and retracing
# ---------------------------------------------------------------------------
def test_batched_configurations_equal_one_at_a_time():
    p, w = preset("ethernet-10g", "v100"), get_workload("vgg16", 32)
    n = np.array([2, 8, 32, 16])
    bb = np.array([0, 4, 25, 25]) * 1024**2
    k = np.array([1, 2, 4, 3])
    for arch in ("ring", "ps"):
        batch = iteration_time(p, w, arch, n, bucket_bytes=bb, servers=k)
        for i in range(len(n)):
            one = iteration_time(p, w, arch, int(n[i]), bucket_bytes=bb[i], servers=int(k[i]))
            for f in Breakdown.FIELDS:
                assert float(getattr(batch, f)[i]) == pytest.approx(
                    float(getattr(one, f)), rel=1e-13
                ), (arch, i, f)
    # broadcasting: a column of workers against a row of bucket sizes
    grid = iteration_time(p, w, "ring", n[:, None], bucket_bytes=bb[None, :])
    assert grid.iteration_s.shape == (4, 4)
    assert float(grid.iteration_s[2, 3]) == pytest.approx(
        float(iteration_time(p, w, "ring", n[2], bucket_bytes=bb[3]).iteration_s), rel=1e-13
    )


def test_jit_over_params_and_vmap_over_parameter_sets():
    w = toy()
    p = hand_params()
    f = jax.jit(lambda q: iteration_time(q, w, "ring", 4, bucket_bytes=5 * MB).iteration_s)
    eager = float(iteration_time(p, w, "ring", 4, bucket_bytes=5 * MB).iteration_s)
    assert float(f(p)) == pytest.approx(eager, rel=1e-14)
    stack = jax.tree_util.tree_map(lambda *x: jnp.stack(x), p, p.scaled(beta=2.0))
    both = eqx.filter_vmap(f)(stack)
    assert float(both[0]) == pytest.approx(eager, rel=1e-14)
    assert float(both[1]) > float(both[0])


def _count_traces(monkeypatch):
    """Replace the timeline's per-configuration core by a trace counter.

    ``_core`` runs once per trace of the jitted, vmapped ``_sweep`` (and not at
    all when a compiled version is reused), so its call count is the number of
    traces of the sweep.
    """
    counted = eqx.debug.assert_max_traces(timeline_module._core, max_traces=None)
    monkeypatch.setattr(timeline_module, "_core", counted)
    return counted


def _unique_workload(T=23):
    # A tensor count no other test uses: the first call below must trace.
    counts = np.arange(1, T + 1) * 40_000
    return Workload("traces", tuple(f"w{i}" for i in range(T)), counts, np.full(T, 1e8), None, 16)


def _traced_time(p, w, arch, workers, **kw):
    """iteration_time with traced parameters (the jax path: calibration on steps, grads)."""
    return jax.grad(lambda q: jnp.sum(iteration_time(q, w, arch, workers, **kw).iteration_s))(p)


def test_no_retracing_across_a_sweep_of_values(monkeypatch):
    counted = _count_traces(monkeypatch)
    w = _unique_workload()
    p = preset("ethernet-10g", "v100")
    # four different caps that give the same number of buckets (the same shapes)
    by_count = {}
    for c in np.linspace(2e6, 6e6, 81):
        by_count.setdefault(len(bucketize(w, c)[0]), []).append(c)
    caps = max(by_count.values(), key=len)[:4]
    assert len(caps) == 4
    rng = np.random.default_rng(0)
    for i in range(6):
        _traced_time(
            p.scaled(beta=float(rng.uniform(0.5, 2)), flops=float(rng.uniform(0.5, 2))),
            w,
            "ring",
            rng.integers(1, 64, 8),
            ranks_per_node=rng.integers(1, 8, 8),
            servers=rng.integers(1, 4, 8),
            bucket_bytes=caps[i % 4],
            batch_size=rng.integers(1, 128, 8),
        )
    assert eqx.debug.get_num_traces(counted) == 1
    # a different number of configurations within one power of two: still no retrace
    _traced_time(p, w, "ring", np.arange(1, 8), bucket_bytes=caps[0])
    assert eqx.debug.get_num_traces(counted) == 1


def test_no_retracing_across_bucket_sizes(monkeypatch):
    counted = _count_traces(monkeypatch)
    w = _unique_workload(T=29)
    p = preset("ethernet-10g", "v100")
    caps = [1e6, 2e6, 4e6, 8e6, 16e6]
    assert len({len(bucketize(w, c)[0]) for c in caps}) == len(caps)
    for cap in caps:
        _traced_time(p, w, "ring", np.arange(1, 9), bucket_bytes=cap)
    # The bucket axis is padded to a multiple of 16 (at most all 29 tensors), so
    # the traced sweep traces once per distinct padded width, and only then:
    # computed here from the bucket counts, not bounded.
    widths = {min(29, 16 * math.ceil(len(bucketize(w, c)[0]) / 16)) for c in caps}
    assert len(widths) == 2  # these caps need both widths (16 and 29): two traces
    assert eqx.debug.get_num_traces(counted) == len(widths)
    # Positive control: a new shape does retrace, and the counter counts it
    # (17 configurations pad to 32 rows instead of 8).
    _traced_time(p, w, "ring", np.arange(1, 18), bucket_bytes=caps[0])
    assert eqx.debug.get_num_traces(counted) == len(widths) + 1


def test_concrete_sweep_is_numpy_in_few_calls(monkeypatch):
    # Concrete parameters: the closed forms run in numpy and nothing is handed to
    # XLA (numpy arrays out). One regime: every bucket cost is affine, so 5000
    # configurations of 5 caps go through ONE evaluation of the step's parts
    # (_affine_sweep, no _core); three regimes cost buckets one by one: the step's
    # parts once more, then one exchange per cap, with its exact buckets.
    counted = _count_traces(monkeypatch)
    parts = eqx.debug.assert_max_traces(timeline_module._step_parts, max_traces=None)
    monkeypatch.setattr(timeline_module, "_step_parts", parts)
    per_cap = eqx.debug.assert_max_traces(timeline_module._bucket_exchange, max_traces=None)
    monkeypatch.setattr(timeline_module, "_bucket_exchange", per_cap)
    w = _unique_workload(T=31)
    rng = np.random.default_rng(1)
    N = 5000
    caps = rng.choice([0, 1e6, 4e6, 16e6, 64e6], N)
    workers = rng.integers(1, 256, N)
    p1 = preset("ethernet-10g", "v100")
    out = iteration_time(p1, w, "p2p", workers, bucket_bytes=caps)
    assert out.iteration_s.shape == (N,) and bool(np.all(np.isfinite(out.iteration_s)))
    assert all(type(getattr(out, f)) is np.ndarray for f in Breakdown.FIELDS)
    assert eqx.debug.get_num_traces(counted) == 0 and eqx.debug.get_num_traces(parts) == 1
    p3 = preset("ethernet-10g", "v100", n_regimes=3)
    out3 = iteration_time(p3, w, "ring", workers, bucket_bytes=caps)
    assert bool(np.all(np.isfinite(out3.iteration_s)))
    assert eqx.debug.get_num_traces(counted) == 0 and eqx.debug.get_num_traces(parts) == 2
    assert eqx.debug.get_num_traces(per_cap) == len(np.unique(caps)) == 5


def test_one_traced_call_sweeps_many_configurations_with_one_trace(monkeypatch):
    counted = _count_traces(monkeypatch)
    w = _unique_workload(T=37)
    p = preset("ethernet-10g", "v100")
    rng = np.random.default_rng(1)
    N = 500
    g = _traced_time(
        p, w, "p2p", rng.integers(1, 256, N), bucket_bytes=rng.choice([0, 1e6, 4e6, 16e6], N)
    )
    assert bool(np.isfinite(np.asarray(g.log_beta)).all())
    assert eqx.debug.get_num_traces(counted) == 1


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(architecture="allreduce"), r"unknown architecture 'allreduce'; valid: .*ring"),
        (dict(workers=0), r"workers must be finite and ≥ 1, got \S*0"),
        (dict(workers=np.array([4, -1])), r"workers must be finite and ≥ 1"),
        (dict(ranks_per_node=0), r"ranks_per_node must be finite and ≥ 1"),
        (dict(servers=0), r"servers must be finite and ≥ 1"),
        (dict(bucket_bytes=-1), r"bucket_bytes must be finite and ≥ 0"),
        (dict(batch_size=0), r"batch_size must be finite and ≥ 1"),
        (dict(architecture="ring", colocated=True), r"'colocated' applies to the ps"),
    ],
)
def test_bad_input_names_the_argument(kwargs, pattern):
    args = dict(architecture="ring", workers=4) | kwargs
    arch = args.pop("architecture")
    with pytest.raises(ValueError, match=pattern):
        iteration_time(preset(), toy(), arch, **args)


def test_workload_without_flops_or_step_time_is_refused():
    w = toy(fwd=(0.0, 0.0, 0.0), name="noflops")
    with pytest.raises(ValueError, match="has no FLOP counts; give a measured single-worker"):
        iteration_time(preset(), w, "ring", 4)
    # with a measured step time it is fine
    b = iteration_time(preset(), w.with_step_time(0.1), "ring", 1)
    assert float(b.iteration_s) == pytest.approx(0.1, rel=1e-13)


# --------------------------------------------------------------------------- bucket schedule
def test_bucket_schedule_by_hand_on_the_queueing_toy():
    """The schedule's per-bucket starts and ends are the hand recursion's (slow network)."""
    w, n, batch = toy(), 4, 8
    p = hand_params()
    s = bucket_schedule(p, w, "ring", n, bucket_bytes=0, batch_size=batch)
    sizes = [4 * MB, 2 * MB, 1 * MB]
    ready = [6 / 12, 10 / 12, 12 / 12]
    fwd, bwd = batch * 6e9 / FLOPS, batch * 12e9 / FLOPS
    c = [ring_c(x, n) for x in sizes]
    bwd_eff = bwd * (1 + INTERFERENCE * min(sum(c) / bwd, 1.0 - ready[0]))
    end, starts, ends = fwd, [], []
    for r, cb in zip(ready, c, strict=True):
        starts.append(max(fwd + r * bwd_eff, end))
        end = starts[-1] + cb
        ends.append(end)
    np.testing.assert_allclose(s.bucket_bytes, sizes)
    np.testing.assert_allclose(s.ready_s, [fwd + r * bwd_eff for r in ready], rtol=1e-13)
    np.testing.assert_allclose(s.start_s, starts, rtol=1e-12)
    np.testing.assert_allclose(s.end_s, ends, rtol=1e-12)
    assert s.backward_s == pytest.approx(bwd_eff, rel=1e-13)
    assert s.update_start_s == pytest.approx(max(fwd + bwd_eff, end), rel=1e-13)
    assert s.iteration_s == pytest.approx(end + 7 * MB * UPDATE + STEP_OVERHEAD, rel=1e-13)


@pytest.mark.parametrize("arch", ARCHITECTURE_NAMES)
def test_bucket_schedule_ends_where_iteration_time_does(arch):
    """For every architecture, the schedule's end and exposed time are iteration_time's.

    The per-bucket start/end are also replayed here by the sequential recursion
    start_b = max(ready_b, end_{b−1}) from the schedule's own ready times and costs.
    """
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    if hasattr(get_architecture(arch), "schedule"):  # fsdp/hsdp: per-unit, refused
        with pytest.raises(ValueError, match="per unit"):
            bucket_schedule(p, w, arch, 8)
        return
    slow = p.scaled(beta=8.0)  # communication queues behind itself
    queued = False
    for params in (p, slow):
        for n, g, k, bb, first in [
            (8, 1, 1, 25 * 2**20, None),
            (8, 1, 1, 25 * 2**20, 2**20),  # DDP's small first bucket
            (16, 4, 2, 2**20, None),
            (4, 2, 1, 0, None),
            (1, 1, 1, 0, None),
        ]:
            kw = dict(ranks_per_node=g, servers=k, bucket_bytes=bb, first_bucket_bytes=first)
            s = bucket_schedule(params, w, arch, n, **kw)
            bd = iteration_time(params, w, arch, n, **kw)
            assert s.iteration_s == pytest.approx(float(bd.iteration_s), rel=1e-12)
            assert s.overhead_start_s + s.overhead_s == pytest.approx(s.iteration_s, rel=1e-14)
            assert s.exposed_s == pytest.approx(
                float(bd.exposed_communication_s), rel=1e-9, abs=1e-15
            )
            assert float(np.sum(s.phase1_s) + np.sum(s.phase2_s)) == pytest.approx(
                float(bd.communication_s), rel=1e-12, abs=1e-15
            )
            assert s.bucket_bytes.size == int(bd.num_buckets)
            np.testing.assert_array_equal(
                s.bucket_bytes, bucketize(w, bb, first_bucket_bytes=first)[0]
            )
            prev = -math.inf
            for b in range(s.bucket_bytes.size):
                start = max(s.ready_s[b], prev)
                assert s.start_s[b] == pytest.approx(start, rel=1e-12)
                prev = start + s.phase1_s[b]
                assert s.end_s[b] == pytest.approx(prev, rel=1e-12)
            queued |= bool(np.any(s.start_s[1:] > s.ready_s[1:] * (1 + 1e-9)))
            if not s.overlaps:
                assert s.update_start_s == pytest.approx(s.end_s[-1], rel=1e-14)
    assert queued  # the recursion's max was exercised, not only ready times


def test_bucket_schedule_refuses_arrays():
    with pytest.raises(ValueError, match="workers must be a scalar"):
        bucket_schedule(preset(), toy(), "ring", [2, 4])


@pytest.mark.parametrize("arch", ["ps", "ring", "fsdp"])
def test_no_configurations_give_empty_results(arch):
    # an empty sweep (a filter that kept nothing) is empty results, not a crash in the bucketing
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    out = iteration_time(p, w, arch, np.zeros(0), bucket_bytes=np.zeros(0))
    assert all(getattr(out, f).shape == (0,) for f in Breakdown.FIELDS)
    draws = p.from_flat(np.stack([p.flat(), p.flat()]))  # a batch of 2 parameter sets
    assert iteration_time(draws, w, arch, np.zeros(0)).iteration_s.shape == (2, 0)


@pytest.mark.parametrize("arch", ["ring", "tree", "hierarchical"])
def test_exposed_communication_never_exceeds_the_communication(arch):
    """Exposed = what the step waits on communication (backward's slowdown under
    overlap included) is at most the communication itself; with one bucket, ready
    when backward ends, nothing overlaps: exposed equals communication exactly
    (interference used to slow backward by ι·min(C/T_bwd, 1) there too)."""
    p = preset("ethernet-10g", "v100")
    p = eqx.tree_at(lambda q: q.logit_interference, p, jnp.asarray(0.0))  # ι = 0.5
    w = get_workload("resnet50", 64)
    n = np.repeat([2.0, 8.0, 64.0, 512.0], 5)
    caps = np.tile([0.0, 2.0**20, 25 * 2.0**20, 2.0**27, 2.0**30], 4)
    bd = iteration_time(p.to_numpy(), w, arch, n, ranks_per_node=4, bucket_bytes=caps)
    exposed, comm = np.asarray(bd.exposed_communication_s), np.asarray(bd.communication_s)
    assert np.all(exposed <= comm * (1 + 1e-12))
    one = np.asarray(bd.num_buckets) == 1
    assert one.sum() >= 8  # 128 MiB and 1 GiB caps hold all of ResNet-50's 97 MiB
    np.testing.assert_allclose(exposed[one], comm[one], rtol=1e-12)
    # and where many buckets overlap backward, backward is slowed (ι still acts)
    many = caps == 2.0**20
    assert np.all(exposed[many] < comm[many])


def test_a_fixed_global_batch_pays_for_its_smaller_gemms():
    """Strong scaling: B = 256 samples over n workers, each computing B/n. With
    m½ = 16 (the CPU preset's) a worker's compute per sample grows as its batch
    shrinks — a batch-1 dense layer is a matrix-vector product — exactly as
    Σ F_l(1 + m½/min(b·r_l, w_l)) / R says; with no m½ (a GPU preset's) it is
    the same at every n."""
    from costmodel import preset
    from costmodel.workloads import get_workload

    w = get_workload("vgg16", batch_size=256)
    n = np.array([1.0, 4.0, 16.0, 64.0, 256.0])
    b = 256.0 / n
    flops = float(np.sum(w.fwd_flops) + np.sum(w.bwd_flops))
    for dev, m_half in (("cpu", 16.0), ("v100", None)):
        p = preset("ethernet-10g", dev).to_numpy()
        out = iteration_time(p, w, "ring", n, batch_size=b, base_batch_size=256.0)
        per_sample = (np.asarray(out.forward_s) + np.asarray(out.backward_s)) / b
        if m_half is None:
            np.testing.assert_allclose(per_sample, per_sample[0], rtol=1e-9)
            continue
        assert np.all(np.diff(per_sample) > 0)
        u = np.array([w.small_gemm(x) for x in b])
        share = float(p.core_share(np.float64(1.0)))  # a lone rank on the CPU's 2 slots
        want = flops * (1 + m_half * u) / float(p.flops_per_s) * share
        np.testing.assert_allclose(per_sample, want, rtol=1e-9)


@pytest.mark.parametrize("arch", ["ring", "fsdp"])
def test_a_job_smaller_than_a_node_shares_the_cores_of_its_own_ranks(arch):
    """n < g ranks fill one node with n ranks: they share its cores n ways, not g (a new
    user's trial: one worker 'costed as 1 rank on one node' computed at the 2-rank share,
    91.6% efficient). The compute of (n, g) equals (n, min(g, n)), in numpy and jitted; a
    full node still shares g ways."""
    p = ClusterParams.create(node_compute_slots=1.0)  # every rank beyond one slows compute
    w = get_workload("resnet18", 32)
    a = get_architecture(arch)

    def compute(n, g, **kw):
        bd = iteration_time(p, w, a, n, ranks_per_node=g, bucket_bytes=25 << 20, **kw)
        return float(bd.forward_s) + float(bd.backward_s)

    assert compute(1, 2) == pytest.approx(compute(1, 1), rel=1e-12)
    assert compute(2, 4) == pytest.approx(compute(2, 2), rel=1e-12)
    assert compute(4, 4) > 1.5 * compute(4, 1)  # 4 ranks on one node's single slot
