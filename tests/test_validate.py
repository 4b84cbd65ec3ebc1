"""ddltune validate: metrics, prediction of step records, the CLI, and a short real run.

Physics checked: the rank agreement equals scipy's Kendall τ when every pair
counts and ignores pairs within their spread; regret is the closed form;
records whose measured times are the predictions times known factors give
exactly those errors back; without overlap the ring can only be slower, and
architectures that never overlap are unchanged; an end-to-end run on real
processes writes valid step records that re-score to the same result.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

from calibration import read_records
from costmodel import get_workload, iteration_time, preset
from tuner.cli import main
from tuner.validation import model_name, model_workload
from tuner.validation._validate import (
    compare_steps,
    load_params,
    predict_records,
    rank_agreement,
    regret,
)

SPEC = {"model": "mlp", "in": 64, "width": 128, "depth": 2, "classes": 10, "batch_size": 16}
TINY = {"model": "mlp", "in": 8, "width": 16, "depth": 1, "classes": 3, "batch_size": 4}


def _rec(arch, workers, bucket, t, *, servers=0, colocated=False, iqr=0.0, spec=SPEC):
    procs = workers + (servers if arch == "ps" and not colocated else 0)
    return {
        "schema": 1,
        "kind": "step",
        "architecture": arch,
        "servers": servers,
        "colocated": colocated,
        "workers": workers,
        "ranks_per_node": procs,
        "bucket_bytes": bucket,
        "model": model_name(spec),
        "model_spec": spec,
        "batch_size": spec["batch_size"],
        "time_s": {"p10": t, "median": t * 1.1, "iqr": iqr},
        "samples_s": [t],
        "backend": "cpu",
        "device_kind": "cpu",
        "versions": {},
        "host_fingerprint": "test",
        "timestamp": "2026-01-01T00:00:00Z",
        "source": "test",
    }


def _grid():
    recs = []
    for n in (2, 3, 4):
        for b in (0, 1 << 16, 1 << 24):
            recs.append(_rec("ring", n, b, 1.0))
            recs.append(_rec("p2p", n, b, 1.0))
            recs.append(_rec("ps", n, b, 1.0, servers=1))
    return recs


PARAMS = preset("ethernet-10g", "cpu")
BASE = 2e-3


# --------------------------------------------------------------------------- metrics


def test_rank_agreement_is_kendall_tau_when_every_pair_counts():
    rng = np.random.default_rng(0)
    for _ in range(5):
        m, p = rng.random(12), rng.random(12)
        tau, used, total = rank_agreement(m, p, np.zeros(12))
        assert (used, total) == (66, 66)
        assert tau == pytest.approx(kendalltau(m, p).statistic, abs=1e-12)


def test_rank_agreement_ignores_pairs_within_their_spread():
    m = np.array([1.0, 1.02, 2.0, 3.0])
    s = np.array([0.05, 0.05, 0.05, 0.05])
    # The prediction swaps the two indistinguishable ones: that pair must not count.
    p = np.array([1.5, 1.4, 2.5, 3.5])
    tau, used, total = rank_agreement(m, p, s)
    assert (tau, used, total) == (1.0, 5, 6)
    # A spread larger than every difference leaves nothing to rank.
    tau, used, _ = rank_agreement(m, p, np.full(4, 10.0))
    assert np.isnan(tau) and used == 0
    with pytest.raises(ValueError, match="equal lengths"):
        rank_agreement([1.0], [1.0, 2.0], [0.0])


def test_regret_closed_form():
    assert regret([3.0, 2.0, 4.0], [1.0, 2.0, 3.0]) == (0.5, 0, 1)  # picks 3.0, best 2.0
    assert regret([3.0, 2.0], [2.0, 1.0])[0] == 0.0
    with pytest.raises(ValueError):
        regret([], [])


# --------------------------------------------------------------------------- prediction


def test_predict_records_matches_iteration_time():
    recs = [_rec("ring", 3, 1 << 16, 1.0), _rec("ps", 2, 0, 1.0, servers=2)]
    got = predict_records(PARAMS, recs, BASE, overlap=True)
    w = model_workload(SPEC, step_time_s=BASE)
    want_ring = iteration_time(PARAMS, w, "ring", 3, ranks_per_node=3, bucket_bytes=1 << 16)
    want_ps = iteration_time(PARAMS, w, "ps", 2, ranks_per_node=4, servers=2, bucket_bytes=0)
    np.testing.assert_allclose(got, [float(want_ring.iteration_s), float(want_ps.iteration_s)])


def test_a_records_sync_adds_the_models_small_all_reduces_to_prediction_and_fit():
    """A step record's ``sync`` (the harness's all-reduces before its swaps) adds
    count × the model's all-reduce of that size to the prediction, the same in
    ``predict_records`` and in the step fit's ``calibration.step_time``; a record
    without it is unchanged; a malformed one is refused, naming the field."""
    from calibration import step_record_run, step_time, sync_time, validate_record
    from costmodel import collective_time

    plain = _rec("p2p", 2, 1 << 24, 1.0)
    sync = {"allreduces": 4, "message_bytes": 64, "num_ranks": 2, "ranks_per_node": 1}
    synced = {**plain, "sync": sync}
    validate_record(synced)
    want = 4 * float(collective_time(PARAMS, "all_reduce", 64.0, 2.0, 1.0))
    assert want > 0
    np.testing.assert_allclose(sync_time(PARAMS, [None, sync]), [0.0, want])
    a, b = predict_records(PARAMS, [plain, synced], BASE, overlap=False)
    np.testing.assert_allclose(b - a, want, rtol=1e-9)
    w = model_workload(SPEC, step_time_s=BASE)
    runs = [step_record_run(r) for r in (plain, synced)]
    fa, fb = step_time(PARAMS, w, runs, overlap=False)
    np.testing.assert_allclose([fa, fb], [a, b], rtol=1e-9)
    for bad in ({"allreduces": 0, "message_bytes": 64, "num_ranks": 2}, {"allreduces": 2}, 3):
        with pytest.raises(ValueError, match="'sync' must be"):
            validate_record({**plain, "sync": bad})


def test_no_overlap_is_compute_plus_all_communication():
    # Without overlap the ring's iteration is the plain sum of its parts
    # (forward + backward + every bucket's all-reduce + update + overhead);
    # architectures that never overlap are unchanged.
    recs = _grid()
    with_ov = predict_records(PARAMS, recs, BASE, overlap=True)
    without = predict_records(PARAMS, recs, BASE, overlap=False)
    w = model_workload(SPEC, step_time_s=BASE)
    for r, a, b in zip(recs, with_ov, without, strict=True):
        if r["architecture"] == "ring":
            bd = iteration_time(
                PARAMS, w, "ring", r["workers"], ranks_per_node=r["workers"],
                bucket_bytes=r["bucket_bytes"],
            )  # fmt: skip
            parts = sum(
                float(getattr(bd, f))
                for f in ("forward_s", "backward_s", "communication_s", "update_s", "overhead_s")
            )
            assert b == pytest.approx(parts, rel=1e-12)
        else:
            assert b == pytest.approx(a, rel=1e-12)


def test_compare_recovers_known_errors():
    recs = _grid()
    pred = predict_records(PARAMS, recs, BASE, overlap=False)
    factors = np.linspace(0.8, 1.25, len(recs))  # measured = predicted × factor
    for r, p, f in zip(recs, pred, factors, strict=True):
        r["time_s"]["p10"] = float(p * f)
    base = _rec("ring", 1, 0, BASE)
    res = compare_steps(PARAMS, [base] + recs)  # cpu: p10, no overlap
    assert res.statistic == "p10" and res.overlap is False
    errs = np.array([r.error for r in res.rows])
    np.testing.assert_allclose(errs, 1 / factors - 1, rtol=1e-9)
    assert res.mape == pytest.approx(np.mean(np.abs(1 / factors - 1)), rel=1e-9)
    assert set(res.mape_by_workers) == {2, 3, 4}
    # Exact predictions: perfect rank agreement and no regret.
    for r, p in zip(recs, pred, strict=True):
        r["time_s"]["p10"] = float(p)
    exact = compare_steps(PARAMS, [base] + recs)
    assert exact.mape == pytest.approx(0.0, abs=1e-12)
    assert exact.regret == 0.0 and exact.kendall_tau == 1.0
    doc = exact.to_dict()
    assert set(doc) >= {"rows", "mape", "kendall_tau", "regret"}
    assert set(doc["rows"][0]) >= {
        "architecture",
        "servers",
        "workers",
        "bucket_bytes",
        "measured_s",
        "predicted_s",
    }


def test_compare_errors():
    with pytest.raises(ValueError, match="single-worker step"):
        compare_steps(PARAMS, [_rec("ring", 2, 0, 1.0)])
    with pytest.raises(ValueError, match="workers ≥ 2"):
        compare_steps(PARAMS, [_rec("ring", 1, 0, 1.0)])
    other = dict(SPEC, width=7)
    with pytest.raises(ValueError, match="several models"):
        compare_steps(PARAMS, [_rec("ring", 1, 0, 1.0), _rec("ring", 2, 0, 1.0, spec=other)])


def test_load_params(tmp_path):
    assert load_params(PARAMS) is PARAMS
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(PARAMS.to_dict()))
    np.testing.assert_allclose(load_params(bare).alpha_s, PARAMS.alpha_s)
    bad = tmp_path / "bad.json"
    bad.write_text('{"kind": "something else"}')
    from costmodel import InputFileError

    with pytest.raises(InputFileError, match="bad.json"):
        load_params(bad)
    with pytest.raises(FileNotFoundError):
        load_params(tmp_path / "missing.json")
    with pytest.raises(TypeError, match="profile must be"):
        load_params(3)


def test_load_params_from_a_profile(tmp_path):
    from calibration import Profile  # missing: an error, not a skip

    prof = Profile.from_preset("ethernet-10g", "cpu")
    path = tmp_path / "profile.json"
    prof.save(path)
    np.testing.assert_allclose(load_params(path).beta_s_per_byte, PARAMS.beta_s_per_byte)
    assert load_params(prof) is prof.params
    # A profile brings its 90% prediction interval: it brackets every prediction,
    # and the coverage counts the measured times inside it.
    recs = [r for r in _grid() if r["architecture"] == "ring"][:4]  # one interval program
    pred = predict_records(prof.params, recs, BASE, overlap=False)
    for r, p, f in zip(recs, pred, (0.5, 1.0, 1.0, 3.0), strict=True):
        r["time_s"]["p10"] = float(p * f)
    res = compare_steps(path, [_rec("ring", 1, 0, BASE)] + recs)
    for r in res.rows:
        assert r.interval_low_s <= r.predicted_s <= r.interval_high_s
    inside = [r.interval_low_s <= r.measured_s <= r.interval_high_s for r in res.rows]
    assert res.interval_coverage == pytest.approx(np.mean(inside))
    assert 0 < res.interval_coverage < 1  # some measured times in, some out: a real count
    half = [(r.interval_high_s - r.interval_low_s) / 2 / r.predicted_s for r in res.rows]
    assert res.interval_half_width == pytest.approx(np.median(half))
    assert res.to_dict()["interval_half_width"] == res.interval_half_width


# --------------------------------------------------------------------------- CLI


def _steps_and_profile(tmp_path):
    """The grid's step records (with the single-worker step) and bare parameters, as files."""
    recs = [_rec("ring", 1, 0, BASE)] + _grid()
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PARAMS.to_dict()))
    return recs, path, prof


def test_cli_rescore_from_file(tmp_path, capsys):
    recs, path, prof = _steps_and_profile(tmp_path)
    assert main(["validate", "--profile", str(prof), "--from", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["rows"]) == 27 and 0 <= doc["mape"]
    assert main(["validate", "--profile", str(prof), "--from", str(path)]) == 0
    out = capsys.readouterr().out
    assert "MAPE" in out and "Kendall tau" in out and "regret" in out


def test_cli_usage_errors(tmp_path, capsys):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PARAMS.to_dict()))
    assert main(["validate", "--workers", "2"]) == 2  # --profile is required
    assert main(["validate", "--profile", str(prof), "--workers", "1"]) == 2
    assert "--workers must be ≥ 2" in capsys.readouterr().err
    assert main(["validate", "--profile", str(prof), "--size", "width"]) == 2
    assert main(["validate", "--profile", str(tmp_path / "nope.json"), "--from", "x"]) == 1


# --------------------------------------------------------------------------- real run


@pytest.mark.multiprocess
@pytest.mark.timeout(300)
def test_validate_end_to_end(tmp_path, capsys):
    prof = tmp_path / "p.json"
    prof.write_text(json.dumps(PARAMS.to_dict()))
    out = tmp_path / "steps.jsonl"
    args = [
        "validate", "--profile", str(prof), "--workers", "2", "--model", "mlp",
        "--size", "in=8,width=16,depth=1,classes=3,batch_size=4",
        "--arch", "ps,p2p,ring", "--colocated", "--bucket-bytes", "0,16M",
        "--steps", "3", "--warmup-steps", "1", "--repeats", "1", "--measurements", str(out), "--json",
        "--no-progress",
    ]  # fmt: skip
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["rows"]
    assert len(rows) == 6
    assert {(r["architecture"], r["bucket_bytes"]) for r in rows} == {
        (a, b) for a in ("ps", "p2p", "ring") for b in (0, 16 * 2**20)
    }
    for r in rows:
        assert r["measured_s"] > 0 and r["predicted_s"] > 0 and r["workers"] == 2
    assert doc["mape"] == pytest.approx(
        np.mean([abs(r["predicted_s"] / r["measured_s"] - 1) for r in rows])
    )
    # Every step was recorded (baseline included) and re-scores to the same result.
    recs = read_records(out)
    assert len(recs) == 7 and sum(r["workers"] == 1 for r in recs) == 1
    again = compare_steps(prof, recs).to_dict()
    assert again["mape"] == pytest.approx(doc["mape"])
    # No worker left behind.
    me = os.getpid()
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as fh:
                    fields = fh.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            assert not (int(fields[1]) == me and fields[0] != "Z"), f"process {d} left behind"
    # An existing measurement file is not overwritten without --overwrite.
    assert main(args[:-2] + ["--no-progress"]) == 1
    assert "already exists" in capsys.readouterr().err


# --------------------------------------------------------------------------- published scaling


SCALING = Path(__file__).resolve().parent / "data" / "scaling"
K80 = SCALING / "scaling_tf_cnn_benchmarks_aws-k80-distributed-ps_1-64gpus.csv"
#: Published model names → the model zoo.
ZOO = {"InceptionV3": "inception_v3", "ResNet-50": "resnet50", "ResNet-152": "resnet152"}


def _scaling_table(path: Path) -> list[dict]:
    """The rows of a published scaling CSV ('#' lines are its header notes)."""
    with open(path, encoding="utf-8") as fh:
        lines = [ln for ln in fh if ln.strip() and not ln.lstrip().startswith("#")]
    return list(csv.DictReader(lines))


@pytest.mark.slow
def test_published_k80_scaling_is_explained_by_communication():
    # Real data (tf_cnn_benchmarks, 8 to 64 K80 GPUs on EC2, 8 per instance,
    # distributed_replicated = hybrid: all-reduce inside an instance, one parameter
    # server per instance across them). From the published 1-GPU throughput and
    # datasheet presets alone (p2.8xlarge: 10 GbE, PCIe 3.0, K80), no fitting:
    rows = _scaling_table(K80)
    base = {
        (r["model"], r["batch_size_per_gpu"]): float(r["images_per_sec"])
        for r in rows
        if r["gpus"] == "1"
    }
    params = preset("ethernet-10g,pcie3-x16", "k80")
    errors, linear_errors = [], []
    for (model, batch), ips1 in base.items():
        group = sorted(
            (int(r["gpus"]), float(r["images_per_sec"]))
            for r in rows
            if (r["model"], r["batch_size_per_gpu"]) == (model, batch) and r["gpus"] != "1"
        )
        n = np.array([g for g, _ in group], dtype=np.float64)
        b = int(batch)
        w = get_workload(ZOO[model], b).with_step_time(b / ips1)
        bd = iteration_time(
            params,
            w,
            "hybrid",
            n,
            ranks_per_node=np.minimum(n, 8),
            servers=np.maximum(n // 8, 1),
            bucket_bytes=0,  # TensorFlow then exchanged every variable on its own
        )
        predicted = np.asarray(bd.throughput_samples_per_s)
        linear = n * ips1
        published = np.array([y for _, y in group])
        # communication only ever adds time: never better than linear scaling ...
        assert np.all(predicted <= linear * (1 + 1e-9)), model
        # ... and costs more the more GPUs share it: efficiency falls with the count
        assert np.all(np.diff(predicted / linear) < 0), model
        errors += list(np.abs(predicted / published - 1))
        linear_errors += list(np.abs(linear / published - 1))
    assert len(errors) == 20  # 5 (model, batch) series × 8, 16, 32, 64 GPUs
    # The modelled communication explains most of the published loss of
    # efficiency: within the stated 10% band, and under half linear scaling's error.
    mape, linear_mape = float(np.mean(errors)), float(np.mean(linear_errors))
    assert mape < 0.10 and mape < 0.5 * linear_mape, (mape, linear_mape)


def test_published_tables_parse():
    for f in sorted(SCALING.glob("*.csv")):
        rows = _scaling_table(f)
        assert rows and all("images_per_sec" in r for r in rows), f
        assert any(r["gpus"] == "1" for r in rows), f  # the base every prediction scales from
    dgx = _scaling_table(SCALING / "scaling_tf_cnn_benchmarks_dgx1-p100_1-8gpus.csv")
    assert sum(r["images_per_sec"].strip().upper() == "N/A" for r in dgx) == 1  # AlexNet, 8 GPUs


def test_warns_about_what_the_profile_never_measured():
    from types import SimpleNamespace

    from tuner.validation._validate import _coverage_warnings

    recs = _grid()  # ps with a dedicated server: up to 5 processes; SPEC's gradient ≈ 83 KiB
    grad = model_workload(SPEC).total_param_bytes
    covered = SimpleNamespace(measured_ranges={"num_ranks": [2, 5], "message_bytes": [1024, grad]})
    assert _coverage_warnings(covered, recs) == ()
    assert _coverage_warnings(PARAMS, recs) == ()  # bare parameters: nothing to compare with
    short = SimpleNamespace(measured_ranges={"num_ranks": [2, 4], "message_bytes": [1024, 4096]})
    (ranks, sizes) = _coverage_warnings(short, recs)
    assert "2–4 ranks" in ranks and "run 5 processes" in ranks
    assert "up to 4 KiB" in sizes


def test_a_profile_file_is_loaded_whole_or_refused(tmp_path):
    from calibration import Profile
    from costmodel import InputFileError

    path = tmp_path / "profile.json"
    Profile.from_preset("ethernet-10g", "cpu").save(path)
    doc = json.loads(path.read_text())
    doc["schema"] = 99  # a newer ddltune's profile: refused, not read as bare parameters
    future = tmp_path / "future.json"
    future.write_text(json.dumps(doc))
    with pytest.raises(InputFileError, match="schema version 99"):
        load_params(future)
    meas = tmp_path / "m.jsonl"
    meas.write_text("".join(json.dumps(r) + "\n" for r in _grid()[:2]))
    with pytest.raises(InputFileError, match=r"m.jsonl:1: this is a measurements file"):
        load_params(meas)


_STEP_ONLY = ("architecture", "servers", "colocated", "workers", "bucket_bytes", "model",
              "model_spec", "batch_size")  # fmt: skip


def test_cli_from_selects_rows_and_names_a_file_without_steps(tmp_path, capsys):
    recs, path, prof = _steps_and_profile(tmp_path)
    args = ["validate", "--profile", str(prof), "--from", str(path), "--json"]
    assert main(args + ["--workers", "2,4", "--arch", "ring,ps"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert len(rows) == 12
    assert {(r["workers"], r["architecture"]) for r in rows} == {
        (n, a) for n in (2, 4) for a in ("ring", "ps")
    }
    assert main(args + ["--arch", "foo"]) == 2
    assert "unknown architecture 'foo'" in capsys.readouterr().err
    # a selection that leaves nothing says what the file has (it said "no step record
    # with workers ≥ 2" of a file of 27)
    assert main(args + ["--workers", "7"]) == 2
    err = capsys.readouterr().err
    assert "--workers 7 selects none of the 27 step records" in err, err
    assert "(workers 2, 3, 4; architectures p2p, ps, ring)" in err, err
    # a file to write is refused, not silently skipped
    out = tmp_path / "new.jsonl"
    assert main(args + ["--measurements", str(out)]) == 2
    assert "--measurements belongs to training" in capsys.readouterr().err
    assert not out.exists()
    other = tmp_path / "coll.jsonl"
    coll = {k: v for k, v in recs[1].items() if k not in _STEP_ONLY}
    coll.update(kind="collective", collective="all_reduce", message_bytes=1024, num_ranks=2,
                ranks_per_node=2, dtype="float32", wrong=0, in_place=False)  # fmt: skip
    other.write_text(json.dumps(coll) + "\n")
    assert main(["validate", "--profile", str(prof), "--from", str(other)]) == 2
    assert "no training-step records" in capsys.readouterr().err


def test_warns_when_the_profile_is_unreliable():
    from types import SimpleNamespace

    from tuner.validation._validate import _coverage_warnings

    prof = SimpleNamespace(reliable=False, heldout_p90=0.6, measured_ranges={})
    (w,) = _coverage_warnings(prof, _grid())
    assert "UNRELIABLE" in w and "60.0%" in w


def test_coverage_counts_processes_not_ranks_per_node_on_an_emulated_cluster():
    from types import SimpleNamespace

    from tuner.validation._validate import _coverage_warnings

    # One rank per emulated node: ranks_per_node is 1, the run has workers + servers processes.
    recs = [dict(r, processes=r["ranks_per_node"], ranks_per_node=1) for r in _grid()]
    grad = model_workload(SPEC).total_param_bytes
    covered = SimpleNamespace(measured_ranges={"num_ranks": [2, 5], "message_bytes": [1024, grad]})
    assert _coverage_warnings(covered, recs) == ()
    short = SimpleNamespace(measured_ranges={"num_ranks": [2, 4], "message_bytes": [1024, grad]})
    (ranks,) = _coverage_warnings(short, recs)
    assert "run 5 processes" in ranks and "run 1 " not in ranks


def test_cross_fitted_steps_predict_each_worker_count_out_of_sample():
    # Truth: communication in a step 1.6x its microbenchmark. A preset profile
    # (step_comm 1, prior sd ln 3) predicts 2-4 workers too short with a band
    # several times the step wide; fitted on the other worker counts, each count
    # is predicted close to the truth with a band of a few percent, and its own
    # steps do not enter its prediction.
    from calibration import STEP_TERMS, Profile

    prof = Profile.from_preset("ethernet-10g", "cpu")
    # a calibrated link: every leaf known to 0.1% but the step terms at their prior
    var = np.full(prof.covariance.shape[0], 1e-6)
    for f in STEP_TERMS:
        var[prof._layout.slices[f]] = np.diag(prof.covariance)[prof._layout.slices[f]]
    prof = Profile(params=prof.params, covariance=np.diag(var), leaf_names=prof.leaf_names,
                   prior=prof.prior)  # fmt: skip
    truth = prof.params.scaled(step_comm=1.6)
    recs = _grid()
    for r, t in zip(recs, predict_records(truth, recs, BASE, overlap=False), strict=True):
        r["time_s"]["p10"] = float(t)
    base = _rec("ring", 1, 0, BASE)
    plain = compare_steps(prof, [base] + recs, step_fit="profile")
    cross = compare_steps(prof, [base] + recs)  # auto: a profile without step terms
    assert plain.step_fit == "profile" and cross.step_fit == "cross"
    assert plain.mape > 0.08 and cross.mape < 0.03
    width = [(r.interval_high_s - r.interval_low_s) / r.predicted_s for r in cross.rows]
    plain_width = [(r.interval_high_s - r.interval_low_s) / r.predicted_s for r in plain.rows]
    assert max(width) < 0.5 and np.median(width) * 3 < np.median(plain_width)
    assert cross.to_dict()["step_fit"] == "cross"
    # leave one count out: doubling the 4-worker steps moves the others' predictions,
    # not their own
    slow = [dict(r, time_s={**r["time_s"], "p10": r["time_s"]["p10"] * (2 if r["workers"] == 4
                                                                          else 1)})
            for r in recs]  # fmt: skip
    moved = compare_steps(prof, [base] + slow)
    ratio = np.array([b.predicted_s / a.predicted_s for a, b in zip(cross.rows, moved.rows,
                                                                    strict=True)])  # fmt: skip
    four = np.array([r.workers == 4 for r in cross.rows])
    np.testing.assert_allclose(ratio[four], 1.0, rtol=1e-9)
    assert ratio[~four].max() > 1.2
    with pytest.raises(ValueError, match="step_fit"):
        compare_steps(prof, [base] + recs, step_fit="sometimes")
    with pytest.raises(ValueError, match="two or more worker"):
        compare_steps(prof, [base] + [r for r in recs if r["workers"] == 2], step_fit="cross")
    # each result says how its step terms were set, and what that makes of the scores
    assert "each worker count is predicted out of sample" in cross.step_fit_note
    one = compare_steps(prof, [base] + [r for r in recs if r["workers"] == 2])
    assert one.step_fit == "profile" and "one worker count (2)" in one.step_fit_note
    assert "keep their prior" in one.step_fit_note
    from calibration import fit_steps, step_record_run

    runs = [step_record_run(r, r["time_s"]["p10"], line=i) for i, r in enumerate([base, *recs])]
    fitted = fit_steps(runs, model_workload(SPEC, step_time_s=BASE), prof, overlap=False)
    own = compare_steps(fitted, [base] + recs)  # auto: the profile has step terms of its own
    assert own.step_fit == "profile" and "in-sample, not a validation" in own.step_fit_note
    assert own.to_dict()["step_fit_note"] == own.step_fit_note
    # fit_step_records (what `ddltune run --validate` fits before it recommends) is that
    # fit, on every record at once, and finds the truth's factor
    from tuner.validation import fit_step_records

    folded = fit_step_records(prof, [base] + recs)
    np.testing.assert_allclose(folded.params.flat(), fitted.params.flat(), rtol=1e-12)
    assert folded.params.step_comm_factor == pytest.approx(1.6, rel=0.05)  # prior: 1
    # chained (run --validate: the MLP's fit is the CNN's prior), the terms are reported
    # against the profile the chain started from: a term the first fit pinned stays
    # identified, where against the narrowed prior it would read "not identified"
    once = folded.fit["steps"]["terms"]["log_step_comm"]
    assert once["identified"]
    again = fit_step_records(folded, [base] + recs, reference=prof).fit["steps"]["terms"]
    assert again["log_step_comm"]["prior_sd"] == once["prior_sd"]
    assert again["log_step_comm"]["identified"]
    narrow = fit_step_records(folded, [base] + recs).fit["steps"]["terms"]["log_step_comm"]
    assert narrow["prior_sd"] < 0.5 * once["prior_sd"] and not narrow["identified"]
    with pytest.raises(ValueError, match="single-worker step"):
        fit_step_records(prof, recs)
    with pytest.raises(ValueError, match="calibration.Profile"):
        fit_step_records(prof.params, [base] + recs)


def test_emulated_nodes_sharing_a_cpu_slow_the_steps_compute_by_their_count():
    """Issue 22: an emulated cluster of more nodes than CPUs pins node i to CPU i mod C,
    so a 3- or 4-worker step on 4 nodes of a 2-CPU machine runs two workers' compute on
    one core: the step waits for them (the CNN's 3- and 4-worker steps were 45–52% slower
    than predicted). Its compute is the single-worker step × ⌈⌈P / R⌉ / C⌉; real hosts,
    and emulated nodes with CPUs of their own, are not slowed."""
    from calibration import compute_contention, step_record_run

    emu = {"nodes": 4, "ranks_per_node": 1, "nodes_per_cpu": 2, "cpus": 2}

    def rec(workers, **kw):
        r = _rec("ring", workers, 0, 1.0)
        return dict(r, ranks_per_node=1, processes=workers, emulated=dict(emu, **kw))

    assert [compute_contention(rec(n)) for n in (1, 2, 3, 4)] == [1.0, 1.0, 2.0, 2.0]
    dedicated = dict(rec(2), processes=3)  # 2 workers and their server: 3 nodes
    assert compute_contention(dedicated) == 2.0
    assert compute_contention(rec(4, nodes_per_cpu=1, cpus=4)) == 1.0  # a CPU per node
    assert compute_contention(rec(6, nodes=6, nodes_per_cpu=3, cpus=2)) == 3.0
    # 2 ranks per node: 4 processes fill nodes 0 and 1, which have CPUs 0 and 1
    assert compute_contention(dict(rec(4, ranks_per_node=2), ranks_per_node=2)) == 1.0
    old = rec(4)
    del old["emulated"]["cpus"]  # records before 'cpus': ⌈nodes / nodes_per_cpu⌉
    assert compute_contention(old) == 2.0
    assert compute_contention(_rec("ring", 4, 0, 1.0)) == 1.0  # real hosts
    # the prediction adds (c − 1) × the single-worker step, and its communication is
    # that of the cores shared c-fold (ClusterParams.with_core_contention: the latency,
    # not the wire), in validate and in step fits alike
    from costmodel import ClusterParams

    p = ClusterParams.create(alpha_s=(5e-6, 200e-6), beta_s_per_byte=(1e-11, 1e-8))
    plain = [_rec("ring", n, 0, 1.0) for n in (3, 4)]
    shared = [rec(n) for n in (3, 4)]
    for r in plain:
        r["ranks_per_node"] = 1
    base = predict_records(p, plain, BASE, overlap=False)
    comm = predict_records(p.with_core_contention(2.0), plain, BASE, overlap=False) - base
    # c − 1 = 1 more of the cores' part (the step without latency, call overhead and
    # reductions is its wire and compute), none of the wire
    wire = predict_records(p.scaled(alpha=1e-9, call_overhead=1e-9, gamma=1e-9), plain, BASE,
                           overlap=False)  # fmt: skip
    assert np.all(comm > 0)
    np.testing.assert_allclose(comm, base - wire, rtol=1e-5)
    got = predict_records(p, shared, BASE, overlap=False) - base
    np.testing.assert_allclose(got, BASE + comm, rtol=1e-9)
    from calibration import step_time

    runs = [step_record_run(r, 1.0) for r in (*shared, *plain)]
    assert [r["compute_share"] for r in runs] == [2.0, 2.0, 1.0, 1.0]
    t = step_time(p.to_numpy(), model_workload(SPEC, step_time_s=BASE), runs, overlap=False)
    np.testing.assert_allclose(t[:2] - t[2:], BASE + comm, rtol=1e-9)


@pytest.mark.parametrize(
    ("emulated", "words"),
    [
        ("4x1", "emulated: expected the emulated cluster's object, got '4x1'"),
        ({"nodes": 4, "nodes_per_cpu": "two"}, "emulated.nodes_per_cpu: expected a whole number"),
        ({"nodes_per_cpu": 2}, "emulated.nodes: expected a whole number ≥ 1, got None"),
        ({"nodes": 4, "nodes_per_cpu": 2, "cpus": 0}, "emulated.cpus: expected a whole number"),
    ],
)
def test_cli_a_bad_emulated_provenance_names_file_line_and_field(tmp_path, capsys, emulated, words):
    """The contention a step record's emulated cluster implies is read from its
    provenance; a field that is not what ddltune writes is an error at its line, not
    a step silently predicted as on real hosts."""
    recs, path, prof = _steps_and_profile(tmp_path)
    recs[3]["emulated"] = emulated
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["validate", "--profile", str(prof), "--from", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"steps.jsonl:4: {words}" in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"ranks_per_node": 0}, "ranks_per_node: expected a positive integer, got '0'"),
        ({"architecture": "ps", "colocated": True, "servers": 5, "workers": 2},
         "servers: 5 colocated servers need as many workers, got 2"),
        ({"architecture": "ring", "servers": 0, "processes": 2, "workers": 3},
         "processes: 2, but 3 workers run 3"),
        ({"architecture": "ps", "servers": 1, "workers": 2, "processes": 2},
         "processes: 2, but 2 workers and 1 dedicated server run 3"),
        ({"same_buckets_at": [-1]},
         "'same_buckets_at' must be a list of integers in [0, 2^50] B, got [-1]"),
        ({"same_buckets_at": [True]},  # as the file spells it, not Python's True
         "'same_buckets_at' must be a list of integers in [0, 2^50] B, got [true]"),
    ],
)  # fmt: skip
def test_cli_an_inconsistent_step_record_names_file_line_and_field(tmp_path, capsys, change, words):
    """Found by a new user's trial: a record's ranks_per_node of 0 was reported as a bad
    '--ranks-per-node' (an option validate does not have), and a colocated ps record
    with more servers than workers, or a 'processes' that disagreed with its workers,
    was scored silently (the second changed every other row's prediction)."""
    recs, path, prof = _steps_and_profile(tmp_path)
    recs[3].update(change)
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    assert main(["validate", "--profile", str(prof), "--from", str(path)]) == 1
    err = capsys.readouterr().err
    assert f"steps.jsonl:4: {words}" in err, err


# --------------------------------------------------------------------------- same programs

CNN_CAPS = (0, 3 << 19, 16 << 20)  # the default validation caps


def test_caps_that_make_the_same_buckets_are_one_program():
    """The CNN's gradients (about 77 KiB) make one bucket under 1.5 MiB and under 16 MiB:
    one program; per tensor is another; servers, their place and the P2P exchange are part
    of the program; the MLP's 3.6 MiB make different buckets under the two caps."""
    from tuner.validation import StepConfig, program_key, same_programs

    grad = {m: 4 * model_workload(m).total_params for m in ("cnn", "mlp")}
    assert grad["cnn"] < 3 << 19 < grad["mlp"] < 16 << 20
    key = program_key
    assert key(StepConfig("ring", 3 << 19), "cnn") == key(StepConfig("ring", 16 << 20), "cnn")
    assert key(StepConfig("ring", 3 << 19), "mlp") != key(StepConfig("ring", 16 << 20), "mlp")
    assert key(StepConfig("ring", 0), "cnn") != key(StepConfig("ring", 3 << 19), "cnn")
    big = 16 << 20
    for a, b in (
        (StepConfig("ps", big, 1, True), StepConfig("ps", big, 2, True)),
        (StepConfig("ps", big, 1, True), StepConfig("ps", big, 1, False)),
        (StepConfig("p2p", big), StepConfig("p2p", big, p2p_exchange="reduce_scatter")),
        (StepConfig("ring", big), StepConfig("hierarchical", big)),
    ):
        assert key(a, "cnn") != key(b, "cnn")
    configs = [StepConfig("ring", b) for b in CNN_CAPS] + [StepConfig("p2p", 3 << 19)]
    kept = same_programs(configs, "cnn")
    assert [(c.architecture, c.bucket_bytes, o) for c, o in kept] == [
        ("ring", 0, ()),
        ("ring", 16 << 20, (3 << 19,)),  # the largest cap stands for both, where the first was
        ("p2p", 3 << 19, ()),
    ]
    assert [o for _, o in same_programs(configs, "mlp")] == [()] * 4


def _fake_launch(launched):
    """A training launch that records its configurations and answers as rank 0 does."""

    from calibration import provenance

    def launch(config, nproc, on_message, *args, **kwargs):
        launched.append((config["workers"], [(c["architecture"], c["bucket_bytes"]) for c in
                                             config["configs"]]))  # fmt: skip
        for i, c in enumerate(config["configs"]):
            on_message(0, {
                "type": "step", "config_index": i, "config": c, "workers": config["workers"],
                "processes": nproc, "ranks_per_node": nproc, "batch_size": 32, "num_buckets": 1,
                "samples_s": [0.01 * (i + 1)] * 3, "compile_s": 0.1, "warmup_steps": 1,
                "provenance": provenance("test"),
            })  # fmt: skip

    return launch


def test_configurations_of_one_program_are_measured_once(tmp_path, monkeypatch):
    """measure_configurations launches the CNN's ring once for 1.5 MiB and 16 MiB (at 16
    MiB, whose record names 1.5 MiB) and the MLP's twice; every record reaches the file."""
    from calibration import RecordWriter
    from tuner.validation import _harness, measure_configurations, seed_configurations

    shared, _ = seed_configurations(CNN_CAPS)
    for model, rings in (("cnn", [0, 16 << 20]), ("mlp", [0, 3 << 19, 16 << 20])):
        launched: list = []
        monkeypatch.setattr(_harness, "_launch_training", _fake_launch(launched))
        path = tmp_path / f"{model}.jsonl"
        with RecordWriter(path, "new") as w:
            base, got = measure_configurations(model, [2, 3], shared, writer=w)
        multi = [cs for n, cs in launched if n > 1]
        assert len(multi) == 2
        for cs in multi:
            assert [b for a, b in cs if a == "ring"] == rings
        for m in got:
            one_bucket = (
                model == "cnn" and m.config.architecture == "ring" and m.config.bucket_bytes
            )
            assert m.record.get("same_buckets_at") == ([3 << 19] if one_bucket else None)
        on_file = read_records(path)
        assert len(on_file) == len(got) + 1  # and the single-worker step
        assert [r.get("same_buckets_at") for r in on_file if r["workers"] > 1] == [
            m.record.get("same_buckets_at") for m in got
        ]


def test_records_of_one_program_are_one_row_with_their_samples_pooled():
    """Two caps of the CNN measured apart (files before the harness merged them) are one
    row: at the larger cap, its measured time the p10 of both measurements' samples, the
    other cap named; so the pick between identical programs is no longer scored as regret.
    Other worker counts, caps that differ and the per-tensor ring stay rows of their own."""
    from tuner.validation import pool_same_programs

    cnn = {"model": "cnn", "batch_size": 16}

    def rec(arch, n, cap, samples, **kw):
        r = _rec(arch, n, cap, min(samples), spec=cnn, **kw)
        r["samples_s"] = list(samples)
        return r

    a = rec("ring", 4, 3 << 19, [0.040, 0.041, 0.042])
    b = rec("ring", 4, 16 << 20, [0.032, 0.033, 0.034])
    recs = [
        rec("ring", 1, 0, [0.005]),
        a,
        rec("ring", 4, 0, [0.050, 0.051]),
        b,
        rec("ring", 2, 3 << 19, [0.020]),
        rec("ring", 2, 16 << 20, [0.021]),
    ]
    pooled = pool_same_programs(recs[1:])
    assert [(r["workers"], r["bucket_bytes"], r.get("same_buckets_at")) for r in pooled] == [
        (4, 16 << 20, [3 << 19]),
        (4, 0, None),
        (2, 16 << 20, [3 << 19]),
    ]
    assert sorted(pooled[0]["samples_s"]) == sorted(a["samples_s"] + b["samples_s"])
    assert pooled[0]["time_s"]["count"] == 6 and pooled[0]["repeats"] == 2
    assert a["bucket_bytes"] == 3 << 19 and "same_buckets_at" not in b  # inputs untouched
    res = compare_steps(PARAMS, recs)
    assert len(res.rows) == 3
    row = next(r for r in res.rows if r.workers == 4 and r.bucket_bytes)
    assert row.measured_s == pytest.approx(np.percentile(a["samples_s"] + b["samples_s"], 10))
    assert row.same_buckets_at == (3 << 19,)
    assert row.bucket_label == "16 MiB (= 1.5 MiB)"
    assert row.to_dict()["same_buckets_at"] == [3 << 19]
    # another emulated cluster is another program
    c = rec("ring", 4, 16 << 20, [0.03])
    c["emulated"] = {"nodes": 4}
    assert len(pool_same_programs([a, c])) == 2
