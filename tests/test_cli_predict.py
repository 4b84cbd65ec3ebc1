"""``ddltune predict``: the rows are the model's numbers, nccl-tests' bandwidth
definitions hold, and bad input is one line naming the flag (exit 2, or 1 for files)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from costmodel import collective_time, get_workload, iteration_time, preset
from tuner.cli import main

DATA = Path(__file__).parent / "data"
BREAKDOWN_KEYS = {
    "forward_s",
    "backward_s",
    "communication_s",
    "exposed_communication_s",
    "update_s",
    "overhead_s",
    "iteration_s",
    "throughput_samples_per_s",
    "scaling_efficiency",
    "num_buckets",
}


def _run(capsys, *argv):
    code = main(["predict", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _json(capsys, *argv):
    code, out, err = _run(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)  # exactly one JSON document


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ddltune predict: error: ")
    return lines[0]


# ---------------------------------------------------------------------------
# Iteration mode
# ---------------------------------------------------------------------------
def test_iteration_rows_are_the_models_breakdown(capsys):
    doc = _json(
        capsys,
        *("--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50"),
        *("--arch", "ps,p2p,ring", "--servers", "1,2", "--workers", "4,32"),
        *("--bucket-bytes", "0,25M"),
    )
    rows = doc["rows"]
    # ps × 2 servers × 2 workers × 2 buckets, p2p and ring × 2 × 2
    assert len(rows) == 8 + 4 + 4
    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    for r in rows:
        assert {
            "architecture",
            "servers",
            "colocated",
            "workers",
            "ranks_per_node",
            "bucket_bytes",
            "time_s",
        } | BREAKDOWN_KEYS <= set(r)
        assert r["time_s"] == r["iteration_s"]
        assert (r["servers"] is None) == (r["architecture"] != "ps")
        want = iteration_time(
            p,
            w,
            r["architecture"],
            r["workers"],
            servers=r["servers"] or 1,
            bucket_bytes=r["bucket_bytes"],
        )
        for key in BREAKDOWN_KEYS:
            assert r[key] == pytest.approx(float(getattr(want, key)), rel=1e-12), (r, key)
    assert {r["bucket_bytes"] for r in rows} == {0, 25 * 1024**2}
    assert doc["workload"]["name"] == "resnet50" and doc["workload"]["batch_size"] == 64
    # the paper's finding is visible in the command's own output
    t = {(r["architecture"], r["workers"]): r["time_s"] for r in rows if r["bucket_bytes"]}
    t_ps1 = {
        r["workers"]: r["time_s"]
        for r in rows
        if r["architecture"] == "ps" and r["servers"] == 1 and r["bucket_bytes"]
    }
    assert t_ps1[32] / t_ps1[4] >= 5 and t[("ring", 32)] / t[("ring", 4)] < 1.5


def test_table_has_units_and_one_line_per_configuration(capsys):
    code, out, err = _run(
        capsys,
        *("--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50"),
        *("--arch", "ps,p2p,ring", "--workers", "4,8,16,32"),
    )
    assert code == 0 and err == ""
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("arch"))
    for unit in ("iteration ms", "exposed ms", "samples/s", "efficiency %"):
        assert unit in header
    body = [line for line in lines if line.split()[:1] and line.split()[0] in ("ps", "p2p", "ring")]
    assert len(body) == 12
    assert "resnet50" in lines[0] and "ethernet-10g" in lines[0]
    # the columns add up: iteration = forward + backward + exposed + update + overhead
    assert "overhead ms" in header
    for line in body:
        it, fwd, bwd, _comm, exposed, update, overhead = map(float, line.split()[6:13])
        assert abs(fwd + bwd + exposed + update + overhead - it) <= 0.03, line


def test_colocated_servers_batch_and_ranks_per_node(capsys):
    doc = _json(
        capsys,
        *("--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100", "--model", "bert_base"),
        *("--arch", "ps,hierarchical", "--servers", "4", "--colocated", "--workers", "16"),
        *("--ranks-per-node", "8", "--batch-size", "32", "--bucket-bytes", "100M"),
    )
    ps, hier = doc["rows"]
    assert ps["colocated"] is True and hier["colocated"] is False
    assert ps["servers"] == 4 and ps["ranks_per_node"] == 8 and ps["bucket_bytes"] == 100 * 2**20
    w = get_workload("bert_base", 32)
    p = preset("ib-hdr-200g,nvlink-a100", "a100", model_kind=w.kind)  # transformer MFU
    want = iteration_time(
        p, w, "ps", 16, servers=4, colocated=True, ranks_per_node=8, bucket_bytes=100 * 2**20
    )
    assert ps["time_s"] == pytest.approx(float(want.iteration_s), rel=1e-12)
    assert ps["throughput_samples_per_s"] == pytest.approx(16 * 32 / ps["time_s"], rel=1e-12)


def test_layer_file_and_measured_step_time(capsys):
    # One worker, no communication: the iteration is the measured step.
    doc = _json(
        capsys,
        *("--preset", "ethernet-25g", "--layers", str(DATA / "layers_example.json")),
        *("--batch-size", "32", "--step-time", "0.41", "--arch", "ring", "--workers", "1,8"),
    )
    one, eight = doc["rows"]
    assert one["time_s"] == pytest.approx(0.41, rel=1e-12)
    assert one["scaling_efficiency"] == pytest.approx(1.0, rel=1e-12)
    assert eight["time_s"] > one["time_s"]
    assert doc["workload"]["name"] == "lenet5" and doc["workload"]["step_time_s"] == 0.41


# ---------------------------------------------------------------------------
# Collective mode
# ---------------------------------------------------------------------------
def test_collective_rows_follow_nccl_tests_definitions(capsys):
    sizes = "1K,1M,64M,1G,64G"
    doc = _json(
        capsys,
        *("--preset", "ib-edr-100g", "--device", "v100", "--collective", "all_reduce"),
        *("--num-ranks", "16", "--message-bytes", sizes),
    )
    rows = doc["rows"]
    p = preset("ib-edr-100g", "v100")
    S = np.array([1024, 1024**2, 64 * 1024**2, 1024**3, 64 * 1024**3])
    t = np.asarray(collective_time(p, "all_reduce", S, 16, 1))
    assert [r["message_bytes"] for r in rows] == S.tolist()
    for r, s, ti in zip(rows, S, t, strict=True):
        assert {"collective", "num_ranks", "message_bytes", "time_s", "algbw", "busbw"} <= set(r)
        assert r["time_s"] == pytest.approx(float(ti), rel=1e-13)
        assert r["algbw"] == pytest.approx(s / ti, rel=1e-13)
        assert r["busbw"] == pytest.approx(s / ti * 2 * 15 / 16, rel=1e-13)
    # busbw grows with the size towards the link's bandwidth (0.92 × 100 Gb/s / 8);
    # within 10 %: the preset's NIC cap equals the link, which the smooth max blurs
    # (tests/test_presets.py::test_preset_busbw_reaches_the_link_rate)
    link = 0.92 * 100e9 / 8
    assert 0.9 * link < rows[-1]["busbw"] < link
    assert all(a["busbw"] < b["busbw"] for a, b in zip(rows, rows[1:], strict=False))


def test_a_profile_measured_on_one_node_says_its_network_across_nodes_is_the_prior():
    """A new user's trial: `ddltune run` on one machine (2 ranks, 2 per node) recommended
    64 workers on 32 nodes, whose network no record measured, saying so only as the
    report's "prior: ethernet-10g,shm:cpu". Predictions across nodes from such a profile
    now say the network there is the prior preset's datasheet link; within one node, or
    from a profile with records across nodes, they do not."""
    from tuner._predict import topology_warnings, unmeasured_network_warning

    class OneNode:
        measured_ranges = {"num_ranks": [2, 2], "ranks_per_node": [2, 2]}
        prior = {"network": "ethernet-10g,shm", "device": "cpu"}

    class Across:
        measured_ranges = {"num_ranks": [2, 4], "ranks_per_node": [1, 1]}
        prior = OneNode.prior

    w = unmeasured_network_warning(OneNode(), 64, 2)
    assert w is not None and "32 nodes" in w and "ethernet-10g datasheet link" in w
    assert "--prior-preset" in w and ",shm" not in w
    assert w in topology_warnings(OneNode(), 64, 2)
    assert unmeasured_network_warning(OneNode(), 2, 2) is None  # within the node
    assert unmeasured_network_warning(OneNode(), 2, 8) is None
    assert unmeasured_network_warning(Across(), 64, 1) is None  # measured across nodes
    assert unmeasured_network_warning(None, 64, 1) is None


def test_an_unreliable_profile_is_named_with_every_prediction(tmp_path, capsys):
    """A new user's trial: `predict` answered from an UNRELIABLE profile (held-out p90
    15.7%) without a word, where `recommend` refused it. Both modes now warn, with the
    figure and the limit; a reliable profile gives no such warning. A hand-edited
    "reliable": true over a p90 beyond the limit is refused, naming the key."""
    from calibration import Profile

    path = tmp_path / "p.json"
    Profile.from_preset("ethernet-10g", "v100").save(path)
    doc = json.loads(path.read_text())
    clean = ("--profile", str(path), "--model", "resnet50", "--arch", "ring", "--workers", "4")
    code, _, err = _run(capsys, *clean)
    assert code == 0 and "UNRELIABLE" not in err
    path.write_text(json.dumps({**doc, "reliable": False, "heldout_p90": 0.157}))
    code, _, err = _run(capsys, *clean)
    assert (
        code == 0
        and "the profile is marked UNRELIABLE (held-out p90 error 15.7%, limit 15%)" in err
    )
    code, _, err = _run(capsys, "--profile", str(path), "--collective", "all_reduce",
                        "--num-ranks", "4", "--message-bytes", "1M")  # fmt: skip
    assert code == 0 and err.count("UNRELIABLE") == 1
    path.write_text(json.dumps({**doc, "reliable": True, "heldout_p90": 0.157}))
    code, _, err = _run(capsys, *clean)
    assert code == 1 and "'reliable' is true but 'heldout_p90' 0.157" in _one_line_error(err)


def test_collective_mode_takes_several_rank_counts(capsys):
    """--num-ranks 2,3,8 (a new user's trial expected a list, as --workers takes): a table
    per rank count in that order, each row as the one-count command gives it; --json rows
    carry their num_ranks; a repeated count is predicted once."""
    argv = ("--preset", "ethernet-10g", "--collective", "all_to_all", "--message-bytes", "1M,4M")
    doc = _json(capsys, *argv, "--num-ranks", "2,3,8,3")
    assert [(r["num_ranks"], r["message_bytes"]) for r in doc["rows"]] == [
        (n, s) for n in (2, 3, 8) for s in (2**20, 2**22)
    ]
    for n in (2, 3, 8):
        one = _json(capsys, *argv, "--num-ranks", str(n))["rows"]
        assert [r for r in doc["rows"] if r["num_ranks"] == n] == one
    assert main(["predict", *argv, "--num-ranks", "2,3,8"]) == 0
    text = capsys.readouterr().out
    heads = [ln for ln in text.splitlines() if ln.startswith("all_to_all (pairwise)")]
    assert [h.split(",")[1].strip() for h in heads] == ["2 ranks", "3 ranks", "8 ranks"]


@pytest.mark.parametrize(
    ("collective", "factor"),
    [("all_gather", 7 / 8), ("reduce_scatter", 7 / 8), ("broadcast", 1.0), ("ps_push", 1.0)],
)
def test_busbw_factor_per_collective(capsys, collective, factor):
    doc = _json(
        capsys,
        *("--preset", "ethernet-100g", "--collective", collective),
        *("--num-ranks", "8", "--message-bytes", "4M"),
    )
    (r,) = doc["rows"]
    assert r["busbw"] == pytest.approx(r["algbw"] * factor, rel=1e-13)
    assert r["algbw"] == pytest.approx(4 * 2**20 / r["time_s"], rel=1e-13)


def test_collective_table_and_algorithm(capsys):
    code, out, _ = _run(
        capsys,
        *("--preset", "ib-edr-100g,nvlink-v100", "--collective", "all_reduce"),
        *("--algorithm", "hierarchical", "--num-ranks", "16", "--ranks-per-node", "8"),
        *("--message-bytes", "1K,1G"),
    )
    assert code == 0
    assert "all_reduce (hierarchical), 16 ranks, 8 per node" in out
    header = next(line for line in out.splitlines() if line.startswith("size"))
    for unit in ("time µs", "algbw GB/s", "busbw GB/s"):
        assert unit in header


def test_one_rank_collective_has_no_bandwidth(capsys):
    (r,) = _json(
        capsys,
        *("--preset", "ethernet-10g", "--collective", "all_reduce"),
        *("--num-ranks", "1", "--message-bytes", "1M"),
    )["rows"]
    assert r["time_s"] == 0.0 and r["algbw"] is None and r["busbw"] is None


# ---------------------------------------------------------------------------
# Profiles
# ---------------------------------------------------------------------------
def test_profile_gives_the_same_numbers_and_an_interval(tmp_path, capsys):
    # A profile that holds exactly the preset (the prior before any measurement):
    # the same predictions, now with a 90% interval around each.
    from calibration import Profile

    path = tmp_path / "prior.json"
    Profile.from_preset("ethernet-10g", "v100").save(path)
    args = ("--model", "resnet50", "--arch", "ring,ps", "--workers", "4,32")
    with_profile = _json(capsys, "--profile", str(path), *args)["rows"]
    with_preset = _json(capsys, "--preset", "ethernet-10g", "--device", "v100", *args)["rows"]
    for a, b in zip(with_profile, with_preset, strict=True):
        assert a["time_s"] == pytest.approx(b["time_s"], rel=1e-9)
        lo, hi = a["interval_s"]
        assert 0 < lo < a["time_s"] < hi
        assert "interval_s" not in b
    rows = _json(
        capsys,
        *("--profile", str(path), "--collective", "all_gather"),
        *("--num-ranks", "8", "--message-bytes", "1K,1G"),
    )["rows"]
    assert all(r["interval_s"][0] < r["time_s"] < r["interval_s"][1] for r in rows)
    code, out, _ = _run(capsys, "--profile", str(path), *args)
    assert code == 0 and "90% interval ms" in out
    # a profile holds its device: --device is a usage error
    code, _, err = _run(capsys, "--profile", str(path), "--device", "a100", *args)
    assert code == 2 and "--device" in _one_line_error(err)
    # a missing profile file is a file problem: exit 1, naming the file
    code, _, err = _run(capsys, "--profile", str(tmp_path / "none.json"), *args)
    assert code == 1 and "none.json" in _one_line_error(err)


# ---------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------
ITER = ("--preset", "ethernet-10g", "--model", "resnet50", "--arch", "ring", "--workers", "4")
COLL = ("--preset", "ethernet-10g", "--collective", "all_reduce", "--num-ranks", "4")


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            (*COLL, "--message-bytes", "1K", "--collective", "allreduce"),
            ["--collective", "ps_push"],
        ),
        (("--preset", "ethernet-1g", *ITER[2:]), ["--preset", "ethernet-1g", "ib-hdr-200g"]),
        ((*ITER, "--device", "v200"), ["--device", "v200", "a100"]),
        ((*ITER[:4], "--arch", "ring,allreduce", "--workers", "4"), ["--arch", "p2p"]),
        ((*ITER[:2], "--model", "resnet5", *ITER[4:]), ["--model", "resnet50", "--layers"]),
        ((*ITER[:-1], "0,4"), ["--workers", "≥ 1"]),
        ((*ITER[:-1], "4,,8"), ["--workers", "empty item", "4,,8"]),
        ((*COLL[:-1], "0", "--message-bytes", "1K"), ["--num-ranks", "≥ 1"]),
        ((*COLL[:-1], "2,,3", "--message-bytes", "1K"), ["--num-ranks", "empty item"]),
        ((*COLL[:-1], "2,3x", "--message-bytes", "1K"), ["--num-ranks", "2,3x"]),
        ((*COLL, "--message-bytes=-1K"), ["--message-bytes", "-1K"]),
        ((*COLL, "--message-bytes", "1Q"), ["--message-bytes", "suffix"]),
        ((*COLL, "--message-bytes", "1K,,2K"), ["--message-bytes", "empty item", "1K,,2K"]),
        (
            (*COLL, "--message-bytes", "0,1K"),
            ["--message-bytes", "at least 1 byte, got '0' in '0,1K'"],
        ),
        ((*ITER, "--batch-size", "0"), ["--batch-size", "≥ 1"]),
        ((*ITER, "--batch-size", "-3"), ["--batch-size"]),
        ((*ITER, "--step-time", "0"), ["--step-time", "> 0"]),
        ((*ITER, "--ranks-per-node", "0"), ["--ranks-per-node"]),
        ((*ITER, "--colocated"), ["--colocated", "ps"]),
        ((*ITER, "--servers", "2"), ["--servers", "ps"]),
        ((*ITER, "--collective", "all_reduce"), ["--collective", "--model"]),
        ((*COLL, "--message-bytes", "1K", "--algorithm", "ring2"), ["--algorithm", "tree"]),
        (
            (
                *COLL[:3],
                "all_gather",
                "--algorithm",
                "tree",
                "--num-ranks",
                "4",
                "--message-bytes",
                "1",
            ),
            ["--algorithm", "all_gather has one algorithm"],
        ),
        (ITER[2:], ["--preset", "--profile"]),
        (ITER[:2], ["--model", "--collective"]),
        (ITER[:4], ["--arch", "--workers"]),
        (COLL, ["--message-bytes"]),
        ((*ITER, "--preset", "ethernet-10g", "--profile", "p.json"), ["--profile", "--preset"]),
    ],
)
def test_usage_errors_are_one_line_exit_2(capsys, argv, words):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    line = _one_line_error(err)
    for w in words:
        assert w in line, line


def test_malformed_layer_file_is_exit_1_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("name,params,fwd_flops\nfc.weight,7840,0\nfc.bias,-10,15690\n")
    code, _, err = _run(
        capsys, "--preset", "ethernet-10g", "--layers", str(bad), "--arch", "ring", "--workers", "2"
    )
    assert code == 1
    assert f"{bad}:3" in _one_line_error(err)
    code, _, err = _run(
        capsys, "--preset", "ethernet-10g", "--layers", str(tmp_path / "none.json"), *ITER[4:]
    )
    assert code == 1 and "none.json: no such file" in _one_line_error(err)


def test_help_explains_the_options_with_an_example(capsys):
    code = main(["predict", "--help"])
    out = capsys.readouterr().out
    assert code == 0
    for opt in (
        "--preset",
        "--profile",
        "--device",
        "--model",
        "--layers",
        "--batch-size",
        "--step-time",
        "--arch",
        "--servers",
        "--colocated",
        "--workers",
        "--ranks-per-node",
        "--bucket-bytes",
        "--collective",
        "--algorithm",
        "--num-ranks",
        "--message-bytes",
        "--json",
    ):
        assert opt in out, opt
    assert "ddltune predict --preset ethernet-10g --device v100 --model resnet50" in out
    for unit in ("ms", "samples/s", "µs", "GB/s", "powers of 1024"):
        assert unit in out
    assert main(["--help"]) == 0 and "predict" in capsys.readouterr().out


# ---------------------------------------------------------------------------
# The library functions the CLI calls
# ---------------------------------------------------------------------------
def test_predict_functions_are_the_cli_rows_and_name_bad_arguments(capsys):
    import tuner
    from calibration import Profile

    p = preset("ethernet-10g", "v100")
    w = get_workload("resnet50", 64)
    rows = tuner.predict_iterations(p, w, ["ps", "ring"], [4, 8], servers=[1, 2], ranks_per_node=2)
    # ps × 2 servers × 2 workers, ring × 2 workers (servers None), in the CLI's order
    assert [(r["architecture"], r["servers"], r["workers"]) for r in rows] == [
        ("ps", 1, 4), ("ps", 1, 8), ("ps", 2, 4), ("ps", 2, 8), ("ring", None, 4), ("ring", None, 8)
    ]  # fmt: skip
    for r in rows:
        t = iteration_time(
            p, w, r["architecture"], r["workers"], ranks_per_node=2, servers=r["servers"] or 1
        )
        assert r["time_s"] == pytest.approx(float(t.iteration_s), rel=1e-12)
    cli = _json(
        capsys,
        *("--preset", "ethernet-10g", "--model", "resnet50", "--arch", "ps,ring"),
        *("--workers", "4,8", "--servers", "1,2", "--ranks-per-node", "2"),
    )["rows"]
    assert [r["time_s"] for r in cli] == pytest.approx([r["time_s"] for r in rows], rel=1e-12)
    coll = tuner.predict_collective(Profile.from_preset("ethernet-10g", "v100"), "all_reduce",
                                    [1024, 2**20], 8)  # fmt: skip
    assert [r["message_bytes"] for r in coll] == [1024, 2**20]
    assert all(r["interval_s"][0] < r["time_s"] < r["interval_s"][1] for r in coll)
    with pytest.raises(ValueError, match="colocated"):
        tuner.predict_iterations(p, w, ["ring"], [4], colocated=True)
    with pytest.raises(ValueError, match="unknown architecture 'rign'"):
        tuner.predict_iterations(p, w, ["rign"], [4])
    with pytest.raises(ValueError, match="workers: expected at least one"):
        tuner.predict_iterations(p, w, ["ring"], [])
    with pytest.raises(TypeError, match="cluster"):
        tuner.predict_collective("ethernet-10g", "all_reduce", [1024], 8)


def test_compute_dtype_follows_the_gradient_dtype_and_is_refused_with_a_profile(capsys, tmp_path):
    base = ("--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100", "--model", "gpt2",
            "--arch", "ring", "--workers", "1", "--batch-size", "8")  # fmt: skip
    tf32 = _json(capsys, *base)["rows"][0]
    bf16 = _json(capsys, *base, "--grad-dtype", "bf16")["rows"][0]
    explicit = _json(capsys, *base, "--compute-dtype", "bf16")["rows"][0]
    # bf16's dense peak is twice TF32's on the A100: compute halves
    assert bf16["forward_s"] == pytest.approx(tf32["forward_s"] / 2)
    assert explicit["forward_s"] == pytest.approx(bf16["forward_s"])
    code, _, err = _run(capsys, *base, "--compute-dtype", "bf16", "--device", "v100")
    assert code == 2 and "--compute-dtype" in _one_line_error(err) and "fp16" in err
    from calibration import Profile

    path = tmp_path / "p.json"
    Profile.from_preset("ethernet-10g", "v100").save(path)
    code, _, err = _run(capsys, "--profile", str(path), "--model", "gpt2", "--arch", "ring",
                        "--workers", "2", "--compute-dtype", "bf16")  # fmt: skip
    assert code == 2 and "--compute-dtype applies to --preset" in _one_line_error(err)


def test_fsdp_units_beyond_the_measured_sizes_say_how_far_and_what_to_collect(tmp_path, capsys):
    # issue 24, item 7: a 7B decoder's FSDP units are hundreds of MB whatever the bucket
    # cap; a profile measured up to the 16 MiB of `ddltune run` extrapolates to them.
    # Before: the warning checked the 25 MiB buckets of the cap, not the units.
    from calibration import Profile
    from costmodel import get_architecture
    from costmodel.architectures import unit_bytes

    prof = Profile.from_preset("ib-hdr-200g,nvlink-a100", "a100")
    prof.measured_ranges = {"message_bytes": [1024, 16 * 2**20], "num_ranks": [2, 16],
                            "ranks_per_node": [8, 8], "collectives": ["all_gather",
                            "reduce_scatter", "all_reduce"]}  # fmt: skip
    path = tmp_path / "p.json"
    prof.save(path)
    doc = _json(capsys, "--profile", str(path), "--model", "llama2_7b", "--arch", "fsdp",
                "--workers", "16", "--ranks-per-node", "8", "--grad-dtype", "bf16")  # fmt: skip
    (row,) = doc["rows"]
    (w,) = [x for x in row["warnings"] if "outside the measured sizes" in x]
    w16 = get_workload("llama2_7b", 1, dtype_bytes=2)
    units = unit_bytes(w16)
    assert get_architecture("fsdp").keeps_root(w16)
    largest = float(units.max())  # the root: embed_tokens + lm_head + norm, 500 MiB
    assert largest == (2 * 32000 * 4096 + 4096) * 2
    assert w.startswith("extrapolation: FSDP unit messages of 386 MiB–500 MiB")
    assert f"the largest is {largest / 2**24:.3g}× the largest measured" in w
    assert w.endswith("ddltune collect --max-bytes 1G")  # 1 KiB × 4^k: 512M would stop at 256 MiB
    # measured up to 1 GiB: no warning
    prof.measured_ranges["message_bytes"] = [1024, 2**30]
    prof.save(path, overwrite=True)
    doc = _json(capsys, "--profile", str(path), "--model", "llama2_7b", "--arch", "fsdp",
                "--workers", "16", "--ranks-per-node", "8", "--grad-dtype", "bf16")  # fmt: skip
    assert not [x for x in doc["rows"][0]["warnings"] if "outside the measured sizes" in x]


@pytest.mark.parametrize("steps", ["0", "-3", "1.5", "65537", "99999999999999999999"])
def test_accumulation_steps_out_of_range_is_one_line_naming_it(capsys, steps):
    # before: 1e20 micro-batches were accepted (exit 0) and printed an exposed time
    # 45,000x the communication
    code = main(["predict", "--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50",
                 "--arch", "ring", "--workers", "8", "--accumulation-steps", steps])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1 and "--accumulation-steps" in err


def test_the_cpu_preset_says_how_it_slows_small_gemms(capsys):
    """The cluster line names the CPU preset's small-GEMM rate, m / (m + 16), beside its
    FLOP rate; a GPU preset (no such term) says nothing of it."""
    base = ("--model", "resnet50", "--arch", "ring", "--workers", "2", "--preset", "ethernet-10g")
    code, out, _ = _run(capsys, *base, "--device", "cpu")
    assert code == 0 and "a GEMM of smallest dimension m at m / (m + 16) of it" in out
    code, out, _ = _run(capsys, *base, "--device", "v100")
    assert code == 0 and "smallest dimension" not in out


def test_predictions_with_a_profile_run_its_interval_in_numpy_and_match_the_jitted_one():
    """``ddltune predict --profile`` took 4–7 s on the jitted interval (vmapped over the
    sigma points); it now evaluates every perturbed parameter set in one numpy call, as
    ``recommend`` does. The intervals are the jitted path's (tangents: central differences
    against jax.jvp) for iterations and for a collective, on a fitted-like profile (the
    link's, the compute rate's, the fan-in's and step_comm_factor's leaves ×1.5 either way)."""
    import copy

    import tuner
    from calibration import Profile
    from costmodel import get_workload

    base = Profile.from_preset("ethernet-10g", "v100")
    spread = ("log_alpha[inter]", "log_beta[inter]", "log_alpha[intra]", "log_beta[intra]",
              "log_flops", "log_step_comm", "log_fanin")  # fmt: skip
    var = [math.log(1.5) ** 2 if n in spread else 0.0 for n in base.leaf_names]
    prof = Profile(
        params=base.params, covariance=np.diag(var), leaf_names=base.leaf_names, prior=base.prior
    )

    class JaxOnly(Profile):
        def interval(self, fn, level=0.9, *, of="steps"):  # no batched: the jitted path
            return super().interval(fn, level, of=of)

    jax_only = copy.copy(prof)
    jax_only.__class__ = JaxOnly
    w = get_workload("alexnet", 32)  # few tensors: the jitted path compiles fast
    rows = {}
    for name, p in (("numpy", prof), ("jax", jax_only)):
        its = tuner.predict_iterations(p, w, ["ps"], [2, 8], bucket_bytes=[25 << 20])
        coll = tuner.predict_collective(
            p, "all_reduce", [1024, 1 << 20, 1 << 26], 8, ranks_per_node=4
        )
        rows[name] = [r["interval_s"] for r in its + coll]
    assert len(rows["numpy"]) == 2 + 3
    for a, b in zip(rows["numpy"], rows["jax"], strict=True):
        assert a[0] < a[1]
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_steps_of_ten_seconds_and_more_are_tabled_in_seconds(capsys):
    """A new user's CPU steps of 25 s read '25000.00' under 'iteration ms': a table whose
    longest step takes 10 s or more is in seconds, every time column alike, and still adds up."""
    argv = ("--preset", "ethernet-10g", "--device", "cpu", "--model", "resnet50")
    code, out, _ = _run(capsys, *argv, "--arch", "ring", "--workers", "2,4")
    assert code == 0
    lines = out.splitlines()
    header = next(line for line in lines if line.startswith("arch"))
    assert "iteration s" in header and "overhead s" in header and " ms" not in header
    doc = _json(capsys, *argv, "--arch", "ring", "--workers", "2,4")
    rows = [line for line in lines if line.startswith("ring")]
    for line, r in zip(rows, doc["rows"], strict=True):
        it = float(line.split()[6])  # after the bucket, "25 MiB"
        assert r["iteration_s"] >= 10.0
        assert it == pytest.approx(r["iteration_s"], abs=0.0006)
