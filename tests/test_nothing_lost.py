"""Issue 26: nothing lost, on every path.

A job smaller than a node is answered (``--ranks-per-node`` is the node's
capacity), folder outputs keep the user's files, outputs are regular files or
new names, every input read is bounded, errors name the file or option, and
long commands check their plan before any process starts.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import pytest

import tuner
from calibration import (
    Profile,
    RecordWriter,
    provenance,
    read_manifest,
    read_records,
    time_statistics,
)
from costmodel import get_workload, iteration_time, preset
from tuner.cli import main

# ------------------------------------------------------------ item 3: a node's capacity

_DGX = ["--preset", "ib-edr-100g,nvlink-v100", "--device", "v100", "--model", "resnet50",
        "--batch-size", "192", "--step-time", "0.14"]  # fmt: skip


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_predict_runs_a_job_smaller_than_a_node_on_one_node(capsys):
    # the query: "8 GPUs per node, 1 to 8 of them used" (exit 2 before)
    code = main(["predict", *_DGX, "--arch", "ring,ps", "--workers", "2,4,8",
                 "--ranks-per-node", "8", "--json"])  # fmt: skip
    assert code == 0
    rows = _json(capsys)["rows"]
    assert [(r["architecture"], r["workers"], r["ranks_per_node"]) for r in rows] == [
        ("ring", 2, 2), ("ring", 4, 4), ("ring", 8, 8), ("ps", 2, 2), ("ps", 4, 4), ("ps", 8, 8)
    ]  # fmt: skip
    for r in rows:
        notes = [w for w in r["warnings"] if "on one node" in w]
        assert len(notes) == (r["workers"] < 8)
    # n ranks on one node cost what n ranks per node cost (all intra-node, no NIC)
    w = get_workload("resnet50", 192).with_step_time(0.14)
    p = preset("ib-edr-100g,nvlink-v100", "v100")
    for r in rows[:3]:
        n = r["workers"]
        want = float(iteration_time(p, w, "ring", n, ranks_per_node=n).iteration_s)
        assert r["iteration_s"] == pytest.approx(want, rel=1e-12)
    # and not what spreading them one per node would cost
    one_per_node = float(iteration_time(p, w, "ring", 4, ranks_per_node=1).iteration_s)
    assert rows[1]["iteration_s"] < one_per_node


def test_predict_text_and_collective_mode_say_one_node(capsys):
    assert main(["predict", *_DGX, "--arch", "ring", "--workers", "2",
                 "--ranks-per-node", "8"]) == 0  # fmt: skip
    out = capsys.readouterr()
    assert "2 workers fit on one node of 8 ranks" in out.err
    code = main(["predict", "--preset", "ib-edr-100g,nvlink-v100", "--collective", "all_reduce",
                 "--num-ranks", "2", "--ranks-per-node", "8", "--message-bytes", "1M", "--json"])  # fmt: skip
    assert code == 0
    (row,) = _json(capsys)["rows"]
    assert row["ranks_per_node"] == 2 and any("on one node" in w for w in row["warnings"])


def test_node_capacity_note():
    assert tuner.node_capacity_note(8, 8) is None and tuner.node_capacity_note(16, 8) is None
    assert tuner.node_capacity_note(1, 8).startswith("1 worker fits on one node of 8 ranks")


def test_recommend_with_fewer_workers_than_a_node(capsys):
    # before: "--max-workers=4 is less than --ranks-per-node=8: not even one full node" (exit 2)
    code = main(["recommend", *_DGX, "--max-workers", "4", "--ranks-per-node", "8",
                 "--arch", "ring,ps", "--json"])  # fmt: skip
    assert code == 0
    doc = _json(capsys)
    assert 1 <= doc["workers"] <= 4
    assert any("on one node of 8 ranks" in w for w in doc["warnings"])
    # the search covered 1..4 workers, all on the one node
    rec = tuner.recommend(
        preset("ib-edr-100g,nvlink-v100", "v100"),
        get_workload("resnet50", 192).with_step_time(0.14),
        max_workers=4,
        ranks_per_node=8,
        architectures=["ring"],
        refine=False,
    )
    assert np.unique(rec.sweeps["ring"].workers).tolist() == [1, 2, 3, 4]
    assert rec.config.describe().startswith("ring, 4 workers (on one node)")


# ------------------------------------------------------------ item 1: folder outputs


def _tree(folder: Path) -> dict:
    """Every entry under ``folder`` (links not followed) → its bytes' hash, link or 'dir'."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            p = Path(root) / name
            rel = p.relative_to(folder).as_posix()
            if p.is_symlink():
                out[rel] = "link:" + os.readlink(p)
            elif p.is_file():
                out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            else:
                out[rel] = "dir"
    return out


def _user_files(folder: Path) -> dict:
    files = {"figures/fig1.pdf": b"%PDF mine", "figures/sub/data.csv": b"a,b\n1,2\n",
             "notes.txt": b"mine"}  # fmt: skip
    for rel, data in files.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_bytes(data)
    return files


@pytest.fixture(scope="module")
def preset_profile(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("prof") / "profile.json"
    Profile.from_preset("ethernet-10g", "v100").save(path)
    return path


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir() if ".new-" in p.name or ".old-" in p.name)


@pytest.mark.timeout(300)
def test_report_overwrite_keeps_the_users_files(tmp_path, preset_profile, capsys):
    # before: the report rmtree'd figures/, taking figures/fig1.pdf and figures/sub/ with it
    out = tmp_path / "rep"
    argv = ["report", "--profile", str(preset_profile), "--model", "resnet50",
            "--max-workers", "4", "--ranks-per-node", "8", "-o", str(out)]  # fmt: skip
    assert main(argv) == 0, capsys.readouterr().err
    capsys.readouterr()
    old_html = (out / "index.html").read_bytes()
    (out / "figures" / "scaling.png").write_bytes(b"stale")  # the report's own: replaced
    mine = _user_files(out)
    assert main([*argv, "--overwrite"]) == 0, capsys.readouterr().err
    for rel, data in mine.items():
        assert (out / rel).read_bytes() == data
    assert (out / "figures" / "scaling.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "index.html").read_bytes() != b"" and old_html
    assert read_manifest(out) >= {"index.html", "report.md", "figures/scaling.png"}
    assert not read_manifest(out) & set(mine)  # the user's stay the user's
    assert _leftovers(tmp_path) == []
    # item 3 in the report: 4 workers on a node of 8
    assert "on one node" in (out / "report.md").read_text()


def test_an_interrupted_report_leaves_the_old_folder_whole(tmp_path, monkeypatch):
    from tuner import _report

    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.html").write_text("old report")
    _user_files(out)
    before = _tree(out)

    def interrupted(figdir, **kw):
        figdir.mkdir(parents=True)
        (figdir / "scaling.png").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(_report, "_draw_figures", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tuner.write_report(out, {"title": "t"}, overwrite=True)
    assert _tree(out) == before and _leftovers(tmp_path) == []


def _measurements(path: Path) -> Path:
    rec = {"schema": 1, "kind": "collective", "collective": "all_reduce", "num_ranks": 2,
           "ranks_per_node": 2, "dtype": "float32", "wrong": 0}  # fmt: skip
    with RecordWriter(path) as w:
        for s in (1024, 4096):
            samples = [1e-5 + s * 1e-9] * 3
            w.write(rec | {"message_bytes": s, "time_s": time_statistics(samples),
                           "samples_s": samples} | provenance("test", backend="cpu",
                                                              device_kind="cpu"))  # fmt: skip
    return path


def _fast_calibrate(m_path, prof_path, *args, **kw):
    """The run's calibrate step, without the fit (a preset profile, saved where the run saves)."""
    prof = Profile.from_preset("ethernet-10g", "cpu")
    prof.save(prof_path, overwrite=True)
    return prof


@pytest.mark.parametrize("phase", ["collect", "calibrate", "recommend", "report"])
def test_ctrl_c_at_each_phase_of_run_leaves_the_old_folder_whole(tmp_path, monkeypatch, phase):
    # before: each phase wrote straight into -o (the old measurements.jsonl emptied
    # by the collector, figures/ deleted by the report)
    from tuner import _run

    out = tmp_path / "rep"
    out.mkdir()
    for name in ("measurements.jsonl", "profile.json", "index.html"):
        (out / name).write_text(f"old {name}")
    _user_files(out)
    before = _tree(out)
    monkeypatch.setattr(_run, "_calibrate", _fast_calibrate)

    def interrupt_after(fn):
        def wrapped(*args, **kw):
            fn(*args, **kw)  # the phase has written its files (into the staging folder)
            raise KeyboardInterrupt

        return wrapped

    target = {"collect": "_measure", "calibrate": "_calibrate", "recommend": "_recommend",
              "report": "build_report"}[phase]  # fmt: skip
    monkeypatch.setattr(_run, target, interrupt_after(getattr(_run, target)))
    with pytest.raises(KeyboardInterrupt):
        tuner.run_main_job(
            out, measurements=[_measurements(tmp_path / "m.jsonl")], max_workers=4,
            overwrite=True, progress=False,
        )  # fmt: skip
    assert _tree(out) == before and _leftovers(tmp_path) == []


@pytest.mark.timeout(300)
def test_run_overwrite_replaces_its_own_files_and_keeps_the_users(tmp_path, monkeypatch):
    from tuner import _run

    monkeypatch.setattr(_run, "_calibrate", _fast_calibrate)
    out = tmp_path / "rep"
    m = _measurements(tmp_path / "m.jsonl")
    tuner.run_main_job(out, measurements=[m], max_workers=4, progress=False)
    (out / "validation.jsonl").write_text("a previous --validate's steps\n")  # the run's own
    (out / "logs" / "workers2").mkdir(parents=True)
    (out / "logs" / "workers2" / "rank0.log").write_text("old log")
    mine = _user_files(out)
    res = tuner.run_main_job(out, measurements=[m], max_workers=4, progress=False, overwrite=True)
    for rel, data in mine.items():
        assert (out / rel).read_bytes() == data
    assert not (out / "validation.jsonl").exists() and not (out / "logs").exists()
    assert res.report == out / "index.html" and res.report.is_file()
    assert len(read_records(out / "measurements.jsonl")) == 2
    # paths recorded in the files are the folder's, not the staging folder's
    rec = json.loads((out / "recommendation.json").read_text())
    assert rec["inputs"]["measurements"] == str(out / "measurements.jsonl")
    assert f"{out / 'measurements.jsonl'} (sha256" in (out / "report.md").read_text()
    assert ".new-" not in (out / "profile.json").read_text()
    assert _leftovers(tmp_path) == []
