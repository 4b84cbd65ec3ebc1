"""Gradient-exchange architectures: per-bucket costs against closed forms, limits,
where the update runs, memory, and the scaling behaviour each is known for.

Closed forms, typed here from their sources:

- ring / tree / hierarchical all-reduce: see tests/test_collectives.py;
- peer-to-peer (Alqahtani & Demirbas, arXiv 1909.02061, §3): every worker owns a
  1/n shard; all_to_all of the shards (n−1)α + (n−1)/n·sβ·(n−1)ᵉ, the owner sums
  (n−1)/n·s·γ and updates s/n, then all_gather (n−1)α + (n−1)/n·sβ;
- parameter server with k servers (ibid.; ../shared/DESIGN.md): the server link
  carries n·s/k, a worker's link s; push α + max(s, n·s/k)·β·(n/k)ᵉ, the servers sum
  n·s/k·γ and update G/k, pull α + max(s, n·s/k)·β·(n/k)ᵉ. Colocated on k of the
  workers, a server's own share stays local: n−1 senders, worker link s(k−1)/k.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from costmodel import (
    ARCHITECTURE_NAMES,
    ClusterParams,
    get_architecture,
    get_workload,
    iteration_time,
    preset,
)

ALPHA = (2e-6, 30e-6)
BETA = (1 / 50e9, 1 / 2e9)
GAMMA = 1 / 100e9
FANIN_E = 0.2
A2A_E = 0.15
UPDATE = 5e-12
TINY = 1e-30


def exact_params(**kw) -> ClusterParams:
    args = dict(
        alpha_s=ALPHA,
        beta_s_per_byte=BETA,
        node_beta_s_per_byte=TINY,
        gamma_s_per_byte=GAMMA,
        call_overhead_s=TINY,
        fanin_exponent=FANIN_E,
        all_to_all_exponent=A2A_E,
        update_s_per_byte=UPDATE,
    )
    args.update(kw)
    return ClusterParams.create(**args)


def phases(arch_name, s, n, g=1, k=1, colocated=False, params=None):
    """(phase1, phase2) seconds of one bucket, as floats."""
    arch = get_architecture(arch_name, colocated=colocated)
    p = params or exact_params()
    f = np.float64
    one = arch.phase1_s(p, f(s), f(n), f(g), f(k))
    two = arch.phase2_s(p, f(s), f(n), f(g), f(k))
    return float(one), float(two)


# ---------------------------------------------------------------------------
# Names
# ---------------------------------------------------------------------------
def test_names_and_labels():
    for name in ARCHITECTURE_NAMES:
        assert get_architecture(name).name == name
    assert get_architecture("ps").label == "ps (dedicated)"
    assert get_architecture("ps", colocated=True).label == "ps (colocated)"
    with pytest.raises(
        ValueError, match=r"unknown architecture 'allreduce'; valid: fsdp, hierarchical"
    ):
        get_architecture("allreduce")
    with pytest.raises(ValueError, match=r"'colocated' applies to the ps architecture only"):
        get_architecture("ring", colocated=True)


def test_which_architectures_overlap_backward():
    # all-reduce libraries bucket and overlap (DDP, Horovod), so do the sharded ones
    # (DeepSpeed ZeRO, FSDP); the paper's TF PS and P2P exchange after backward
    overlapping = {n for n in ARCHITECTURE_NAMES if get_architecture(n).overlaps}
    assert overlapping == {"ring", "tree", "hierarchical", "zero1", "zero2", "fsdp", "hsdp"}


# ---------------------------------------------------------------------------
# Per-bucket costs against closed forms
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(("s", "n"), [(1e6, 2), (1e6, 8), (3e7, 32), (1.0, 5)])
def test_p2p_bucket_cost(s, n):
    f = (n - 1) / n
    a2a = (n - 1) * ALPHA[1] + f * s * BETA[1] * (n - 1) ** A2A_E + f * s * GAMMA
    ag = (n - 1) * ALPHA[1] + f * s * BETA[1]
    one, two = phases("p2p", s, n)
    assert one == pytest.approx(a2a, rel=1e-12)
    assert two == pytest.approx(ag, rel=1e-12)


@pytest.mark.parametrize(("s", "n", "k"), [(1e6, 1, 1), (1e6, 4, 1), (3e7, 32, 1), (3e7, 32, 4)])
def test_dedicated_ps_bucket_cost(s, n, k):
    move = ALPHA[1] + max(s, n * s / k) * BETA[1] * (n / k) ** FANIN_E
    one, two = phases("ps", s, n, k=k)
    assert one == pytest.approx(move + n * s / k * GAMMA, rel=1e-12)
    assert two == pytest.approx(move, rel=1e-12)


@pytest.mark.parametrize(
    ("s", "n", "k", "g"), [(1e6, 4, 1, 1), (3e7, 32, 4, 1), (3e7, 8, 8, 1), (3e7, 32, 2, 8)]
)
def test_colocated_ps_bucket_cost(s, n, k, g):
    """A server's NIC carries the shares of the workers on other nodes: its g − 1
    node-mates send theirs through the node's memory (32 workers, 8 per node: 24 flows,
    not 31)."""
    flows = n - g if g > 1 else n - 1
    link = max(flows * s / k, s * (k - 1) / k)
    move = ALPHA[1] + link * BETA[1] * max(flows / k, 1.0) ** FANIN_E
    one, two = phases("ps", s, n, g=g, k=k, colocated=True)
    assert two == pytest.approx(move, rel=1e-12)
    assert one == pytest.approx(move + n * s / k * GAMMA, rel=1e-12)


def test_servers_on_workers_send_and_receive_at_sendrecvs_rate():
    """k ≥ 2 colocated servers (and ps_host's and hybrid's servers on the nodes) send
    their own worker's shares while they receive the others': both directions of the
    NIC at once, the pattern sendrecv measures, so their bytes go at sendrecv's fitted
    rate. One server on a worker (its share stays local: it only receives) and
    dedicated servers keep the one-way rate of ps_push / ps_pull. Measured on the
    emulated 4 × 1 cluster (issue 22, the main job's 2-PS colocated steps): −8.9,
    −15.2, −18.2% at 2, 3, 4 workers at the one-way rate, +7.1, −1.2, −3.4% at sendrecv's."""
    from costmodel import COLLECTIVE_NAMES

    slow = 1.25  # sendrecv's β factor; every other collective's is 1
    rb = np.ones((len(COLLECTIVE_NAMES), 2, 1))
    rb[COLLECTIVE_NAMES.index("sendrecv")] = slow
    plain, duplex = exact_params(), exact_params(regime_beta_factor=rb)
    s, n = 3e7, 4
    for k, colocated, factor in ((2, True, slow), (4, True, slow), (1, True, 1.0), (2, False, 1.0)):
        a = phases("ps", s, n, k=k, colocated=colocated, params=plain)
        b = phases("ps", s, n, k=k, colocated=colocated, params=duplex)
        flows = n - 1 if colocated else n
        kk = min(k, n) if colocated else k
        wire = max(flows * s / kk, s * (kk - 1) / kk if colocated else s)
        wire *= max(flows / kk, 1.0) ** FANIN_E * BETA[1]
        for x, y in zip(a, b, strict=True):  # push and pull alike
            assert y - x == pytest.approx((factor - 1.0) * wire, rel=1e-9), (k, colocated)
    for name in ("ps_host", "hybrid"):  # 4 nodes of 2 ranks, servers on the nodes
        a = phases(name, s, 8, g=2, k=4, params=plain)
        b = phases(name, s, 8, g=2, k=4, params=duplex)
        assert all(y > x for x, y in zip(a, b, strict=True)), name
        one_node = (
            phases(name, s, 2, g=2, k=4, params=plain),
            phases(name, s, 2, g=2, k=4, params=duplex),
        )
        assert one_node[0] == pytest.approx(one_node[1], rel=1e-12), name
    # the architectures say where they do it (the tuner then asks for sendrecv)
    says = {
        (name, colocated, n, g, k): bool(
            get_architecture(name, colocated=colocated).servers_send_and_receive(n, g, k)
        )
        for name, colocated, n, g, k in (
            ("ps", True, 4, 1, 2), ("ps", True, 4, 1, 1), ("ps", False, 4, 1, 2),
            ("ps_host", False, 8, 2, 1), ("ps_host", False, 2, 2, 1),
            ("hybrid", False, 8, 2, 4), ("hybrid", False, 8, 2, 1), ("ring", False, 8, 2, 1),
        )
    }  # fmt: skip
    assert [k for k, v in says.items() if v] == [
        ("ps", True, 4, 1, 2), ("ps_host", False, 8, 2, 1), ("hybrid", False, 8, 2, 4)
    ]  # fmt: skip


@pytest.mark.parametrize("name", ["ring", "tree", "hierarchical"])
def test_all_reduce_architectures_have_no_second_phase(name):
    one, two = phases(name, 1e7, 16, g=4)
    assert one > 0 and two == 0.0


# ---------------------------------------------------------------------------
# One worker
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "colocated"),
    [
        ("ring", False),
        ("tree", False),
        ("hierarchical", False),
        ("p2p", False),
        ("hybrid", False),
        ("ps", True),
    ],
)
def test_one_worker_communicates_nothing(name, colocated):
    p = preset("ethernet-10g", "v100")
    w = get_workload("resnet50", 64)
    for g in (1, 4):
        for s in (1.0, 1e6, 1e8):
            assert phases(name, s, 1, g=g, k=2, colocated=colocated, params=p) == (0.0, 0.0)
    b = iteration_time(p, w, name, 1, colocated=colocated)
    assert float(b.communication_s) == 0.0
    assert float(b.scaling_efficiency) == pytest.approx(1.0, rel=1e-12)


def test_one_worker_with_a_separate_server_still_communicates():
    # A dedicated server (1PS) and TF's host-CPU parameter device are other
    # processes: even one worker pushes its gradients there and pulls parameters back.
    s = 1e8
    one, two = phases("ps", s, 1, k=1)
    move = ALPHA[1] + s * BETA[1]
    assert one == pytest.approx(move + s * GAMMA, rel=1e-12)
    assert two == pytest.approx(move, rel=1e-12)
    # ps_host: the GPU pushes to its host over the intra-node link and pulls back
    one, two = phases("ps_host", s, 1, g=1)
    assert one == pytest.approx(ALPHA[0] + s * BETA[0] + s * GAMMA, rel=1e-12)
    assert two == pytest.approx(ALPHA[0] + s * BETA[0], rel=1e-12)


@pytest.mark.parametrize("g,links", [(2, 1), (8, 1), (8, 2), (8, 4), (8, 8), (6, 4), (3, 8)])
def test_ps_host_puts_ceil_g_over_links_gpus_on_each_host_link(g, links):
    """One node (n = g, so no host-to-host exchange): p = ⌈g/links⌉ GPUs share one link to
    the host, the links run side by side, the host sums all g gradients:
    push α + p·s·β·pᵉ + g·s·γ, pull α + p·s·β·pᵉ (intra level)."""
    s = 1e8
    p_link = math.ceil(g / links)
    one, two = phases("ps_host", s, g, g=g, params=exact_params(host_links=links))
    move = ALPHA[0] + p_link * s * BETA[0] * p_link**FANIN_E
    assert one == pytest.approx(move + g * s * GAMMA, rel=1e-12)
    assert two == pytest.approx(move, rel=1e-12)


def test_ps_host_exchange_does_not_grow_with_links_and_default_is_one_link():
    s, g = 5e7, 8.0
    t = [
        sum(phases("ps_host", s, 16, g=g, params=exact_params(host_links=h))) for h in range(1, 10)
    ]
    assert all(b <= a for a, b in zip(t, t[1:], strict=False)), t
    assert t[0] > t[3]  # DGX-1-like 4 links: strictly cheaper than one shared link
    assert t[7] == t[8]  # beyond one link per GPU nothing changes
    assert sum(phases("ps_host", s, 16, g=g)) == t[0]
    # only ps_host reads it: every other architecture is the same with 1 or 4 links
    for name in ("ps", "hybrid", "p2p", "ring", "hierarchical"):
        a = phases(name, s, 16, g=g, k=2, params=exact_params(host_links=1))
        b = phases(name, s, 16, g=g, k=2, params=exact_params(host_links=4))
        assert a == b, name


# ---------------------------------------------------------------------------
# Update, memory
# ---------------------------------------------------------------------------
def test_where_the_update_runs():
    p = exact_params()
    G = 1e8
    ring = get_architecture("ring").update_s(p, G, 16.0, 1.0)
    assert float(ring) == pytest.approx(G * UPDATE)  # every worker updates everything
    p2p = get_architecture("p2p").update_s(p, G, 16.0, 1.0)
    assert float(p2p) == pytest.approx(G / 16 * UPDATE)  # each its shard
    ps = get_architecture("ps").update_s(p, G, 16.0, 4.0)
    assert float(ps) == pytest.approx(G / 4 * UPDATE)  # each server its shard
    col = get_architecture("ps", colocated=True).update_s(p, G, 2.0, 4.0)
    assert float(col) == pytest.approx(G / 2 * UPDATE)  # no more servers than workers


# ---------------------------------------------------------------------------
# Scaling behaviour (the physics each architecture is known for)
# ---------------------------------------------------------------------------
def test_ring_traffic_per_worker_does_not_grow_with_workers():
    # bandwidth term 2(n−1)/n·sβ: from 4 to 256 workers it grows by (255/256)/(3/4) only
    s = 1e9
    t = [phases("ring", s, n, params=exact_params(alpha_s=TINY))[0] for n in (4, 256)]
    assert t[1] / t[0] == pytest.approx((255 / 256) / (3 / 4), rel=1e-9)


def test_one_server_congests_linearly_and_more_servers_relieve_it():
    s = 1e8
    p = exact_params(alpha_s=TINY, gamma_s_per_byte=TINY)
    t = {n: sum(phases("ps", s, n, k=1, params=p)) for n in (4, 8, 16, 32)}
    for n in (8, 16, 32):  # server link n·s: linear in n, times the fan-in (n)ᵉ
        assert t[n] / t[4] == pytest.approx((n / 4) ** (1 + FANIN_E), rel=1e-9)
    t4 = sum(phases("ps", s, 32, k=4, params=p))
    assert t[32] / t4 == pytest.approx(4 ** (1 + FANIN_E), rel=1e-9)
    # with as many servers as workers the server link is no busier than a worker's
    t32 = sum(phases("ps", s, 32, k=32, params=p))
    assert t32 == pytest.approx(2 * s * BETA[1], rel=1e-9)


def test_hierarchical_saves_latency_across_nodes():
    # small messages: 2(g−1) fast intra steps + 2(m−1) inter steps beat 2(n−1) inter steps
    s, n, g = 1024.0, 32, 8
    ring = phases("ring", s, n, g=g)[0]
    hier = phases("hierarchical", s, n, g=g)[0]
    m = n // g
    assert hier < ring / 3
    assert hier == pytest.approx(
        2 * (g - 1) * ALPHA[0] + 2 * (m - 1) * ALPHA[1], rel=1e-3
    )  # latency-bound: bytes add < 0.1 %


def test_hierarchical_on_one_node_is_the_intra_node_ring():
    for s in (1.0, 1e6, 1e9):
        ring = phases("ring", s, 8, g=8)[0]
        hier = phases("hierarchical", s, 8, g=8)[0]
        assert hier == pytest.approx(ring, rel=1e-12)


def test_p2p_pays_all_to_all_congestion():
    s = 1e8
    p = exact_params(alpha_s=TINY, gamma_s_per_byte=TINY)
    a2a = phases("p2p", s, 64, params=p)[0]
    assert a2a == pytest.approx(63 / 64 * s * BETA[1] * 63**A2A_E, rel=1e-9)
    assert a2a > phases("ring", s, 64, params=p)[0] / 2  # more than a reduce-scatter's worth


# ---------------------------------------------------------------------------
# Overlap variants (with_overlap)
# ---------------------------------------------------------------------------
def test_with_overlap_makes_one_cached_variant_keeping_fields():
    from costmodel import with_overlap

    ps = get_architecture("ps", colocated=True)
    on = with_overlap(ps, True)
    assert on.overlaps and on.colocated and on.label == ps.label and on.name == "ps"
    assert type(with_overlap(get_architecture("ps"), True)) is type(on)  # one class, cached
    assert with_overlap(on, True) is on and with_overlap(ps, False) is ps
    ring = get_architecture("ring")
    assert not with_overlap(ring, False).overlaps
    with pytest.raises(TypeError, match="AbstractArchitecture"):
        with_overlap("ps", True)


@pytest.mark.parametrize("name", ["ring", "ps", "p2p"])
def test_overlap_can_only_hide_communication_behind_backward(name):
    # Serial: T = fwd + bwd + C + update + overhead exactly. Overlapped: never
    # slower, and it hides at most the backward pass (no interference here).
    from costmodel import with_overlap

    p = exact_params(overlap_interference=1e-9)
    w = get_workload("resnet50", 32).with_step_time(0.2)
    n = np.array([2.0, 8.0, 32.0])
    kw = dict(ranks_per_node=np.ones(3), servers=np.full(3, 2.0), bucket_bytes=np.full(3, 25e6))
    arch = get_architecture(name)
    serial = iteration_time(p, w, with_overlap(arch, False), n, **kw)
    over = iteration_time(p, w, with_overlap(arch, True), n, **kw)
    s = {
        k: np.asarray(getattr(serial, k))
        for k in (
            "forward_s",
            "backward_s",
            "communication_s",
            "update_s",
            "overhead_s",
            "iteration_s",
        )
    }
    np.testing.assert_allclose(
        s["iteration_s"],
        s["forward_s"] + s["backward_s"] + s["communication_s"] + s["update_s"] + s["overhead_s"],
        rtol=1e-9,
    )
    o = np.asarray(over.iteration_s)
    assert np.all(o <= s["iteration_s"] * (1 + 1e-9))
    assert np.all(o >= s["iteration_s"] - s["backward_s"] * (1 + 1e-6))
    assert np.all(o < s["iteration_s"])  # something was hidden


@pytest.mark.parametrize("name", ["ps", "ps_host", "hybrid", "p2p", "ring", "tree", "hierarchical"])
def test_a_configurations_phase_key_costs_what_the_configuration_costs(name):
    # the numpy sweep costs each distinct phase_key once: the key must give the
    # same phase times as the configuration it stands for, at every bucket size
    arch = get_architecture(name)
    p = preset("ib-hdr-200g", "a100", n_regimes=3).to_numpy()
    rng = np.random.default_rng(3)
    g = rng.choice([1.0, 2.0, 8.0], 300)
    n = rng.integers(1, 200, 300).astype(float)
    k = rng.integers(1, 17, 300).astype(float)
    s = np.array([[1e3], [3e6], [2e8]])
    for phase in (arch.phase1_s, arch.phase2_s):
        np.testing.assert_allclose(
            phase(p, s, *arch.phase_key(n, g, k)) + 0 * n, phase(p, s, n, g, k) + 0 * n, rtol=1e-14
        )
