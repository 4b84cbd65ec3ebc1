"""CLI tests of ``ddltune recommend``: arguments in, exit code and output out."""

from __future__ import annotations

import json
import re

import pytest

from calibration import Profile
from costmodel import format_bytes, get_workload, iteration_time, preset
from tuner.cli import main


@pytest.fixture(autouse=True)
def _no_persistent_cache(monkeypatch):
    """Tests leave nothing in ~/.cache (the CLI keeps compiled programs there)."""
    monkeypatch.setenv("DDLTUNE_NO_COMPILATION_CACHE", "1")


BASE = ["recommend", "--preset", "ethernet-10g", "--device", "v100", "--model", "resnet18"]
SMALL = [*BASE, "--max-workers", "4", "--arch", "ring,ps", "--no-refine"]


def _json(capsys, argv):
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_json_document_has_the_documented_keys_and_consistent_numbers(capsys):
    doc = _json(capsys, [*SMALL, "--batch-size", "32"])
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
        assert key in doc, key
    assert doc["architecture"] in ("ring", "ps")
    assert 1 <= doc["workers"] <= 4
    lo, hi = doc["interval_s"]
    assert lo < doc["iteration_time_s"] < hi  # a preset profile carries its prior's spread
    assert 0.0 <= doc["p_best"] <= 1.0
    # the numbers are the cost model's: recompute the step time independently
    w = get_workload("resnet18", 32)
    t = iteration_time(
        preset("ethernet-10g", "v100"),
        w,
        doc["architecture"],
        doc["workers"],
        servers=max(doc["servers"], 1),
        bucket_bytes=doc["bucket_bytes"],
        colocated=doc["colocated"],
    ).iteration_s
    assert doc["iteration_time_s"] == pytest.approx(float(t), rel=1e-9)
    assert doc["throughput_samples_per_s"] == pytest.approx(
        doc["workers"] * 32 / doc["iteration_time_s"], rel=1e-9
    )
    assert all(set(a) >= {"architecture", "workers", "interval_s"} for a in doc["alternatives"])


def _figure(out: str, pattern: str) -> float:
    m = re.search(pattern, out)
    assert m, (pattern, out)
    return float(m.group(1).replace(",", ""))


_UNIT_S = {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
_DURATION = r"(\S+ (?:ns|µs|ms|s))\b"


def _seconds(text: str) -> float:
    """'23.46 s', '845 µs' → seconds (the text shows every duration with its unit)."""
    value, unit = text.split()
    return float(value) * _UNIT_S[unit]


def _duration(out: str, label: str) -> float:
    m = re.search(label + _DURATION, out)
    assert m, (label, out)
    return _seconds(m.group(1))


def test_text_output_shows_the_recommendations_figures_with_units(capsys):
    doc = _json(capsys, SMALL)  # the same query, as numbers
    code = main(SMALL)
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "Recommended:" in out and "Runner-ups:" in out and "Why:" in out
    bd = doc["breakdown"]
    # every figure of the recommendation, read back from the text, to the digits shown
    durations = {
        r"step time\s+": doc["iteration_time_s"],
        r"90% interval ": doc["interval_s"][0],
        r"90% interval \S+ (?:ns|µs|ms|s) – ": doc["interval_s"][1],
        r"forward ": bd["forward_s"],
        r"backward ": bd["backward_s"],
        r"communication\s+": bd["communication_s"],
        r"exposed ": bd["exposed_communication_s"],
        r"update\s+": bd["update_s"],
    }
    for label, value in durations.items():  # 4 significant digits, each with its unit
        assert _duration(out, label) == pytest.approx(value, rel=6e-4), label
    shown = {
        r"throughput\s+(\S+) samples/s": doc["throughput_samples_per_s"],
        r"scaling eff\.\s+(\S+) %": 100 * doc["scaling_efficiency"],
    }
    for pattern, value in shown.items():
        # whole samples/s, one decimal of a percent
        assert _figure(out, pattern) == pytest.approx(value, rel=6e-4, abs=0.051), pattern
    assert "e+0" not in out.split("Runner-ups:")[0]  # no 2.346e+04 ms
    assert f"in {bd['num_buckets']:.0f} bucket" in out
    bucket = "per tensor" if doc["bucket_bytes"] == 0 else format_bytes(doc["bucket_bytes"])
    assert bucket in out.split("Runner-ups:")[0]
    # one runner-up line per alternative, with its workers, step time and efficiency
    table = out.split("Runner-ups:")[1].splitlines()[2:]
    assert len(table) >= len(doc["alternatives"]) > 0
    for alt, line in zip(doc["alternatives"], table, strict=False):
        cells = line.split()
        assert str(alt["workers"]) in cells, line
        step = re.search(r"\s" + _DURATION + r"\s{2,}", line)  # the step, before the interval
        assert step, line
        assert _seconds(step.group(1)) == pytest.approx(alt["iteration_time_s"], rel=6e-4)
        assert float(cells[-1].rstrip("%")) == pytest.approx(
            100 * alt["scaling_efficiency"], abs=0.051
        )


def test_profile_file_and_global_batch(tmp_path, capsys):
    path = tmp_path / "profile.json"
    Profile.from_preset("ib-edr-100g", "a100").save(path)
    doc = _json(
        capsys,
        [
            "recommend",
            "--profile",
            str(path),
            "--model",
            "resnet18",
            "--global-batch",
            "256",
            "--max-workers",
            "8",
            "--ranks-per-node",
            "4",
            "--arch",
            "ring,hierarchical",
            "--bucket-bytes",
            "0,1M,25M",
            "--no-refine",
        ],
    )
    assert doc["workers"] in (4, 8) and doc["ranks_per_node"] == 4
    assert doc["bucket_bytes"] in (0, 2**20, 25 * 2**20)
    assert doc["throughput_samples_per_s"] == pytest.approx(256 / doc["iteration_time_s"])


def test_objective_cost_reports_the_cost(capsys):
    doc = _json(
        capsys,
        [*SMALL, "--objective", "cost", "--price-per-hour", "2.5", "--server-price-per-hour", "1"],
    )
    dedicated = doc["architecture"] == "ps" and not doc["colocated"]
    rate = doc["workers"] * 2.5 + (doc["servers"] * 1.0 if dedicated else 0.0)
    assert doc["cost_per_sample"] == pytest.approx(
        rate / 3600 / doc["throughput_samples_per_s"], rel=1e-9
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        ([*BASE, "--max-workers", "0"], "--max-workers"),
        ([*BASE, "--max-workers", "many"], "--max-workers"),
        ([*BASE, "--max-workers", "4", "--arch", "rings"], "unknown architecture 'rings'"),
        ([*BASE, "--max-workers", "4", "--objective", "fastest"], "unknown objective 'fastest'"),
        ([*BASE, "--max-workers", "4", "--objective", "cost"], "--price-per-hour"),
        # --servers with no architecture that has servers: it was ignored silently
        (
            [*BASE, "--max-workers", "4", "--arch", "ring", "--servers", "2"],
            "--servers applies to ps",
        ),
        ([*BASE, "--max-workers", "4", "--objective", "efficiency"], "--min-efficiency"),
        ([*BASE, "--max-workers", "4", "--bucket-bytes", "1Q"], "unknown size suffix"),
        # megabits are not a size: refused with the two spellings that are
        ([*BASE, "--max-workers", "4", "--bucket-bytes", "25Mb"], "write 25MB (powers of 1000)"),
        ([*BASE, "--max-workers", "4", "--bucket-bytes", "1e30"], "is more than 1 PiB"),
        (
            ["recommend", "--preset", "ethernet-1g", "--model", "resnet18", "--max-workers", "4"],
            "unknown network preset",
        ),
        (
            ["recommend", "--preset", "ethernet-10g", "--model", "resnet5", "--max-workers", "4"],
            "unknown model 'resnet5'",
        ),
        # a typo gets the nearest valid name (a new user's trial)
        (
            ["recommend", "--preset", "ethernet10g", "--model", "resnet18", "--max-workers", "4"],
            "(did you mean 'ethernet-10g'?)",
        ),
        ([*BASE, "--max-workers", "4", "--arch", "rng"], "--arch: unknown architecture 'rng'"),
    ],
)
def test_usage_errors_exit_2_with_one_line(capsys, argv, needle):
    code = main(argv)
    out, err = capsys.readouterr()
    assert code == 2
    assert out == ""
    assert needle in err
    assert "Traceback" not in err


def test_infeasible_and_refused_exit_1_with_one_line(tmp_path, capsys):
    code = main([*SMALL, "--target-throughput", "1e9"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "no configuration reaches" in err and "the most possible is" in err
    assert len(err.strip().splitlines()) == 1
    base = Profile.from_preset("ethernet-10g", "v100")
    bad = Profile(
        params=base.params,
        covariance=base.covariance,
        leaf_names=base.leaf_names,
        prior=base.prior,
        reliable=False,
        heldout_p90=0.31,
    )
    path = tmp_path / "bad.json"
    bad.save(path)
    argv = ["recommend", "--profile", str(path), "--model", "resnet18", "--max-workers", "2"]
    code = main([*argv, "--arch", "ring", "--no-refine"])
    _, err = capsys.readouterr()
    assert code == 1
    assert "31.0%" in err and "15%" in err and "--force" in err
    doc = _json(capsys, [*argv, "--arch", "ring", "--no-refine", "--force"])
    assert doc["reliable"] is False
    assert any("unreliable" in w for w in doc["warnings"])


def test_missing_and_malformed_profile_files_exit_1(tmp_path, capsys):
    code = main(
        [
            "recommend",
            "--profile",
            str(tmp_path / "nope.json"),
            "--model",
            "resnet18",
            "--max-workers",
            "2",
        ]
    )
    _, err = capsys.readouterr()
    assert code == 1 and "nope.json" in err
    bad = tmp_path / "bad.json"
    bad.write_text("{not json\n")
    code = main(["recommend", "--profile", str(bad), "--model", "resnet18", "--max-workers", "2"])
    _, err = capsys.readouterr()
    assert code == 1 and "bad.json:1" in err


def test_layers_file_and_step_time(tmp_path, capsys):
    layers = tmp_path / "m.csv"
    layers.write_text(
        "name,params,fwd_flops\nfc1.weight,1000000,0\nfc1.bias,1000,0\nfc2.weight,10000,0\n"
    )
    doc = _json(
        capsys,
        [
            "recommend",
            "--preset",
            "ethernet-10g",
            "--layers",
            str(layers),
            "--step-time",
            "0.05",
            "--batch-size",
            "16",
            "--max-workers",
            "1",
            "--arch",
            "ring",
        ],
    )
    assert doc["architecture"] == "ring" and doc["workers"] == 1
    # one worker, no communication: the step is the measured single-worker step
    assert doc["iteration_time_s"] == pytest.approx(0.05, rel=1e-9)
    assert doc["breakdown"]["communication_s"] == 0.0


def test_help_explains_with_an_example(capsys):
    assert main(["recommend", "--help"]) == 0
    out, _ = capsys.readouterr()
    assert "examples:" in out and "--max-workers" in out and "ddltune recommend --preset" in out


def test_max_workers_defaults_to_reports_64(capsys):
    assert main([*BASE, "--arch", "ring", "--no-refine"]) == 0
    out = capsys.readouterr().out
    assert "up to 64 workers" in out
    assert 1 <= _figure(out, r"(\d+) workers?\b") <= 64


def test_sharding_for_memory_names_the_whole_need_per_rank(capsys):
    """Llama-2-7B on 8 DGX A100 nodes, bf16, 8 micro-batches: a replica does not fit, so fsdp
    wins for memory. The rationale's figure per rank is the chosen configuration's whole
    need (activations and buffers included), as memory_bytes_per_rank says, not the model
    states alone; the replica's need exceeds the device."""
    code = main(
        [
            *("recommend", "--model", "llama2_7b", "--batch-size", "4"),
            *("--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100"),
            *("--device-memory", "80G", "--optimizer", "adam", "--max-workers", "64"),
            *("--ranks-per-node", "8", "--grad-dtype", "bf16", "--accumulation-steps", "8"),
            "--json",
        ]
    )
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["architecture"] in ("fsdp", "hsdp")
    need = format_bytes(doc["memory_bytes_per_rank"])
    assert f"needs {need} per rank in all" in doc["rationale"]
    replica = doc["rationale"].split("a full replica (DDP) needs ")[1].split(",")[0]
    assert replica.endswith("GiB") and float(replica.split()[0]) > 80


def test_a_cpu_profile_says_the_overlapped_exchange_is_an_assumption():
    """validate predicts the ring without overlap on CPU (XLA:CPU runs collectives after
    compute), recommend with it (DDP overlaps): recommend now says which it assumed, on a CPU
    profile only (from a new user's trial)."""
    from tuner import recommend

    prof = Profile.from_preset("ethernet-10g", "cpu")
    w = get_workload("resnet50", 64)
    doc = json.loads(prof.to_json())
    doc["provenance"]["backend"] = "cpu"
    cpu = Profile.from_dict(doc)
    doc["provenance"]["backend"] = "gpu"
    gpu = Profile.from_dict(doc)
    kw = dict(max_workers=16, architectures=["ring"])
    (note,) = [m for m in recommend(cpu, w, **kw).warnings if "under backward" in m]
    assert "XLA:CPU" in note and "can change the pick" in note
    assert not [m for m in recommend(gpu, w, **kw).warnings if "under backward" in m]
    ps = recommend(cpu, w, max_workers=16, architectures=["ps"])
    assert not [m for m in ps.warnings if "under backward" in m]  # ps does not overlap


def test_one_worker_says_nothing_is_exchanged_and_compares_nothing(capsys):
    """`--max-workers 1`: every architecture and bucket is the same step (no exchange), so
    no runner-ups, no p_best, no framework settings for a 0 MiB bucket (a new user's
    trial found 'p_best 50 %', five identical runner-ups and DDP's bucket_cap_mb=0.0)."""
    argv = [*BASE, "--max-workers", "1"]
    doc = _json(capsys, argv)
    assert doc["workers"] == 1 and doc["alternatives"] == [] and doc["p_best"] is None
    assert doc["framework_settings"] == {}
    assert doc["breakdown"]["communication_s"] == 0.0
    w = get_workload("resnet18", int(doc["batch_size"]))
    for arch in ("ring", "p2p"):  # compute and the update only, whatever the exchange
        one = float(iteration_time(preset("ethernet-10g", "v100"), w, arch, 1).iteration_s)
        assert doc["iteration_time_s"] == pytest.approx(one, rel=1e-6)
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "Recommended: 1 worker, no gradient exchange" in out
    assert "communication    none (one worker)" in out and "nothing to choose" in out
    assert "Runner-ups" not in out and "bucket_cap_mb" not in out and "p_best 50" not in out
    # a search that reached more workers and found one best keeps its comparison
    many = _json(capsys, [*BASE, "--max-workers", "4"])
    assert many["workers"] > 1 and many["alternatives"]


def test_format_choices_names_the_nearest_valid_name_only_when_close():
    """difflib's ratio ≥ 0.6, ignoring case, '-' and '_'; nothing when nothing is near."""
    from costmodel import format_choices

    names = ["ring", "ps", "hierarchical", "ethernet-10g"]
    assert format_choices(names) == "ethernet-10g, hierarchical, ps, ring"
    assert format_choices(names, "rnig").endswith("(did you mean 'ring'?)")
    assert format_choices(names, "Ethernet_10G").endswith("(did you mean 'ethernet-10g'?)")
    assert format_choices(names, "hierarchy").endswith("(did you mean 'hierarchical'?)")
    assert "did you mean" not in format_choices(names, "fsdp")
    assert "did you mean" not in format_choices(names, "ring")  # not a typo
    assert "did you mean" not in format_choices(names, None)
