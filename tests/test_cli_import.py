"""``ddltune import-nccl-tests``: exit codes, one-line errors, table and JSON output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from calibration import read_records
from tuner.cli import main

DATA = Path(__file__).parent / "data" / "nccl-tests"
AR = str(DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt")
GKE = str(DATA / "nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt")
NEBIUS = str(DATA / "nccl_all_reduce_h100-nebius-ib_16gpus_1.txt")


def _run(capsys, *argv):
    code = main(["import-nccl-tests", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def _one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ddltune import-nccl-tests: error: ")
    return lines[0]


def test_import_prints_what_was_detected(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    code, stdout, err = _run(capsys, AR, NEBIUS, "-o", str(out), "--ranks-per-node", "8")
    assert code == 1  # --ranks-per-node 8 contradicts the 2-GPU file's device lines
    line = _one_line_error(err)
    assert "--ranks-per-node 8" in line and "device lines" in line and AR in line
    assert not out.exists()

    code, stdout, err = _run(capsys, AR, "-o", str(out))
    assert code == 0 and err == ""
    assert "all_reduce" in stdout and "NVIDIA GeForce RTX 2080 Ti" in stdout
    assert "8 B – 1 GiB" in stdout and "wrote 56 records" in stdout
    assert "collective from command line, line 3" in stdout
    assert len(read_records(out)) == 56


def test_json_output_is_one_document(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    code, stdout, err = _run(
        capsys, GKE, "-o", str(out), "--collective", "all_gather", "--ranks-per-node", "8", "--json"
    )
    assert code == 0 and err == ""
    doc = json.loads(stdout)
    f = doc["files"][0]
    assert (f["collective"], f["num_ranks"], f["ranks_per_node"]) == ("all_gather", 16, 8)
    assert (f["min_bytes"], f["max_bytes"], f["dtypes"]) == (256, 8589934592, ["float32"])
    assert f["sources"]["num_ranks"].startswith("the count column")
    assert doc["records"] == 52 and doc["warnings"] == []


@pytest.mark.parametrize(
    "argv, flag",
    [
        ([GKE, "--ranks-per-node", "8"], "--collective"),
        ([GKE, "--collective", "all_gather"], "--ranks-per-node"),
        ([NEBIUS], "--ranks-per-node"),
    ],
)
def test_missing_information_names_the_flag(tmp_path, capsys, argv, flag):
    out = tmp_path / "m.jsonl"
    code, stdout, err = _run(capsys, *argv, "-o", str(out))
    assert code == 1 and stdout == ""
    line = _one_line_error(err)
    assert flag in line and "cannot tell" in line
    assert not out.exists()


def test_existing_output_needs_overwrite(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    out.write_text("previous\n")
    code, _, err = _run(capsys, AR, "-o", str(out))
    assert code == 1
    assert "--overwrite" in _one_line_error(err)
    assert out.read_text() == "previous\n"
    code, _, err = _run(capsys, AR, "-o", str(out), "--overwrite")
    assert code == 0 and len(read_records(out)) == 56


def test_malformed_input_is_exit_1_with_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    text = Path(AR).read_text().replace("  40.10  ", "    nan  ")
    bad.write_text(text)
    code, _, err = _run(capsys, str(bad), "-o", str(tmp_path / "m.jsonl"))
    assert code == 1
    line = _one_line_error(err)
    lineno = 1 + next(i for i, s in enumerate(text.splitlines()) if " nan " in s)
    assert f"{bad}:{lineno}: " in line and "NaN" in line
    assert not (tmp_path / "m.jsonl").exists()

    notnccl = tmp_path / "notes.txt"
    notnccl.write_text("just some notes\n")
    code, _, err = _run(capsys, str(notnccl), "-o", str(tmp_path / "m.jsonl"))
    assert code == 1 and "not nccl-tests output" in _one_line_error(err)

    code, _, err = _run(capsys, str(tmp_path / "missing.txt"), "-o", str(tmp_path / "m.jsonl"))
    assert code == 1 and "No such file" in _one_line_error(err)


def test_truncated_last_row_warns_on_stderr(tmp_path, capsys):
    lines = Path(AR).read_text().splitlines()
    last = max(i for i, s in enumerate(lines) if s.strip().startswith("1073741824"))
    cut = tmp_path / "cut.txt"
    cut.write_text("\n".join(lines[:last]) + "\n" + lines[last][:50])
    code, stdout, err = _run(capsys, str(cut), "-o", str(tmp_path / "m.jsonl"))
    assert code == 0
    assert err.startswith("ddltune import-nccl-tests: warning: ") and "cut short" in err
    assert "wrote 54 records" in stdout


@pytest.mark.parametrize(
    "argv, words",
    [
        ([AR], ["-o/--output"]),
        ([AR, "-o", "m.jsonl", "--num-ranks", "0"], ["--num-ranks"]),
        ([AR, "-o", "m.jsonl", "--ranks-per-node", "two"], ["--ranks-per-node"]),
        ([AR, "-o", "m.jsonl", "--collective", "gather"], ["collective", "all_to_all"]),
        (["-o", "m.jsonl"], ["FILE"]),
    ],
)
def test_usage_errors_exit_2(tmp_path, capsys, monkeypatch, argv, words):
    monkeypatch.chdir(tmp_path)
    code, _, err = _run(capsys, *argv)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith("ddltune import-nccl-tests: error: ")
    for w in words:
        assert w in last
    assert not (tmp_path / "m.jsonl").exists()


def test_help_explains_every_option_with_an_example(capsys):
    code = main(["import-nccl-tests", "--help"])
    out = capsys.readouterr().out
    assert code == 0
    for opt in (
        "--output",
        "--collective",
        "--num-ranks",
        "--ranks-per-node",
        "--overwrite",
        "--json",
    ):
        assert opt in out
    assert "ddltune import-nccl-tests all_reduce_8gpus.txt -o m.jsonl" in out
    top = main(["--help"])
    assert top == 0 and "import-nccl-tests" in capsys.readouterr().out
