"""``ddltune calibrate``: exit codes, files written (or not), JSON output, real nccl-tests data."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from calibration import Profile, import_nccl_tests
from costmodel import collective_time, preset
from tuner.cli import main

DATA = Path(__file__).parent / "data" / "nccl-tests"
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


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
    """Tests leave nothing in ~/.cache (calibrate keeps its compiled program there)."""
    monkeypatch.setenv("DDLTUNE_NO_COMPILATION_CACHE", "1")


@pytest.fixture(scope="module")
def measurements(tmp_path_factory) -> Path:
    """Collector-like records from 2, 3 and 4 processes on one CPU node, 3% noise,
    with compute records run by 1–4 processes at once (the core-sharing term)."""
    truth = preset("ethernet-10g", "cpu").scaled(alpha=1.5, beta=0.6, flops=1.5)
    rng = np.random.default_rng(4)
    lines = []
    for c in ("all_reduce", "all_gather", "ps_push"):
        for n in (2, 3, 4):
            for k in range(10, 23):
                t = float(collective_time(truth, c, 2**k, n, n)) * math.exp(0.03 * rng.normal())
                samples = [t * (1 + 0.2 * abs(rng.normal())) for _ in range(9)] + [t]
                rec = {
                    **BASE,
                    "kind": "collective",
                    "collective": c,
                    "message_bytes": 2**k,
                    "num_ranks": n,
                    "ranks_per_node": n,
                    "time_s": {"min": t, "median": float(np.median(samples))},
                    "samples_s": samples,
                }
                lines.append(json.dumps(rec))
    for g in (1, 2, 3, 4):
        for m in (128, 256, 512, 1024):
            f = 2.0 * m**3
            # the model's own compute record: one call (overhead + FLOPs/F) × core share
            t = float(truth.compute_time(f, float(g), calls=1.0)) * math.exp(0.03 * rng.normal())
            rec = {
                **BASE,
                "kind": "compute",
                "op": "matmul",
                "flops": f,
                "num_ranks": g,
                "ranks_per_node": g,
                "time_s": {"p10": t},
            }
            lines.append(json.dumps(rec))
    path = tmp_path_factory.mktemp("m") / "m.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_calibrate_writes_a_reliable_profile_and_json_summary(measurements, tmp_path, capsys):
    out = tmp_path / "profile.json"
    code = main(["calibrate", str(measurements), "-o", str(out), "--json", "--regimes", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    doc = json.loads(captured.out)
    prof = Profile.load(out)
    assert doc["output"] == str(out) and doc["reliable"] is True and prof.reliable
    assert doc["heldout_p90"] == pytest.approx(prof.heldout_p90)
    assert prof.heldout_p90 < 0.15
    # Per series (collective, n, g) and compute (op, g): train and held-out errors.
    series = {(s.get("collective") or s.get("op"), s["num_ranks"]) for s in doc["series"]}
    assert ("ps_push", 3) in series and ("matmul", 4) in series
    assert all(s["heldout"]["points"] >= 1 for s in doc["series"] if s["kind"] == "collective")
    # The compute-sharing term and flops are identified from 1–4 concurrent processes.
    assert prof.identified["node_compute_slots"] and prof.identified["flops_per_s"]
    assert prof.fit["statistic"] == "p10"
    assert prof.fit["statistics_used"] == {"p10": 117 + 16}  # from samples, and given
    assert prof.provenance["inputs"][0]["path"] == str(measurements)
    assert len(prof.provenance["inputs"][0]["sha256"]) == 64


def test_calibrate_text_output_and_overwrite(measurements, tmp_path, capsys):
    out = tmp_path / "p.json"
    out.write_text("old")
    assert main(["calibrate", str(measurements), "-o", str(out), "--regimes", "1"]) == 1
    err = capsys.readouterr().err
    assert "already exists" in err and "--overwrite" in err
    assert out.read_text() == "old"
    code = main(["calibrate", str(measurements), "-o", str(out), "--regimes", "1", "--overwrite"])
    text = capsys.readouterr().out
    assert code == 0
    assert "held out" in text and "all_reduce n=3 g=3" in text and f"wrote {out}" in text
    assert "emulated" not in text  # a real machine's records
    assert Profile.load(out).params.n_regimes == 1


def test_calibrate_says_when_the_records_came_from_an_emulated_cluster(
    measurements, tmp_path, capsys
):
    emu = {"nodes": 2, "ranks_per_node": 1, "rate_bits_per_s": 1e8}
    lines = [
        json.dumps(json.loads(ln) | {"emulated": emu})
        for ln in measurements.read_text().splitlines()
    ]
    path = tmp_path / "emu.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["calibrate", str(path), "-o", str(tmp_path / "p.json"), "--regimes", "1"]) == 0
    text = capsys.readouterr().out
    assert "measured in the emulated cluster 2x1@100mbit" in text and "not a real cluster" in text
    assert main(["show", str(path)]) == 0
    assert "emulated:  2x1@100mbit" in capsys.readouterr().out
    assert main(["show", str(tmp_path / "p.json")]) == 0  # the profile says so too, and its input
    text = capsys.readouterr().out
    assert "emulated: 2x1@100mbit" in text and f"input: {path} (sha256 " in text
    assert "ranks 2–4; ranks/node 2–4" in text  # spans, not Python lists


@pytest.mark.parametrize(
    "args, message",
    [
        (["--holdout", "1.5"], "--holdout"),
        (["--regimes", "nine"], "--regimes"),
        (["--regimes", "0"], "--regimes"),
        (["--prior-preset", "ethernet-10g"], "NETWORK"),
        (["--prior-preset", "warp:cpu"], "unknown network"),
        (["--statistic", "p50"], "--statistic"),
    ],
)
def test_usage_errors_exit_2(measurements, tmp_path, capsys, args, message):
    out = tmp_path / "p.json"
    assert main(["calibrate", str(measurements), "-o", str(out), *args]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    "content, reason",
    [
        ('{"schema": 1, "kind": "collective", "time_s": {"p10": NaN}}\n', "NaN"),
        ('{"schema": 7}\n', "unknown schema version 7"),
        ('{"schema": 1, "kind": "collecti', "truncated"),
        (  # a training step written as a collective: the field it lacks, and what it is
            json.dumps(
                {
                    **BASE,
                    "kind": "collective",
                    "architecture": "ring",
                    "workers": 2,
                    "time_s": {"p10": 0.1},
                }
            )
            + "\n",
            "needs the field 'collective' naming one of all_reduce",
        ),
        (  # an emulated cluster's provenance that says nothing of its CPUs' sharing
            json.dumps(
                {
                    **BASE,
                    "kind": "collective",
                    "collective": "all_reduce",
                    "message_bytes": 1024,
                    "num_ranks": 4,
                    "ranks_per_node": 1,
                    "time_s": {"p10": 1e-3},
                    "emulated": {"nodes": 4, "ranks_per_node": 1, "nodes_per_cpu": "two"},
                }
            )
            + "\n",
            "emulated.nodes_per_cpu: expected a whole number ≥ 1, got 'two'",
        ),  # fmt: skip
        (
            "# nThread 1 nGpus 8\n   1024  256  float  sum  34.1  0.03  0.05  0\n",
            "not a JSON Lines measurement file",
        ),
        (  # the quote is line 1's own, not line 2 after it (a new user's trial)
            "hello world\n{{{\n",
            "a record starts with '{', this line with 'hello world'\n",
        ),
    ],
)
def test_bad_input_exits_1_naming_file_and_line_and_writes_nothing(
    tmp_path, capsys, content, reason
):
    bad = tmp_path / "m.jsonl"
    bad.write_text(content)
    out = tmp_path / "p.json"
    assert main(["calibrate", str(bad), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:1:" in err and reason in err
    assert "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == [bad]


def test_missing_file_exits_1(tmp_path, capsys):
    assert main(["calibrate", str(tmp_path / "nope.jsonl"), "-o", str(tmp_path / "p.json")]) == 1
    assert "nope.jsonl" in capsys.readouterr().err


def test_unreliable_profile_warns_on_stderr(tmp_path, capsys):
    rng = np.random.default_rng(0)
    recs = [
        {
            **BASE,
            "kind": "collective",
            "collective": "all_gather",
            "message_bytes": 2**k,
            "num_ranks": 2,
            "ranks_per_node": 2,
            "time_s": {"p10": 1e-4 * math.exp(rng.uniform(-1.5, 1.5))},
        }
        for k in range(8, 28)
    ]
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp_path / "p.json"
    assert main(["calibrate", str(m), "-o", str(out), "--regimes", "1"]) == 0
    captured = capsys.readouterr()
    assert "warning: held-out p90 error" in captured.err and "UNRELIABLE" in captured.out
    prof = Profile.load(out)
    assert prof.reliable is False and prof.warnings


@pytest.mark.slow
def test_real_nccl_tests_all_reduce_within_error_band(tmp_path, capsys):
    """The 8×A100 all_reduce table (superbench): imported, calibrated with the default
    25% hold-out, the held-out p90 stays within 15% and the interval covers the held-out points."""
    m = tmp_path / "ar.jsonl"
    import_nccl_tests(
        DATA / "nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt", m, collective="all_reduce"
    )
    out = tmp_path / "p.json"
    assert main(["calibrate", str(m), "-o", str(out), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    prof = Profile.load(out)
    assert prof.prior["preset"] == "ib-hdr-200g,nvlink-a100:a100"
    assert prof.fit["statistics_used"] == {"mean": 32}  # lower of out-of-place/in-place
    assert prof.fit["points"]["skipped"]["in_place"] == 32
    from tuner.cli._calibrate import _print_text  # the summary says what was fitted

    _print_text(prof, out)
    assert "statistic median (used: mean for 32)" in capsys.readouterr().out
    assert doc["heldout"]["points"] == 8
    assert doc["heldout"]["median"] < 0.05 and doc["heldout"]["p90"] < 0.15 and prof.reliable
    assert prof.measured_ranges["message_bytes"] == [4, 8 * 1024**3]
    assert prof.measured_ranges["ranks_per_node"] == [8, 8]
    # One node: the inter-node network stays the prior's. Single parameters of the
    # bandwidth term (regime β, node cap, γ all scale with S) are confounded, but the
    # prediction they make together is pinned down: a narrow interval on one node,
    # a wide one across nodes.
    assert not prof.identified["beta_s_per_byte[inter]"]
    lo, hi = prof.interval(lambda p: collective_time(p, "all_reduce", 2.0**30, 8, 8))
    lo2, hi2 = prof.interval(lambda p: collective_time(p, "all_reduce", 2.0**30, 16, 8))
    assert float(hi / lo) < 1.3 < 3.0 < float(hi2 / lo2)


def test_identified_bandwidths_keep_three_digits_without_a_stray_point():
    # 'calibrate' printed "897. MB/s" (a new user's trial): '#.3g' keeps a trailing point
    from tuner.cli._calibrate import _value

    shown = [_value({"unit": "s/byte", "value": 1 / bw}) for bw in (897.3e6, 21e6, 999.6e6, 5.5)]
    assert shown == ["897 MB/s", "21.0 MB/s", "1.00 GB/s", "5.50 B/s"]


def test_a_calibration_that_holds_nothing_out_is_called_untested(tmp_path, capsys):
    """--holdout 0 (or too few sizes to hold any out): no error measured out of sample, so
    the summary says untested, not 'reliable; held-out p90 —' (a new user's trial)."""
    truth = preset("ethernet-10g", "cpu")
    m = tmp_path / "m.jsonl"
    m.write_text("".join(json.dumps({
        "schema": 1, "kind": "collective", "collective": "all_reduce", "message_bytes": s,
        "num_ranks": 2, "ranks_per_node": 2, "dtype": "float32",
        "time_s": {"p10": float(collective_time(truth, "all_reduce", s, 2, 2))},
        "backend": "cpu", "device_kind": "cpu", "versions": {}, "host_fingerprint": "x",
        "timestamp": "2026-01-01T00:00:00Z", "source": "test"}) + "\n"
        for s in (2**10, 2**14, 2**18, 2**22)))  # fmt: skip
    out = tmp_path / "p.json"
    assert main(["calibrate", str(m), "-o", str(out), "--holdout", "0", "--regimes", "1"]) == 0
    text = capsys.readouterr().out
    assert f"wrote {out} (untested: no point was held out" in text and "reliable;" not in text
    assert main(["calibrate", str(m), "-o", str(out), "--regimes", "1", "--overwrite"]) == 0
    assert "untested" not in capsys.readouterr().out  # a held-out point: tested


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_calibrate_keeps_its_compiled_program_for_the_next_run(tmp_path, monkeypatch):
    """A fresh `ddltune calibrate` writes the fit's program to ~/.cache/ddltune/jax (here
    XDG_CACHE_HOME), which the next calibration, or one after `run`, reads instead of
    compiling. (The opt-out, DDLTUNE_NO_COMPILATION_CACHE=1, is enable_compilation_cache's,
    shared by every command and used by the in-process tests.)"""
    root = Path(__file__).resolve().parents[1]
    m = tmp_path / "ar.jsonl"
    import_nccl_tests(
        DATA / "nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt", m, collective="all_reduce"
    )

    def calibrate(cache: Path) -> Path:
        e = {k: v for k, v in os.environ.items() if k != "DDLTUNE_NO_COMPILATION_CACHE"}
        e.update(XDG_CACHE_HOME=str(cache), PYTHONPATH=str(root))
        out = cache.parent / f"{cache.name}.json"
        argv = [sys.executable, "-m", "tuner.cli", "calibrate", str(m), "-o", str(out)]
        p = subprocess.run([*argv, "--regimes", "1"], env=e, capture_output=True, text=True,
                           timeout=150)  # fmt: skip
        assert p.returncode == 0, p.stderr
        assert out.is_file()
        return cache / "ddltune" / "jax"

    kept = calibrate(tmp_path / "on")
    assert kept.is_dir() and any(kept.iterdir())
    # the opt-out (set here by the autouse fixture) leaves JAX's setting and the folder alone
    import jax

    from tuner.cli._common import enable_compilation_cache

    before = jax.config.jax_compilation_cache_dir
    off = tmp_path / "off"
    monkeypatch.setenv("XDG_CACHE_HOME", str(off))
    enable_compilation_cache()
    assert jax.config.jax_compilation_cache_dir == before and not off.exists()
