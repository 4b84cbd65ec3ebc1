"""``ddltune run``: the main job end to end, its files, and bad input.

The fast test feeds ``--measurements`` a small synthetic file whose times the
model cannot explain (each size's time multiplied by a seeded random factor
of up to ×4): the held-out error is then far over the tuner's 15% limit, so
the run must still finish, force the recommendation and mark it UNRELIABLE
with the refusal's reason — the path a noisy machine takes. The real run
(local worker processes measuring this machine) is marked slow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from calibration import RecordWriter, provenance, read_records, time_statistics
from costmodel import collective_time, preset
from tuner.cli import build_parser, main


@pytest.fixture(autouse=True)
def no_compilation_cache(monkeypatch):
    """The CLI keeps compiled programs in ~/.cache/ddltune/jax; tests leave it alone."""
    monkeypatch.setenv("DDLTUNE_NO_COMPILATION_CACHE", "1")


FIGURES = {
    "collectives.png",
    "busbw.png",
    "scaling.png",
    "buckets.png",
    "timeline.png",
    "sensitivity.png",
}
DATA = {"measurements.jsonl", "profile.json", "recommendation.json"}


def _noisy_file(path: Path, spike: int | None = None) -> int:
    """Records from a CPU preset, each time × exp(U(−0.7, 0.7)): unexplainable by any fit;
    ``spike``: all_reduce at that many bytes 8× slower still (a point the fit cannot follow)."""
    p = preset("ethernet-10g", "cpu")
    rng = np.random.default_rng(1)
    n_rec = 0
    with RecordWriter(path) as w:
        for name in ("all_reduce", "ps_push"):
            for s in 2 ** np.arange(10, 25, 2):
                t = float(collective_time(p, name, float(s), 2.0, 2.0))
                samples = [t * float(np.exp(rng.uniform(-0.7, 0.7)))] * 3
                if name == "all_reduce" and s == spike:
                    samples = [8 * x for x in samples]
                w.write(
                    {
                        "schema": 1,
                        "kind": "collective",
                        "collective": name,
                        "message_bytes": int(s),
                        "num_ranks": 2,
                        "ranks_per_node": 2,
                        "dtype": "float32",
                        "wrong": 0,
                        "time_s": time_statistics(samples),
                        "samples_s": samples,
                    }
                    | provenance("test", backend="cpu", device_kind="cpu")
                )
                n_rec += 1
    return n_rec


def _images_exist(out: Path, validated: bool = False) -> None:
    html = (out / "index.html").read_text()
    srcs = re.findall(r'<img src="([^"]+)"', html)
    # --validate adds the real-training figure
    assert {Path(s).name for s in srcs} == FIGURES | ({"validation.png"} if validated else set())
    for s in srcs:
        assert (out / s).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(900)
def test_run_with_measurements_unreliable_profile(tmp_path, capsys):
    m = tmp_path / "m.jsonl"
    n_rec = _noisy_file(m, spike=2**24)
    out = tmp_path / "rep"
    code = main(
        ["run", "--measurements", str(m), "--max-workers", "8", "-o", str(out), "--no-progress"]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    assert {p.name for p in out.iterdir()} >= DATA | {"index.html", "report.md", "figures"}
    assert f"report: {out / 'index.html'}" in cap.out
    assert "UNRELIABLE" in cap.out and "[2/4] calibrating" in cap.err
    # the folder stands alone: the input's records were copied, unchanged in number
    assert len(read_records(out / "measurements.jsonl")) == n_rec
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["reliable"] is False and "15%" in rec["refusal"]
    assert rec["workers"] <= 8 and rec["architecture"]
    assert rec["workload"]["activations_in_memory"] is False  # resnet50: not a transformer
    # the measured topology (2 ranks on a node), as recommend and report take it from a
    # profile: no extrapolation in ranks per node (run alone used 1 per node)
    assert rec["ranks_per_node"] == 2
    assert not any("per node" in w and "extrapolation" in w for w in rec["warnings"])
    assert set(rec["timings"]) == {"read", "calibrate", "recommend", "report", "total"}
    assert rec["timings"]["total"] >= rec["timings"]["calibrate"] > 0
    prof = json.loads((out / "profile.json").read_text())
    assert prof["reliable"] is False
    # the files it names are the folder's, not the staging folder's that is gone
    final = str(out / "measurements.jsonl")
    assert [e["path"] for e in prof["provenance"]["inputs"]] == [final]
    worst = prof["validation"]["worst"]
    assert worst and {w["file"] for w in worst} == {final}
    # the notes' file:line too (a new user read '.ddltune-report.new-f3jhr1jd/measurements.jsonl:30')
    assert ".new-" not in (out / "profile.json").read_text()
    assert any(f"{final}:" in n for n in prof["notes"]), prof["notes"]
    _images_exist(out)
    # a new user copied the rounded '97.5 MiB buckets' into DDP, which then bucketed
    # differently from the 97.46 MiB chosen: the exact bytes of recommendation.json,
    # and a recommend command (recommend's parser accepts it) for the framework settings
    line = next(ln for ln in cap.out.splitlines() if "bucket size exactly" in ln)
    assert rec["bucket_bytes"] > 0 and f"exactly {int(rec['bucket_bytes']):,} bytes" in line
    cmd = re.search(r"(ddltune recommend .*)$", line)[1].split()
    parser, _ = build_parser(cmd[1:])
    args = parser.parse_args(cmd[1:])
    assert args.profile == str(out / "profile.json") and args.max_workers == 8 and args.force
    html = (out / "index.html").read_text()
    assert 'id="unreliable"' in html and "UNRELIABLE" in html
    assert "15%" in html  # the refusal's reason, shown prominently
    md = (out / "report.md").read_text()
    assert "UNRELIABLE" in md and "held-out p90" in md
    # what makes the interval wide (the noisy records' held-out misses) is on the console,
    # not only in recommend's warnings (a new user's trial found it missing there)
    (wide,) = [w for w in rec["warnings"] if w.startswith("the 90% interval of the step (")]
    assert "%) of its upper side's variance" in wide and f"  note: {wide}" in cap.out
    # one node measured: the recommendation's nodes are the prior's network, said on the
    # console too (a new user read a 32-node answer from one machine as measured)
    assert rec["workers"] > rec["ranks_per_node"]
    (net,) = [w for w in rec["warnings"] if w.startswith("no measurement crossed nodes")]
    assert f"  warning: {net}" in cap.out
    # a second run into the same folder is refused before anything is measured
    assert main(["run", "--measurements", str(m), "-o", str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "code", "needle"),
    [
        (["--workers", "1"], 2, "--workers"),
        (["--max-workers", "0"], 2, "--max-workers"),
        (["--batch-size", "x"], 2, "--batch-size"),
        (["--model", "resnet51"], 2, "For your own model give its layers: --layers FILE"),
        (["--model", "resnet50", "--layers", "x.json"], 2, "not allowed"),
        (["--device", "v100"], 2, "--preset"),
        (["--preset", "ethernet-11g"], 2, "ethernet-11g"),
        (["--max-bytes", "12Q"], 2, "suffix"),
        (["--measurements", "nope.jsonl"], 1, "nope.jsonl"),
        (["--validate", "--measurements", "m.jsonl"], 2, "--validate"),
        (["--layers", "nope.json"], 1, "nope.json"),
        # what collect would refuse, refused before anything starts (from a new user's
        # trial: run printed "[1/4] measuring … (1024 B – 0 MiB)" first, and offered
        # "--force", which run has no such option as)
        (["--max-bytes", "512"], 2, "--max-bytes must be at least 1 KiB"),
        (["--workers", "100000"], 2, "--workers 100000 on"),
        (["--step-factor", "1"], 2, "--step-factor must be an integer ≥ 2, got 1"),
        (["--step-factor", "2.5"], 2, "--step-factor"),
    ],
)
def test_run_bad_arguments(tmp_path, capsys, argv, code, needle):
    assert main(["run", *argv, "-o", str(tmp_path / "out")]) == code
    out, err = capsys.readouterr()
    assert needle in err
    assert "[1/4]" not in out + err and "--force" not in err
    assert "load_layers(" not in err and "workload_from_pytree" not in err  # no API advice
    assert not (tmp_path / "out").exists()  # nothing written on a usage error


def test_run_into_an_existing_file_is_one_line_and_leaves_the_file(tmp_path, capsys):
    """-o naming an existing file: one line naming it, no Python exception name (a new
    user's trial saw "error: NotADirectoryError: -o notes.txt: …"), the file untouched."""
    notes = tmp_path / "notes.txt"
    notes.write_text("mine\n")
    m = tmp_path / "m.jsonl"
    _noisy_file(m)
    assert main(["run", "--measurements", str(m), "-o", str(notes)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(notes) in err and "not a folder" in err
    assert "Error" not in err
    assert notes.read_text() == "mine\n"


def test_run_malformed_measurements_names_file_and_line(tmp_path, capsys):
    m = tmp_path / "m.jsonl"
    _noisy_file(m)
    lines = m.read_text().splitlines()
    lines[3] = lines[3].replace('"num_ranks": 2', '"num_ranks": 0')
    m.write_text("\n".join(lines) + "\n")
    assert main(["run", "--measurements", str(m), "-o", str(tmp_path / "o")]) == 1
    errors = [ln for ln in capsys.readouterr().err.splitlines() if "error" in ln]
    assert len(errors) == 1 and f"{m}:4:" in errors[0] and "num_ranks" in errors[0]


def test_run_where_nothing_fits_names_runs_and_recommends_remedies_and_keeps_the_profile(
    tmp_path, capsys
):
    """llama2_7b at run's default batch fits no device (a new user's trial: the error
    advised --device-memory and --accumulation-steps, which run does not have)."""
    m = tmp_path / "m.jsonl"
    _noisy_file(m)
    out = tmp_path / "rep"
    argv = ["run", "--measurements", str(m), "--model", "llama2_7b", "-o", str(out)]
    assert main([*argv, "--max-workers", "8", "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "no configuration fits in memory" in err and "Traceback" not in err
    assert "'ddltune run' sizes the model as given (--model llama2_7b, --batch-size 64)" in err
    kept = list(tmp_path.glob("rep.profile-*.json"))
    assert len(kept) == 1 and not out.exists()
    suggested = re.search(r"'(ddltune recommend [^']*)'", err)[1].split()
    assert suggested[:3] == ["ddltune", "recommend", "--profile"] and suggested[3] == str(kept[0])
    assert "--max-workers" in suggested and "--device-memory" in suggested
    assert "--force" in suggested  # the noisy profile is unreliable: recommend would refuse
    # the command it suggests, with the remedies it lists, is one recommend parses
    parser, _ = build_parser(suggested[1:])
    args = parser.parse_args([*suggested[1:], "--accumulation-steps", "4",
                              "--activation-checkpointing", "full", "--optimizer", "sgd"])  # fmt: skip
    assert args.device_memory == 80 * 2**30 and args.max_workers == 8


def test_run_where_nothing_fits_refuses_before_measuring(tmp_path, capsys, monkeypatch):
    """A new user's `ddltune run --model llama2_7b` measured this machine for minutes
    before saying that nothing fits: the memory a configuration needs depends on the
    device's memory alone (the prior preset's), so run now says so at once, names the
    preset it judged on, and suggests a recommend command on that preset which
    recommend's own parser accepts; nothing is written."""
    import tuner._run

    def measured(*a, **k):
        raise AssertionError("run measured a model that fits no device")

    monkeypatch.setattr(tuner._run, "_measure", measured)
    monkeypatch.setattr(tuner._run, "_accelerator_plugins", lambda: False)  # this machine's
    out = tmp_path / "o"
    assert main(["run", "--model", "llama2_7b", "--max-workers", "8", "-o", str(out)]) == 1
    so, err = capsys.readouterr()
    assert "nothing was measured: on the prior's device (cpu), no configuration fits" in err
    assert "[1/4]" not in so + err and "Traceback" not in err
    assert not out.exists() and list(tmp_path.iterdir()) == []
    suggested = re.search(r"'(ddltune recommend [^']*)'", err)[1].split()
    assert suggested[2:6] == ["--preset", "ethernet-10g,shm", "--device", "cpu"]
    parser, _ = build_parser(suggested[1:])
    args = parser.parse_args(suggested[1:])
    assert args.max_workers == 8 and args.device_memory == 80 * 2**30
    # a model that fits goes on to measure (here: the stand-in above, its error reported)
    assert main(["run", "--model", "resnet50", "--max-workers", "8", "-o", str(out)]) == 1
    assert "run measured a model that fits no device" in capsys.readouterr().err


def test_run_refuses_layers_without_flops_before_measuring(tmp_path, capsys):
    """A new user's layer file of parameters only: run measured for a minute, then
    failed naming --step-time, which run does not have."""
    layers = tmp_path / "noflops.json"
    layers.write_text(json.dumps({"name": "m", "layers": [{"name": "w", "params": 1000}]}))
    assert main(["run", "--layers", str(layers), "-o", str(tmp_path / "o")]) == 2
    out, err = capsys.readouterr()
    assert "have no FLOP counts, which 'ddltune run' needs" in err
    assert "[1/4]" not in out + err and not (tmp_path / "o").exists()


def test_run_refuses_file_as_output(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    m = tmp_path / "m.jsonl"
    _noisy_file(m)
    assert main(["run", "--measurements", str(m), "-o", str(f)]) == 1
    assert "not a folder" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.multiprocess
@pytest.mark.timeout(900)
def test_run_end_to_end_measures_this_machine(tmp_path, capsys):
    """The main job on this machine's processes: collect, calibrate, recommend, report.
    (`run --validate`, its real training and the step fit before the second
    recommendation, is tested in the emulated cluster, test_emulate.py, where its steps
    also cross a shaped link: here it cost 28 s of a 54-s test.)"""
    out = tmp_path / "rep"
    code = main(
        [
            "run",
            "--workers",
            "2",
            "--max-bytes",
            "64K",
            "--step-factor",
            "4",
            "--budget",
            "0.05",
            "--max-workers",
            "8",
            "-o",
            str(out),
            "--json",
            "--no-progress",
        ]
    )
    cap = capsys.readouterr()
    assert code == 0, cap.err
    doc = json.loads(cap.out)
    recs = read_records(out / "measurements.jsonl")
    assert doc["records"] == len(recs) > 0
    assert {r["kind"] for r in recs} == {"collective", "compute"}
    assert {r["num_ranks"] for r in recs if r["kind"] == "collective"} == {2}
    sizes = sorted({r["message_bytes"] for r in recs if r["kind"] == "collective"})
    assert sizes == [1024, 4096, 16384, 65536]  # --step-factor 4 up to --max-bytes
    assert set(doc["timings_s"]) == {"collect", "calibrate", "recommend", "report", "total"}
    assert doc["recommendation"]["workers"] <= 8
    _images_exist(out)
    assert not (out / "validation.jsonl").exists()
    assert "[3b/4]" not in cap.err and "[3c/4]" not in cap.err
    from calibration import Profile
    from tuner import measured_ranks_per_node

    assert measured_ranks_per_node(Profile.load(out / "profile.json")) == 2


def test_wrong_results_are_named_record_by_record():
    """run named only a count ('1 wrong results'); now which records and what happens
    to them (from a new user's trial)."""
    from tuner._run import _wrong_results_note

    ok = {"kind": "collective", "collective": "all_reduce", "message_bytes": 1024,
          "num_ranks": 2, "wrong": 0}  # fmt: skip
    assert _wrong_results_note([ok, {"kind": "compute", "op": "matmul"}]) is None
    bad = dict(ok, collective="reduce_scatter", message_bytes=16 * 2**20, wrong=1)
    note = _wrong_results_note([ok, bad])
    assert note.startswith(
        "1 measured call returned a wrong result (checked against the expected sum), in 1 record:"
    )  # the report counts records
    assert "reduce_scatter 16 MiB on 2 ranks (1 of its calls)" in note
    assert "this record is kept" in note and "left out of the fit" in note
    many = [dict(bad, message_bytes=2**k, wrong=2) for k in range(10, 16)]
    note = _wrong_results_note(many)
    assert note.startswith("12 measured calls") and "in 6 records" in note
    assert "and 2 more" in note


def test_run_summary_aligns_series_of_any_label_length(monkeypatch):
    """The held-out table's series column is as wide as its longest label (a
    halving-doubling reduce_scatter's label is 41 characters)."""
    import tuner._run as run_module

    series = [
        {"series": "all_reduce n=4 g=1", "heldout_points": 2, "heldout_median": 0.1,
         "heldout_p90": 0.2},
        {"series": "reduce_scatter (halving_doubling) n=4 g=1", "heldout_points": 2,
         "heldout_median": 0.1, "heldout_p90": 0.2},
    ]  # fmt: skip
    summary = {"heldout_p90": 0.2, "reliable": False, "limit": 0.15, "series": series}
    monkeypatch.setattr(run_module, "profile_summary", lambda profile: summary)
    lines = []
    run_module._print_errors(None, lines.append)
    rows = [ln for ln in lines if "held-out median" in ln]
    assert len(rows) == 2 and len({ln.index("held-out median") for ln in rows}) == 1


def test_run_summary_of_real_training_says_how_many_pairs_and_the_coverage():
    """A new user's trial: 'Kendall tau 1.00' was printed where it held over 2 of 15
    pairs (0.41 over all), and the intervals' coverage was in the report only."""
    from types import SimpleNamespace

    from tuner._run import _say_validation

    v = SimpleNamespace(rows=[0] * 6, mape=0.108, kendall_tau=1.0, tau_pairs=(2, 15),
                        kendall_tau_all=0.414, regret=0.015, interval_coverage=0.9,
                        interval_half_width=0.7)  # fmt: skip
    lines = []
    _say_validation(lines.append, v)
    (line,) = lines
    assert "Kendall tau 1.00 over 2 of 15 pairs" in line and "(all pairs 0.41)" in line
    assert "90% interval coverage 90% (median half-width 70.0%)" in line
    v.interval_coverage = float("nan")
    lines.clear()
    _say_validation(lines.append, v)
    assert "coverage" not in lines[0]


def test_the_suggested_emulated_run_writes_its_own_folder():
    """The command the plain run suggests at its end ran into the plain run's own
    folder and was refused ('-o ddltune-report is not empty'): it parses with run's
    own parser, emulates a cluster, and writes elsewhere than run's default."""
    from tuner.cli._run import EMULATE_SUGGESTION

    argv = EMULATE_SUGGESTION.split()
    assert argv[:2] == ["ddltune", "run"]
    parser, _ = build_parser(argv[1:])
    args = parser.parse_args(argv[1:])
    default = parser.parse_args(["run"])
    assert args.emulate == "2x1@100mbit" and args.output != default.output


def test_the_suggested_emulated_run_adds_overwrite_once_its_folder_holds_files(
    tmp_path, monkeypatch
):
    """Printed again after the emulated run had written its folder, the suggestion was
    refused as printed (a new user's trial); then it carries --overwrite."""
    from tuner.cli._run import EMULATE_SUGGESTION, emulate_suggestion

    monkeypatch.chdir(tmp_path)
    assert emulate_suggestion() == EMULATE_SUGGESTION
    folder = tmp_path / EMULATE_SUGGESTION.rsplit(" -o ", 1)[1]
    folder.mkdir()
    assert emulate_suggestion() == EMULATE_SUGGESTION  # an empty folder is written into
    (folder / "index.html").write_text("")
    assert emulate_suggestion() == EMULATE_SUGGESTION + " --overwrite"


def test_run_emulate_refusals_name_emulate_and_only_runs_options(tmp_path, capsys):
    """A new user's trial: `run --emulate 1x1@…` said 'workers must be an integer ≥ 2'
    (no --workers was given), and `run --emulate 9x1@…` offered --force, which run
    does not have. Both are refused before any namespace exists, nothing written."""
    out = tmp_path / "o"
    assert main(["run", "--emulate", "1x1@100mbit", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "--emulate 1x1@100mbit has 1 rank; a collective needs at least 2" in err
    assert main(["run", "--emulate", "64x4@100mbit", "-o", str(out)]) == 2  # > 4 per core
    err = capsys.readouterr().err
    assert "--emulate 64x4@100mbit (256 ranks)" in err and "--force" not in err
    assert "ddltune run --measurements FILE" in err
    assert not out.exists()


def test_the_recommendation_names_its_inputs_by_absolute_paths(tmp_path, monkeypatch):
    """recommendation.json's inputs are absolute: written from a relative -o, `ddltune show`
    of the file from another folder named the profile relative to the run's folder."""
    from costmodel import get_workload, preset
    from tuner import recommend
    from tuner._run import _write_recommendation

    monkeypatch.chdir(tmp_path)
    w = get_workload("resnet50", 32)
    rec = recommend(preset("ethernet-10g", "v100"), w, max_workers=4, architectures=["ring"])
    rel = Path("rep")
    rel.mkdir()
    _write_recommendation(
        rel / "recommendation.json", rec, None, w, rel / "measurements.jsonl",
        rel / "profile.json", [Path("m.jsonl")], (), {"total": 1.0},
    )  # fmt: skip
    doc = json.loads((tmp_path / "rep" / "recommendation.json").read_text())
    assert doc["inputs"] == {
        "measurements": str(tmp_path / "rep" / "measurements.jsonl"),
        "profile": str(tmp_path / "rep" / "profile.json"),
        "source_measurements": [str(tmp_path / "m.jsonl")],
    }
