"""ClusterParams: SI properties, the plain-dict round trip, ``scaled``, ``create``'s errors."""

from __future__ import annotations

import json
import math

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from costmodel import (
    COLLECTIVE_NAMES,
    LEVELS,
    PARAMETER_UNITS,
    ClusterParams,
    collective_time,
    preset,
)

SI = dict(
    alpha_s=(3e-6, 40e-6),
    beta_s_per_byte=(1 / 80e9, 1 / 3e9),
    node_beta_s_per_byte=(1 / 400e9, 1 / 3.5e9),
    gamma_s_per_byte=1 / 250e9,
    call_overhead_s=12e-6,
    fanin_exponent=0.3,
    all_to_all_exponent=0.07,
    node_compute_slots=6.0,
    flops_per_s=12e12,
    step_overhead_s=2e-3,
    update_s_per_byte=4e-12,
    overlap_interference=0.2,
    memory_bytes=32 * 1024**3,
)


def test_properties_return_what_create_was_given_in_si_units():
    p = ClusterParams.create(**SI, n_regimes=1)
    for key, value in SI.items():
        np.testing.assert_allclose(np.asarray(getattr(p, key)), value, rtol=1e-13, err_msg=key)
    # leaves are stored unconstrained: log of scales, logit of the fraction
    assert float(p.log_alpha[1]) == pytest.approx(math.log(40e-6), rel=1e-15)
    assert float(p.logit_interference) == pytest.approx(math.log(0.2 / 0.8), rel=1e-14)
    # one regime: the per-collective regime tables are the base α, β
    np.testing.assert_allclose(
        np.asarray(p.regime_alpha_s), np.broadcast_to(np.array(SI["alpha_s"])[:, None], (9, 2, 1))
    )
    assert p.regime_alpha_s.shape == (len(COLLECTIVE_NAMES), len(LEVELS), 1)


def test_default_regimes_spread_from_low_latency_to_high_bandwidth():
    p = ClusterParams.create(n_regimes=3)
    ra = np.exp(np.asarray(p.regime_log_alpha))[0, 0]
    rb = np.exp(np.asarray(p.regime_log_beta))[0, 0]
    np.testing.assert_allclose(ra, [0.25, 1.0, 4.0], rtol=1e-12)
    np.testing.assert_allclose(rb, [4.0, 2.0, 1.0], rtol=1e-12)  # the last at the link's β


@pytest.mark.parametrize("n_regimes", [1, 3])
def test_dict_round_trip_through_json(n_regimes):
    p = ClusterParams.create(**SI, n_regimes=n_regimes, regime_sharpness=6.0)
    d = p.to_dict()
    # every physical quantity is there, with its documented unit, in plain Python
    assert set(PARAMETER_UNITS) <= set(d)
    assert d["collectives"] == list(COLLECTIVE_NAMES) and d["levels"] == list(LEVELS)
    text = json.dumps(d, allow_nan=False)
    q = ClusterParams.from_dict(json.loads(text))
    assert q.n_regimes == n_regimes
    for a, b in zip(jax.tree_util.tree_leaves(p), jax.tree_util.tree_leaves(q), strict=True):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-13, atol=1e-15)
    # and the same model: identical predictions
    S = np.geomspace(1, 1e9, 7)
    for name in COLLECTIVE_NAMES:
        np.testing.assert_allclose(
            np.asarray(collective_time(q, name, S, 16, 4)),
            np.asarray(collective_time(p, name, S, 16, 4)),
            rtol=1e-12,
        )
    # and writing it again gives the same document (to rounding of exp(log x))
    _close_dicts(q.to_dict(), d)


def _close_dicts(a, b):
    """Nested dicts/lists of numbers equal to 1e-13 relative (strings exactly)."""
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if k in ("collectives", "levels", "n_regimes"):
            assert x == y, k
        else:
            np.testing.assert_allclose(np.asarray(x, float), np.asarray(y, float), rtol=1e-13)


def test_regime_tables_keep_their_per_collective_values():
    # (C, 2, R) factors, different for every entry, survive the round trip in place.
    C, R = len(COLLECTIVE_NAMES), 2
    ra = np.arange(1, C * 2 * R + 1, dtype=float).reshape(C, 2, R) / 10
    rb = ra[::-1].copy()
    p = ClusterParams.create(n_regimes=R, regime_alpha_factor=ra, regime_beta_factor=rb)
    p = p.replace_sharpness(np.linspace(1, 9, C))
    d = p.to_dict()
    np.testing.assert_allclose(d["regime_alpha_factor"], ra, rtol=1e-13)
    np.testing.assert_allclose(d["regime_beta_factor"], rb, rtol=1e-13)
    q = ClusterParams.from_dict(d)
    np.testing.assert_allclose(np.asarray(q.regime_sharpness), np.linspace(1, 9, C), rtol=1e-13)
    i = COLLECTIVE_NAMES.index("all_gather")
    np.testing.assert_allclose(
        np.asarray(q.regime_alpha_s[i, 1]), np.asarray(p.alpha_s[1]) * ra[i, 1], rtol=1e-13
    )


def test_from_dict_names_what_is_wrong():
    d = ClusterParams.create().to_dict()
    with pytest.raises(ValueError, match="parameters lack gamma_s_per_byte"):
        ClusterParams.from_dict({k: v for k, v in d.items() if k != "gamma_s_per_byte"})
    with pytest.raises(ValueError, match="parameters lack n_regimes"):
        ClusterParams.from_dict({k: v for k, v in d.items() if k != "n_regimes"})
    with pytest.raises(ValueError, match="this ddltune expects"):
        ClusterParams.from_dict(d | {"collectives": ["all_reduce"]})
    with pytest.raises(ValueError, match="invalid parameters: alpha_s must be finite and > 0"):
        ClusterParams.from_dict(d | {"alpha_s": [1e-6, -1e-6]})
    with pytest.raises(ValueError, match="must be a JSON object, got list"):
        ClusterParams.from_dict([1, 2])


def test_scaled_multiplies_exactly_the_named_quantity():
    p = ClusterParams.create(**SI)
    q = p.scaled(beta_inter=0.5, alpha=2.0, flops=3.0)
    np.testing.assert_allclose(
        np.asarray(q.beta_s_per_byte), [SI["beta_s_per_byte"][0], SI["beta_s_per_byte"][1] / 2]
    )
    np.testing.assert_allclose(np.asarray(q.alpha_s), 2 * np.asarray(SI["alpha_s"]), rtol=1e-14)
    assert float(q.flops_per_s) == pytest.approx(3 * SI["flops_per_s"], rel=1e-14)
    # the node's cap (a ratio to β in its leaf) keeps its physical value
    np.testing.assert_allclose(
        np.asarray(q.node_beta_s_per_byte), np.asarray(p.node_beta_s_per_byte), rtol=1e-14
    )
    # everything else untouched, bit for bit
    changed = {"log_beta", "log_node_ratio", "log_alpha", "log_flops"}
    for f in p.__dataclass_fields__:
        if f not in changed and f != "n_regimes":
            assert np.array_equal(np.asarray(getattr(p, f)), np.asarray(getattr(q, f))), f
    # the physics follows: a 2× faster network halves an inter-node transfer's β·S part
    tiny = 1e-30  # no latency, overhead, reduction or node cap to blur the ratio
    pa = ClusterParams.create(
        alpha_s=tiny, call_overhead_s=tiny, gamma_s_per_byte=tiny, node_beta_s_per_byte=tiny
    )
    t1 = float(collective_time(pa, "all_gather", 1e9, 8, 1))
    t2 = float(collective_time(pa.scaled(beta_inter=0.5), "all_gather", 1e9, 8, 1))
    assert t2 / t1 == pytest.approx(0.5, rel=1e-14)
    # scaled(x=1) is the identity; scaling composes multiplicatively
    assert np.array_equal(np.asarray(p.scaled(gamma=1.0).log_gamma), np.asarray(p.log_gamma))
    r = p.scaled(gamma=2.0).scaled(gamma=4.0)
    assert float(r.gamma_s_per_byte) == pytest.approx(8 * SI["gamma_s_per_byte"], rel=1e-14)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(betta=2.0), r"unknown parameter 'betta' to scale; valid: alpha, alpha_inter"),
        (dict(beta=0.0), r"factor for 'beta' must be finite and > 0, got 0.0"),
        (dict(alpha=float("nan")), r"factor for 'alpha' must be finite and > 0"),
        (dict(memory=-1), r"factor for 'memory' must be finite and > 0, got -1"),
    ],
)
def test_scaled_rejects_bad_keys_and_factors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ClusterParams.create().scaled(**kwargs)


@pytest.mark.parametrize(
    ("kwargs", "pattern"),
    [
        (dict(alpha_s=0.0), r"alpha_s must be finite and > 0 for both levels"),
        (dict(alpha_s=(1e-6, float("nan"))), r"alpha_s must be finite and > 0"),
        (dict(beta_s_per_byte=(1e-9, -1e-9)), r"beta_s_per_byte must be finite and > 0"),
        (dict(node_beta_s_per_byte=(0.0, 1.0)), r"node_beta_s_per_byte must be finite"),
        (dict(gamma_s_per_byte=-1.0), r"gamma_s_per_byte must be a finite number > 0, got -1.0"),
        (dict(flops_per_s=float("inf")), r"flops_per_s must be a finite number > 0"),
        (dict(call_overhead_s=0), r"call_overhead_s must be a finite number > 0"),
        (dict(node_compute_slots=0), r"node_compute_slots must be a finite number > 0"),
        (dict(regime_sharpness=0.0), r"regime_sharpness must be a finite number > 0"),
        (dict(overlap_interference=1.0), r"overlap_interference must be in \(0, 1\), got 1.0"),
        (dict(overlap_interference=0.0), r"overlap_interference must be in \(0, 1\)"),
        (dict(n_regimes=0), r"n_regimes must be an integer in \[1, 8\], got 0"),
        (dict(n_regimes=2.0), r"n_regimes must be an integer in \[1, 8\], got 2.0"),
        (dict(n_regimes=9), r"n_regimes must be an integer in \[1, 8\], got 9"),
        (
            dict(n_regimes=2, regime_beta_factor=(1.0, 0.0)),
            r"regime_beta_factor must be finite and > 0",
        ),
        (dict(memory_bytes=-5), r"memory_bytes must be a finite number > 0, got -5"),
    ],
)
def test_create_names_the_bad_argument(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        ClusterParams.create(**kwargs)


def test_is_a_pytree_of_arrays_with_static_structure():
    # vmap/grad see only array leaves; n_regimes is structure (static), not a leaf
    p3 = ClusterParams.create(n_regimes=3)
    leaves, treedef = jax.tree_util.tree_flatten(p3)
    assert all(isinstance(x, jax.Array) for x in leaves)
    assert len(leaves) == len(p3.__dataclass_fields__) - 2  # n_regimes, host_links
    assert treedef != jax.tree_util.tree_structure(ClusterParams.create(n_regimes=2))
    # differentiable with respect to every leaf: d(all_reduce time)/d(log β) = β·∂T/∂β > 0
    g = jax.grad(lambda q: collective_time(q, "all_reduce", 1e8, 8, 1))(p3)
    assert isinstance(g, ClusterParams) and float(g.log_beta[1]) > 0
    # stacking parameter sets gives a batch that vmap sweeps (what-if grids)
    stack = jax.tree_util.tree_map(lambda *x: jnp.stack(x), p3, p3.scaled(beta=2.0))
    t = eqx.filter_vmap(lambda q: collective_time(q, "all_reduce", 1e8, 8, 1))(stack)
    assert t.shape == (2,) and float(t[1]) > float(t[0])


@pytest.mark.parametrize("bad", [0, -1, 65, 2.5, True, "4", None])
def test_host_links_must_be_a_whole_number_of_links(bad):
    with pytest.raises(ValueError, match=r"host_links must be an integer in \[1, 64\]"):
        ClusterParams.create(host_links=bad)
    with pytest.raises(ValueError, match=r"host_links"):
        preset("ethernet-10g", "v100", host_links=bad)


def test_host_links_is_static_and_survives_json_and_flat_round_trips():
    p = ClusterParams.create(host_links=4)
    assert p.host_links == 4 and ClusterParams.create().host_links == 1
    # structure, not a leaf: θ is the same length, and from_flat / to_numpy keep it
    assert p.flat().shape == ClusterParams.create().flat().shape
    assert p.from_flat(p.flat()[None]).host_links == 4 and p.to_numpy().host_links == 4
    d = json.loads(json.dumps(p.to_dict()))
    assert d["host_links"] == 4 and ClusterParams.from_dict(d).host_links == 4
    d["host_links"] = 4.0  # a JSON writer may print a whole number as a float
    assert ClusterParams.from_dict(d).host_links == 4
    del d["host_links"]  # written before the field: one link, as every prediction then
    assert ClusterParams.from_dict(d).host_links == 1
    d["host_links"] = 0
    with pytest.raises(ValueError, match=r"invalid parameters: host_links must be"):
        ClusterParams.from_dict(d)


def test_compute_time_of_a_small_gemm_is_hockneys_half_performance_law():
    """compute_time(F, small_gemm = 1/m) = F·(1 + m½/m)/R: at m = m½ half the rate,
    at m ≫ m½ the full rate, u = 0 exactly the rate; the default m½ (e^−30) leaves
    every time as it was to 1e-12; jax and numpy agree; gradients flow to m½."""
    R, m_half = 1e12, 16.0
    p = ClusterParams.create(flops_per_s=R, gemm_half_dim=m_half)
    F = 2e9
    one = jnp.asarray(1.0)
    assert float(p.compute_time(F, one, small_gemm=1 / m_half)) == pytest.approx(2 * F / R)
    assert float(p.compute_time(F, one, small_gemm=1 / 64)) == pytest.approx(1.25 * F / R)
    assert float(p.compute_time(F, one, small_gemm=1e-9)) == pytest.approx(F / R, rel=1e-7)
    assert float(p.compute_time(F, one)) == pytest.approx(F / R, rel=1e-7)
    ms = np.array([1.0, 4.0, 16.0, 64.0, 256.0, 4096.0])
    pn = p.to_numpy()
    t = pn.compute_time(F, np.ones_like(ms), small_gemm=1 / ms)
    assert np.all(np.diff(t) < 0)  # bigger GEMMs run faster, toward F/R
    np.testing.assert_allclose(t, F * (1 + m_half / ms) / R, rtol=1e-12)
    d = ClusterParams.create(flops_per_s=R).to_numpy()
    np.testing.assert_allclose(d.compute_time(F, np.ones_like(ms), small_gemm=1 / ms), F / R,
                               rtol=1e-12)  # fmt: skip
    g = jax.grad(lambda q: q.compute_time(F, one, small_gemm=1 / 64.0))(p)
    assert float(g.log_gemm_half) == pytest.approx(F / R * m_half / 64, rel=1e-5)
    # round trip through the profile's dict; a dict without the key keeps the default
    back = ClusterParams.from_dict(json.loads(json.dumps(p.to_dict())))
    assert float(back.gemm_half_dim) == pytest.approx(m_half, rel=1e-6)
    old = p.to_dict()
    del old["gemm_half_dim"]
    assert float(ClusterParams.from_dict(old).gemm_half_dim) < 1e-12
    with pytest.raises(ValueError, match="gemm_half_dim"):
        ClusterParams.create(gemm_half_dim=0.0)


def test_head_start_round_trips_and_an_older_profile_has_none():
    """head_start_bytes per level through the profile's dict (JSON), a dict written
    before it (no key) loads with none (e^−30 bytes, below what the model counts), a
    scalar sets both levels, and a non-positive, non-numeric, three-level or absurd
    (over 1 GiB: a new user's hand-edited 1e300 changed the recommendation) value is
    an error naming it."""
    from costmodel.collectives import NEGLIGIBLE_HEAD_START_BYTES

    p = ClusterParams.create(head_start_bytes=(1e-13, 2048.0))
    back = ClusterParams.from_dict(json.loads(json.dumps(p.to_dict())))
    np.testing.assert_allclose(np.asarray(back.head_start_bytes), [1e-13, 2048.0], rtol=1e-6)
    old = p.to_dict()
    del old["head_start_bytes"]
    assert np.all(
        np.asarray(ClusterParams.from_dict(old).head_start_bytes) < NEGLIGIBLE_HEAD_START_BYTES
    )
    assert np.all(np.asarray(ClusterParams.create().head_start_bytes) < NEGLIGIBLE_HEAD_START_BYTES)
    np.testing.assert_allclose(
        np.asarray(ClusterParams.create(head_start_bytes=512.0).head_start_bytes), 512.0, rtol=1e-6
    )
    for bad in (0.0, -1.0, float("nan"), 1e300, "abc", [1.0, 2.0, 3.0]):
        with pytest.raises(ValueError, match="head_start_bytes must be"):
            ClusterParams.create(head_start_bytes=bad)
        with pytest.raises(ValueError, match="invalid parameters: head_start_bytes must be"):
            ClusterParams.from_dict({**p.to_dict(), "head_start_bytes": bad})


def test_all_to_all_congestion_cap_round_trips_and_an_older_profile_has_none():
    """all_to_all_congestion_cap through the profile's dict (JSON); a dict written before
    it (no key) loads with none (e^30, where the factor is (n−1)ᵉ as that file's ddltune
    predicted it), as ``create`` does by default; a non-positive or non-numeric value is
    an error naming it."""
    from costmodel import collective_time

    p = ClusterParams.create(all_to_all_exponent=0.5, all_to_all_congestion_cap=0.38)
    back = ClusterParams.from_dict(json.loads(json.dumps(p.to_dict())))
    assert float(back.all_to_all_congestion_cap) == pytest.approx(0.38, rel=1e-12)
    old = p.to_dict()
    del old["all_to_all_congestion_cap"]
    before = ClusterParams.from_dict(old)
    assert float(before.all_to_all_congestion_cap) > 1e12
    assert float(ClusterParams.create().all_to_all_congestion_cap) > 1e12
    t = float(collective_time(before, "all_to_all", 1e8, 64, 1))
    b = float(before.beta_s_per_byte[1])
    a = float(before.alpha_s[1]) * 63 + float(before.call_overhead_s)
    assert t == pytest.approx(a + 63 / 64 * 1e8 * b * 63**0.5, rel=1e-6)
    for bad in (0.0, -1.0, float("nan"), "abc", 1e308):
        with pytest.raises(ValueError, match="all_to_all_congestion_cap must be"):
            ClusterParams.create(all_to_all_congestion_cap=bad)


def test_cache_round_trips_and_an_older_profile_has_none():
    """cache_bytes and cache_excess per level through the profile's dict (JSON); a dict
    written before them (no keys) loads with none (the defaults, which change no cost:
    costmodel.collectives.cache_is_none), as ``create`` does; a non-positive,
    non-numeric or absurd value is an error naming it."""
    from costmodel.collectives import cache_is_none

    p = ClusterParams.create(cache_bytes=(2.0**20, 1e13), cache_excess=(1.5, 1e-13))
    back = ClusterParams.from_dict(json.loads(json.dumps(p.to_dict())))
    np.testing.assert_allclose(np.asarray(back.cache_bytes), [2.0**20, 1e13], rtol=1e-12)
    np.testing.assert_allclose(np.asarray(back.cache_excess), [1.5, 1e-13], rtol=1e-12)
    assert not cache_is_none(back.cache_excess, back.cache_bytes)
    old = p.to_dict()
    del old["cache_bytes"], old["cache_excess"]
    before = ClusterParams.from_dict(old)
    assert cache_is_none(before.cache_excess, before.cache_bytes)
    assert cache_is_none(ClusterParams.create().cache_excess, ClusterParams.create().cache_bytes)
    for key, bad in (("cache_bytes", 0.0), ("cache_bytes", 1e300), ("cache_excess", -1.0),
                     ("cache_excess", 1e4), ("cache_excess", "abc"), ("cache_bytes", [1, 2, 3])):  # fmt: skip
        with pytest.raises(ValueError, match=f"{key} must be"):
            ClusterParams.create(**{key: bad})
        with pytest.raises(ValueError, match=f"invalid parameters: {key} must be"):
            ClusterParams.from_dict({**p.to_dict(), key: bad})


@pytest.mark.parametrize(
    ("value", "shown"),
    [("5", '"5"'), (True, "true"), (None, "null"), ("none", '"none"'), ([1.0, "x"], '"x"')],
)
def test_a_hand_edited_parameter_that_is_no_json_number_is_refused_as_json_spells_it(value, shown):
    """A new user's trial: "5" and true were taken as 5 and 1 (float() converts them), null
    read "got None"; each is refused naming the key and the value as JSON writes it, and a
    parameter whose default is "none" says to leave the key out. 1e308 for the cap (its
    interval's sigma points overflowed exp) is over the largest accepted."""
    d = ClusterParams.create().to_dict()
    for key in ("all_to_all_congestion_cap", "alpha_s", "flops_per_s"):
        with pytest.raises(ValueError) as e:
            ClusterParams.from_dict({**d, key: value})
        msg = str(e.value)
        assert f"{key} must be a number, got {shown}" in msg
        assert ("leave the key out for none" in msg) == (key == "all_to_all_congestion_cap")
    with pytest.raises(ValueError, match="must be ≤ 1e\\+15 .*leave the key out for none"):
        ClusterParams.from_dict({**d, "all_to_all_congestion_cap": 1e308})
    # numbers as numpy writes them still load
    np_d = {**d, "flops_per_s": np.float32(1e12), "host_links": np.int64(2)}
    assert ClusterParams.from_dict(np_d).host_links == 2


@pytest.mark.parametrize("logit", [40.0, -800.0])
@pytest.mark.parametrize(
    "leaf", ["logit_latency_overlap", "logit_backward_hide", "logit_interference"]
)
def test_a_share_fitted_to_saturation_survives_the_file(leaf, logit):
    """A logit beyond ±37 writes its share as exactly 1.0 (0.0), which the reader refused
    ('must be in (0, 1)'): a profile ddltune wrote that it could not read. It reads back
    inside (0, 1), within 3e-16 of it; a share out of range is still refused."""
    from calibration import ParamLayout

    p = ClusterParams.create(**SI, n_regimes=1)
    flat = np.asarray(p.flat(), dtype=np.float64)
    flat[ParamLayout(1).slices[leaf]] = logit
    q = p.from_flat(flat)
    with np.errstate(over="ignore"):
        d = json.loads(json.dumps(q.to_dict(), allow_nan=False))
        back = ClusterParams.from_dict(d)
        share = {"logit_latency_overlap": "latency_overlap", "logit_backward_hide":
                 "backward_hide", "logit_interference": "overlap_interference"}[leaf]  # fmt: skip
        np.testing.assert_allclose(
            np.asarray(getattr(back, share)),
            np.asarray(getattr(q, share)),
            rtol=3e-16,
            atol=1e-299,
        )
    d[share] = [1.5, 0.5] if isinstance(d[share], list) else 1.5
    with pytest.raises(ValueError, match="must be in"):
        ClusterParams.from_dict(d)
