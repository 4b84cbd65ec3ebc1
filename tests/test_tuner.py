"""Tests of the tuner: search, objectives, refinement, uncertainty, what-if, sensitivity.

Physics, not snapshots: closed forms are computed here independently (the
toy's optimum bucket size b* = √(G·α'/c), the bandwidth a non-overlapping
architecture needs), the grid search is compared with a brute-force loop over
:func:`costmodel.iteration_time`, and limits and monotonicity are checked
(more bandwidth never lowers throughput; elasticities of a model homogeneous
of degree one in its times sum to one).
"""

from __future__ import annotations

import itertools
import json
import math

import jax
import numpy as np
import pytest

import tuner
from calibration import Profile
from costmodel import (
    ClusterParams,
    Workload,
    get_architecture,
    get_workload,
    iteration_time,
    preset,
)

P10G = preset("ethernet-10g", "v100")


@pytest.fixture(scope="module")
def resnet18():
    return get_workload("resnet18", 32)


def _brute_force(params, workload, label_variant, workers, caps, g=1, global_batch=None):
    """Every configuration of one variant, one iteration_time call per worker count."""
    v = label_variant
    arch = get_architecture(v.name, colocated=v.colocated)
    if not getattr(arch, "uses_bucket_bytes", True):
        caps = caps[-1:]  # fsdp/hsdp per layer block: the search tries one cap
    rows = []
    for n in workers:
        if v.uses_servers:
            limit = n if v.name == "ps" else math.ceil(n / g)
            servers = [k for k in (2**e for e in range(12)) if k <= limit] or [1]
        else:
            servers = [0]
        for k in servers:
            batch = workload.batch_size if global_batch is None else math.ceil(global_batch / n)
            base = batch if global_batch is None else global_batch
            out = iteration_time(
                params,
                workload,
                arch,
                np.full(len(caps), float(n)),
                ranks_per_node=g,
                servers=max(k, 1),
                bucket_bytes=np.asarray(caps, dtype=np.float64),
                batch_size=float(batch),
                base_batch_size=float(base),
            )
            t = np.asarray(out.iteration_s)
            thr = n * batch / t if global_batch is None else global_batch / t
            for c, ti, th in zip(caps, t, thr, strict=True):
                rows.append((n, k, c, float(ti), float(th)))
    return rows


# ---------------------------------------------------------------------------
# The toy with a known optimum bucket size
# ---------------------------------------------------------------------------
def _toy():
    """4000 equal tensors of 4 KiB, communication-bound ring all-reduce on 8 workers.

    With every tensor's backward cost equal, the first bucket (b bytes) is
    ready after b·c seconds of backward, c = T_bwd·(1 + interference)/G; each
    bucket then costs α' = 2(n−1)α + o per message and β' = 2(n−1)/n·β (+γ)
    per byte, so the step is T(b) = T_fwd + b·c + (G/b)·α' + G·β' + const,
    minimised at b* = √(G·α'/c). The parameters below put b* at exactly 100
    tensors (409,600 bytes, G/b* = 40 buckets), where the exact bucketing
    equals the continuous formula; every other cap is strictly worse.
    """
    n_tensors, per = 4000, 1024
    flops = 1e12
    f_fwd = flops * 0.010 / n_tensors  # 10 ms forward, 20 ms backward (bwd = 2 × fwd)
    w = Workload(
        "toy",
        tuple(f"t{i}" for i in range(n_tensors)),
        np.full(n_tensors, per),
        np.full(n_tensors, f_fwd),
        None,
        batch_size=1,
    )
    G = float(w.total_param_bytes)
    n = 8
    interference = 1e-9
    t_bwd = w.batch_size * w.total_bwd_flops / flops
    c = t_bwd * (1 + interference) / G
    b_star = 100 * per * 4
    alpha_prime = b_star**2 * c / G
    call = 1e-12
    alpha = (alpha_prime - call) / (2 * (n - 1))
    p = ClusterParams.create(
        alpha_s=(1e-6, alpha),
        beta_s_per_byte=(1e-11, 1e-9),
        node_beta_s_per_byte=(1e-30, 1e-30),
        gamma_s_per_byte=1e-30,
        call_overhead_s=call,
        flops_per_s=flops,
        step_overhead_s=1e-6,
        update_s_per_byte=1e-15,
        overlap_interference=interference,
    )
    return p, w, n, c, alpha_prime, G


def test_toy_optimum_bucket_size_found_within_5_percent():
    p, w, n, c, alpha_prime, G = _toy()
    b_star = math.sqrt(G * alpha_prime / c)  # the closed form
    # The optimum computed independently of the tuner and of the closed form: the
    # exact model at every cap of a whole number of tensors, 25 to 300 of them.
    per_tensor = G / len(w.param_counts)
    caps = per_tensor * np.arange(25, 301)
    scan = iteration_time(p, w, "ring", np.full(caps.size, float(n)), bucket_bytes=caps)
    t_scan = np.asarray(scan.iteration_s)
    b_scan = float(caps[np.argmin(t_scan)])
    assert 25 * per_tensor < b_scan < 300 * per_tensor  # an interior minimum
    assert b_scan == pytest.approx(b_star, rel=1e-9)  # the model's optimum is the closed form's
    rec = tuner.recommend(p, w, max_workers=n, architectures=["ring"])
    assert rec.workers == n
    assert rec.config.refined
    assert abs(rec.bucket_bytes / b_scan - 1) < 0.05
    # The grid alone (powers of two) cannot get there, and is slower under the exact model.
    grid = tuner.recommend(p, w, max_workers=n, architectures=["ring"], refine=False)
    assert abs(grid.bucket_bytes / b_scan - 1) > 0.05
    assert rec.iteration_time_s < grid.iteration_time_s
    # The exact model agrees with the continuous formula at b* (exact bucketing there).
    t_star = float(iteration_time(p, w, "ring", n, bucket_bytes=b_star).iteration_s)
    bd = rec.breakdown
    t_formula = (
        bd["forward_s"]
        + b_star * c
        + (G / b_star) * alpha_prime
        + G * (2 * (n - 1) / n * 1e-9 + (n - 1) / n * 1e-30)
        + bd["update_s"]
        + bd["overhead_s"]
    )
    assert t_star == pytest.approx(t_formula, rel=1e-9)
    assert rec.iteration_time_s <= t_star * (1 + 1e-12)


@pytest.mark.parametrize(
    "network,model,workers", [("ethernet-10g", "resnet50", 1024), ("ib-edr-100g", "bert_base", 64)]
)
def test_refined_bucket_reaches_a_dense_scan_of_the_exact_model(network, model, workers):
    # Real models: tensors of very different sizes make the exact T(b) a staircase with
    # several local minima; the refinement (gradient on the fluid model, then the exact
    # model near its optimum and between the grid's neighbours) must match a dense scan.
    p, w = preset(network, "v100"), get_workload(model, 32)
    rec = tuner.recommend(p, w, max_workers=workers, architectures=["ring"])
    caps = np.geomspace(2**20, w.total_param_bytes, 400)
    scan = iteration_time(p, w, "ring", rec.workers, bucket_bytes=caps).iteration_s
    assert rec.iteration_time_s <= float(np.min(scan)) * 1.002


# ---------------------------------------------------------------------------
# Grid search = brute force
# ---------------------------------------------------------------------------
def test_grid_search_equals_brute_force(resnet18):
    caps = [0, 2**20, 2**24]
    rec = tuner.recommend(P10G, resnet18, max_workers=4, bucket_bytes=caps, refine=False)
    assert set(rec.sweeps) == {
        "ps (dedicated)",
        "ps (colocated)",
        "p2p",
        "ring",
        "tree",
        "zero1",
        "zero2",
        "fsdp",
    }
    best = (-math.inf, None)
    for sw in rec.sweeps.values():
        rows = _brute_force(P10G, resnet18, sw.variant, range(1, 5), caps)
        assert len(rows) == len(sw)
        got = {
            (int(a), int(b), int(c)): (t, th)
            for a, b, c, t, th in zip(
                sw.workers, sw.servers, sw.bucket_bytes, sw.iteration_s, sw.throughput, strict=True
            )
        }
        for nn, k, c, t, th in rows:
            assert got[(nn, k, c)][0] == pytest.approx(t, rel=1e-12)
            assert got[(nn, k, c)][1] == pytest.approx(th, rel=1e-12)
            if th > best[0]:
                best = (th, (sw.variant.name, sw.variant.colocated, nn, k, c))
    assert rec.throughput_samples_per_s == pytest.approx(best[0], rel=1e-12)
    name, colocated, nn, k, c = best[1]
    assert (rec.architecture, rec.colocated, rec.workers, rec.servers, rec.bucket_bytes) == (
        name,
        colocated,
        nn,
        k,
        c,
    )


def test_grid_equals_brute_force_multi_rank_global_batch(resnet18):
    caps = [0, 4 * 2**20]
    B = 96
    rec = tuner.recommend(
        P10G,
        resnet18,
        max_workers=4,
        ranks_per_node=2,
        bucket_bytes=caps,
        global_batch=B,
        refine=False,
    )
    assert {"ps_host", "hybrid", "hierarchical"} <= set(rec.sweeps)
    best = -math.inf
    for sw in rec.sweeps.values():
        assert set(sw.workers.tolist()) == {2, 4}  # multiples of ranks per node
        rows = _brute_force(P10G, resnet18, sw.variant, [2, 4], caps, g=2, global_batch=B)
        assert len(rows) == len(sw)
        np.testing.assert_allclose(sorted(r[4] for r in rows), np.sort(sw.throughput), rtol=1e-12)
        best = max(best, max(r[4] for r in rows))
        # fixed global batch: throughput = B / T, and efficiency = T1 / (n T)
        np.testing.assert_allclose(sw.throughput, B / sw.iteration_s, rtol=1e-12)
    # the best of the brute force, or a simpler one that ties with it (hsdp is 0.1% ahead of
    # hierarchical here: its inter-node all-reduce overlaps on a second stream)
    if rec.throughput_samples_per_s != pytest.approx(best, rel=1e-12):
        assert best * (1 - tuner._recommend.TIE_TOLERANCE) < rec.throughput_samples_per_s < best
        assert "Ties go to the simpler architecture" in rec.rationale
    # efficiency against one worker computing the whole global batch alone
    one = iteration_time(P10G, resnet18, "ring", 1, batch_size=B)
    t1 = float(one.iteration_s)
    assert rec.scaling_efficiency == pytest.approx(t1 / (rec.workers * rec.iteration_time_s), 1e-9)


# ---------------------------------------------------------------------------
# Never worse than the frameworks' defaults; the paper's 1PS collapse
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("network,model", [("ethernet-10g", "resnet50"), ("ib-edr-100g", "vgg16")])
def test_never_slower_than_ddp_or_horovod_defaults(network, model):
    p, w = preset(network, "v100"), get_workload(model, 32)
    rec = tuner.recommend(p, w, max_workers=16)
    for cap in (25 * 2**20, tuner.HOROVOD_FUSION_BYTES):  # DDP 25 MiB, Horovod 64 MiB
        t = float(iteration_time(p, w, "ring", rec.workers, bucket_bytes=cap).iteration_s)
        assert rec.iteration_time_s <= t * (1 + 1e-12)
    # …and at every worker count, the best configuration beats ring with DDP's default
    ring = iteration_time(p, w, "ring", np.arange(1, 17), bucket_bytes=25 * 2**20)
    best = np.full(16, np.inf)
    for sw in rec.sweeps.values():
        np.minimum.at(best, sw.workers - 1, np.where(sw.feasible, sw.iteration_s, np.inf))
    assert np.all(best <= np.asarray(ring.iteration_s) * (1 + 1e-12))


def test_vgg16_on_10g_ethernet_does_not_pick_a_single_parameter_server():
    w = get_workload("vgg16", 32)
    rec = tuner.recommend(P10G, w, max_workers=32)
    assert not (rec.architecture == "ps" and rec.servers == 1)
    # 1PS collapses: its server link carries n × the model, so adding workers adds nothing.
    sw = rec.sweeps["ps (dedicated)"]
    one_ps = sw.servers == 1
    thr = {n: sw.throughput[one_ps & (sw.workers == n)].max() for n in (8, 32)}
    assert thr[32] < 1.2 * thr[8]
    assert rec.throughput_samples_per_s > 3 * thr[32]


# ---------------------------------------------------------------------------
# Objectives and constraints
# ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def resnet18_sweeps(resnet18):
    return tuner.recommend(P10G, resnet18, max_workers=12, refine=False)


def _all(rec):
    keys = ("workers", "servers", "bucket_bytes", "iteration_s", "throughput", "efficiency")
    out = {k: [] for k in (*keys, "dedicated", "feasible")}
    for sw in rec.sweeps.values():
        for k in keys:
            out[k].append(np.asarray(getattr(sw, k), dtype=np.float64))
        out["dedicated"].append(np.full(len(sw), sw.variant.dedicated_servers))
        out["feasible"].append(sw.feasible)
    return {k: np.concatenate(v) for k, v in out.items()}


def test_cost_objective_minimises_cost_per_sample(resnet18, resnet18_sweeps):
    price, server_price = 3.0, 1.0
    rec = tuner.recommend(
        P10G,
        resnet18,
        max_workers=12,
        objective="cost",
        price_per_hour=price,
        server_price_per_hour=server_price,
        refine=False,
    )
    a = _all(resnet18_sweeps)
    rate = a["workers"] * price + np.where(a["dedicated"], a["servers"] * server_price, 0.0)
    cost = rate / 3600.0 / a["throughput"]
    assert rec.config.cost_per_sample == pytest.approx(cost.min(), rel=1e-9)
    assert rec.objective == "cost"


def test_efficiency_and_min_workers_objectives(resnet18, resnet18_sweeps):
    a = _all(resnet18_sweeps)
    rec = tuner.recommend(
        P10G, resnet18, max_workers=12, objective="efficiency", min_efficiency=0.6, refine=False
    )
    ok = a["efficiency"] >= 0.6
    assert rec.scaling_efficiency >= 0.6
    assert rec.throughput_samples_per_s == pytest.approx(a["throughput"][ok].max(), rel=1e-12)
    target = 0.5 * a["throughput"].max()
    rec = tuner.recommend(
        P10G,
        resnet18,
        max_workers=12,
        objective="min-workers",
        target_throughput=target,
        refine=False,
    )
    reach = a["throughput"] >= target
    assert rec.workers == a["workers"][reach].min()
    assert rec.throughput_samples_per_s >= target


def test_memory_excludes_configurations_that_do_not_fit(resnet18):
    G = resnet18.total_param_bytes
    # ring workers hold parameters, gradients and momentum: 3 G; a p2p worker holds
    # parameters, gradients and a 1/n shard of the momentum: 2 G + G / n.
    # (replicated and PS families: a sharded one would be faster here even without the limit)
    rec = tuner.recommend(
        P10G,
        resnet18,
        max_workers=8,
        architectures=["ps", "p2p", "ring", "tree"],
        device_memory_bytes=2.6 * G,
        refine=False,
    )
    assert not rec.sweeps["ring"].feasible.any()
    p2p = rec.sweeps["p2p"]
    np.testing.assert_array_equal(p2p.feasible, 2 * G + G / p2p.workers <= 2.6 * G)
    assert rec.architecture != "ring" and rec.architecture != "tree"
    assert rec.excluded["worker_memory"] > 0
    assert any(w.startswith("memory:") for w in rec.warnings)
    assert "Memory bounds the choice" in rec.rationale


# ---------------------------------------------------------------------------
# Bad input and infeasible constraints
# ---------------------------------------------------------------------------
def test_bad_input_gives_clear_errors(resnet18):
    with pytest.raises(ValueError, match="max_workers must be ≥ 1"):
        tuner.recommend(P10G, resnet18, max_workers=0)
    with pytest.raises(ValueError, match="unknown architecture 'rng'; valid: .*ring"):
        tuner.recommend(P10G, resnet18, max_workers=4, architectures=["rng"])
    with pytest.raises(ValueError, match="unknown objective 'speed'"):
        tuner.recommend(P10G, resnet18, max_workers=4, objective="speed")
    # servers that fit no worker count were replaced by 1 server, silently
    with pytest.raises(ValueError, match=r"servers \[8, 16\] are all more than the 4 workers"):
        tuner.recommend(P10G, resnet18, max_workers=4, architectures=["ps"], servers=[8, 16])
    with pytest.raises(ValueError, match="--price-per-hour"):
        tuner.recommend(P10G, resnet18, max_workers=4, objective="cost")
    with pytest.raises(ValueError, match="--server-price-per-hour"):
        tuner.recommend(P10G, resnet18, max_workers=4, objective="cost", price_per_hour=1.0)
    with pytest.raises(ValueError, match="--min-efficiency"):
        tuner.recommend(P10G, resnet18, max_workers=4, objective="efficiency")
    with pytest.raises(ValueError, match="--target-throughput"):
        tuner.recommend(P10G, resnet18, max_workers=4, objective="min-workers")
    with pytest.raises(ValueError, match="ranks_per_node > 1"):
        tuner.recommend(P10G, resnet18, max_workers=4, architectures=["hierarchical"])
    with pytest.raises(ValueError, match="min_efficiency must be in"):
        tuner.recommend(P10G, resnet18, max_workers=4, min_efficiency=1.5)
    with pytest.raises(TypeError, match="calibration.Profile"):
        tuner.recommend("profile.json", resnet18, max_workers=4)


def test_infeasible_constraints_say_what_is_possible(resnet18, resnet18_sweeps):
    most = _all(resnet18_sweeps)["throughput"].max()
    kw = dict(max_workers=12, refine=False)
    with pytest.raises(tuner.InfeasibleError, match="the most possible is") as e:
        tuner.recommend(P10G, resnet18, target_throughput=10 * most, **kw)
    rec = e.value.recommendation
    assert rec.status == "infeasible"
    assert rec.throughput_samples_per_s == pytest.approx(most, rel=1e-12)
    rec = tuner.recommend(
        P10G,
        resnet18,
        architectures=["ps_dedicated"],
        min_efficiency=0.9999,
        on_infeasible="return",
        **kw,
    )
    assert rec.status == "infeasible" and "the best possible is" in rec.message
    assert rec.scaling_efficiency < 0.9999
    with pytest.raises(tuner.InfeasibleError, match="no configuration fits in memory"):
        tuner.recommend(P10G, resnet18, device_memory_bytes=1024, **kw)


# ---------------------------------------------------------------------------
# Uncertainty: intervals, p_best, reliability, extrapolation
# ---------------------------------------------------------------------------
def _scaled_profile(base: Profile, factor: float, **kw) -> Profile:
    return Profile(
        params=base.params,
        covariance=base.covariance * factor,
        leaf_names=base.leaf_names,
        prior=base.prior,
        **kw,
    )


@pytest.fixture(scope="module")
def preset_profile():
    return Profile.from_preset("ethernet-10g", "v100")


def test_intervals_shrink_with_the_covariance(resnet18, preset_profile):
    kw = dict(max_workers=8, architectures=["ring", "ps"], refine=False)
    wide = tuner.recommend(preset_profile, resnet18, **kw)
    narrow = tuner.recommend(_scaled_profile(preset_profile, 0.25), resnet18, **kw)
    assert narrow.config.describe() == wide.config.describe()
    for a, b in zip(
        [wide.config, *wide.alternatives], [narrow.config, *narrow.alternatives], strict=True
    ):
        lo, hi = a.interval_s
        assert lo < a.iteration_time_s < hi
        # a preset has no residual spread: the tangent's log-width is 2zσ and halves with
        # σ; where the step levels off within zσ the sigma points narrow the wide one more
        ratio = math.log(b.interval_s[1] / b.interval_s[0]) / math.log(hi / lo)
        assert 0.5 * (1 - 1e-3) <= ratio < 1
        assert lo <= b.interval_s[0] and b.interval_s[1] <= hi
    assert 0.0 <= wide.p_best <= 1.0
    # (almost) no uncertainty: the nominal winner wins every draw
    certain = tuner.recommend(_scaled_profile(preset_profile, 1e-10), resnet18, **kw)
    assert certain.p_best == 1.0


def test_one_architectures_alternatives_are_other_configurations_before_other_buckets(resnet18):
    """With one architecture asked for, the runner-ups are other worker counts, not
    the chosen configuration again at other bucket sizes (a new user's trial listed
    ring × 8 workers at three bucket sizes)."""
    rec = tuner.recommend(P10G, resnet18, max_workers=16, architectures=["ring"], refine=False)
    configs = [(a.workers, a.servers) for a in rec.alternatives]
    assert len(rec.alternatives) == 5
    # ranked by the objective, as the sweep ranks them (a trial saw 6, 4, 2, then 8 workers)
    thr = [a.throughput_samples_per_s for a in rec.alternatives]
    assert thr == sorted(thr, reverse=True)
    assert len(set(configs)) == 5 and (rec.workers, rec.servers) not in configs
    # with fewer configurations than places, other bucket sizes fill the rest
    small = tuner.recommend(P10G, resnet18, max_workers=2, architectures=["ring"], refine=False)
    keys = [(a.workers, a.bucket_bytes) for a in small.alternatives]
    assert len(keys) == len(set(keys)) == 5 and (small.workers, small.bucket_bytes) not in keys
    assert {a.workers for a in small.alternatives} <= {1, 2}


def test_bare_parameters_give_point_intervals_and_say_so(resnet18_sweeps):
    rec = resnet18_sweeps
    assert rec.interval_s == (rec.iteration_time_s, rec.iteration_time_s)
    assert math.isnan(rec.p_best)
    assert any("no profile covariance" in w for w in rec.warnings)
    doc = json.loads(json.dumps(rec.to_dict(), allow_nan=False))
    for key in (
        "architecture",
        "servers",
        "colocated",
        "workers",
        "bucket_bytes",
        "iteration_time_s",
        "interval_s",
        "throughput_samples_per_s",
        "scaling_efficiency",
        "breakdown",
        "alternatives",
        "p_best",
        "rationale",
        "warnings",
    ):
        assert key in doc
    assert doc["p_best"] is None
    assert len(doc["alternatives"]) == 5
    labels = [a["label"] for a in doc["alternatives"]]
    assert len(set(labels[:4])) == 4 and doc["label"] not in labels[:4]  # distinct first


def test_curve_is_the_best_configuration_per_worker_count(resnet18_sweeps):
    rec = resnet18_sweeps
    curves = rec.curves()
    assert set(curves) == set(rec.sweeps)
    for label, c in curves.items():
        sw = rec.sweeps[label]
        for n, t, lo, hi in zip(c.workers, c.iteration_s, c.low_s, c.high_s, strict=True):
            assert t == sw.iteration_s[sw.workers == n].min()
            assert lo == t == hi  # bare parameters: a point
    bc = rec.bucket_curve()
    assert bc["workers"] == rec.workers and len(bc["bucket_bytes"]) == len(bc["iteration_s"])
    with pytest.raises(ValueError, match="unknown architecture label"):
        rec.curve("ring-ish")


def test_unreliable_profile_is_refused_unless_forced(resnet18, preset_profile):
    bad = _scaled_profile(preset_profile, 1.0, reliable=False, heldout_p90=0.2)
    with pytest.raises(tuner.UnreliableProfileError, match=r"20\.0%.*15%.*--force"):
        tuner.recommend(bad, resnet18, max_workers=4, architectures=["ring"])
    rec = tuner.recommend(
        bad, resnet18, max_workers=4, architectures=["ring"], force=True, refine=False
    )
    assert rec.reliable is False
    assert any("unreliable profile" in w for w in rec.warnings)


def test_extrapolation_beyond_measured_ranges_is_flagged(resnet18, preset_profile):
    measured = {
        "message_bytes": [1024, 2**20],
        "num_ranks": [2, 4],
        "ranks_per_node": [1, 1],
        "collectives": ["all_reduce"],
    }
    prof = _scaled_profile(preset_profile, 1.0, measured_ranges=measured)
    rec = tuner.recommend(prof, resnet18, max_workers=8, architectures=["ps"], refine=False)
    text = " ".join(rec.warnings)
    assert f"{rec.workers} workers is outside the measured rank counts" in text
    assert "bucket messages" in text and "outside the measured sizes" in text
    assert "no measurements of ps_push, ps_pull" in text


def test_servers_on_workers_need_sendrecv_measured(resnet18, preset_profile):
    """Two or more servers on workers send and receive at once: the model prices their
    bytes at sendrecv's rate, so a profile without sendrecv says so; one server on a
    worker only receives, and needs only ps_push and ps_pull."""
    measured = {"collectives": ["ps_push", "ps_pull"]}
    prof = _scaled_profile(preset_profile, 1.0, measured_ranges=measured)
    for servers, missing in (([2], True), ([1], False)):
        rec = tuner.recommend(
            prof, resnet18, max_workers=8, architectures=["ps_colocated"], servers=servers,
            refine=False,
        )  # fmt: skip
        assert rec.config.colocated and rec.config.servers == servers[0]
        text = " ".join(rec.warnings)
        assert ("no measurements of sendrecv" in text) is missing, text
        assert "no measurements of ps_push" not in text


# ---------------------------------------------------------------------------
# What-if and the inverse question
# ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "changes", [{"beta_inter": 0.5}, {"beta_inter": 0.5, "node_beta_inter": 0.5}]
)
def test_what_if_double_bandwidth_never_lowers_throughput(resnet18, resnet18_sweeps, changes):
    fast = tuner.what_if(P10G, resnet18, changes, max_workers=12, refine=False)
    for label, sw in resnet18_sweeps.sweeps.items():
        assert np.all(fast.sweeps[label].throughput >= sw.throughput * (1 - 1e-12))
    assert fast.throughput_samples_per_s >= resnet18_sweeps.throughput_samples_per_s
    assert any("what-if" in w for w in fast.warnings)
    with pytest.raises(ValueError, match="unknown parameter 'bandwidth'"):
        tuner.what_if(P10G, resnet18, {"bandwidth": 2.0}, max_workers=4)


def test_min_bandwidth_matches_the_closed_form_for_a_non_overlapping_architecture(resnet18):
    # p2p communicates after backward: T(bw) = T_inf + B / bw exactly (β and the NIC cap
    # scale together), so efficiency e = T1 / T reaches e* at bw* = B / (T1 / e* − T_inf).
    config = {"architecture": "p2p", "workers": 8, "bucket_bytes": 2**24}
    target = 0.5
    r = tuner.min_bandwidth_for_efficiency(P10G, resnet18, config, target)
    assert r.status == "ok"

    def step(bw_factor):
        p = P10G.scaled(beta_inter=1 / bw_factor, node_beta_inter=1 / bw_factor)
        return float(iteration_time(p, resnet18, "p2p", 8, bucket_bytes=2**24).iteration_s)

    bw0 = 1 / float(P10G.beta_s_per_byte[1])
    t0, t_inf = step(1.0), step(1e9)
    B = (t0 - t_inf) * bw0
    t1 = float(iteration_time(P10G, resnet18, "ring", 1).iteration_s)
    bw_star = B / (t1 / target - t_inf)
    assert r.bandwidth_bytes_per_s == pytest.approx(bw_star, rel=1e-3)
    assert r.efficiency >= target
    assert r.iterations < 30
    unreachable = tuner.min_bandwidth_for_efficiency(
        P10G, resnet18, {"architecture": "ps", "workers": 12, "servers": 1}, 0.999
    )
    assert unreachable.status == "unreachable" and unreachable.max_efficiency < 0.999
    assert math.isnan(unreachable.bandwidth_bytes_per_s)
    with pytest.raises(ValueError, match="target_efficiency must be in"):
        tuner.min_bandwidth_for_efficiency(P10G, resnet18, config, 1.5)


# ---------------------------------------------------------------------------
# Sensitivity
# ---------------------------------------------------------------------------
_TIME_SCALES = (
    "alpha_intra",
    "alpha_inter",
    "beta_intra",
    "beta_inter",
    "node_beta_intra",
    "node_beta_inter",
    "gamma",
    "call_overhead",
    "step_overhead",
    "update",
)


@pytest.mark.parametrize(
    "config",
    [
        {"architecture": "ring", "workers": 8, "bucket_bytes": 2**22},
        {"architecture": "ps", "workers": 8, "servers": 2, "bucket_bytes": 2**24},
    ],
)
def test_sensitivity_elasticities_follow_eulers_theorem(resnet18, config):
    # Every time in the model scales with α, β, γ, overheads and 1/FLOP/s: T is
    # homogeneous of degree one in them, so the elasticities sum to one.
    e = tuner.sensitivity(P10G, resnet18, config)
    assert set(e) == set(tuner.SENSITIVITY_NAMES)
    total = sum(e[k] for k in _TIME_SCALES) - e["flops"]
    assert total == pytest.approx(1.0, abs=1e-9)
    # and each is the derivative of log T: compare with central differences
    arch = get_architecture(config["architecture"])

    def log_t(p):
        return math.log(
            float(
                iteration_time(
                    p,
                    resnet18,
                    arch,
                    config["workers"],
                    servers=config.get("servers", 1),
                    bucket_bytes=config["bucket_bytes"],
                ).iteration_s
            )
        )

    h = 1e-5
    for key in ("beta_inter", "alpha_inter", "flops"):
        fd = log_t(P10G.scaled(**{key: math.exp(h)})) - log_t(P10G.scaled(**{key: math.exp(-h)}))
        assert e[key] == pytest.approx(fd / (2 * h), rel=1e-4, abs=1e-9)


def test_sensitivity_of_one_worker_is_compute_only(resnet18):
    e = tuner.sensitivity(P10G, resnet18, {"architecture": "ring", "workers": 1})
    assert e["beta_inter"] == 0.0 and e["alpha_inter"] == 0.0
    bd = iteration_time(P10G, resnet18, "ring", 1)
    share = float((bd.forward_s + bd.backward_s) / bd.iteration_s)
    # the elasticities are central differences (h = 1e-5 in log units: error ~1e-10)
    assert e["flops"] == pytest.approx(-share, rel=1e-8)
    # a CNN computes at flops_per_s × conv_efficiency: the same elasticity
    assert resnet18.kind == "cnn" and e["conv_efficiency"] == pytest.approx(e["flops"], rel=1e-8)


# ---------------------------------------------------------------------------
# Compilation: a recommendation compiles nothing (the sweep runs in numpy)
# ---------------------------------------------------------------------------
def test_recommendation_compiles_nothing(preset_profile):
    # A model with a tensor count no other test uses (37) has new shapes, so
    # anything jitted on the path would have to compile: the sweep, the
    # intervals, the parameter draws and the bucket refinement all run in numpy.
    kw = dict(max_workers=6, architectures=["ring", "p2p", "zero2", "fsdp"])
    T = 37
    fresh = Workload(
        "fresh", tuple(f"f{i}" for i in range(T)), np.full(T, 50_000), np.full(T, 1e9), None, 32
    )
    compiles = []

    def listener(event, duration, **_):
        if event.endswith("backend_compile_duration"):
            compiles.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        rec = tuner.recommend(preset_profile, fresh, **kw)
        during = list(compiles)
        # Positive control: the listener does see a compilation, of the jitted
        # (traced) path of the same model on the same new shapes.
        jax.jit(lambda p: iteration_time(p, fresh, "ring", np.arange(1.0, 5.0)).iteration_s)(
            preset_profile.params
        )
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert np.isfinite(rec.iteration_time_s) and rec.interval_s[0] < rec.iteration_time_s
    assert during == []
    assert len(compiles) > 0


def test_variants_and_worker_grid():
    labels = [v.label for v in tuner.resolve_variants(None, 1)]
    assert labels == [
        "ps (dedicated)",
        "ps (colocated)",
        "p2p",
        "ring",
        "tree",
        "zero1",
        "zero2",
        "fsdp",
    ]
    labels8 = [v.label for v in tuner.resolve_variants(None, 8)]
    assert {"ps_host", "hybrid", "hierarchical", "hsdp"} <= set(labels8)
    assert tuner.DEFAULT_BUCKET_GRID[0] == 0 and 25 * 2**20 in tuner.DEFAULT_BUCKET_GRID
    assert all(
        b == 2 * a
        for a, b in itertools.pairwise(
            [c for c in tuner.DEFAULT_BUCKET_GRID if c & (c - 1) == 0][1:]
        )
    )


def test_worker_grid_refuses_a_sweep_beyond_its_bound_and_names_the_way_out(capsys):
    # --max-workers 1e9 ran out of memory (112 GiB) and 100,000 ran for minutes
    # without a word (from a new user's trial): every count is one column of the sweep
    from tuner._search import MAX_WORKER_COUNTS, worker_grid
    from tuner.cli import main

    assert worker_grid(MAX_WORKER_COUNTS).size == MAX_WORKER_COUNTS
    assert worker_grid(8 * MAX_WORKER_COUNTS, 8).size == MAX_WORKER_COUNTS
    for args in ((MAX_WORKER_COUNTS + 1,), (8 * MAX_WORKER_COUNTS + 8, 8)):
        with pytest.raises(ValueError, match=r"would search .* worker counts.*ranks_per_node"):
            worker_grid(*args)
    argv = ["recommend", "--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50"]
    assert main([*argv, "--max-workers", "1000000000", "--force"]) == 2
    err = capsys.readouterr().err
    assert "--max-workers 1000000000 would search 1,000,000,000 worker counts" in err
    assert "Traceback" not in err and "MemoryError" not in err


# --------------------------------------------------------------------------- ties


def test_a_tie_goes_to_the_simpler_architecture():
    # ResNet-50 on 2 CPU processes is compute-bound (issue 22: the default run picked
    # fsdp). Among the sharded architectures fsdp is predicted 0.2% ahead of zero1; with
    # bare parameters (no intervals) the 0.5% floor makes them tie, and zero1 (a
    # sharded optimizer only) is chosen.
    w = get_workload("resnet50", 32)
    p = preset("ethernet-10g", "cpu")
    rec = tuner.recommend(p, w, max_workers=2, architectures=["fsdp", "zero2", "zero1"])
    by_arch = {}  # each architecture's best runner-up (listed before other worker counts)
    for c in rec.alternatives:
        by_arch.setdefault(c.architecture, c)
    assert rec.architecture == "zero1"
    assert by_arch["fsdp"].throughput_samples_per_s > rec.config.throughput_samples_per_s
    gap = by_arch["fsdp"].throughput_samples_per_s / rec.config.throughput_samples_per_s - 1
    assert 0 < gap < tuner._recommend.TIE_TOLERANCE
    assert "Ties go to the simpler architecture: zero1 (2 workers) is chosen over" in rec.rationale
    # with every architecture the ring is the fastest outright, and the simplest
    assert tuner.recommend(p, w, max_workers=2).architecture == "ring"
    # zero1 (DDP + a sharded optimizer) is as simple as p2p (servers on the workers):
    # tied and at one level, the faster wins (before, p2p was always preferred: the
    # Llama-2-7B recommendation with full checkpointing was TensorFlow's P2P)
    pair = tuner.recommend(p, w, max_workers=2, architectures=["p2p", "zero1"])
    by_arch = {}
    for c in [pair.config, *pair.alternatives]:
        by_arch.setdefault(c.architecture, c)
    assert by_arch["zero1"].throughput_samples_per_s > by_arch["p2p"].throughput_samples_per_s
    assert pair.architecture == "zero1"


def test_a_tie_follows_the_intervals():
    # AlexNet on 100 Gb/s InfiniBand, 8 V100s, an update 18× the SGD preset's (an
    # optimizer streaming its state): zero2 (a G/n update) is predicted 3.8% faster than
    # the ring, outside the 0.5% floor. Bare parameters: zero2. The preset's prior: the
    # 90% interval of their paired difference reaches zero, a tie, the ring. Intervals
    # shrunk to nothing: zero2 again, and the rationale says nothing of ties.
    w = get_workload("alexnet", 32)
    kw = dict(max_workers=8, architectures=["ring", "zero2"], refine=False)
    params = preset("ib-edr-100g", "v100").scaled(update=18.0)
    bare = tuner.recommend(params, w, **kw)
    assert bare.architecture == "zero2" and "Ties go" not in bare.rationale
    ring = next(c for c in bare.alternatives if c.architecture == "ring")
    assert bare.config.throughput_samples_per_s / ring.throughput_samples_per_s - 1 > 0.02
    base = Profile.from_preset("ib-edr-100g", "v100")
    prior = Profile(
        params=params, covariance=base.covariance, leaf_names=base.leaf_names, prior=base.prior
    )
    wide = tuner.recommend(prior, w, **kw)
    lo, hi = wide.config.interval_s
    assert wide.architecture == "ring" and hi / lo > 1.05  # the band is wider than the gap
    assert "Ties go to the simpler architecture: ring (8 workers) is chosen over zero2" in (
        wide.rationale
    )
    certain = tuner.recommend(_scaled_profile(prior, 1e-10), w, **kw)
    assert certain.architecture == "zero2" and "Ties go" not in certain.rationale


def test_a_compute_bound_choice_says_why_its_efficiency_is_below_one():
    """'Compute-bound: 100% of the step is compute' beside 83.7% scaling efficiency read as
    a contradiction (a new user's trial): ranks sharing a node's cores each compute slower
    than one alone, and the rationale now says so with the factor."""
    import equinox as eqx
    import jax.numpy as jnp

    p = preset("ethernet-10g", "cpu")
    p = eqx.tree_at(lambda q: q.log_node_slots, p, jnp.asarray(0.0))  # one rank's worth of cores
    w = get_workload("resnet50", 64)
    rec = tuner.recommend(p, w, max_workers=2, ranks_per_node=2, architectures=["ring"])
    text = " ".join(rec.rationale) if isinstance(rec.rationale, list) else rec.rationale
    two, one = p.to_numpy().core_share(np.asarray([2.0, 1.0]))
    share = float(two / one)
    assert share > 1.05 and rec.workers == 2
    assert "Compute-bound" in text and "sharing a node's cores" in text
    assert f"{share:.2f}× slower" in text
    # one worker alone: nothing shared, nothing to explain
    solo = tuner.recommend(p, w, max_workers=1, ranks_per_node=2, architectures=["ring"])
    solo_text = " ".join(solo.rationale) if isinstance(solo.rationale, list) else solo.rationale
    assert "sharing a node's cores" not in solo_text


def _step_comm_sd(base: Profile, sd: float) -> Profile:
    """``base`` with every leaf pinned (sd 0.001) but step_comm_factor's, which gets ``sd``."""
    i = base.leaf_names.index("log_step_comm")
    cov = np.diag(np.full(len(base.leaf_names), 1e-6))
    cov[i, i] = sd**2
    return Profile(params=base.params, covariance=cov, leaf_names=base.leaf_names, prior=base.prior)


def test_a_wide_interval_names_the_unmeasured_parameter_that_sets_it(resnet18):
    """Issue 22: with no training steps, step_comm_factor stays at its prior (×3 either
    way) and sets the 90% interval of a step whose exchange is exposed; the warnings say
    so, with the command that measures it. Pinned (sd 0.01, as steps pin it), the
    interval is narrow and the note is gone."""
    base = Profile.from_preset("ethernet-10g", "v100")
    kw = dict(max_workers=16, architectures=["ring"], refine=False)
    wide = tuner.recommend(_step_comm_sd(base, math.log(3.0)), resnet18, **kw)
    lo, hi = wide.config.interval_s
    assert hi > 1.25 * wide.config.iteration_time_s
    notes = [w for w in wide.warnings if "is wide mostly because of" in w]
    assert len(notes) == 1
    assert "step_comm_factor" in notes[0] and "--steps" in notes[0] and "run --validate" in notes[0]
    narrow = tuner.recommend(_step_comm_sd(base, 0.01), resnet18, **kw)
    lo, hi = narrow.config.interval_s
    assert hi < 1.05 * narrow.config.iteration_time_s
    assert not any("is wide" in w for w in narrow.warnings)


def test_a_base_link_parameter_whose_regime_products_are_identified_is_not_named(resnet18):
    """A regime's β is base × factor: a profile whose inter-node base β and all_reduce
    factors are each uncertain (sd 1) but whose products are pinned (the fit's usual
    confounding) does not warn that the ring depends on an unidentified
    beta_s_per_byte[inter]; the same profile with the products free does."""
    base = Profile.from_preset("ethernet-10g", "v100")
    names = base.leaf_names
    v = np.zeros(len(names))
    v[names.index("log_beta[inter]")] = 1.0
    for i, n in enumerate(names):
        if n.startswith("regime_log_beta[all_reduce,inter,"):
            v[i] = -1.0
    kw = dict(max_workers=16, architectures=["ring"], refine=False)

    def unidentified(cov):
        measured = {"message_bytes": [1024, 1 << 24], "num_ranks": [2, 4],
                    "ranks_per_node": [1, 1], "collectives": ["all_reduce"]}  # fmt: skip
        prof = Profile(params=base.params, covariance=cov, leaf_names=names, prior=base.prior,
                       measured_ranges=measured)  # fmt: skip
        assert not prof.identified["beta_s_per_byte[inter]"]
        rec = tuner.recommend(prof, resnet18, **kw)
        return [w for w in rec.warnings if "could not identify" in w]

    pinned = np.outer(v, v) + np.diag(np.full(len(names), 1e-6))
    assert unidentified(pinned) == []
    free = np.diag(np.where(v != 0, 1.0, 1e-6))
    (w,) = unidentified(free)
    assert "beta_s_per_byte[inter]" in w


def test_a_wide_interval_from_held_out_misses_says_so(resnet18):
    """Every parameter pinned, but the microbenchmarks missed their held-out points by
    ±30% (log): the residual spread sets the interval, and the note says to measure
    again, not to measure a parameter."""
    base = Profile.from_preset("ethernet-10g", "v100")
    names = base.leaf_names
    prof = Profile(params=base.params, covariance=np.diag(np.full(len(names), 1e-6)),
                   leaf_names=names, prior=base.prior,
                   validation={"heldout_log_residuals": [0.3, -0.3] * 10})  # fmt: skip
    rec = tuner.recommend(prof, resnet18, max_workers=16, architectures=["ring"], refine=False)
    (note,) = [w for w in rec.warnings if "is wide mostly because of" in w]
    assert "the microbenchmarks' held-out misses" in note and "--budget-s" in note
    lo, hi = rec.config.interval_s
    assert hi / rec.config.iteration_time_s == pytest.approx(math.exp(0.3), rel=1e-3)


def test_a_refined_bucket_is_a_round_cap_on_its_plateau_and_survives_a_saved_profile(tmp_path):
    """Tensors are never split, so the refined optimum is a plateau of caps with one step
    time; the cap chosen on it is the coarsest whole MiB, 64 KiB or KiB there, not a byte
    that rounding picked (a run said 102,196,406 bytes, recommend on its saved profile
    102,196,405)."""
    prof = Profile.from_preset("ethernet-10g", "v100")
    w = get_workload("resnet50", 64)
    kw = dict(max_workers=16, architectures=["ring"])
    a = tuner.recommend(prof, w, **kw)
    assert a.config.refined and a.config.bucket_bytes % 1024 == 0
    b = tuner.recommend(Profile.load(prof.save(tmp_path / "p.json")), w, **kw)
    assert b.config.bucket_bytes == a.config.bucket_bytes
    # the same step as the unrounded optimum's neighbours: a cap one KiB either side of
    # the plateau point chosen is no faster
    t = [
        float(iteration_time(prof.params, w, "ring", a.config.workers,
                             bucket_bytes=a.config.bucket_bytes + d).iteration_s)
        for d in (-1024, 0, 1024)
    ]  # fmt: skip
    assert t[1] <= min(t) * (1 + 1e-9)
    assert a.config.iteration_time_s == pytest.approx(t[1], rel=1e-5)


def test_a_profile_that_held_nothing_out_is_called_untested():
    """A calibration with no held-out point has no measured error: recommend says so (a
    new user's 3-record profile read 'reliable' with a 90% interval of 2 s – 3,288 s)."""
    from calibration import calibrate
    from costmodel import collective_time

    truth = preset("ethernet-10g", "cpu")
    recs = [
        {"schema": 1, "kind": "collective", "collective": "all_reduce", "message_bytes": s,
         "num_ranks": 2, "ranks_per_node": 2, "dtype": "float32",
         "time_s": {"p10": float(collective_time(truth, "all_reduce", s, 2, 2))},
         "backend": "cpu", "device_kind": "cpu", "versions": {}, "host_fingerprint": "x",
         "timestamp": "2026-01-01T00:00:00Z", "source": "test"}
        for s in (2**10, 2**16, 2**22)
    ]  # fmt: skip
    untested = calibrate(recs, n_regimes=1, holdout=0.0)
    assert math.isnan(untested.heldout_p90)
    w = get_workload("resnet18", 32)
    rec = tuner.recommend(untested, w, max_workers=4, architectures=["ring"], force=True)
    assert any(
        x.startswith("untested profile: its calibration held no point out") for x in rec.warnings
    )
    tested = tuner.recommend(Profile.from_preset("ethernet-10g", "cpu"), w, max_workers=4,
                             architectures=["ring"])  # fmt: skip
    assert not any(x.startswith("untested") for x in tested.warnings)  # a preset: its own note
