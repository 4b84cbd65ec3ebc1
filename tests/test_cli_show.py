"""``ddltune show``: summaries of measurement files and profiles, and bad input.

Counts and ranges are checked against the records written here (or against
the nccl-tests table imported from tests/data), not against a stored output.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from calibration import Profile, RecordWriter, import_nccl_tests, provenance, time_statistics
from costmodel import format_seconds
from tuner.cli import main

DATA = Path(__file__).parent / "data" / "nccl-tests"


def _collective(name, size, n, t):
    rec = {
        "schema": 1,
        "kind": "collective",
        "collective": name,
        "message_bytes": size,
        "num_ranks": n,
        "ranks_per_node": n,
        "dtype": "float32",
        "wrong": 0,
        "time_s": time_statistics([t, 1.1 * t, 1.2 * t]),
        "samples_s": [t, 1.1 * t, 1.2 * t],
    }
    return rec | provenance("test", backend="cpu", device_kind="cpu")


def _compute(flops, t, n):
    rec = {
        "schema": 1,
        "kind": "compute",
        "op": "matmul",
        "flops": flops,
        "num_ranks": n,
        "ranks_per_node": n,
        "dtype": "float32",
        "time_s": time_statistics([t]),
        "samples_s": [t],
    }
    return rec | provenance("test", backend="cpu", device_kind="cpu")


@pytest.fixture
def measurements(tmp_path):
    path = tmp_path / "m.jsonl"
    with RecordWriter(path) as w:
        for n in (2, 4):
            for k, size in enumerate((1024, 4096, 65536)):
                w.write(_collective("all_reduce", size, n, 1e-4 * (k + 1) * n))
        w.write(_collective("ps_push", 2048, 2, 3e-4))
        w.write(_compute(2e9, 0.1, 1))
        w.write(_compute(2e9, 0.4, 2))
    return path


def test_show_measurements_json(measurements, capsys):
    assert main(["show", str(measurements), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["type"] == "measurements" and doc["records"] == 9
    assert doc["kinds"] == {"collective": 7, "compute": 2}
    assert doc["backends"] == ["cpu"] and doc["hosts"] == 1
    ar4 = next(
        c for c in doc["collectives"] if c["collective"] == "all_reduce" and c["num_ranks"] == 4
    )
    assert (ar4["points"], ar4["min_bytes"], ar4["max_bytes"]) == (3, 1024, 65536)
    # medians of [t, 1.1t, 1.2t] are 1.1t
    assert ar4["min_time_s"] == pytest.approx(1.1 * 4e-4)
    assert ar4["max_time_s"] == pytest.approx(1.1 * 12e-4)
    gf = {c["num_ranks"]: c["max_gflop_s"] for c in doc["compute"]}
    assert gf == {1: pytest.approx(20.0), 2: pytest.approx(5.0)}


def test_show_measurements_text(measurements, capsys):
    assert main(["show", str(measurements)]) == 0
    out = capsys.readouterr().out
    assert "9 (7 collective, 2 compute)" in out
    assert "1 KiB – 64 KiB" in out and "ps_push" in out


def test_show_imported_nccl_tests(tmp_path, capsys):
    m = tmp_path / "nccl.jsonl"
    import_nccl_tests([DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt"], m)
    assert main(["show", str(m), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (s,) = doc["collectives"]
    assert (s["collective"], s["num_ranks"]) == ("all_reduce", 2)
    assert s["max_bytes"] == 1073741824 and s["min_bytes"] == 8  # from the table's first/last rows
    assert doc["device_kinds"] == ["NVIDIA GeForce RTX 2080 Ti"]
    # an import stamps every row alike: one time, not the same time twice
    assert main(["show", str(m)]) == 0
    (when,) = [ln for ln in capsys.readouterr().out.splitlines() if "when:" in ln]
    assert when.split("when:")[1].strip() == doc["first"] and "…" not in when


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("", "empty"),
        ('{"schema": 1, "kind": "collective"}\n', ":1:"),
        ("not json at all\n", "not a ddltune file"),
        ("#  size  count  type  time  algbw  busbw\n", "import-nccl-tests"),
        ('{"a": 1}', "neither a profile"),
        # ddltune's own other files (a new user's trial: the report, whose text says
        # busbw, read as nccl-tests output; the recommendation as an unknown object)
        ("<!DOCTYPE html>\n<html><td>busbw</td></html>\n", "this is an HTML page"),
        # report.md, which says busbw too, was sent to import-nccl-tests, which refused it
        ("# ddltune report: resnet50\n\n| busbw |\n", "this is a ddltune report (Markdown)"),
        # a recommendation (shown since; see below) without what recommend writes
        (
            '{"architecture": "ring", "label": "ring", "iteration_time_s": 1.0, "bucket_bytes": 0}',
            "'workers' must be an integer ≥ 1, got 'nothing'",
        ),
    ],
)
def test_show_bad_files(tmp_path, capsys, content, needle):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(content)
    assert main(["show", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and str(bad) in err


def test_show_truncated_line_names_the_line(measurements, tmp_path, capsys):
    cut = tmp_path / "cut.jsonl"
    text = measurements.read_text()
    cut.write_text(text[: len(text) - 40])
    assert main(["show", str(cut)]) == 1
    err = capsys.readouterr().err
    assert f"{cut}:9:" in err and "truncated" in err
    # where the JSON breaks, and what to do about it (the message ended "starting at")
    assert "(column " in err and "The lines before it are whole" in err and "--resume" in err


def test_a_line_cut_short_in_the_middle_names_the_column_where_it_ends(
    measurements, tmp_path, capsys
):
    """A record cut at 60 characters in the middle of the file (a new user's trial) read
    "Expecting value (column 1)": the column past the newline. It names the column where
    the line ends and says the record is cut short; the line is the right one."""
    lines = measurements.read_text().splitlines(keepends=True)
    head = lines[2][:60]
    lines[2] = head + "\n"
    cut = tmp_path / "mid.jsonl"
    cut.write_text("".join(lines))
    assert main(["show", str(cut)]) == 1
    err = capsys.readouterr().err.strip()
    assert f"{cut}:3: not valid JSON" in err and err.count("\n") == 0
    import json

    try:
        json.loads(head)
    except json.JSONDecodeError as e:
        assert f"(column {e.colno})" in err and e.colno > 1
    assert "cut short" in err and "--resume" not in err  # not the last line's advice


def test_show_a_cut_off_profile_names_where_its_json_breaks(tmp_path, capsys):
    """A profile cut short was called measurements ('give it as --profile …')."""
    from calibration import Profile

    text = Profile.from_preset("ethernet-10g", "v100").to_json()
    cut = tmp_path / "profile.json"
    cut.write_text(text[: len(text) // 3])
    assert main(["show", str(cut)]) == 1
    err = capsys.readouterr().err
    assert f"{cut}:" in err and "not valid JSON" in err and "(column " in err, err
    assert "not measurements" not in err and err.count("\n") == 1


def test_show_missing_and_usage(tmp_path, capsys):
    assert main(["show", str(tmp_path / "nope.jsonl")]) == 1
    assert "No such file" in capsys.readouterr().err
    assert main(["show", str(tmp_path)]) == 1
    assert "directory" in capsys.readouterr().err
    assert main(["show"]) == 2
    assert main(["show", "a", "b"]) == 2


def test_show_profile(tmp_path, capsys):
    from calibration import Profile

    prof = Profile.from_preset("ethernet-10g", "v100")
    path = prof.save(tmp_path / "profile.json")
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["type"] == "profile" and doc["reliable"] is True
    assert doc["heldout_p90"] is None  # a preset: nothing was held out
    table = prof.parameter_table()
    assert [p["name"] for p in doc["parameters"]] == [p["name"] for p in table]
    beta = next(p for p in doc["parameters"] if p["name"] == "beta_s_per_byte[inter]")
    assert beta["value"] == pytest.approx(1 / 1.125e9)  # 10 Gb/s × 90%: the preset's value
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "profile — reliable" in out
    assert "held-out error: none" in out
    assert "90% interval of a step" not in out  # a preset has no residual spread
    # β shown as a bandwidth in GB/s: 1.125 GB/s for ethernet-10g
    row = next(ln for ln in out.splitlines() if ln.strip().startswith("beta_s_per_byte[inter]"))
    assert "1.125" in row and "GB/s" in row


def test_parameter_rows_show_a_slow_link_in_mb_per_s_with_its_interval():
    """An emulated 200 Mbit/s NIC read 0.0224 GB/s; it reads 22.4 MB/s, the interval too."""
    from tuner import format_parameter_rows

    row = format_parameter_rows(
        [
            {
                "name": "beta_s_per_byte[inter]",
                "value": 1 / 22.4e6,
                "unit": "s/byte",
                "low": 1 / 23.5e6,
                "high": 1 / 21.4e6,
                "identified": True,
            }
        ]  # fmt: skip
    )[0]
    assert row[1:4] == ["22.4", "MB/s", "21.4 – 23.5"]
    slow = format_parameter_rows([{"name": "b", "value": 1 / 5e3, "unit": "s/byte"}])[0]
    assert slow[1:3] == ["5", "kB/s"]


def test_parameter_rows_show_bytes_in_a_unit_of_their_size():
    """A new user read a fitted 2.2 KiB head start as 2.06e-06 GiB (and the default
    9e-14 B as 8.7e-23 GiB): bytes read in GiB, MiB, KiB or B by size, the interval
    in the value's unit; device memory stays in GiB."""
    from tuner import format_parameter_rows

    def row(value, low=math.nan, high=math.nan):
        return format_parameter_rows(
            [{"name": "x", "value": value, "unit": "bytes", "low": low, "high": high}]
        )[0][1:4]

    assert row(16 * 2**30) == ["16", "GiB", "—"]
    assert row(2253.0, 2017.0, 2458.0) == ["2.2", "KiB", "1.97 – 2.4"]
    assert row(3 * 2**20) == ["3", "MiB", "—"]
    assert row(9.4e-14)[:2] == ["9.4e-14", "B"]


def test_a_share_fitted_to_almost_zero_reads_zero():
    """A new user read latency_overlap 5.2e-14 (a share in (0, 1)): it reads 0; a share of
    0.0001 and above keeps its figures, and so does a dimensionless value above 1."""
    from tuner import format_parameter_rows

    def value(v):
        return format_parameter_rows([{"name": "latency_overlap[intra]", "value": v, "unit": "1"}])[
            0
        ][1]

    assert value(5.2e-14) == "0"
    assert value(1.2e-4) == "0.00012"
    assert value(0.387) == "0.387"
    assert value(2.5) == "2.5"


def test_parameters_the_data_never_moved_from_none_read_none():
    """A new user read the default head start as 9.358e-14 B and the congestion cap as
    1.069e+13: a parameter at its "no such effect" default (costmodel.PARAMETER_NONE)
    and not identified reads "none", with no interval; the same name fitted, or an
    identified one, keeps its number. `ddltune show` says what "none" means."""
    from costmodel import PARAMETER_NONE, ClusterParams
    from tuner import format_parameter_rows

    d = ClusterParams.create().to_dict()
    rows = []
    for key in PARAMETER_NONE:
        v = d[key]
        for x in v if isinstance(v, list) else [v]:
            rows.append(
                {"name": key, "value": x, "low": x / 10, "high": x * 10, "identified": False}
            )
    got = format_parameter_rows(rows)
    assert len(got) == 11 and all(r[1:] == ["none", "", "—", "no"] for r in got)
    fitted = format_parameter_rows(
        [
            {"name": "head_start_bytes[inter]", "value": 2253.0, "identified": False},
            {
                "name": "all_to_all_congestion_cap",
                "value": 0.387,
                "low": 0.344,
                "high": 0.435,
                "identified": True,
            },
            {
                "name": "latency_overlap[inter]",
                "value": d["latency_overlap"][1],
                "identified": True,
            },
        ]  # fmt: skip
    )
    assert fitted[0][1:3] == ["2.2", "KiB"]
    assert fitted[1][1:] == ["0.387", "", "0.344 – 0.435", "yes"]
    assert fitted[2][1] != "none"  # identified at the default value: a finding, shown


def test_a_parameter_no_measurement_depends_on_reads_prior(measurements, tmp_path, capsys):
    """A new user's trial read alpha_s[inter] 25 µs and step_overhead_s 1000 µs of a
    one-node profile as measurements: they are the prior preset's, which no record
    depends on. parameter_table marks them at_prior (from the fit's free leaves; every
    parameter of a preset; unknown for a profile written without them) and show's table
    says "prior" in the identified column, "no" for what the data moved but did not pin."""
    from calibration import Profile, calibrate

    prof = calibrate(str(measurements))  # every record within one node (n = g)
    table = {r["name"]: r for r in prof.parameter_table()}
    assert table["alpha_s[inter]"]["at_prior"] is True
    assert table["step_overhead_s"]["at_prior"] is True
    assert table["call_overhead_s"]["at_prior"] is False
    assert table["alpha_s[intra]"]["at_prior"] is False
    path = prof.save(tmp_path / "p.json")
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    rows = {ln.split()[0]: ln.split()[-1] for ln in out.splitlines() if ln.startswith("  ")}
    assert rows["alpha_s[inter]"] == "prior" and rows["step_overhead_s"] == "prior"
    assert rows["call_overhead_s"] in ("yes", "no")
    assert "'prior' = no measurement depends on it" in out
    # the cache's two parameters are explained where they are listed (a new user's trial)
    from tuner import CACHE_NOTE

    assert CACHE_NOTE in " ".join(out.split()) and "cache_excess[intra]" in rows
    preset = Profile.from_preset("ethernet-10g", "v100").parameter_table()
    assert all(r["at_prior"] is True for r in preset)
    doc = json.loads(path.read_text())
    del doc["fit"]["free_leaves"]
    assert all(r["at_prior"] is None for r in Profile.from_dict(doc).parameter_table())


def test_show_malformed_profile(tmp_path, capsys):
    bad = tmp_path / "profile.json"
    bad.write_text('{"schema": 99, "kind": "profile", "params": {}}\n')
    assert main(["show", str(bad)]) == 1
    err = capsys.readouterr().err
    assert str(bad) in err and err.count("\n") == 1


def test_show_says_how_many_hosts_the_measuring_jobs_spanned(tmp_path, capsys):
    """Records of a job across nodes carry num_hosts (never the names): show lists the
    distinct counts beside the machines that wrote the file (one: rank 0's)."""
    path = tmp_path / "m.jsonl"
    with RecordWriter(path) as w:
        w.write(_collective("all_reduce", 1024, 2, 1e-4) | {"num_hosts": 1})
        w.write(_collective("all_reduce", 1024, 8, 2e-3) | {"ranks_per_node": 2, "num_hosts": 4})
    assert main(["show", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["hosts"] == 1 and doc["job_hosts"] == [1, 4]
    assert main(["show", str(path)]) == 0
    assert "written on 1 machine(s); jobs across 1, 4 host(s)" in capsys.readouterr().out


def test_show_on_a_ddltune_folder_summarises_its_profile(tmp_path, capsys):
    """A run folder given to show: a new user expected its summary (it said 'Is a
    directory'): the profile's, with the commands for the folder's other files; a folder
    with measurements only shows those; any other folder asks for a file."""
    from calibration import Profile

    Profile.from_preset("ethernet-10g", "v100").save(tmp_path / "profile.json")
    (tmp_path / "measurements.jsonl").write_text(
        json.dumps(_collective("all_reduce", 1024, 2, 1e-4)) + "\n"
    )
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "parameters (90% interval" in out
    assert f"the folder also holds: ddltune show {tmp_path / 'measurements.jsonl'})" in out
    assert main(["show", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["file"] == str(tmp_path / "profile.json")
    (tmp_path / "profile.json").unlink()
    assert main(["show", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "measurement records" in out and "folder also holds" not in out
    other = tmp_path / "empty"
    other.mkdir()
    assert main(["show", str(other)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a ddltune folder" in err
    assert err.count("give a file") == 1 and "give a file, not a folder" in err
    # a folder of other files: the hint names them, and says "give a file" once (it said
    # "give a .jsonl or .json file; give a file, for example …": a new user's trial)
    (other / "mine.jsonl").write_text("")
    assert main(["show", str(other)]) == 1
    err = capsys.readouterr().err
    assert err.count("give a") == 1 and f"give a file, for example {other / 'mine.jsonl'}" in err


def test_show_prints_the_profiles_notes(tmp_path, capsys):
    """A profile's notes (a training point the fit does not follow, an optimiser that
    stopped early) were printed by calibrate and the report, not by show."""
    from calibration import Profile

    path = Profile.from_preset("ethernet-10g", "v100").save(tmp_path / "p.json")
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "notes": ["the fit does not follow 1 measured point"]}))
    assert main(["show", str(path)]) == 0
    assert "note: the fit does not follow 1 measured point" in capsys.readouterr().out


def test_show_a_recommendation_and_the_folder_names_it(tmp_path, capsys):
    """`show recommendation.json` (a new user's trial: no command showed the run's
    recommendation again, and show refused the file) prints the configuration, its step
    with the 90% interval, why, the runners-up and the warnings; --json gives the file's
    fields back; a run folder's summary names it among the folder's other files."""
    argv = ["recommend", "--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50",
            "--max-workers", "8", "--json"]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    run = tmp_path / "R"
    run.mkdir()
    (run / "recommendation.json").write_text(json.dumps(doc))
    assert main(["show", str(run / "recommendation.json")]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == doc["message"]
    lo, hi = doc["interval_s"]
    assert f"step {format_seconds(doc['iteration_time_s'])} (90%: {format_seconds(lo)} – " \
           f"{format_seconds(hi)})" in out  # fmt: skip
    assert f"why: {doc['rationale']}" in out and "runners-up:" in out
    assert doc["alternatives"][0]["label"] in out.split("runners-up:")[1]
    assert main(["show", str(run / "recommendation.json"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["iteration_time_s"] == doc["iteration_time_s"]
    # run's file says whether the memory per rank counts activations (transformers only):
    # a new user read ResNet-50's 292 MiB at batch 64 as what a run needs
    from tuner import NO_ACTIVATIONS

    for counted in (False, True):
        (run / "recommendation.json").write_text(
            json.dumps({**doc, "workload": {"name": "x", "activations_in_memory": counted}})
        )
        assert main(["show", str(run / "recommendation.json")]) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if "memory per rank" in ln)
        assert (f"({NO_ACTIVATIONS})" in line) is not counted
    (run / "recommendation.json").write_text(json.dumps(doc))
    # the folder: its profile first where it has one, the recommendation named after it
    Profile.from_preset("ethernet-10g", "cpu").save(run / "profile.json")
    assert main(["show", str(run)]) == 0
    assert f"ddltune show {run / 'recommendation.json'}" in capsys.readouterr().out
    (run / "profile.json").unlink()
    assert main(["show", str(run)]) == 0
    assert capsys.readouterr().out.splitlines()[0] == doc["message"]
