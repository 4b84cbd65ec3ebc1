"""Calibration on observed training steps (issue 23): the CSV, the fit, the CLI."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import equinox as eqx
import numpy as np
import pytest

from calibration import STEP_TERMS, Profile, fit_steps, read_steps_csv, step_time
from costmodel import PARAMETER_UNITS, InputFileError, get_workload
from tuner.cli import main

W = get_workload("resnet50", 64)


def _truth(base: Profile, flops_scale=0.6, overhead=0.03, interference=0.3, comm=1.0):
    p0 = base.params.to_numpy()
    return eqx.tree_at(
        lambda m: (m.log_flops, m.log_step_overhead, m.logit_interference, m.log_step_comm),
        p0,
        (
            p0.log_flops + math.log(flops_scale),
            np.float64(math.log(overhead)),
            np.float64(math.log(interference / (1 - interference))),
            np.float64(math.log(comm)),
        ),
    )


def _runs(truth, design, noise=0.01, seed=0, arch="ring"):
    runs = [
        {
            "workers": n,
            "ranks_per_node": 8,
            "batch_size": b,
            "architecture": arch,
            "servers": 1,
            "colocated": False,
            "bucket_bytes": 25.0 * 2**20,
            "file": "synthetic",
            "line": i + 1,
        }
        for i, (n, b) in enumerate(design)
    ]
    t = step_time(truth, W, runs)
    t = t * np.exp(noise * np.random.default_rng(seed).normal(size=t.shape))
    for r, x in zip(runs, t, strict=True):
        r["step_time_s"] = float(x)
    return runs


DESIGN = [(1, 16), (1, 32), (1, 64), (2, 64), (4, 64), (8, 64), (16, 64), (4, 16), (16, 16)]


@pytest.mark.parametrize("comm", [1.0, 1.8])
def test_round_trip_recovers_compute_overhead_and_in_step_comm_from_seeded_noisy_steps(comm):
    """Steps generated from known terms (1% noise) on 10 GbE: three batch sizes at one
    worker separate FLOP rate and overhead, the multi-worker rows set the in-step
    communication factor; they come back within 3%, 15% and 10%."""
    base = Profile.from_preset("ethernet-10g", "v100")
    truth = _truth(base, comm=comm)
    prof = fit_steps(_runs(truth, DESIGN), W, base)
    terms = prof.fit["steps"]["terms"]
    assert math.exp(terms["log_flops"]["value"]) == pytest.approx(
        float(truth.flops_per_s), rel=0.03
    )
    assert math.exp(terms["log_step_overhead"]["value"]) == pytest.approx(0.03, rel=0.15)
    assert math.exp(terms["log_step_comm"]["value"]) == pytest.approx(comm, rel=0.10)
    assert terms["log_flops"]["identified"] and terms["log_step_comm"]["identified"]
    # the profile predicts the runs it was fitted on to within the noise
    rows = prof.fit["steps"]["rows"]
    assert max(abs(r["fitted_s"] / r["measured_s"] - 1) for r in rows) < 0.05
    # and its parameters are the fitted ones (what predict/recommend read)
    got = step_time(
        prof.params.to_numpy(), W, [dict(r, step_time_s=1.0) for r in _runs(truth, DESIGN)]
    )
    np.testing.assert_allclose(got, [r["fitted_s"] for r in rows], rtol=1e-9)


def test_terms_the_runs_cannot_see_stay_exactly_at_the_prior():
    """One worker only (no communication): the backward slowdown under overlap does not enter
    the step, so it keeps its prior value and variance and is not identified; the base
    profile's other parameters and covariance are untouched."""
    base = Profile.from_preset("ethernet-10g", "v100")
    prof = fit_steps(_runs(_truth(base), [(1, 16), (1, 32), (1, 64)]), W, base)
    t = prof.fit["steps"]["terms"]["logit_interference"]
    assert t["value"] == t["prior"] and t["posterior_sd"] == pytest.approx(t["prior_sd"])
    assert not t["identified"]
    lay = prof._layout
    moved = np.concatenate([np.arange(lay.size)[lay.slices[f]] for f in STEP_TERMS])
    keep = np.setdiff1d(np.arange(lay.size), moved)
    np.testing.assert_array_equal(prof.params.flat()[keep], base.params.flat()[keep])
    np.testing.assert_array_equal(
        prof.covariance[np.ix_(keep, keep)], base.covariance[np.ix_(keep, keep)]
    )
    assert prof.measured_ranges["num_ranks"] == [1, 1]
    # single-worker steps exchange nothing: they measure no ranks per node
    assert not prof.measured_ranges["ranks_per_node"]  # the preset's empty range


def test_profile_with_steps_round_trips_through_json(tmp_path):
    base = Profile.from_preset("ethernet-10g", "v100")
    prof = fit_steps(_runs(_truth(base), DESIGN), W, base)
    path = prof.save(tmp_path / "p.json")
    back = Profile.load(path)
    assert back.fit["steps"]["terms"] == json.loads(json.dumps(prof.fit["steps"]["terms"]))
    np.testing.assert_allclose(back.params.flat(), prof.params.flat(), rtol=1e-12)
    assert back.measured_ranges["num_ranks"] == [1, 16]
    assert back.measured_ranges["ranks_per_node"] == [2, 8]  # min(8, n), n ≥ 2


def test_profile_written_before_the_step_leaves_loads_with_them_at_their_defaults(tmp_path):
    """A profile file without ``step_comm_factor`` and ``backward_hide`` (and its covariance
    without their leaves) loads: factor 1, no hiding, their variances the prior's, every
    prediction unchanged."""
    base = Profile.from_preset("ethernet-10g", "v100")
    doc = json.loads(base.to_json())
    for key, leaf in (
        ("step_comm_factor", "log_step_comm"),
        ("backward_hide", "logit_backward_hide"),
    ):
        del doc["params"][key]
        leaves = doc["covariance"]["leaves"]
        i = leaves.index(leaf)
        doc["covariance"]["leaves"] = leaves[:i] + leaves[i + 1 :]
        m = np.asarray(doc["covariance"]["matrix"])
        doc["covariance"]["matrix"] = np.delete(np.delete(m, i, 0), i, 1).tolist()
    f = tmp_path / "old.json"
    f.write_text(json.dumps(doc))
    old = Profile.load(f)
    assert float(old.params.step_comm_factor) == 1.0 and float(old.params.backward_hide) < 1e-12
    np.testing.assert_allclose(old.covariance, base.covariance, rtol=1e-9)
    runs = [{"workers": 16, "ranks_per_node": 8, "batch_size": 64, "architecture": a,
             "servers": 2, "colocated": False, "bucket_bytes": 2.0**20}
            for a in ("ring", "ps", "fsdp")]  # fmt: skip
    np.testing.assert_allclose(
        step_time(old.params.to_numpy(), W, runs), step_time(base.params.to_numpy(), W, runs)
    )


def test_in_step_factor_scales_every_architectures_exchange():
    """With the factor at 2, communication doubles for the bucketed and the sharded
    families alike (compute, update and overhead unchanged)."""
    from costmodel import iteration_time

    p = Profile.from_preset("ethernet-10g", "v100").params.to_numpy()
    p2 = p.scaled(step_comm=2.0)
    for arch in ("ring", "ps", "p2p", "hierarchical", "fsdp", "zero2"):
        a, b = (iteration_time(q, W, arch, 16, ranks_per_node=8, servers=2) for q in (p, p2))
        assert float(b.communication_s) == pytest.approx(2 * float(a.communication_s), rel=1e-9)
        assert float(b.backward_s) == float(a.backward_s) and float(b.update_s) == float(a.update_s)


# ---------------------------------------------------------------------------- the CSV
def test_csv_columns_defaults_and_throughput(tmp_path):
    f = tmp_path / "runs.csv"
    f.write_text(
        "# from our logs\n"
        "workers,ranks_per_node,batch_size,samples_per_s,architecture,bucket_bytes,colocated\n"
        "\n"
        "1,8,64,360,,,\n"
        "16,8,64,4900,ps,4M,true\n"
    )
    a, b = read_steps_csv(f)
    assert (a["architecture"], a["servers"], a["colocated"]) == ("ring", 1, False)
    assert a["bucket_bytes"] == 25 * 2**20 and a["line"] == 4
    assert a["step_time_s"] == pytest.approx(64 / 360)
    assert b["step_time_s"] == pytest.approx(16 * 64 / 4900)
    assert (b["architecture"], b["colocated"], b["bucket_bytes"]) == ("ps", True, 4 * 2**20)


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("", None, "no header"),
        ("workers,batch_size,step_time_s\n1,64,0.2\n", 1, "'ranks_per_node'"),
        ("workers,ranks_per_node,batch_size\n1,8,64\n", 1, "samples_per_s"),
        ("workers,ranks_per_node,batch_size,step_time_s,gpus\n", 1, "unknown column 'gpus'"),
        ("workers,ranks_per_node,batch_size,step_time_s\n", 1, "no run"),
        ("workers,ranks_per_node,batch_size,step_time_s\n1.5,8,64,0.2\n", 2, "workers"),
        ("workers,ranks_per_node,batch_size,step_time_s\n1,8,64,fast\n", 2, "step_time_s"),
        ("workers,ranks_per_node,batch_size,step_time_s\n1,8,64,-1\n", 2, "step_time_s"),
        ("workers,ranks_per_node,batch_size,step_time_s\n1,8,64\n", 2, "3 values for 4"),
        ("workers,ranks_per_node,batch_size,samples_per_s\n1,8,64,\n", 2, "neither"),
        (
            "workers,ranks_per_node,batch_size,step_time_s,architecture\n1,8,64,0.2,allreduce\n",
            2,
            "architecture: unknown 'allreduce'",
        ),
        (
            "workers,ranks_per_node,batch_size,step_time_s,bucket_bytes\n1,8,64,0.2,lots\n",
            2,
            "bucket_bytes",
        ),
    ],
)
def test_bad_csv_names_file_line_and_column(tmp_path, text, line, words):
    f = tmp_path / "runs.csv"
    f.write_text(text)
    with pytest.raises(InputFileError) as e:
        read_steps_csv(f)
    assert e.value.line == line and words in str(e.value)
    assert str(e.value).startswith(f"{f}:{line}:" if line else f"{f}:")


# ---------------------------------------------------------------------------- the CLI
def _csv(tmp_path, runs):
    f = tmp_path / "runs.csv"
    lines = ["workers,ranks_per_node,batch_size,step_time_s"]
    lines += [
        f"{r['workers']},{r['ranks_per_node']},{r['batch_size']},{r['step_time_s']!r}" for r in runs
    ]
    f.write_text("\n".join(lines) + "\n")
    return f


def test_cli_calibrate_steps_then_predict(tmp_path, capsys):
    base = Profile.from_preset("ib-edr-100g,nvlink-v100", "v100")
    runs = _runs(_truth(base, flops_scale=0.5, overhead=0.01), DESIGN[:-1])
    f, out = _csv(tmp_path, runs), tmp_path / "p.json"
    rc = main(["calibrate", "--steps", str(f), "--model", "resnet50",
               "--preset", "ib-edr-100g,nvlink-v100", "--device", "v100", "-o", str(out)])  # fmt: skip
    text = capsys.readouterr().out
    assert rc == 0 and "compute throughput" in text and f"{f}:2" in text
    # what a step's 90% interval is made of: the runs span 2–16 workers, so their own misses
    prof = Profile.load(out)
    band = f"half-width {100 * math.sinh(1.6448536269514722 * prof.residual_sd(0.9)):.1f}%"
    assert f"90% interval of a step: {band} from what the step fit leaves" in text
    fitted = {
        (r["workers"], r["batch_size"]): r["fitted_s"]
        for r in Profile.load(out).fit["steps"]["rows"]
    }
    rc = main(["predict", "--profile", str(out), "--model", "resnet50", "--arch", "ring",
               "--workers", "16,32", "--ranks-per-node", "8", "--json"])  # fmt: skip
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    by_n = {r["workers"]: r for r in rows}
    # show says what the profile was fitted on
    assert main(["show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "training runs: 8 at 1–16 workers" in shown and "a preset profile" not in shown
    assert f"90% interval of a step: {band} from what the step fit leaves" in shown
    # the identified terms by their parameter names (as --json and the report name them)
    ident = shown.split("step terms identified: ")[1].splitlines()[0]
    assert ident != "none" and "log_" not in ident and "logit_" not in ident, ident
    assert set(ident.split(", ")) <= set(PARAMETER_UNITS), ident
    # the run at 16 workers, batch 64: predict gives the fitted time
    assert by_n[16]["iteration_s"] == pytest.approx(fitted[16, 64], rel=1e-9)
    assert "32 ranks were never measured" in cap.err + json.dumps(doc)


@pytest.mark.parametrize(
    "argv, words",
    [
        (["--steps", "R", "--preset", "ethernet-10g", "-o", "p.json"], "--steps needs the model"),
        (["-o", "p.json"], "give measurement files"),
        (["--steps", "R", "--model", "resnet50", "-o", "p.json"], "--preset NET"),
        (
            ["--steps", "R", "--model", "resnet50", "--device", "v100", "-o", "p.json"],
            "--device goes",
        ),
        (["--steps", "R", "--model", "resnet50", "--preset", "nope", "-o", "p.json"], "--preset"),
    ],
)
def test_cli_step_usage_errors_name_the_option(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "R").write_text("workers,ranks_per_node,batch_size,step_time_s\n1,8,64,0.2\n")
    rc = main(["calibrate", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and words in err and "Traceback" not in err
    assert not (tmp_path / "p.json").exists()


def test_validate_step_records_calibrate_with_their_harness_model(tmp_path, capsys):
    """``kind: "step"`` records (as ``ddltune validate`` writes them) are runs: p10 on CPU,
    other kinds skipped, the harness model from ``model_spec`` (no --model needed)."""
    spec = {"model": "mlp", "in": 64, "width": 128, "depth": 2, "classes": 10, "batch_size": 32}
    recs = [{"schema": 1, "kind": "collective", "collective": "all_reduce"}]
    for n, t in ((1, 0.010), (2, 0.014), (3, 0.017)):
        recs.append({"schema": 1, "kind": "step", "architecture": "ring", "servers": 0,
                     "colocated": False, "workers": n, "ranks_per_node": 1, "batch_size": 32,
                     "bucket_bytes": 1 << 20, "time_s": {"p10": t, "median": 2 * t},
                     "model_spec": spec, "backend": "cpu"})  # fmt: skip
    f = tmp_path / "validation.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    out = tmp_path / "p.json"
    rc = main(["calibrate", "--steps", str(f), "--preset", "ethernet-10g,shm", "--device", "cpu",
               "-o", str(out), "--json"])  # fmt: skip
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0
    rows = doc["steps"]["rows"]
    assert [r["line"] for r in rows] == [2, 3, 4]
    assert [r["measured_s"] for r in rows] == [0.010, 0.014, 0.017]  # p10, not the median
    # fitted as validate fits them and `run --validate` folds them (the compute from the
    # measured single-worker step, no overlap on CPU): one implementation of that fit
    from tuner.validation import fit_step_records

    want = fit_step_records(Profile.from_preset("ethernet-10g,shm", "cpu"), recs)
    np.testing.assert_allclose(
        Profile.load(out).params.flat(), want.params.flat(), rtol=1e-9, atol=1e-12
    )
    # two models' files (an emulated run's MLP and CNN) need no --model either
    cnn = {"model": "cnn", "image": 8, "in_channels": 3, "channels": 4, "depth": 2,
           "classes": 10, "batch_size": 32, "kernel": 3}  # fmt: skip
    g = tmp_path / "validation-cnn.jsonl"
    g.write_text("".join(json.dumps(dict(r, model_spec=cnn)) + "\n" for r in recs[1:]))
    rc = main(["calibrate", "--steps", str(f), "--steps", str(g), "--preset", "ethernet-10g,shm",
               "--device", "cpu", "-o", str(tmp_path / "two.json")])  # fmt: skip
    assert rc == 0, capsys.readouterr().err
    capsys.readouterr()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": "step", "workers": 2}) + "\n")
    assert main(["calibrate", "--steps", str(bad), "--preset", "ethernet-10g", "-o",
                 str(tmp_path / "q.json")]) != 0  # fmt: skip
    assert f"{bad}:1: step record without" in capsys.readouterr().err


@pytest.mark.parametrize(
    "text, words",
    [
        ("workers,workers,ranks_per_node,batch_size,step_time_s\n1,2,8,64,0.2\n", "appears twice"),
        ("workers,ranks_per_node,batch_size,step_time_s,\n1,8,64,0.2,\n", "trailing comma"),
        (
            "workers,ranks_per_node,batch_size,samples_per_s,step_time_s\n1,8,64,360,0.5\n",
            "disagree",
        ),
    ],
)
def test_contradictory_or_ambiguous_csv_is_refused(tmp_path, text, words):
    f = tmp_path / "runs.csv"
    f.write_text(text)
    with pytest.raises(InputFileError, match=words):
        read_steps_csv(f)


def test_a_profile_given_as_steps_says_what_it_is(tmp_path):
    from calibration import read_steps

    f = Profile.from_preset("ethernet-10g", "v100").save(tmp_path / "p.json")
    with pytest.raises(InputFileError, match="this is a ddltune profile"):
        read_steps(f)


@pytest.mark.parametrize("cmd", ["calibrate", "import-nccl-tests"])
def test_output_that_is_an_input_is_refused_and_the_input_kept(tmp_path, capsys, cmd):
    """-o naming an input file, even with --overwrite, is refused before anything is
    written: the data stays byte for byte."""
    src = tmp_path / "runs.csv"
    src.write_text("workers,ranks_per_node,batch_size,step_time_s\n1,8,64,0.2\n2,8,64,0.21\n")
    if cmd == "calibrate":
        argv = ["calibrate", "--steps", str(src), "--model", "resnet50", "--preset",
                "ethernet-10g", "-o", str(src), "--overwrite"]  # fmt: skip
    else:
        argv = ["import-nccl-tests", str(src), "--collective", "all_reduce", "-o", str(src),
                "--overwrite"]  # fmt: skip
    before = src.read_bytes()
    assert main(argv) != 0
    assert "is one of the inputs" in capsys.readouterr().err
    assert src.read_bytes() == before


@pytest.mark.parametrize("arch", ["ps", "ps_host", "hybrid", "p2p"])
def test_backward_hide_closed_form_and_the_report_timeline_agree(arch):
    """With h of backward hidden, a non-overlapping exchange C costs max(0, C − h·T_bwd)
    after backward: h = 0 is today's serial cost, h = 1 full overlap; the report's
    bucket schedule ends where iteration_time does."""
    from costmodel import bucket_schedule, iteration_time

    p = Profile.from_preset("ethernet-10g", "v100").params.to_numpy()
    kw = dict(ranks_per_node=4, servers=2, bucket_bytes=4 * 2**20)
    base = iteration_time(p, W, arch, 8, **kw)
    c1 = float(base.iteration_s) - float(base.forward_s) - float(base.backward_s)
    c1 -= float(base.update_s) + float(base.overhead_s)  # exposed = C1 + C2 today
    for h in (0.3, 0.999999):
        q = eqx.tree_at(lambda m: m.logit_backward_hide, p, np.float64(math.log(h / (1 - h))))
        b = iteration_time(q, W, arch, 8, **kw)
        saved = float(base.iteration_s) - float(b.iteration_s)
        assert 0.0 < saved <= h * float(base.backward_s) * (1 + 1e-9)
        assert float(b.iteration_s) >= float(b.forward_s) + float(b.backward_s)
        sched = bucket_schedule(q, W, arch, 8, **kw)
        assert sched.iteration_s == pytest.approx(float(b.iteration_s), rel=1e-9)
    assert c1 > 0


def test_round_trip_recovers_the_hidden_share_of_a_parameter_server_exchange():
    """Parameter-server steps whose push hides behind 70% of backward (TensorFlow's
    dataflow), at 1–16 workers and two batches on 100 GbE (where the exchange and backward
    are of a size): the share comes back within 0.1; the profile predicts 32 workers,
    never fitted, within 5%."""
    base = Profile.from_preset("ethernet-100g", "v100")
    truth = eqx.tree_at(
        lambda m: m.logit_backward_hide, _truth(base, comm=1.0), np.float64(math.log(0.7 / 0.3))
    )
    design = [(1, 16), (1, 64), (2, 64), (4, 64), (8, 64), (16, 64), (4, 16), (16, 16)]
    prof = fit_steps(_runs(truth, design, arch="ps"), W, base)
    t = prof.fit["steps"]["terms"]["logit_backward_hide"]
    assert 1 / (1 + math.exp(-t["value"])) == pytest.approx(0.7, abs=0.1)
    far = _runs(truth, [(32, 64)], noise=0.0, arch="ps")
    got = step_time(prof.params.to_numpy(), W, far)[0]
    assert got == pytest.approx(far[0]["step_time_s"], rel=0.05)


DGX1 = (
    Path(__file__).resolve().parent
    / "data"
    / "scaling"
    / "scaling_tf_cnn_benchmarks_dgx1-p100_1-8gpus.csv"
)


def _dgx1_series(model: str, batch: int = 64, data: str = "synthetic") -> list[dict]:
    """One published DGX-1 series (TensorFlow parameter_server, variables on the CPU) as runs."""
    with open(DGX1, encoding="utf-8") as fh:
        rows = list(csv.DictReader(ln for ln in fh if ln.strip() and not ln.startswith("#")))
    out = []
    for i, r in enumerate(rows):
        if (r["model"], int(r["batch_size_per_gpu"]), r["data"]) != (model, batch, data):
            continue
        n = int(r["gpus"])
        out.append({"workers": n, "ranks_per_node": n, "batch_size": batch,
                    "architecture": "ps_host", "servers": 1, "colocated": False,
                    "bucket_bytes": 0.0,  # TensorFlow 2017: every variable on its own
                    "step_time_s": n * batch / float(r["images_per_sec"]),
                    "file": str(DGX1), "line": i + 1})  # fmt: skip
    return sorted(out, key=lambda r: r["workers"])


@pytest.mark.parametrize("model,zoo", [("ResNet-50", "resnet50"), ("InceptionV3", "inception_v3")])
def test_dgx1_host_links_carry_two_gpu_steps_to_eight_within_five_percent(model, zoo):
    """Published DGX-1 steps (tf_cnn_benchmarks, ps on the host CPU): fitted at 1 and 2
    GPUs, the 4- and 8-GPU steps are predicted within 5% with the DGX-1's four PCIe
    switch uplinks (two GPUs each, WP-08437-001); with one shared host link the same fit
    charges the 8 GPUs' fan-in to it and misses the 8-GPU step by more than 10%. The
    fitted profile keeps its host links, in its parameters and through JSON."""
    runs = _dgx1_series(model)
    assert [r["workers"] for r in runs] == [1, 2, 4, 8]
    w = get_workload(zoo, 64)
    errors, fitted = {}, {}
    for links in (4, 1):
        base = Profile.from_preset("ib-edr-100g,pcie3-x16", "p100", host_links=links)
        prof = fitted[links] = fit_steps(runs[:2], w, base)
        t = step_time(prof.params.to_numpy(), w, runs[2:])
        errors[links] = t / [r["step_time_s"] for r in runs[2:]] - 1
        lo, hi = prof.interval(lambda p, w=w: step_time(p, w, runs[2:]), batched=True)
        assert np.all(lo < t) and np.all(t < hi)
    assert np.all(np.abs(errors[4]) < 0.05), errors
    assert abs(errors[1][-1]) > 0.10, errors
    for links, prof in fitted.items():
        assert prof.params.host_links == links
        assert Profile.from_dict(json.loads(prof.to_json())).params.host_links == links


def test_intervals_of_both_paths_keep_the_profiles_host_links():
    """Profile.interval's traced path (jvp of a jax function) rebuilds parameters from θ;
    they keep the profile's host links (static, not in θ), as the batched path's do."""
    prof = Profile.from_preset("ib-edr-100g,pcie3-x16", "p100", host_links=4)
    seen = []

    def fn(p):  # a jax-traceable function of the parameters that reads the host links
        seen.append(p.host_links)
        return p.host_links * p.flops_per_s

    lo, hi = prof.interval(fn)
    lo_b, hi_b = prof.interval(fn, batched=True)
    assert set(seen) == {4}
    flops = float(prof.params.flops_per_s)
    assert float(lo) < 4 * flops < float(hi)
    np.testing.assert_allclose([float(lo), float(hi)], [float(lo_b[0]), float(hi_b[0])], rtol=1e-3)


def test_cli_host_links_reach_the_profile_and_predict(tmp_path, capsys):
    """calibrate --host-links writes them into the profile (and --json); predict reads them
    from it and refuses --host-links beside a profile; with presets, --host-links 4 makes
    an 8-GPU ps_host step faster than one shared host link; out-of-range values exit 2."""
    f, out = tmp_path / "runs.csv", tmp_path / "p.json"
    f.write_text(
        "workers,ranks_per_node,batch_size,samples_per_s,architecture\n"
        "1,1,64,219,ps_host\n2,2,64,422,ps_host\n"  # the DGX-1 table's ResNet-50 rows
    )
    net = ["--preset", "ib-edr-100g,pcie3-x16", "--device", "p100"]
    rc = main(["calibrate", "--steps", str(f), "--model", "resnet50", *net, "--host-links", "4",
               "-o", str(out), "--json"])  # fmt: skip
    assert rc == 0 and json.loads(capsys.readouterr().out)["host_links"] == 4
    assert Profile.load(out).params.host_links == 4
    assert main(["show", str(out)]) == 0
    assert "host links per node: 4" in capsys.readouterr().out
    what = ["--model", "resnet50", "--arch", "ps_host", "--workers", "8", "--ranks-per-node", "8",
            "--bucket-bytes", "0", "--json"]  # fmt: skip
    assert main(["predict", "--profile", str(out), "--host-links", "4", *what]) == 2
    assert "--host-links applies to --preset" in capsys.readouterr().err
    times = {}
    for links in ("1", "4"):
        assert main(["predict", *net, "--host-links", links, *what]) == 0
        doc = json.loads(capsys.readouterr().out)
        times[links] = (doc["rows"] if isinstance(doc, dict) else doc)[0]["iteration_s"]
    assert times["4"] < 0.9 * times["1"], times
    for bad in ("0", "65", "two"):
        assert main(["predict", *net, "--host-links", bad, *what]) == 2
        err = capsys.readouterr().err
        assert "--host-links" in err and "Traceback" not in err


def _with_microbenchmark_spread(base: Profile, spread: float) -> Profile:
    """``base`` as if its calibration's held-out points missed by |log error| up to ``spread``."""
    doc = json.loads(base.to_json())
    doc["validation"] = {"heldout_log_residuals": list(np.linspace(-spread, spread, 41))}
    return Profile.from_dict(doc)


def test_step_intervals_take_the_step_fits_spread_and_cover_fresh_steps():
    """A calibration whose microbenchmarks missed by up to 30% (a ±30% band), then steps at
    four worker counts with 3% noise: the step predictions' 90% band is set by what the
    step fit leaves (half-width under 10%, not 30%) and holds about 90% of 250 fresh steps
    drawn alike; a collective's band keeps the microbenchmarks' spread."""
    base = _with_microbenchmark_spread(Profile.from_preset("ethernet-10g", "v100"), 0.3)
    truth = _truth(base)
    prof = fit_steps(_runs(truth, DESIGN, noise=0.03, seed=1), W, base)
    assert len(prof.validation["step_log_residuals"]) == len(DESIGN)
    assert prof.validation["step_worker_counts"] == [1, 2, 4, 8, 16]
    assert prof.residual_sd(0.9, of="microbenchmarks") == base.residual_sd(0.9)
    assert prof.residual_sd(0.9) < 0.3 * base.residual_sd(0.9)
    fresh = [r for seed in range(2, 52) for r in _runs(truth, DESIGN[3:7] + DESIGN[8:], 0.03, seed)]
    lo, hi = prof.interval(lambda p: step_time(p, W, fresh), batched=True)
    t = np.array([r["step_time_s"] for r in fresh])
    assert len(t) == 250
    assert 0.8 <= np.mean((t >= lo) & (t <= hi)) <= 0.99
    assert float(np.median(hi / lo)) < 1.2  # half-width under 10% of the step
    with pytest.raises(ValueError, match="of must be"):
        prof.residual_sd(0.9, of="collectives")


def test_residual_spread_is_the_split_conformal_quantile_over_z():
    """m residuals: the ⌈(m+1)·level⌉-th smallest |r| over z(level) (the largest when that
    rank passes m), for the calibration's held-out points and the steps' alike."""
    z = 1.6448536269514722
    base = _with_microbenchmark_spread(Profile.from_preset("ethernet-10g", "v100"), 0.3)
    # 41 values, |r| = 0.3·|k|/20 (k = −20…20): the 38th smallest is 0.3·19/20
    assert base.residual_sd(0.9) == pytest.approx(0.3 * 19 / 20 / z, rel=1e-12)
    doc = json.loads(base.to_json())
    v = doc["validation"]
    v["step_worker_counts"], v["step_effective_parameters"] = [1, 2, 4], 2.0
    v["step_log_residuals"] = [0.01, -0.02, 0.05, -0.04]  # ⌈4.5⌉ = 5 > 4; × sqrt(4/2)
    assert Profile.from_dict(doc).residual_sd(0.9) == pytest.approx(0.05 * 2**0.5 / z, rel=1e-12)
    v["step_log_residuals"] = [0.01 * k for k in range(1, 20)]  # ⌈18⌉-th; × sqrt(19/17)
    got = Profile.from_dict(doc).residual_sd(0.9)
    assert got == pytest.approx(0.18 * (19 / 17) ** 0.5 / z, rel=1e-12)
    # one worker count of ≥ 2 (or no residual degree of freedom): the calibration's spread
    for counts, p_eff in (([1, 8], 2.0), ([1, 2, 4], 19.0)):
        v["step_worker_counts"], v["step_effective_parameters"] = counts, p_eff
        assert Profile.from_dict(doc).residual_sd(0.9) == base.residual_sd(0.9)


def test_steps_at_one_worker_count_leave_the_microbenchmarks_spread():
    """Steps at one worker count (and the baseline) cannot show how the model's miss changes
    with the count: the step predictions keep the calibration's spread exactly."""
    base = _with_microbenchmark_spread(Profile.from_preset("ethernet-10g", "v100"), 0.3)
    design = [(1, 64), (8, 64), (8, 32), (8, 16), (8, 64), (8, 32)]
    prof = fit_steps(_runs(_truth(base), design, noise=0.03), W, base)
    assert prof.validation["step_worker_counts"] == [1, 8]
    assert prof.residual_sd(0.9) == base.residual_sd(0.9)
