"""calibration.Profile: the JSON file (round trip, atomic, validation) and prediction intervals."""

from __future__ import annotations

import copy
import json
import math

import jax.numpy as jnp
import numpy as np
import pytest
from jax.flatten_util import ravel_pytree
from scipy.stats import norm

from calibration import Profile, calibrate
from costmodel import InputFileError, collective_time, preset

BASE = {
    "schema": 1,
    "backend": "cpu",
    "device_kind": "cpu",
    "versions": {},
    "host_fingerprint": "x",
    "timestamp": "2026-01-01T00:00:00Z",
    "source": "test",
    "dtype": "float32",
}


@pytest.fixture(scope="module")
def fitted():
    """A small CPU fit with held-out points (3% noise on a known cluster)."""
    truth = preset("ethernet-10g", "cpu").scaled(alpha=1.5, beta=0.6)
    rng = np.random.default_rng(2)
    recs = []
    for c in ("all_reduce", "all_gather"):
        for n in (2, 3, 4):
            for k in range(8, 26):
                t = float(collective_time(truth, c, 2**k, n, n)) * math.exp(0.03 * rng.normal())
                recs.append(
                    {
                        **BASE,
                        "kind": "collective",
                        "collective": c,
                        "message_bytes": 2**k,
                        "num_ranks": n,
                        "ranks_per_node": n,
                        "time_s": {"p10": t},
                    }
                )
    return calibrate(recs, n_regimes=1)


def test_an_edit_of_the_readable_parameters_alone_is_refused_naming_both(fitted, tmp_path):
    """'parameters' is a copy of 'params' for people: a value edited there alone changed
    nothing (a new user's trial made an inter-node bandwidth negative there, and show,
    predict and recommend went on with the old one). It is now an error naming the entry
    and what 'params' says; the file as written, and a table this version does not know,
    still load."""
    from costmodel import InputFileError

    doc = json.loads(fitted.to_json())
    names = [row["name"] for row in doc["parameters"]]
    i = names.index("beta_s_per_byte[inter]")
    for bad in (-8.9e-10, 1.5 * doc["parameters"][i]["value"], "fast", None):
        edited = copy.deepcopy(doc)
        edited["parameters"][i]["value"] = bad
        path = tmp_path / "edited.json"
        path.write_text(json.dumps(edited))
        with pytest.raises(InputFileError) as info:
            Profile.load(path)
        msg = str(info.value)
        assert str(path) in msg and "'parameters' gives beta_s_per_byte[inter] = " in msg
        assert "edit 'params' instead" in msg
    other = copy.deepcopy(doc)
    other["parameters"].append({"name": "from_another_version", "value": -1.0})
    back = Profile.from_dict(other)
    assert np.asarray(ravel_pytree(back.params)[0]) == pytest.approx(
        np.asarray(ravel_pytree(fitted.params)[0]), rel=1e-12
    )
    del other["parameters"]
    assert Profile.from_dict(other).reliable == fitted.reliable


def test_save_load_round_trip(fitted, tmp_path):
    path = fitted.save(tmp_path / "p.json")
    back = Profile.load(path)
    np.testing.assert_allclose(
        np.asarray(ravel_pytree(back.params)[0]),
        np.asarray(ravel_pytree(fitted.params)[0]),
        atol=1e-9,
    )
    np.testing.assert_allclose(back.covariance, fitted.covariance, rtol=1e-10, atol=1e-300)
    assert back.leaf_names == fitted.leaf_names
    assert back.reliable == fitted.reliable
    assert back.heldout_p90 == pytest.approx(fitted.heldout_p90)
    assert back.measured_ranges == fitted.measured_ranges
    assert back.measured_ranges["message_bytes"] == [256, 2**25]
    assert back.measured_ranges["num_ranks"] == [2, 4]
    assert back.measured_ranges["collectives"] == ["all_reduce", "all_gather"]
    assert back.identified == fitted.identified
    assert back.prior["preset"] == "ethernet-10g,shm:cpu"
    assert set(back.provenance) >= {"inputs", "versions", "created"}
    # Intervals survive the trip.
    fn = lambda p: collective_time(p, "all_reduce", jnp.asarray([1e3, 1e6]), 4, 4)  # noqa: E731
    for a, b in zip(back.interval(fn), fitted.interval(fn), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-8)
    # The file is plain JSON with the documented keys.
    doc = json.loads(path.read_text())
    assert doc["schema"] == 1 and doc["kind"] == "ddltune-profile"
    assert len(doc["covariance"]["leaves"]) == len(doc["covariance"]["matrix"])


def test_save_refuses_to_overwrite_and_writes_atomically(fitted, tmp_path):
    path = tmp_path / "p.json"
    path.write_text("keep me")
    with pytest.raises(FileExistsError, match="--overwrite"):
        fitted.save(path)
    assert path.read_text() == "keep me"
    fitted.save(path, overwrite=True)
    assert Profile.load(path).reliable == fitted.reliable
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]  # no temporary left


def _correlate_beyond_one(d):
    """Leaves 0 and 1 covary by 1e3, far more than their sds allow (|ρ| > 1)."""
    m = d["covariance"]["matrix"]
    m[0][1] = m[1][0] = 1e3


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda d: d.update(schema=2), "unknown profile schema version 2"),
        (lambda d: d.pop("schema") and d.pop("kind"), "not a ddltune profile"),
        (lambda d: d.pop("covariance"), "missing key(s) covariance"),
        (lambda d: d.pop("measured_ranges"), "missing key(s) measured_ranges"),
        (lambda d: d["params"].pop("alpha_s"), "'params'"),
        (lambda d: d["covariance"]["matrix"].pop(), "must be"),
        (lambda d: d["covariance"]["matrix"][0].__setitem__(0, -1.0), "negative variance"),
        (_correlate_beyond_one, "not positive semi-definite"),  # a new user's edit, exit 0
        (lambda d: d.update(reliable="yes"), "'reliable'"),
        (lambda d: d["measured_ranges"].update(num_ranks=[4, 2]), "min > max"),
        (lambda d: d["params"].update(n_regimes=2), "'covariance.leaves'"),
    ],
)
def test_load_rejects_bad_profiles_naming_the_file(fitted, tmp_path, mutate, reason):
    doc = fitted.to_dict()
    mutate(doc)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputFileError) as exc:
        Profile.load(path)
    assert exc.value.path == str(path)
    assert reason in str(exc.value)


def test_load_rejects_non_json_with_line_and_nan(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{\n "schema": 1,\n oops\n}')
    with pytest.raises(InputFileError) as exc:
        Profile.load(p)
    assert exc.value.line == 3 and "not valid JSON" in str(exc.value)
    p.write_text('{"schema": 1, "heldout_p90": NaN}')
    with pytest.raises(InputFileError, match="NaN"):
        Profile.load(p)
    p.write_text("[1, 2]")
    with pytest.raises(InputFileError, match="JSON object"):
        Profile.load(p)
    with pytest.raises(FileNotFoundError):
        Profile.load(tmp_path / "missing.json")
    p.write_text(" \n")  # as 'ddltune show' says it (a new user's trial)
    with pytest.raises(InputFileError, match="the file is empty$"):
        Profile.load(p)
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")  # a figure given as --profile
    with pytest.raises(InputFileError, match="not a text file, so not a ddltune profile"):
        Profile.load(p)


def test_a_measurement_file_and_a_profile_given_for_each_other_say_so(fitted, tmp_path):
    """Each file read where the other is expected: the error names the file and what it
    is, and the command that turns one into the other (not 'not valid JSON: Extra
    data' / 'Expecting property name': from a new user's trial)."""
    from calibration import read_records

    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({**BASE, **r}) + "\n" for r in [
        {"kind": "collective", "collective": "all_reduce", "message_bytes": 1024,
         "num_ranks": 2, "ranks_per_node": 2, "time_s": {"p10": 1e-4}},
    ] * 2))  # fmt: skip
    with pytest.raises(InputFileError, match="measurement records .* calibrate") as exc:
        Profile.load(m)
    assert str(m) in str(exc.value)
    prof = tmp_path / "p.json"
    fitted.save(prof)
    with pytest.raises(InputFileError, match="is a ddltune profile .* --profile") as exc:
        read_records(prof)
    assert str(prof) in str(exc.value)


def test_from_preset_is_prior_only():
    prof = Profile.from_preset("ethernet-10g", "v100")
    assert prof.reliable is True and math.isnan(prof.heldout_p90)
    assert prof.measured_ranges == {
        "message_bytes": [],
        "num_ranks": [],
        "ranks_per_node": [],
        "collectives": [],
    }
    assert not any(prof.identified.values())
    sd = np.sqrt(np.diag(prof.covariance))
    assert sd[prof.leaf_names.index("log_beta[inter]")] == pytest.approx(math.log(3.0))
    assert np.count_nonzero(prof.covariance - np.diag(np.diag(prof.covariance))) == 0
    assert prof.params.to_dict() == preset("ethernet-10g", "v100").to_dict()
    with pytest.raises(ValueError, match="unknown network"):
        Profile.from_preset("warp", "v100")


def test_interval_closed_form_for_a_one_parameter_function(fitted):
    """fn = c / flops_per_s depends on log_flops only: the interval is
    t·exp(±z·sqrt(var(log F) + s_res²)), computed here from the covariance, s_res the
    split-conformal 0.8 quantile of the m held-out |log residuals| (the ⌈0.8·(m+1)⌉-th
    smallest) over z."""
    fn = lambda p: 1e9 / p.flops_per_s * jnp.ones((2, 3))  # noqa: E731
    lo, hi = fitted.interval(fn, level=0.8)
    assert lo.shape == hi.shape == (2, 3)
    i = fitted.leaf_names.index("log_flops")
    z = norm.ppf(0.9)
    r = np.sort(np.abs(np.asarray(fitted.validation["heldout_log_residuals"])))
    s_res = r[min(len(r), math.ceil(0.8 * (len(r) + 1))) - 1] / z
    sd = math.sqrt(fitted.covariance[i, i] + s_res**2)
    t = 1e9 / float(fitted.params.flops_per_s)
    np.testing.assert_allclose(np.asarray(lo), t * math.exp(-z * sd), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(hi), t * math.exp(z * sd), rtol=1e-6)


def _flops_only(fitted, sd: float):
    """``fitted`` with its covariance replaced by log_flops's alone, sd ``sd``."""
    prof = copy.copy(fitted)
    i = fitted.leaf_names.index("log_flops")
    cov = np.zeros_like(fitted.covariance)
    cov[i, i] = sd**2
    prof.covariance = cov
    return prof


def test_interval_follows_a_bend_instead_of_its_tangent(fitted):
    """Sigma points (issue 22): each side widens by the tangent's log-change or by what the
    prediction does at θ̂ ± z·σ, whichever is less. One parameter, log F with sd σ, each
    bound widened by the residual spread (root-sum-square in log):

    - t = max(c/F, 0.9·c/F̂), a compute floor at 0.9 of the prediction: the high bound is
      t·e^{zσ}; the low one stops at the floor (the tangent's went to t·e^{−zσ}, below it);
    - t = a + c/F with a = c/F̂ (log t's slope −½): the tangent's ½·zσ bounds the high
      side (f is convex there) and the sigma point the low side, −log((1 + e^{−zσ}) / 2).

    The jitted and the batched numpy paths agree."""
    sd = 0.5
    prof = _flops_only(fitted, sd)
    z = norm.ppf(0.95)
    s = prof.residual_sd(0.9, "steps")
    assert s > 0 and z * sd > -math.log(0.9)
    c = 1e9
    y = c / float(prof.params.flops_per_s)
    for lo, hi in (
        prof.interval(lambda p: jnp.maximum(c / p.flops_per_s, 0.9 * y)),
        prof.interval(lambda p: np.maximum(c / np.asarray(p.flops_per_s), 0.9 * y), batched=True),
    ):
        np.testing.assert_allclose(
            np.asarray(hi), y * math.exp(math.hypot(z * sd, z * s)), rtol=1e-6
        )
        np.testing.assert_allclose(
            np.asarray(lo), y * math.exp(-math.hypot(-math.log(0.9), z * s)), rtol=1e-6
        )
    lo, hi = prof.interval(lambda p: y + c / p.flops_per_s)
    up, down = 0.5 * z * sd, -math.log((1 + math.exp(-z * sd)) / 2)
    np.testing.assert_allclose(float(hi), 2 * y * math.exp(math.hypot(up, z * s)), rtol=1e-6)
    np.testing.assert_allclose(float(lo), 2 * y * math.exp(-math.hypot(down, z * s)), rtol=1e-6)


def test_a_step_term_no_steps_informed_takes_its_sigma_points(fitted):
    """A step whose exchange (half its compute at θ̂) hides under compute is flat in
    step_comm_factor at θ̂: the tangent sees no spread. Fitted without training steps,
    step_comm_factor's posterior is its prior (×3 either way), exactly Gaussian in log at
    any distance, so its sigma points are its quantiles and the high side is the exchange
    exposed at ×3^z: t·(½·3^z). A posterior that steps narrowed (0.9 of the prior's
    variance) is a Laplace approximation: the tangent bounds it, as every fitted
    direction, and the high side is the residual spread's alone."""
    i = fitted.leaf_names.index("log_step_comm")
    prior_sd = float(fitted._prior_sd[i])
    assert prior_sd == pytest.approx(math.log(3.0))
    z = norm.ppf(0.95)
    s = fitted.residual_sd(0.9, "steps")
    c = 0.1
    fn = lambda p: jnp.maximum(c, 0.5 * c * p.step_comm_factor)  # noqa: E731
    for var, up in ((prior_sd**2, math.log(0.5 * 3.0**z)), (0.9 * prior_sd**2, 0.0)):
        prof = copy.copy(fitted)
        cov = np.zeros_like(fitted.covariance)
        cov[i, i] = var
        prof.covariance = cov
        lo, hi = prof.interval(fn)
        np.testing.assert_allclose(float(hi), c * math.exp(math.hypot(up, z * s)), rtol=1e-6)
        np.testing.assert_allclose(float(lo), c * math.exp(-z * s), rtol=1e-6)
        if up:
            (name, share), *_ = prof.interval_drivers(fn)
            assert name == "step_comm_factor" and share == pytest.approx(
                up**2 / (up**2 + (z * s) ** 2)
            )


def test_interval_drivers_split_the_high_side_between_parameters_and_residual(fitted):
    """t = c/F with log F of sd σ: the high side's log-variance is (zσ)² from flops_per_s
    and (z·s_res)² from the held-out residual; the shares are those fractions, largest
    first, in both paths. A prediction of several values is refused."""
    sd = 0.5
    prof = _flops_only(fitted, sd)
    s = prof.residual_sd(0.9, "steps")
    want = (sd**2) / (sd**2 + s**2)
    for got in (
        prof.interval_drivers(lambda p: 1e9 / p.flops_per_s),
        prof.interval_drivers(lambda p: 1e9 / np.asarray(p.flops_per_s), batched=True),
    ):
        assert [n for n, _ in got] == ["flops_per_s", "held-out residual"]
        assert got[0][1] == pytest.approx(want, rel=1e-6)
        assert sum(v for _, v in got) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="one value"):
        prof.interval_drivers(lambda p: 1e9 / p.flops_per_s * jnp.ones(2))


def test_interval_properties(fitted):
    S = jnp.asarray([1e3, 1e5, 1e7])
    fn = lambda p: collective_time(p, "all_reduce", S, 4, 4)  # noqa: E731
    t = np.asarray(fn(fitted.params))
    lo50, hi50 = (np.asarray(x) for x in fitted.interval(fn, level=0.5))
    lo90, hi90 = (np.asarray(x) for x in fitted.interval(fn, level=0.9))
    assert np.all(lo90 < lo50) and np.all(lo50 < t) and np.all(t < hi50) and np.all(hi50 < hi90)
    # α + S·β is log-convex in the log-stored leaves: the tangent bounds the high side
    # and the low side is no wider (log-symmetric where the time is log-linear in them).
    assert np.all(np.log(hi90 / t) >= np.log(t / lo90) - 1e-12)
    # One rank: the model's time is 0, and so is the interval's width.
    lo, hi = fitted.interval(lambda p: collective_time(p, "all_reduce", S, 1, 1))
    assert np.all(np.asarray(lo) == 0) and np.all(np.asarray(hi) == 0)
    for bad in (0.0, 1.0, "x"):
        with pytest.raises(ValueError, match="level"):
            fitted.interval(fn, level=bad)


def test_interval_covers_held_out_points(fitted):
    """The 90% interval covers about 90% of the held-out measurements (it is built from them)."""
    v = fitted.validation
    assert v["heldout"]["points"] >= 10
    r = np.abs(np.asarray(v["heldout_log_residuals"]))
    z = norm.ppf(0.95)
    assert np.mean(r <= z * fitted.residual_sd(0.9)) == pytest.approx(0.9, abs=0.1)


def test_parameter_table_matches_params(fitted):
    table = fitted.parameter_table()
    d = fitted.params.to_dict()
    rows = {r["name"]: r for r in table}
    assert rows["alpha_s[intra]"]["value"] == pytest.approx(d["alpha_s"][0])
    assert rows["flops_per_s"]["unit"] == "FLOP/s"
    c = d["collectives"].index("all_gather")
    want = d["beta_s_per_byte"][0] * d["regime_beta_factor"][c][0][0]
    assert rows["regime_beta_s_per_byte[all_gather,intra,0]"]["value"] == pytest.approx(want)
    for r in table:
        assert r["low"] <= r["value"] <= r["high"], r["name"]
        assert set(r) == {"name", "value", "unit", "low", "high", "identified", "at_prior"}
    assert rows["regime_beta_s_per_byte[all_gather,intra,0]"]["identified"]
    assert not rows["beta_s_per_byte[inter]"]["identified"]


def test_a_preset_counts_compute_uncertainty_once_for_a_cnn():
    """A preset's flops_per_s is already a CNN's rate: conv_efficiency stays at 1 with no
    spread of its own (else a CNN's interval counted the compute spread twice: ResNet-50 on
    A100 presets went from 9.3–763 ms to 3.8 ms–1.9 s), and nothing reads as identified."""
    prof = Profile.from_preset("ib-hdr-200g,nvlink-a100", "a100", model_kind="cnn")
    i = prof.leaf_names.index("log_conv_efficiency")
    j = prof.leaf_names.index("log_flops")
    assert float(prof.params.conv_efficiency) == 1.0
    assert prof.covariance[i, i] <= 1e-6 < prof.covariance[j, j]
    assert not any(prof.identified.values())


def test_a_profile_written_with_an_absolute_node_cap_reads_the_same(fitted, tmp_path):
    """Profiles written before the node cap became a ratio to β name the leaf
    ``log_node_beta`` (log β_node); loading one translates its covariance exactly
    (A Σ Aᵀ with the ratio = log β_node − log β), so every interval is unchanged."""
    doc = json.loads(fitted.save(tmp_path / "new.json").read_text())
    names = doc["covariance"]["leaves"]
    m = np.asarray(doc["covariance"]["matrix"])
    # the old file's θ: log β_node = ratio + log β (the inverse of the load's map)
    B = np.eye(len(names))
    for i, n in enumerate(names):
        if n.startswith("log_node_ratio["):
            B[i, names.index("log_beta" + n[len("log_node_ratio") :])] = 1.0
    doc["covariance"] = {
        "leaves": [n.replace("log_node_ratio[", "log_node_beta[") for n in names],
        "matrix": (B @ m @ B.T).tolist(),
    }
    old = tmp_path / "old.json"
    old.write_text(json.dumps(doc))
    back = Profile.load(old)
    assert back.leaf_names == fitted.leaf_names
    np.testing.assert_allclose(back.covariance, fitted.covariance, rtol=1e-9, atol=1e-14)
    fn = lambda p: collective_time(p, "all_to_all", jnp.asarray([1e3, 1e6]), 8, 4)  # noqa: E731
    for a, b in zip(back.interval(fn), fitted.interval(fn), strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-8)


def test_step_records_given_as_a_profile_point_to_calibrate_steps(tmp_path):
    """validate's step records given as --profile name the fit that takes them
    (`calibrate … --steps FILE`), not a bare `calibrate FILE`, which refuses step
    records (a new user's trial followed that advice into a dead end)."""
    rec = {"schema": 1, "kind": "step", "architecture": "ring", "workers": 2}
    path = tmp_path / "validation.jsonl"
    path.write_text(json.dumps(rec) + "\n" + json.dumps(rec) + "\n")
    with pytest.raises(InputFileError) as exc:
        Profile.load(path)
    assert f"--steps {path} -o profile.json" in str(exc.value)
    assert f"'ddltune calibrate {path} -o" not in str(exc.value)


def test_a_level_no_record_reached_predicts_its_preset_link_with_three_regimes():
    """Fitted with 3 regimes on one node, the inter-node level keeps its prior: a 1 GiB
    ring all-reduce across 32 nodes then runs at the preset's link rate, as the plain
    preset says (the prior's large-message regime at ×0.5 made it twice that: busbw
    1.75 GB/s on a 10 GbE prior, in a new user's trial)."""
    truth = preset("ethernet-10g", "cpu").scaled(alpha=1.5, beta=0.6)
    recs = [
        {**BASE, "kind": "collective", "collective": "all_reduce", "message_bytes": 2**k,
         "num_ranks": 2, "ranks_per_node": 2,
         "time_s": {"p10": float(collective_time(truth, "all_reduce", 2**k, 2, 2))}}
        for k in range(10, 25, 2)
    ]  # fmt: skip
    prof = calibrate(recs, n_regimes=3)
    assert prof.params.n_regimes == 3
    S, n, g = 2.0**30, 64, 2
    fitted = float(collective_time(prof.params, "all_reduce", S, n, g))
    plain = float(collective_time(preset("ethernet-10g", "cpu"), "all_reduce", S, n, g))
    assert fitted == pytest.approx(plain, rel=0.05)
