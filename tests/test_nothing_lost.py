"""Issue 26: nothing lost, on every path.

A job smaller than a node is answered (``--ranks-per-node`` is the node's
capacity), folder outputs keep the user's files, outputs are regular files or
new names, every input read is bounded, errors name the file or option, and
long commands check their plan before any process starts.
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path

import numpy as np
import pytest

import tuner
from calibration import (
    OutputPathError,
    Profile,
    RecordWriter,
    atomic_replace_dir,
    atomic_write_text,
    host_fingerprint,
    provenance,
    read_manifest,
    read_records,
    time_statistics,
)
from costmodel import (
    InputFileError,
    get_workload,
    iteration_time,
    preset,
    workload_from_hf_config,
)
from tuner import markdown_escape
from tuner.cli import main
from tuner.cli._common import safe_text

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


def test_an_interrupted_report_leaves_the_old_folder_whole(tmp_path, monkeypatch, tree):
    from tuner import _report

    out = tmp_path / "rep"
    out.mkdir()
    (out / "index.html").write_text("old report")
    _user_files(out)
    before = tree(out)

    def interrupted(figdir, **kw):
        figdir.mkdir(parents=True)
        (figdir / "scaling.png").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(_report, "_draw_figures", interrupted)
    with pytest.raises(KeyboardInterrupt):
        tuner.write_report(out, {"title": "t"}, overwrite=True)
    assert tree(out) == before and _leftovers(tmp_path) == []


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
def test_ctrl_c_at_each_phase_of_run_leaves_the_old_folder_whole(
    tmp_path, monkeypatch, phase, tree
):
    # before: each phase wrote straight into -o (the old measurements.jsonl emptied
    # by the collector, figures/ deleted by the report)
    from tuner import _run

    out = tmp_path / "rep"
    out.mkdir()
    for name in ("measurements.jsonl", "profile.json", "index.html"):
        (out / name).write_text(f"old {name}")
    _user_files(out)
    before = tree(out)
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
    assert tree(out) == before and _leftovers(tmp_path) == []


@pytest.mark.parametrize("phase", ["collect", "calibrate", "report"])
def test_a_run_that_stops_late_keeps_what_it_measured(tmp_path, monkeypatch, phase):
    # The old folder stays whole (above); what this run measured is kept beside -o
    # under a new name, said on the log with the commands that continue from it.
    from tuner import _run

    out = tmp_path / "rep"
    src = _measurements(tmp_path / "src.jsonl")

    def fake_collect(sm, measurements, *args, **kw):  # a collection that wrote 2 records
        sm.write_bytes(src.read_bytes())
        if phase == "collect":
            raise KeyboardInterrupt  # Ctrl-C during collect, after 2 records
        return 2

    def stop(*args, **kw):
        raise RuntimeError("a late failure")

    monkeypatch.setattr(_run, "_measure", fake_collect)
    monkeypatch.setattr(_run, "_calibrate", _fast_calibrate if phase != "calibrate" else stop)
    if phase == "report":
        monkeypatch.setattr(_run, "build_report", stop)
    lines = []
    with pytest.raises(KeyboardInterrupt if phase == "collect" else RuntimeError):
        tuner.run_main_job(out, max_workers=4, progress=False, log=lines.append)
    (kept,) = tmp_path.glob("rep.measurements-*.jsonl")
    assert kept.read_bytes() == src.read_bytes()
    assert any(f"kept the 2 measurements of this run in {kept}" in ln for ln in lines), lines
    assert any(f"ddltune collect -o {kept} --resume" in ln for ln in lines)
    assert not out.exists() and _leftovers(tmp_path) == []
    # a second failure never overwrites the first one's file
    with pytest.raises(KeyboardInterrupt if phase == "collect" else RuntimeError):
        tuner.run_main_job(out, max_workers=4, progress=False, log=lines.append)
    assert len(list(tmp_path.glob("rep.measurements-*.jsonl"))) == 2


@pytest.mark.parametrize("records", [0, 2])
def test_a_collect_error_in_run_names_what_was_kept_not_collects_staging_file(
    tmp_path, monkeypatch, records
):
    # collect's own advice names the staging file, which goes with the staging folder,
    # and collect's --resume, which run has no such option as (from a new user's trial:
    # 'timeout 60 ddltune run' told them to resume from a file that no longer existed)
    import calibration
    from tuner import _run

    out = tmp_path / "rep"
    src = _measurements(tmp_path / "src.jsonl")

    def failing_collect(sm, measurements, *args, **kw):
        if records:
            sm.write_bytes(src.read_bytes())
        raise calibration.CollectError(
            f"terminated by SIGTERM (with 2 workers). The {records} records written to {sm} "
            "by this run are valid; run again with --resume to measure the rest",
            written=records,
            reason="terminated by SIGTERM (with 2 workers)",
        )

    monkeypatch.setattr(_run, "_measure", failing_collect)
    with pytest.raises(calibration.CollectError) as err:
        tuner.run_main_job(out, max_workers=4, progress=False)
    msg = str(err.value)
    assert msg.startswith("terminated by SIGTERM (with 2 workers); ")
    assert ".new-" not in msg and "run again with --resume" not in msg
    assert f"{out} is as it was" in msg and not out.exists()
    kept = list(tmp_path.glob("rep.measurements-*.jsonl"))
    if records:
        assert len(kept) == 1 and kept[0].read_bytes() == src.read_bytes()
        assert f"its 2 finished measurements are kept in {kept[0]}" in msg
        assert f"'ddltune run --measurements {kept[0]} -o DIR'" in msg
    else:
        assert kept == [] and "no measurement had finished" in msg
    assert _leftovers(tmp_path) == []


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


# ------------------------------------------------------------ item 4: hostile inputs


def _calibrate_argv(tmp_path, out, *extra):
    m = tmp_path / "m.jsonl"
    if not m.exists():
        _measurements(m)
    return ["calibrate", str(m), "-o", str(out), *extra]


def test_outputs_are_regular_files_or_new_names(tmp_path, capsys):
    # before: '-o FIFO --overwrite' (or a device node) was replaced by a regular file
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert main(_calibrate_argv(tmp_path, fifo, "--overwrite")) == 1
    assert "FIFO" in capsys.readouterr().err and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    with pytest.raises(OutputPathError, match="FIFO"):
        RecordWriter(fifo, "overwrite")
    with pytest.raises(OutputPathError, match="FIFO"):
        atomic_write_text(fifo, "x")
    if os.geteuid() == 0:  # mknod needs root
        node = tmp_path / "mynull"
        os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        assert main(_calibrate_argv(tmp_path, node, "--overwrite")) == 1
        assert "character device" in capsys.readouterr().err
        assert stat.S_ISCHR(os.lstat(node).st_mode)


def test_calibrate_refuses_a_dangling_symlink_without_overwrite(tmp_path, capsys):
    # before: calibrate -o replaced a dangling link (collect refused it)
    link = tmp_path / "p.json"
    link.symlink_to(tmp_path / "nowhere")
    assert main(_calibrate_argv(tmp_path, link)) == 1
    assert "symbolic link" in capsys.readouterr().err
    assert link.is_symlink() and os.readlink(link) == str(tmp_path / "nowhere")


def test_an_unwritable_output_is_named_before_the_fit(tmp_path, capsys, monkeypatch):
    # before: found after the 20 s fit, the message naming the temporary file
    import calibration

    monkeypatch.setattr(calibration, "calibrate", lambda *a, **k: pytest.fail("fit started"))
    blocker = tmp_path / "file"
    blocker.write_text("a file where the folder should be")
    out = blocker / "p.json"
    assert main(_calibrate_argv(tmp_path, out)) == 1
    err = capsys.readouterr().err
    assert f"{out}: -o: its folder {blocker} cannot take a new file" in err


def test_a_full_disk_names_the_output_and_keeps_the_old(tmp_path, monkeypatch):
    # before: "OSError: [Errno 28] No space left on device" and no path
    old = tmp_path / "p.json"
    old.write_text("old")
    real_fsync = os.fsync

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputPathError, match=r"p\.json: could not be written \(No space"):
        atomic_write_text(old, "new")
    folder = tmp_path / "rep"
    monkeypatch.setattr(os, "fsync", real_fsync)
    atomic_replace_dir(folder, lambda d: (d / "index.html").write_text("old"))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputPathError, match=r"rep: could not be written \(No space.*unchanged"):
        atomic_replace_dir(folder, lambda d: (d / "index.html").write_text("new"), overwrite=True)
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert old.read_text() == "old" and (folder / "index.html").read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json", "rep"]


def test_inputs_are_read_bounded(tmp_path, capsys):
    # before: --hf-config /dev/zero and --layers /dev/zero read until OOM (22 GB)
    for flag in ("--hf-config", "--layers"):
        code = main(["predict", "--preset", "ethernet-10g", "--arch", "ring", "--workers", "4",
                     flag, "/dev/zero"])  # fmt: skip
        assert code == 1 and "MiB limit" in capsys.readouterr().err
    with pytest.raises(InputFileError, match="config.json's 4 MiB limit"):
        workload_from_hf_config("/dev/zero", batch_size=1)


def test_huge_sizes_in_a_config_are_named_not_overflowed(tmp_path, capsys):
    # before: "OverflowError: Python int too large to convert to C long"
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"model_type": "llama", "hidden_size": 10**15,
        "num_hidden_layers": 2, "num_attention_heads": 8, "intermediate_size": 64,
        "vocab_size": 100, "max_position_embeddings": 128}, indent=1))  # fmt: skip
    code = main(["predict", "--preset", "ethernet-10g", "--arch", "ring", "--workers", "4",
                 "--hf-config", str(cfg)])  # fmt: skip
    err = capsys.readouterr().err
    lines = cfg.read_text().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if '"hidden_size"' in text)
    assert code == 1 and f"{cfg}:{line}: 'hidden_size' must be <= 1e+07" in err
    assert "Traceback" not in err and "OverflowError" not in err


def _steps_file(path: Path, *recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


def _step(workers, spec, t=0.01, arch="ring"):
    rec = {"schema": 1, "kind": "step", "architecture": arch, "servers": 0, "colocated": False,
           "workers": workers, "ranks_per_node": workers, "bucket_bytes": 0, "model": "mlp",
           "batch_size": 32, "time_s": {"p10": t, "median": t}, "samples_s": [t],
           "backend": "cpu", "device_kind": "cpu", "versions": {}, "host_fingerprint": "x",
           "timestamp": "2026-01-01T00:00:00Z", "source": "test"}  # fmt: skip
    if spec is not None:
        rec["model_spec"] = spec
    return rec


@pytest.mark.timeout(120)
def test_validate_from_bounds_and_names_the_model_spec(tmp_path, preset_profile, capsys):
    # before: a spec of 1e15 × 1e15 × 1e9 was OOM-killed after 96 s; a record without
    # model_spec gave "step records need 'model_spec'" naming neither file nor line
    huge = {"model": "mlp", "in": 10**15, "width": 10**15, "depth": 10**9}
    for spec, needle in ((huge, "model size 'in' must be an integer ≥ 1 and ≤ 1048576"),
                         (None, "a step record needs 'model_spec'"),
                         ({"model": "mlp", "width": 60000, "depth": 900}, "parameters, more")):  # fmt: skip
        f = _steps_file(tmp_path / "s.jsonl", _step(1, {"model": "mlp"}), _step(2, spec))
        code = main(["validate", "--profile", str(preset_profile), "--from", str(f)])
        err = capsys.readouterr().err
        assert code == 1 and f"{f}:2: model_spec: " in err and needle in err, err


def test_error_messages_are_filtered_like_names(capsys):
    # before: the raw OSC title and clear-screen reached the terminal in the error line
    name = "\x1b]0;PWN\x07\x1b[2Jnofile\u202eabc"
    assert main(["show", name]) == 1
    err = capsys.readouterr().err
    assert "nofileabc" in err
    assert not any(c in err for c in ("\x1b", "\x07", "\u202e"))
    for bidi in ("\u202e", "\u2066", "\u200f", "\u061c"):
        assert bidi not in safe_text(f"a{bidi}b") and bidi not in markdown_escape(f"a{bidi}b")


def test_predict_warns_beyond_the_measured_sizes(tmp_path, capsys):
    # before: the 1 GiB row of a profile measured up to 64 KiB had "warnings": []
    prof = Profile.from_preset("ethernet-10g", "cpu")
    prof.measured_ranges = {"message_bytes": [1024, 65536], "num_ranks": [2, 2],
                            "ranks_per_node": [2, 2], "collectives": ["all_reduce"]}  # fmt: skip
    path = tmp_path / "p.json"
    prof.save(path)
    code = main(["predict", "--profile", str(path), "--collective", "all_reduce",
                 "--num-ranks", "2", "--message-bytes", "1K,1G", "--json"])  # fmt: skip
    assert code == 0
    small, big = _json(capsys)["rows"]
    assert small["warnings"] == []
    assert big["warnings"] == [
        "extrapolation: 1 GiB is outside the measured sizes (1 KiB – 64 KiB)"
    ]


def test_predict_iterations_warn_when_the_buckets_leave_the_measured_sizes(tmp_path, capsys):
    # before: 25 MiB buckets predicted from a profile measured up to 64 KiB, "warnings": []
    prof = Profile.from_preset("ethernet-10g", "cpu")
    prof.measured_ranges = {"message_bytes": [1024, 65536], "num_ranks": [2, 4],
                            "ranks_per_node": [1, 1], "collectives": ["all_reduce"]}  # fmt: skip
    path = tmp_path / "p.json"
    prof.save(path)
    # ResNet-50 at a 25 MiB cap: MiB-sized buckets, far above the measured 64 KiB
    code = main(["predict", "--profile", str(path), "--model", "resnet50", "--arch", "ring",
                 "--workers", "1,2", "--ranks-per-node", "1", "--bucket-bytes", "25M",
                 "--json"])  # fmt: skip
    assert code == 0
    one, two = _json(capsys)["rows"]
    assert not [x for x in one["warnings"] if "bucket messages" in x]  # it exchanges nothing
    (w,) = [x for x in two["warnings"] if "bucket messages" in x]
    assert w.startswith("extrapolation: bucket messages of ")
    assert "reach outside the measured sizes (1 KiB–64 KiB): the largest is " in w
    from costmodel import bucketize, get_workload

    sizes, _ = bucketize(get_workload("resnet50"), 25 * 2**20)
    assert max(sizes) > 65536  # the warning is about these, and says how far
    assert f"the largest is {max(sizes) / 65536:.3g}× the largest measured" in w
    assert w.endswith(
        "measure up to it with ddltune collect --max-bytes 64M"
    )  # ≥ 25 MiB on 1K × 4^k
    # inside the measured sizes: no warning
    prof.measured_ranges["message_bytes"] = [1.0, 2.0**31]
    prof.save(path, overwrite=True)
    assert main(["predict", "--profile", str(path), "--model", "resnet50", "--arch", "ring",
                 "--workers", "2", "--ranks-per-node", "1", "--json"]) == 0  # fmt: skip
    (row,) = _json(capsys)["rows"]
    assert not [x for x in row["warnings"] if "bucket messages" in x]


def test_ddp_bucket_cap_under_fp16_gives_the_modelled_wire_buckets(capsys):
    # before: bucket_cap_mb 76.99 = the fp16 wire bytes; DDP buckets by the fp32
    # parameters' bytes (reducer.cpp) and the hook halves them: wire buckets of 38.5 MiB
    code = main(["recommend", "--preset", "ethernet-10g", "--device", "v100", "--model",
                 "alexnet", "--grad-dtype", "fp16", "--max-workers", "16", "--arch", "ring",
                 "--compute-dtype", "fp32", "--json"])  # fmt: skip
    # (fp32 compute: with fp16 compute AlexNet on 10 GbE is fastest on one worker)
    assert code == 0
    doc = _json(capsys)
    ddp = doc["framework_settings"]["pytorch_ddp"]
    cap = int(ddp["kwargs"]["bucket_cap_mb"] * 1024 * 1024)  # what DDP computes
    assert cap // 2 == doc["bucket_bytes"]  # fp32 parameters, fp16 on the wire
    assert ddp["comm_hook"].endswith("fp16_compress_hook")
    assert "register_comm_hook" in ddp["snippet"]
    assert tuner.ddp_bucket_cap_bytes(100, 4, 4) == 100  # no compression: the cap itself


def test_the_refusal_names_a_command_that_has_force():
    # before: report/run showed "pass --force (force=True)"; report has no --force
    prof = Profile.from_preset("ethernet-10g", "cpu")
    prof.reliable, prof.heldout_p90 = False, 0.4
    with pytest.raises(tuner.UnreliableProfileError) as e:
        tuner.recommend(prof, get_workload("resnet50", 32), max_workers=4, refine=False)
    assert "'ddltune recommend --force'" in str(e.value) and "pass --force" not in str(e.value)


# ------------------------------------------------------------ item 2: plans and partial rows


class _NoCluster:
    def __init__(self, *a, **k):
        raise AssertionError("the emulated cluster was built before the plan was checked")


def test_collect_emulate_plan_is_refused_before_the_namespaces(tmp_path, monkeypatch, capsys):
    # before: 'collect --emulate 2x64@200mbit' built the namespaces, ran a 14 s self-check
    import launch
    from calibration import _collect

    monkeypatch.setattr(launch, "EmulatedCluster", _NoCluster)
    monkeypatch.setattr(_collect, "_cores", lambda: 2)
    code = main(["collect", "--emulate", "2x64@200mbit", "-o", str(tmp_path / "m.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "--emulate 2x64@200mbit (128 ranks) on 2 CPU cores" in err
    code = main(
        ["collect", "--emulate", "2x1@200mbit", "--workers", "3", "-o", str(tmp_path / "m")]
    )
    assert code == 2 and "exceeds the emulated cluster 2x1@200mbit" in capsys.readouterr().err


def test_validation_plan_counts_the_dedicated_servers():
    from tuner.validation import check_validation_plan

    plan = check_validation_plan([2, 3, 4], bucket_bytes=[0])
    assert plan == [(1, 1), (2, 2), (2, 3), (3, 3), (3, 4), (4, 4), (4, 5)]
    assert check_validation_plan([4], colocated=True, emulated_ranks=4)[-1] == (4, 4)
    with pytest.raises(ValueError, match=r"--workers 4: ps with 1 dedicated server needs 5"):
        check_validation_plan([2, 3, 4], emulated_ranks=4, emulate_text="4x1@200mbit")


def test_hierarchical_plan_needs_whole_nodes_before_anything_starts(
    tmp_path, monkeypatch, capsys, preset_profile
):
    # 3 workers on 4x2 would put ranks {0, 1} on node 0 and {2} on node 1: refused
    # before the namespaces, naming the counts and the multiple needed
    import launch
    from tuner.validation import check_validation_plan

    plan = check_validation_plan(
        [4, 8], architectures=["ring", "hierarchical"], emulated_ranks=8, ranks_per_node=2
    )
    assert plan == [(1, 1), (4, 4), (8, 8)]
    monkeypatch.setattr(launch, "EmulatedCluster", _NoCluster)
    code = main(["validate", "--emulate", "4x2@200mbit", "--profile", str(preset_profile),
                 "--workers", "3,4,5", "--arch", "ring,hierarchical", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert "--workers 3,5: hierarchical needs the same number of ranks on every node" in out.err
    assert "multiples of 2" in out.err
    # the ring alone runs on any worker count
    assert check_validation_plan([3], architectures=["ring"], emulated_ranks=8, ranks_per_node=2)
    # more workers than ranks, no parameter server asked for: said so, not as a ps problem
    with pytest.raises(ValueError, match=r"--workers 6: 6 workers need 6 processes, more than the "
                       r"emulated cluster 2x2@100mbit has \(4 ranks\)") as e:  # fmt: skip
        check_validation_plan([6], architectures=["ring", "hierarchical"], emulated_ranks=4,
                              emulate_text="2x2@100mbit", ranks_per_node=2)  # fmt: skip
    assert "ps" not in str(e.value) and "--colocated" not in str(e.value)


def test_validate_emulate_plan_is_refused_before_anything_starts(
    tmp_path, monkeypatch, capsys, preset_profile
):
    # before: trained 18 minutes at 2 and 3 workers, then failed at 4 (5 processes)
    import launch

    monkeypatch.setattr(launch, "EmulatedCluster", _NoCluster)
    code = main(["validate", "--emulate", "4x1@200mbit", "--profile", str(preset_profile),
                 "--workers", "2,3,4", "--model", "mlp", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 2 and out.out == ""
    assert (
        "needs 5 processes (4 workers + 1), more than the emulated cluster 4x1@200mbit" in out.err
    )


def test_validate_local_plan_is_bounded_by_the_cores_before_anything_starts(
    tmp_path, monkeypatch, capsys, preset_profile
):
    # before: validate() lifted the per-core bound (force=True always): 8 workers and a
    # dedicated server, 9 processes on 2 cores, would have trained
    import calibration._collect as collect_mod
    from tuner import validation

    monkeypatch.setattr(collect_mod, "_cores", lambda: 2)
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--profile", str(preset_profile), "--workers", "8", "--model", "mlp",
            "--json"]  # fmt: skip
    code = main(argv)
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and len(out.err.strip().splitlines()) == 1
    assert "--workers 9 on 2 CPU cores" in out.err and "--force" in out.err
    assert list(tmp_path.iterdir()) == []  # no step file, nothing started
    with pytest.raises(ValueError, match="--workers 9 on 2 CPU cores"):
        validation.validate(preset_profile, "mlp", [8])  # the API refuses alike
    assert validation.check_validation_plan([8], force=True)[-1] == (8, 9)  # --force lifts it
    assert validation.check_validation_plan([8], colocated=True)[-1] == (8, 8)  # 4 per core


def test_validate_plan_checks_the_model_memory_before_anything_starts(
    tmp_path, monkeypatch, capsys, preset_profile
):
    # before: nothing checked memory; a 2**26-parameter MLP (256 MiB per float32 copy)
    # on 5 processes needs 5 × 4 × 256 MiB = 5 GiB, beyond a machine with 4 GiB free
    import calibration
    from tuner import validation

    monkeypatch.setattr(calibration, "mem_available_bytes", lambda: 4 * 1024**3)
    spec = {"model": "mlp", "in": 8192, "width": 8192, "depth": 1, "classes": 8}
    params = 8192 * 8192 + 8192 + 8192 * 8 + 8  # the MLP's weights and biases, typed
    plan = validation.check_validation_plan([4], bucket_bytes=[0])
    assert plan[-1] == (4, 5)  # 4 workers + a dedicated server
    with pytest.raises(ValueError, match=r"--workers 4: 5 processes × 4 copies × 256 MiB"):
        validation.check_validation_plan([4], bucket_bytes=[0], model=spec, force=True)
    assert 5 * 4 * params * 4 > calibration.mem_available_bytes()  # the line it draws
    # the same model on 2 workers, colocated: 2 × 4 × 256 MiB = 2 GiB fits
    validation.check_validation_plan([2], colocated=True, bucket_bytes=[0], model=spec)
    monkeypatch.chdir(tmp_path)
    code = main(["validate", "--profile", str(preset_profile), "--workers", "4", "--model",
                 "mlp", "--size", "in=8192,width=8192,depth=1,classes=8", "--json"])  # fmt: skip
    out = capsys.readouterr()
    assert code == 2 and out.out == "" and len(out.err.strip().splitlines()) == 1
    assert "more than this machine's available memory (4 GiB, MemAvailable)" in out.err
    assert list(tmp_path.iterdir()) == []


def _fake_training(fail_at: int):
    """run_training that 'measures' instantly and fails at ``fail_at`` workers, as a rank would."""
    from types import SimpleNamespace

    from launch import LaunchError
    from tuner.validation import _harness

    def run_training(model, n, configs, *, writer=None, on_measurement=None, **kw):
        if n == fail_at:
            raise LaunchError(f"rank {n - 1} exited with code 17 while training")
        out = []
        for c in configs:
            rec = _step(n, {"model": "mlp", "in": 8, "width": 16, "depth": 1, "classes": 3,
                            "batch_size": 4}, t=0.01 * n, arch=c.architecture)  # fmt: skip
            rec.update(
                bucket_bytes=c.bucket_bytes, batch_size=4, host_fingerprint=host_fingerprint()
            )
            m = SimpleNamespace(config=c, workers=n, time_s=rec["time_s"], record=rec)
            if writer is not None:
                writer.write(rec)
            if on_measurement is not None:
                on_measurement(m)
            out.append(m)
        return SimpleNamespace(measurements=out)

    return _harness, run_training


def test_a_late_failure_keeps_and_prints_the_finished_rows(
    tmp_path, monkeypatch, capsys, preset_profile
):
    # before: the failure at the last worker count printed neither JSON nor rows
    harness, fake = _fake_training(fail_at=3)
    monkeypatch.setattr(harness, "run_training", fake)
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--profile", str(preset_profile), "--workers", "2,3", "--arch",
            "ring,p2p", "--bucket-bytes", "0", "--json", "--no-progress"]  # fmt: skip
    assert main(argv) == 1
    out = capsys.readouterr()
    (steps,) = tmp_path.glob("validate-steps-*.jsonl")  # the default file, named up front
    assert f"step records go to {steps.name} as they finish" in out.err
    doc = json.loads(out.out)
    assert doc["partial"] is True and "exited with code 17" in doc["error"]
    assert sorted((r["architecture"], r["workers"]) for r in doc["rows"]) == [
        ("p2p", 2),
        ("ring", 2),
    ]
    assert f"kept in {steps.name}" in out.err and "--from" in out.err
    # the file scores on its own: the finished rows and the single-worker step
    assert main(["validate", "--profile", str(preset_profile), "--from", str(steps), "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["rows"]) == 2


def test_run_emulate_plan_and_output_are_checked_before_the_namespaces(
    tmp_path, monkeypatch, capsys
):
    # before: run --emulate built the namespaces and self-checked, then refused
    import launch
    from calibration import _collect

    monkeypatch.setattr(launch, "EmulatedCluster", _NoCluster)
    monkeypatch.setattr(_collect, "_cores", lambda: 2)
    out = tmp_path / "rep"
    assert main(["run", "--emulate", "2x64@200mbit", "-o", str(out)]) == 2
    assert "(128 ranks) on 2 CPU cores" in capsys.readouterr().err
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["run", "--emulate", "2x1@200mbit", "-o", str(out)]) == 1
    assert "--overwrite" in capsys.readouterr().err


def test_ctrl_c_in_validate_prints_the_finished_rows_and_how_to_score_them(
    tmp_path, monkeypatch, capsys, preset_profile
):
    """Ctrl-C after some configurations: their table (headed 'before Ctrl-C', not 'the
    failure'), no 'nan' for a tau no pair decides, the --from command on stderr, exit 130
    (a new user's trial saw 'Kendall tau nan' and no way back to the rows)."""
    harness, fake = _fake_training(fail_at=0)

    def interrupted(model, n, configs, **kw):
        if n == 3:
            raise KeyboardInterrupt
        return fake(model, n, configs, **kw)

    monkeypatch.setattr(harness, "run_training", interrupted)
    monkeypatch.chdir(tmp_path)
    argv = ["validate", "--profile", str(preset_profile), "--workers", "2,3", "--arch",
            "ring,p2p", "--bucket-bytes", "0", "--no-progress"]  # fmt: skip
    assert main(argv) == 130
    out = capsys.readouterr()
    (steps,) = tmp_path.glob("validate-steps-*.jsonl")
    assert "# partial: 2 configurations finished before Ctrl-C" in out.out
    assert "nan" not in out.out and "Kendall tau n/a" in out.out
    assert f"--from {steps.name}" in out.err and "interrupted" in out.err
