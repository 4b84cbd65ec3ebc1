"""The CLI speaks the user's frameworks and stays quiet and one-line (issue 15 items 1-3, 5-6).

- a profile fitted on one 8-GPU node: ``predict`` defaults to its 8 ranks per node
  and warns (stderr, and ``warnings`` per JSON row) at a topology never measured;
- ``--grad-dtype``, ``--accumulation-steps`` and ``--nics-per-node`` change the
  prediction as their closed forms say;
- ``recommend`` prints the framework settings of its choice;
- usage errors are one line, name options not Python arguments; old option
  spellings still work; progress in a log is a line every few seconds.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from calibration import Profile, import_nccl_tests
from tuner.cli import build_parser, main
from tuner.cli._common import fail, option_names, plural, progress_kwargs

DATA = Path(__file__).parent / "data"
A100_AR = DATA / "nccl-tests" / "nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt"


def _one_node_profile(tmp_path) -> Path:
    """A profile whose measurements all came from one node of 8 GPUs (8 ranks, 8 per node)."""
    prof = Profile.from_preset("ib-hdr-200g,nvlink-a100", "a100")
    prof.measured_ranges = {
        "message_bytes": [4, 8 * 1024**3],
        "num_ranks": [8, 8],
        "ranks_per_node": [8, 8],
        "collectives": ["all_reduce"],
    }
    path = tmp_path / "p.json"
    prof.save(path)
    return path


def _run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_profile_of_one_node_defaults_to_its_ranks_per_node_and_warns_otherwise(tmp_path, capsys):
    p = str(_one_node_profile(tmp_path))
    base = ("predict", "--profile", p, "--collective", "all_reduce", "--message-bytes", "1M,1G")
    code, out, err = _run(capsys, *base, "--num-ranks", "8", "--json")
    assert code == 0, err
    rows = json.loads(out)["rows"]
    assert {r["ranks_per_node"] for r in rows} == {8}  # the measured topology by default
    assert all(r["warnings"] == [] for r in rows) and "warning" not in err
    # the same prediction as asking for 8 per node explicitly
    code, out8, _ = _run(capsys, *base, "--num-ranks", "8", "--ranks-per-node", "8", "--json")
    assert [r["time_s"] for r in json.loads(out8)["rows"]] == [r["time_s"] for r in rows]

    # 8 ranks on 8 nodes was never measured: warned in JSON rows and on stderr, naming 8;
    # and no record crossed nodes, so the network between them is the prior's
    code, out, err = _run(capsys, *base, "--num-ranks", "8", "--ranks-per-node", "1", "--json")
    assert code == 0
    for r in json.loads(out)["rows"]:
        assert len(r["warnings"]) == 2 and "measured 8 ranks per node" in r["warnings"][0]
        assert r["warnings"][1].startswith("no measurement crossed nodes")
    warn = [line for line in err.splitlines() if "warning" in line]
    assert len(warn) == 2 and warn[0].startswith("ddltune predict: warning: extrapolation")
    # across nodes (16 ranks): the rank count is named too; text mode warns as well
    code, out, err = _run(capsys, *base, "--num-ranks", "16")
    assert code == 0 and "measured 8 ranks)" in err and "16 ranks were never measured" in err

    # iteration mode: the default and the warning per row alike
    it = ("predict", "--profile", p, "--model", "resnet50", "--arch", "ring")
    code, out, err = _run(capsys, *it, "--workers", "8,16", "--json")
    rows = json.loads(out)["rows"]
    assert [r["ranks_per_node"] for r in rows] == [8, 8]
    assert rows[0]["warnings"] == [] and "16 ranks were never measured" in rows[1]["warnings"][0]


@pytest.mark.slow
def test_real_8xa100_profile_predicts_its_node_by_default(tmp_path, capsys):
    """The issue's case: nccl-tests of one 8×A100 node, imported and calibrated; predict at
    --num-ranks 8 uses 8 per node (close to the measured times) and warns at 1 per node."""
    m = tmp_path / "ar.jsonl"
    import_nccl_tests(A100_AR, m, collective="all_reduce")
    prof = tmp_path / "p.json"
    assert main(["calibrate", str(m), "-o", str(prof)]) == 0
    capsys.readouterr()
    args = ("predict", "--profile", str(prof), "--collective", "all_reduce", "--num-ranks", "8")
    code, out, err = _run(capsys, *args, "--message-bytes", "1G", "--json")
    assert code == 0 and "warning" not in err
    row = json.loads(out)["rows"][0]
    assert row["ranks_per_node"] == 8
    # superbench's 1 GiB out-of-place time is about 7.9 ms (busbw ≈ 236 GB/s)
    assert 6e-3 < row["time_s"] < 10e-3
    code, out, err = _run(capsys, *args, "--ranks-per-node", "1", "--message-bytes", "1G")
    assert code == 0 and "measured 8 ranks per node" in err


def test_grad_dtype_and_accumulation_on_predict(capsys):
    base = ("predict", "--preset", "ethernet-10g", "--model", "resnet50", "--arch", "ring")
    base += ("--workers", "16", "--json")
    rows = {}
    for extra in ((), ("--grad-dtype", "fp16"), ("--accumulation-steps", "4")):
        code, out, err = _run(capsys, *base, *extra)
        assert code == 0, err
        doc = json.loads(out)
        rows[extra[:1]] = (doc["rows"][0], doc["workload"])
    r32, w32 = rows[()]
    r16, w16 = rows[("--grad-dtype",)]
    r4, _ = rows[("--accumulation-steps",)]
    assert w16["gradient_bytes"] * 2 == w32["gradient_bytes"] and w16["grad_dtype"] == "fp16"
    assert r16["communication_s"] < 0.6 * r32["communication_s"]  # bandwidth-bound: ≈ half
    f, b = r32["forward_s"], r32["backward_s"]
    assert r4["iteration_s"] == pytest.approx(3 * (f + b) + r32["iteration_s"], rel=1e-9)
    assert r4["num_buckets"] == r32["num_buckets"] and r4["accumulation_steps"] == 4
    assert r4["throughput_samples_per_s"] == pytest.approx(
        4 * 16 * 64 / r4["iteration_s"], rel=1e-9
    )


def test_nics_per_node_on_predict(capsys):
    base = ("predict", "--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100")
    base += ("--collective", "all_reduce", "--num-ranks", "64", "--ranks-per-node", "8")
    base += ("--algorithm", "hierarchical", "--message-bytes", "1G", "--json")
    times = {}
    for nics in ("1", "8"):
        code, out, err = _run(capsys, *base, "--nics-per-node", nics)
        assert code == 0, err
        times[nics] = json.loads(out)["rows"][0]["time_s"]
    # Only the inter-node phase changes: 8 rings of S/8 move 2(m−1)/m·S through the node
    # (m = 8 nodes), at HDR's 0.92 × 200 Gb/s = 23 GB/s per NIC. Its time is the p = 32
    # smooth max (NODE_CAP_SHARPNESS) of the rank's link term L = moved/8/B and the node
    # term moved/(nics·B): (1 + 8³²)^(1/32)·L with one NIC, 2^(1/32)·L with eight.
    moved, bw = 2 * 7 / 8 * 2**30, 0.92 * 200e9 / 8
    link = moved / 8 / bw
    saved = ((1 + 8**32) ** (1 / 32) - 2 ** (1 / 32)) * link
    assert times["1"] - times["8"] == pytest.approx(saved, rel=1e-3)
    assert times["1"] >= moved / bw  # one NIC carries all of it
    code, _, err = _run(capsys, *base, "--nics-per-node", "0")
    assert code == 2 and "--nics-per-node" in err and len(err.strip().splitlines()) == 1


def test_recommend_prints_framework_settings(capsys):
    args = ("recommend", "--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100")
    args += ("--model", "resnet50", "--max-workers", "16", "--ranks-per-node", "8")
    args += ("--arch", "ring")
    code, out, err = _run(capsys, *args, "--json")
    assert code == 0, err
    doc = json.loads(out)
    fs = doc["framework_settings"]
    assert fs["pytorch_ddp"]["kwargs"]["bucket_cap_mb"] == doc["bucket_bytes"] / 2**20
    assert fs["horovod"]["env"]["HOROVOD_FUSION_THRESHOLD"] == str(doc["bucket_bytes"])
    code, out, err = _run(capsys, *args)
    assert code == 0 and "# PyTorch DDP" in out and "bucket_cap_mb=" in out
    assert "HOROVOD_FUSION_THRESHOLD=" in out
    # fp16 gradients: half the bytes per bucket for the same time, a different answer
    code, out16, err = _run(capsys, *args, "--grad-dtype", "fp16", "--json")
    assert code == 0, err
    assert json.loads(out16)["iteration_time_s"] < doc["iteration_time_s"]


def test_transform_workload_for_recommend():
    from costmodel import get_workload
    from tuner.cli._recommend import transform_workload

    w = get_workload("resnet50", 32)
    args = build_parser()[0].parse_args(
        ["recommend", "--preset", "ethernet-10g", "--model", "resnet50", "--max-workers", "8"]
        + ["--grad-dtype", "bf16", "--accumulation-steps", "4"]
    )
    t = transform_workload(w, args)
    assert t.dtype_bytes == 2 and t.batch_size == 4 * 32
    assert t.total_bwd_flops == pytest.approx(w.total_bwd_flops)


@pytest.mark.parametrize(
    "argv",
    [
        ["recommend", "--preset", "ethernet-10g", "--model", "resnet50", "--max-workers", "0"],
        ["calibrate", "--no-such-flag"],
        ["report", "--profile", "p.json"],
        ["run", "--budget-s", "x"],
        ["--no-such-flag"],
    ],
)
def test_usage_errors_are_one_line_without_the_usage_block(argv, capsys):
    code, out, err = _run(capsys, *argv)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ddltune") and ": error: " in lines[0] and "--help" in lines[0]
    assert "usage:" not in err


@pytest.mark.parametrize("command", ["run", "predict"])
def test_an_unknown_option_points_to_its_subcommands_help(command, capsys):
    # 'ddltune run --bucket-mb abc' answered "(see 'ddltune --help')", whose list of
    # subcommands does not say run's options (from a new user's trial)
    code, out, err = _run(capsys, command, "--bucket-mb", "abc")
    assert code == 2 and out == ""
    assert err.strip() == (
        f"ddltune {command}: error: unrecognized arguments: --bucket-mb abc "
        f"(see 'ddltune {command} --help')"
    )


def test_errors_name_options_not_python_arguments(capsys):
    assert (
        fail(ValueError("max_bytes must be >= min_bytes, got 0"), command="collect", debug=False)
        == 2
    )
    err = capsys.readouterr().err
    assert "--max-bytes must be >= --min-bytes" in err and "max_bytes" not in err
    # not inside longer names, attributes or quoted file fields
    assert option_names("Workload.batch_size and 'num_ranks' and my_max_bytes") == (
        "Workload.batch_size and 'num_ranks' and my_max_bytes"
    )


def test_budget_spellings_on_run_and_collect():
    parser, _ = build_parser()
    for flag in ("--budget", "--budget-s"):
        assert parser.parse_args(["run", flag, "0.25"]).budget == 0.25
        assert parser.parse_args(["collect", flag, "0.25"]).budget_s == 0.25


def test_plural():
    assert plural(1, "point") == "1 point" and plural(2, "point") == "2 points"


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_in_a_log_is_a_few_lines_not_one_per_point():
    from tqdm import tqdm

    log = io.StringIO()  # not a terminal
    assert progress_kwargs(log)["mininterval"] == 5.0  # the default in a log: every 5 s
    assert progress_kwargs(_Terminal())["mininterval"] == 0.1  # a terminal: the usual bar
    assert "ascii" not in progress_kwargs(_Terminal())
    kw = progress_kwargs(log, interval_s=3600.0)
    assert kw["mininterval"] == 3600.0 and kw["ascii"] is True
    bar = tqdm(total=5000, desc="collect", unit="point", **kw)
    for _ in range(5000):
        bar.update(1)
    bar.close()
    text = log.getvalue()
    assert "\r" not in text
    assert 1 <= len(text.splitlines()) <= 3  # the first and the last state, not 5000
    assert "5000/5000" in text.splitlines()[-1]


def test_collect_progress_is_throttled_when_stderr_is_not_a_terminal(monkeypatch):
    import sys

    from calibration._collect import _Progress

    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    bar = _Progress(2000, True)
    for i in range(2000):
        bar.describe(f"all_reduce {i}")
        bar.advance_to(i + 1)
    bar.close()
    text = log.getvalue()
    assert text.count("\r") <= 5  # not one redraw per point
    assert "2000/2000" in text.splitlines()[-1]  # and the bar was written, to its end


def test_collect_time_left_comes_from_the_points_after_the_launch(monkeypatch):
    """The first point carries the processes' start and XLA's compiles: timed, it made a
    1-minute collection's first estimate read 26 min (a new user's trial). Here the
    launch takes 10 min and each later point 6 s: the time left is 98 points of 6 s."""
    import sys

    from calibration._collect import _Progress

    monkeypatch.setattr(sys, "stderr", io.StringIO())
    bar = _Progress(100, True)
    bar.bar.start_t -= 600.0  # a 10-minute launch before the first point
    bar.bar.last_print_t -= 600.0
    bar.advance_to(1)
    assert bar.position() == 1
    bar.bar.last_print_t -= 6.0  # the next point took 6 s
    bar.advance_to(2)
    d = bar.bar.format_dict
    left = (d["total"] - d["n"]) / d["rate"]
    assert left == pytest.approx(98 * 6.0, rel=0.05)  # timed from the start: ~98 × 303 s
    bar.close()


def test_a_folder_that_is_not_empty_is_a_file_problem_without_the_exception_name(tmp_path, capsys):
    """`run -o` into a non-empty folder: one line, exit 1, our sentence without 'FileExistsError:'."""
    from tuner.cli import main

    (tmp_path / "x").write_text("mine")
    code = main(["run", "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.startswith(f"ddltune run: error: -o {tmp_path}: the folder is not empty (x)")
    assert "FileExistsError" not in err and err.count("\n") == 1
    assert (tmp_path / "x").read_text() == "mine"


def test_a_negative_value_reaches_the_options_own_check(capsys):
    """`--device-memory -5G`: argparse took '-5G' for an option ("expected one argument");
    attached to its option, the value gets the option's own one-line error, exit 2."""
    from tuner.cli import main

    argv = ["recommend", "--preset", "ethernet-10g", "--device", "v100", "--model", "resnet50"]
    code = main([*argv, "--device-memory", "-5G"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "argument --device-memory:" in err and "'-5G'" in err
    assert "expected one argument" not in err


@pytest.mark.parametrize(
    ("extra", "message"), [(("--num-ranks", "99999999999"), "--num-ranks: at most 2^24")]
)
def test_collective_predict_refuses_impossible_rank_layouts(capsys, extra, message):
    """From a new user's trial: 10^11 ranks were accepted where records stop at 2^24.
    (Fewer ranks than --ranks-per-node is a partly used node: allowed, with a warning,
    tests/test_nothing_lost.py.)"""
    base = ("predict", "--preset", "ethernet-10g,shm", "--device", "cpu")
    code, out, err = _run(
        capsys, *base, "--collective", "all_reduce", "--message-bytes", "16M", *extra
    )
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("command", ["recommend", "predict", "report"])
def test_a_missing_or_folder_profile_names_the_option(command, tmp_path, capsys):
    """A --profile that is missing or a folder: one line naming the option and the path
    (it named the path alone; from a new user's trial), exit 1 as every file problem."""
    from tuner.cli import main

    extra = {
        "recommend": ["--max-workers", "8"],
        "predict": ["--arch", "ring", "--workers", "4"],
        "report": ["-o", str(tmp_path / "out")],
    }[command]
    for bad, words in ((tmp_path / "nope.json", "No such file"), (tmp_path, "Is a directory")):
        code = main([command, "--profile", str(bad), "--model", "resnet50", *extra])
        err = capsys.readouterr().err
        assert code == 1 and err.count("\n") == 1
        assert err.startswith(f"ddltune {command}: error: --profile {bad}: {words}")


def test_a_folder_given_for_a_file_names_the_files_in_it(tmp_path, capsys):
    """A run folder given where a file belongs (`calibrate R`, `--profile R`): the error
    names the files of the kind the command reads (records for calibrate, profiles for
    --profile), the usual one first; a folder without one says to give a file. From two
    trials: it said only "Is a directory", then it offered recommendation.json to calibrate."""
    from tuner.cli import main

    run = tmp_path / "R"
    run.mkdir()
    Profile.from_preset("ethernet-10g", "cpu").save(run / "profile.json")
    for name in ("validation.jsonl", "measurements.jsonl", "report.md"):
        (run / name).write_text("{}\n")
    (run / "recommendation.json").write_text(
        '{\n  "architecture": "ring",\n  "iteration_time_s": 1\n}\n'
    )
    code = main(["calibrate", str(run), "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and err.count("\n") == 1
    assert err == (f"ddltune calibrate: error: {run}: Is a directory; give a file, for example "
                   f"{run / 'measurements.jsonl'}, {run / 'validation.jsonl'}\n"), err  # fmt: skip
    assert not (tmp_path / "p.json").exists()
    code = main(["predict", "--profile", str(run), "--model", "resnet50", "--arch", "ring",
                 "--workers", "4"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and err.endswith(
        f"Is a directory; give a file, for example {run / 'profile.json'}\n"
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    code = main(["calibrate", str(empty), "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and err.endswith("Is a directory; give a file, not a folder\n"), err
    # the files it does not name say what they are where they are given
    code = main(["calibrate", str(run / "recommendation.json"), "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and "this is a recommendation" in err and "not JSON Lines" in err, err
    assert "cut short" not in err
    code = main(["predict", "--profile", str(run / "recommendation.json"), "--model", "resnet50",
                 "--arch", "ring", "--workers", "4"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 1 and "this is a recommendation" in err and "not a profile" in err, err
    pretty = tmp_path / "pretty.jsonl"
    pretty.write_text('{\n  "kind": "collective"\n}\n')
    code = main(["calibrate", str(pretty), "-o", str(tmp_path / "p.json")])
    err = capsys.readouterr().err
    assert code == 1 and "one JSON document over several lines, not JSON Lines" in err, err
