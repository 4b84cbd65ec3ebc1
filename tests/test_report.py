"""The report: the timeline recursion against the model, figures, and the files on disk.

The report's timeline (from :func:`costmodel.bucket_schedule`) must end where
:func:`costmodel.iteration_time` does for every architecture; the figures are drawn from data computed
here with the public cost model; the report folder must open from disk (every
``<img src>`` a relative path to a file that exists, nothing fetched from the
network).
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

from costmodel import (
    ARCHITECTURE_NAMES,
    collective_time,
    get_workload,
    iteration_time,
    preset,
)
from tuner._figures import (
    ScalingCurve,
    plot_bucket_sweep,
    plot_busbw,
    plot_collective_fit,
    plot_scaling,
    plot_sensitivity,
    plot_timeline,
)
from tuner._report import (
    FIGURES,
    OPTIONAL_FIGURES,
    collective_series,
    iteration_timeline,
    write_report,
)
from tuner.cli import main

PNG = b"\x89PNG\r\n\x1a\n"
CONFIGS = [(8, 1, 1, 25 * 2**20), (16, 4, 2, 2**20), (4, 2, 1, 0), (1, 1, 1, 25 * 2**20)]


@pytest.fixture(autouse=True)
def no_compilation_cache(monkeypatch):
    """The CLI keeps compiled programs in ~/.cache/ddltune/jax; tests leave it alone."""
    monkeypatch.setenv("DDLTUNE_NO_COMPILATION_CACHE", "1")


@pytest.fixture(scope="module")
def setup():
    return preset("ethernet-10g", "v100"), get_workload("resnet50", 64)


@pytest.mark.parametrize("arch", ARCHITECTURE_NAMES)
def test_timeline_total_equals_iteration_time(setup, arch):
    p, w = setup
    for n, g, k, bb in CONFIGS:
        tl = iteration_timeline(p, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=bb)
        bd = iteration_time(p, w, arch, n, ranks_per_node=g, servers=k, bucket_bytes=bb)
        np.testing.assert_allclose(tl.iteration_s, float(bd.iteration_s), rtol=1e-12)
        np.testing.assert_allclose(
            tl.exposed_s, float(bd.exposed_communication_s), rtol=1e-9, atol=1e-15
        )
        # the recursion's invariants, checked on its output
        assert np.all(tl.start_s >= tl.ready_s - 1e-15)
        if arch == "hsdp":  # the inter-node all-reduces run on a second channel: in
            # issue order, overlapping the next unit's reduce-scatter
            assert np.all(np.diff(tl.start_s) >= -1e-15) and np.all(np.diff(tl.end_s) >= -1e-15)
        else:  # one channel: each reduction after the previous one
            assert np.all(tl.start_s[1:] >= tl.end_s[:-1] - 1e-15)
        assert np.all(tl.end_s >= tl.start_s)
        assert tl.bucket_bytes.sum() == pytest.approx(w.total_param_bytes)
        assert tl.overhead_start_s + tl.overhead_s == pytest.approx(tl.iteration_s)


def test_timeline_limits(setup):
    p, w = setup
    # one worker: nothing to exchange, nothing exposed
    tl = iteration_timeline(p, w, "ring", 1)
    assert np.all(tl.end_s == tl.start_s) and tl.exposed_s == pytest.approx(0.0, abs=1e-15)
    # no overlap (p2p): the first bucket waits for the whole backward pass
    tl = iteration_timeline(p, w, "p2p", 8, bucket_bytes=2**20)
    assert tl.start_s[0] == pytest.approx(tl.forward_s + tl.backward_s)
    # overlap (ring): the first bucket starts during backward
    tl = iteration_timeline(p, w, "ring", 8, bucket_bytes=2**20)
    assert tl.start_s[0] < tl.forward_s + tl.backward_s


def test_timeline_bad_input(setup):
    p, w = setup
    with pytest.raises(ValueError, match="architecture"):
        iteration_timeline(p, w, "allreduce", 4)
    with pytest.raises(ValueError, match="workers"):
        iteration_timeline(p, w, "ring", 0)
    with pytest.raises(ValueError, match="bucket_bytes"):
        iteration_timeline(p, w, "ring", 4, bucket_bytes=-1)


def _records(p, noise=0.03, seed=0):
    """Synthetic collective records: the preset's times with seeded multiplicative noise."""
    rng = np.random.default_rng(seed)
    recs = []
    for name in ("all_reduce", "all_gather", "ps_push"):
        for n in (2, 4):
            for s in 2 ** np.arange(10, 25, 2):
                t = float(collective_time(p, name, float(s), float(n), float(n)))
                t *= float(np.exp(rng.normal(0.0, noise)))
                base = {
                    "kind": "collective",
                    "collective": name,
                    "num_ranks": n,
                    "ranks_per_node": n,
                    "message_bytes": int(s),
                    "backend": "gpu",
                }
                recs.append(base | {"time_s": {"median": t}, "in_place": False})
                recs.append(base | {"time_s": {"median": 1.5 * t}, "in_place": True})
    return recs


def test_collective_series_matches_model_and_keeps_lower_in_place(setup):
    p, _ = setup
    recs = _records(p)
    series = collective_series(p, recs, heldout=[("all_reduce", 2, 2, 4096)])
    assert len(series) == 6
    for s in series:
        pred = np.asarray(
            collective_time(
                p, s.collective, s.message_bytes, float(s.num_ranks), float(s.ranks_per_node)
            )
        )
        np.testing.assert_allclose(s.predicted_s, pred, rtol=1e-12)
        # the lower of the out-of-place / in-place pair (1.5×) is kept: within noise of model
        assert np.all(np.abs(np.log(s.measured_s / s.predicted_s)) < 0.2)
    ar2 = next(s for s in series if s.collective == "all_reduce" and s.num_ranks == 2)
    assert ar2.heldout.sum() == 1 and ar2.message_bytes[ar2.heldout][0] == 4096
    assert collective_series(p, [{"kind": "compute"}]) == []


def test_collective_series_keep_the_hierarchical_all_reduce_apart(setup):
    """Ring and hierarchical all-reduce records of the same (n, g, size) are two series,
    each predicted with its own algorithm, the held-out marks by algorithm (the held-out
    key carries the algorithm's name; before, reading it as a count crashed the report),
    and the machine's ranks of an emulated job go to the prediction as the fit had them."""
    from costmodel import collective_batch, collective_batch_time

    p, _ = setup
    recs = []
    for algo in ("ring", "hierarchical"):
        for s in (1024, 4096, 1 << 20):
            t = float(collective_time(p, "all_reduce", float(s), 8.0, 2.0, algorithm=algo))
            rec = {"kind": "collective", "collective": "all_reduce", "num_ranks": 8,
                   "ranks_per_node": 2, "message_bytes": s, "backend": "gpu",
                   "time_s": {"median": t}, "ranks_per_machine": 8}  # fmt: skip
            recs.append(rec | ({"algorithm": algo} if algo != "ring" else {}))
    held = [("all_reduce", 8, 2, 4096, "hierarchical"), ("all_reduce", 8, 2, 1024)]
    series = collective_series(p, recs, heldout=held)
    assert [(s.collective, s.algorithm) for s in series] == [
        ("all_reduce", None), ("all_reduce", "hierarchical")
    ]  # fmt: skip
    for s in series:
        b = collective_batch(["all_reduce"] * 3, s.message_bytes, 8, 2, [s.algorithm] * 3,
                             [8.0] * 3)  # fmt: skip
        np.testing.assert_allclose(s.predicted_s, np.asarray(collective_batch_time(p, b)))
    assert list(series[0].message_bytes[series[0].heldout]) == [1024]
    assert list(series[1].message_bytes[series[1].heldout]) == [4096]
    assert series[1].label == "n=8 (2/node) hierarchical"


def _curves(p, w, max_workers=32):
    n = np.array([1, 2, 4, 8, 16, 32])[: int(np.log2(max_workers)) + 1]
    out = []
    for arch in ("ring", "p2p", "ps"):
        bd = iteration_time(p, w, arch, n.astype(float), bucket_bytes=25 * 2**20)
        t = np.asarray(bd.iteration_s)
        thr = n * w.batch_size / t
        eff = np.asarray(bd.scaling_efficiency)
        out.append(ScalingCurve(arch, arch, n, t, 0.9 * t, 1.1 * t, thr, thr / 1.1, thr / 0.9, eff))
    return out


def test_figures_are_pngs(setup, tmp_path):
    p, w = setup
    series = collective_series(p, _records(p), heldout=[("all_reduce", 2, 2, 4096)])
    caps = 2.0 ** np.arange(16, 31)
    bd = iteration_time(p, w, "ring", 16, bucket_bytes=caps)
    t = np.asarray(bd.iteration_s)
    tls = [iteration_timeline(p, w, a, 8, bucket_bytes=4 * 2**20) for a in ("ring", "p2p", "ps")]
    written = [
        plot_collective_fit(series, tmp_path / "a.png"),
        plot_busbw(series, tmp_path / "b.png"),
        plot_scaling(_curves(p, w), tmp_path / "c.png", recommended=("ring", 8)),
        plot_bucket_sweep(
            caps,
            t,
            tmp_path / "d.png",
            low_s=0.9 * t,
            high_s=1.1 * t,
            chosen_bytes=2**22,
            defaults={"DDP 25 MiB": 25 * 2**20},
        ),
        plot_timeline(tls, tmp_path / "e.png"),
        plot_sensitivity(
            {"beta_inter": 0.4, "flops": -0.1, "alpha_inter": 0.02}, tmp_path / "f.png"
        ),
    ]
    for path in written:
        data = Path(path).read_bytes()
        assert data[:8] == PNG and len(data) > 5000, path


def _texts_collide(fig) -> list[str]:
    """Every title, axis label and shown tick label of ``fig`` after drawing: the ones
    outside the figure, and each pair from different axes (or different roles of one axis)
    whose boxes overlap by more than a pixel."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # savefig's canvas for PNG
    canvas.draw()
    r = canvas.get_renderer()
    boxes = []
    if fig._suptitle is not None:
        boxes.append(("suptitle", fig._suptitle.get_window_extent(r)))
    for i, ax in enumerate(fig.axes):
        for role, texts in (
            ("title", [ax.title]),
            ("xlabel", [ax.xaxis.label]),
            ("ylabel", [ax.yaxis.label]),
            ("xticks", ax.get_xticklabels(minor=False) + ax.get_xticklabels(minor=True)),
            ("yticks", ax.get_yticklabels(minor=False) + ax.get_yticklabels(minor=True)),
        ):
            for t in texts:
                if not (t.get_visible() and t.get_text()):
                    continue
                b = t.get_window_extent(r)
                # a tick label is drawn only where its tick lies within the axis' view
                a = ax.bbox
                if role == "xticks" and not a.x0 - 1 <= (b.x0 + b.x1) / 2 <= a.x1 + 1:
                    continue
                if role == "yticks" and not a.y0 - 1 <= (b.y0 + b.y1) / 2 <= a.y1 + 1:
                    continue
                boxes.append((f"axes {i} {role} {t.get_text()!r}", b))
    W, H = canvas.get_width_height()
    bad = [n for n, b in boxes if b.x0 < -1 or b.y0 < -1 or b.x1 > W + 1 or b.y1 > H + 1]
    for j, (n1, b1) in enumerate(boxes):
        for n2, b2 in boxes[j + 1 :]:
            if n1.rsplit(" ", 1)[0] == n2.rsplit(" ", 1)[0] and "ticks" in n1:
                continue  # one tick row's own neighbours: matplotlib's locator spaces them
            dx = min(b1.x1, b2.x1) - max(b1.x0, b2.x0)
            dy = min(b1.y1, b2.y1) - max(b1.y0, b2.y0)
            if dx > 1 and dy > 1:
                bad.append(f"{n1} × {n2}")
    return bad


@pytest.mark.parametrize("sizes", ["1K-16M", "1K-64K"])
def test_grid_figures_keep_every_label_inside_and_apart(setup, tmp_path, monkeypatch, sizes):
    """The collectives, busbw and scaling grids are laid out by fixed margins in inches
    (constrained layout took 60% of their drawing): no title, axis label or tick label
    leaves the figure or overlaps another, for a wide time axis (decades labelled) and a
    narrow one (1–64 KiB: every minor tick labelled), one to three columns."""
    import tuner._figures as F

    drawn = []
    monkeypatch.setattr(F, "_save", lambda fig, path: drawn.append(fig) or Path(path))
    p, w = setup
    recs = _records(p)
    if sizes == "1K-64K":
        recs = [r for r in recs if r["message_bytes"] <= 64 * 1024]
    series = collective_series(p, recs, heldout=[("all_reduce", 2, 2, 4096)])
    one = [s for s in series if s.collective == "all_reduce"]
    plot_collective_fit(series, tmp_path / "a.png")
    plot_collective_fit(one, tmp_path / "a1.png")
    plot_busbw(series, tmp_path / "b.png")
    plot_scaling(_curves(p, w), tmp_path / "c.png", recommended=("ring", 8))
    assert len(drawn) == 4
    for fig in drawn:
        assert fig.get_layout_engine() is None  # the fixed margins, not a layout pass
        assert _texts_collide(fig) == []


def test_every_architecture_has_its_own_colour_and_log_axes_read_plain():
    """A new user's trial: ps (dedicated) and hsdp were both red, p2p and fsdp both green
    (the sharded ones took the cycle's colours), and the iteration-time axis read
    2.8×10¹. Every architecture (and colocated ps) has a colour of its own, whatever its
    position; a log axis within a decade labels its minor ticks as plain numbers, a wider
    one its decades (10, 100), never in scientific notation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel import ARCHITECTURE_NAMES
    from tuner._figures import _plain_log_labels, arch_colour

    cols = [arch_colour(a, i, a) for i, a in enumerate(ARCHITECTURE_NAMES)]
    cols.append(arch_colour("ps", 0, "ps (colocated)"))
    assert len(set(cols)) == len(cols) == len(ARCHITECTURE_NAMES) + 1
    assert arch_colour("hsdp", 3) == arch_colour("hsdp", 7)  # not the cycle's
    for lo, hi, want in ((22.0, 35.0, {"30"}), (4.0, 200.0, {"10", "100"})):
        fig, ax = plt.subplots()
        ax.set_yscale("log")
        ax.set_ylim(lo, hi)
        _plain_log_labels(ax)
        fig.canvas.draw()
        labels = [t.get_text() for t in ax.get_yticklabels(minor=False)]
        labels += [t.get_text() for t in ax.get_yticklabels(minor=True)]
        shown = {x for x in labels if x}
        plt.close(fig)
        assert want <= shown and all(float(x.replace(",", "")) > 0 for x in shown), shown
        assert not any("times" in x or "$" in x or "e+" in x for x in shown)


def test_figures_refuse_empty_data(tmp_path):
    for fn, arg in (
        (plot_collective_fit, []),
        (plot_busbw, []),
        (plot_scaling, []),
        (plot_timeline, []),
        (plot_sensitivity, {}),
    ):
        with pytest.raises(ValueError, match="empty"):
            fn(arg, tmp_path / "x.png")
    with pytest.raises(ValueError, match="shape"):
        plot_bucket_sweep(np.array([1.0, 2.0]), np.array([1.0]), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


class _Images(HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcs, self.links = [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.srcs.append(a.get("src"))
        for key in ("href", "src"):
            if a.get(key):
                self.links.append(a[key])


def _context():
    return {
        "title": "ddltune report — resnet50",
        "subtitle": "test",
        "rec": {
            "headline": "ring, 8 workers, bucket 4 MiB",
            "facts": [("workers", "8")],
            "reliable": True,
        },
        "alternatives": {
            "head": ["architecture", "workers"],
            "rows": [["ring", "8"], ["p2p", "4"]],
        },
        "tables": {
            "calibration": [
                {"title": "Parameters", "head": ["a", "b"], "rows": [["x|y", "1"]], "note": ""}
            ]
        },
        "provenance": [("model", "resnet50"), ("layer file", "<script>alert(1)</script>")],
    }


def _check_folder(out: Path) -> None:
    html = (out / "index.html").read_text()
    parser = _Images()
    parser.feed(html)
    assert parser.srcs, "no image in index.html"
    for src in parser.srcs:
        assert not re.match(r"^[a-z]+:", src) and not src.startswith("/"), src
        assert (out / src).is_file(), src
        assert (out / src).read_bytes()[:8] == PNG
    assert not [u for u in parser.links if re.match(r"^(https?:)?//", u)], "network reference"
    md = (out / "report.md").read_text()
    for src in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md):
        assert (out / src).is_file(), src


def test_write_report_folder_opens_from_disk(setup, tmp_path):
    p, w = setup
    series = collective_series(p, _records(p))
    caps = 2.0 ** np.arange(16, 31)
    t = np.asarray(iteration_time(p, w, "ring", 8, bucket_bytes=caps).iteration_s)
    out = tmp_path / "rep"
    files = write_report(
        out,
        _context(),
        collectives=series,
        curves=_curves(p, w),
        recommended=("ring", 8),
        bucket_sweep={"bucket_bytes": caps, "iteration_s": t, "chosen_bytes": 2**22},
        timelines=[iteration_timeline(p, w, "ring", 8)],
        sensitivity={"beta_inter": 0.3},
    )
    assert set(files.figures) == set(FIGURES) - set(OPTIONAL_FIGURES) and not files.skipped
    _check_folder(out)
    md = (out / "report.md").read_text()
    assert "x\\|y" in md  # a '|' inside a cell does not break the Markdown table
    # user text (a model name from a layer file) never becomes HTML in report.md
    assert "<script>" not in md and "\\<script\\>" in md
    assert "ring, 8 workers, bucket 4 MiB" in (out / "index.html").read_text()
    # a second report into the same folder is refused, then allowed with overwrite
    with pytest.raises(FileExistsError, match="overwrite"):
        write_report(out, _context(), curves=_curves(p, w))
    files = write_report(out, _context(), curves=_curves(p, w), overwrite=True)
    assert set(files.figures) == {"scaling.png"}
    assert not (out / "figures" / "collectives.png").exists()  # stale figures removed
    assert "collectives.png" in files.skipped
    _check_folder(out)


def test_alternatives_table_shows_memory_per_rank_next_to_the_time():
    # issue 14: the report shows each configuration's memory per rank beside its time
    from tuner import recommend
    from tuner._report import _alternatives_table

    w = get_workload("resnet50", 32)
    assert w.total_param_bytes == 102_228_128  # 25,557,032 fp32 parameters
    rec = recommend(
        preset("ethernet-10g", "v100"), w, max_workers=4, architectures=["ring", "fsdp"]
    )
    table = _alternatives_table(rec)
    assert "memory per rank" in table["head"] and "iteration" in table["head"]
    # a model without a transformer's activations: the head says what the memory leaves out
    from tuner import NO_ACTIVATIONS

    assert _alternatives_table(rec, w)["head"][-1] == f"memory per rank ({NO_ACTIVATIONS})"
    assert _alternatives_table(rec, get_workload("gpt2", 8))["head"][-1] == "memory per rank"
    col, arch_col = table["head"].index("memory per rank"), table["head"].index("architecture")
    unit = {"KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    shown = {}

    def shown_bytes(text):
        m = re.fullmatch(r"(\d+(?:\.\d+)?) (KiB|MiB|GiB)", text)
        assert m, text
        return float(m[1]) * unit[m[2]]

    for row in table["rows"]:
        shown.setdefault(row[arch_col], set()).add(shown_bytes(row[col]))
    assert set(shown) == {"ring", "fsdp"}  # both architectures are in the table
    # fsdp exchanges per wrapped block, as recommend prints it: no bucket size to show
    b_col = table["head"].index("bucket")
    assert {r[b_col] for r in table["rows"] if r[arch_col] == "fsdp"} == {"per block"}
    assert all(r[b_col] != "per block" for r in table["rows"] if r[arch_col] == "ring")
    # DDP keeps parameters, gradients and one momentum word (the tuner's default optimizer
    # state factor 1): 3 × 102,228,128 B = 292.5 MiB on every rank, whatever the bucket
    (ring,) = shown["ring"]
    assert ring == pytest.approx(3 * 102_228_128, rel=5e-3)
    # FSDP FULL_SHARD at 4 workers: a quarter of those states, plus gathered units
    # (and at the other worker counts the runner-ups list: 3 × P / n and up, less with n)
    w_col = table["head"].index("workers")
    fsdp = sorted((int(r[w_col]), shown_bytes(r[col])) for r in table["rows"]
                  if r[arch_col] == "fsdp")  # fmt: skip
    assert fsdp and all(3 * 102_228_128 / n <= m * (1 + 5e-3) < ring for n, m in fsdp)
    assert [m for _, m in fsdp] == sorted((m for _, m in fsdp), reverse=True)


# --------------------------------------------------------------------------- ddltune report


@pytest.fixture(scope="module")
def preset_files(tmp_path_factory):
    """A preset profile (reliable, prior-only covariance) and measurements made from it."""
    from calibration import Profile, RecordWriter, provenance

    d = tmp_path_factory.mktemp("preset")
    prof = Profile.from_preset("ethernet-10g", "v100")
    prof.save(d / "profile.json")
    with RecordWriter(d / "m.jsonl") as w:
        for r in _records(prof.params):
            rec = {k: v for k, v in r.items() if k != "backend"}
            rec.update(schema=1, dtype="float32", samples_s=[rec["time_s"]["median"]])
            rec.update(provenance("test", backend="gpu", device_kind="V100"))
            w.write(rec)
    return d


@pytest.mark.timeout(900)
def test_report_cli_reliable_profile(preset_files, tmp_path, capsys):
    out = tmp_path / "rep"
    argv = [
        "report",
        "--profile",
        str(preset_files / "profile.json"),
        "--measurements",
        str(preset_files / "m.jsonl"),
        "--model",
        "resnet50",
        "--max-workers",
        "4",
        "-o",
        str(out),
        "--json",
    ]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["reliable"] is True and doc["refusal"] is None
    assert set(doc["figures"]) == set(FIGURES) - set(OPTIONAL_FIGURES) and not doc["skipped"]
    assert doc["recommendation"]["workers"] <= 4
    _check_folder(out)
    html = (out / "index.html").read_text()
    assert 'id="unreliable"' not in html and ">reliable<" in html
    assert doc["recommendation"]["label"] in html
    # the same folder again: refused without --overwrite, one line, exit 1
    assert main(argv) == 1
    assert "--overwrite" in capsys.readouterr().err


@pytest.mark.timeout(900)
def test_report_cli_on_an_unreliable_profile_advises_options_not_python(
    preset_files, tmp_path, capsys
):
    """The refusal of an unreliable profile, as `ddltune report` prints it and the report
    writes it, names --force, not the Python call (a new user's trial read
    "recommend(..., force=True)" in the command's warning)."""
    doc = json.loads((preset_files / "profile.json").read_text())
    doc.update(reliable=False, heldout_p90=0.3)
    bad = tmp_path / "unreliable.json"
    bad.write_text(json.dumps(doc))
    argv = ["report", "--profile", str(bad), "--model", "resnet50", "--max-workers", "4"]
    assert main([*argv, "-o", str(tmp_path / "rep")]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and "(--force)" in err and "UNRELIABLE" in err
    assert "recommend(" not in err and "force=True" not in err
    assert main([*argv, "-o", str(tmp_path / "rep2"), "--json"]) == 0
    refusal = json.loads(capsys.readouterr().out)["refusal"]
    assert "(--force)" in refusal and "force=True" not in refusal


@pytest.mark.parametrize(
    ("extra", "code", "needle"),
    [
        ([], 2, "--model"),
        (["--model", "resnet50", "--profile", "nope.json"], 1, "nope.json"),
        (["--model", "resnet51", "--profile", "PROFILE"], 2, "resnet51"),
        (["--model", "resnet50", "--profile", "BAD"], 1, "bad.json"),
        (["--model", "resnet50", "--profile", "PROFILE", "--measurements", "BAD"], 1, "bad.json"),
        # a new user's trial: a folder or a missing file named the path but not the option
        (
            ["--model", "resnet50", "--profile", "PROFILE", "--measurements", "DIR"],
            1,
            "--measurements ",
        ),
        (
            ["--model", "resnet50", "--profile", "PROFILE", "--measurements", "nope.jsonl"],
            1,
            "--measurements nope.jsonl: No such file",
        ),
    ],
)
def test_report_cli_bad_input(preset_files, tmp_path, capsys, extra, code, needle):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": 1, "kind": "profile", "params": {"alpha_s": "x"}}\n')
    sub = {"PROFILE": str(preset_files / "profile.json"), "BAD": str(bad), "DIR": str(tmp_path)}
    argv = ["report", "-o", str(tmp_path / "o")] + [sub.get(a, a) for a in extra]
    if "--profile" not in argv:
        argv += ["--profile", str(preset_files / "profile.json")]
        argv.remove("--model") if "--model" in argv else None
    assert main(argv) == code
    err = capsys.readouterr().err
    assert needle in err and err.count("error:") == 1
    assert not (tmp_path / "o").exists()


def test_report_warns_of_measurements_the_profile_was_not_fitted_on(tmp_path, capsys):
    """Its figure marked another file's points 'fitted' and 'held out' without a word (from a
    new user's trial); a file the profile lists by content passes silently."""
    import hashlib

    from calibration import Profile
    from tuner.cli._report import _warn_foreign_measurements

    mine, other = tmp_path / "mine.jsonl", tmp_path / "other.jsonl"
    mine.write_text('{"a": 1}\n')
    other.write_text('{"a": 2}\n')
    doc = json.loads(Profile.from_preset("ethernet-10g", "v100").to_json())
    sha = hashlib.sha256(mine.read_bytes()).hexdigest()
    doc["provenance"]["inputs"] = [{"path": "elsewhere/m.jsonl", "sha256": sha}]
    prof = Profile.from_dict(doc)
    _warn_foreign_measurements(prof, "p.json", [mine])
    assert capsys.readouterr().err == ""
    _warn_foreign_measurements(prof, "p.json", [mine, other])
    err = capsys.readouterr().err
    assert f"{other} is not among the files p.json was fitted on" in err and str(mine) not in err
    # a preset lists no inputs: nothing to compare
    _warn_foreign_measurements(Profile.from_preset("ethernet-10g", "v100"), "p.json", [other])
    assert capsys.readouterr().err == ""


def test_bucket_sweep_draws_the_refined_cap_where_the_recommendation_puts_it():
    """A new user's trial: the refined cap (97.5 MiB for ResNet-50) lies between the grid's
    powers of two, and the star, interpolated between them, sat above the curve (25.42 s
    against 25.27 s): the recommended size looked like the slowest. The curve now holds the
    chosen cap at the recommendation's own time, the lowest of the curve."""
    from tuner import recommend
    from tuner._report import _bucket_sweep

    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    rec = recommend(p, w, max_workers=64, ranks_per_node=2, architectures=["ring"])
    assert rec.config.refined
    grid = rec.bucket_curve()["bucket_bytes"]
    assert rec.config.bucket_bytes not in grid  # between grid points
    d = _bucket_sweep(None, p, w, rec)
    caps, t = np.asarray(d["bucket_bytes"]), np.asarray(d["iteration_s"])
    assert np.all(np.diff(caps) > 0)
    i = int(np.flatnonzero(caps == rec.config.bucket_bytes)[0])
    assert t[i] == rec.config.iteration_time_s
    assert t[i] <= t.min() * (1 + 1e-12)


def test_timelines_show_the_fastest_other_architectures_runner_up_first():
    """A new user's report drew the recommendation and the first four architectures in
    sweep order (ps, ps, p2p, tree), not its runner-up (zero1 at 232 samples/s, left
    out): the other rows are now each architecture's best, fastest first."""
    from tuner import recommend
    from tuner._report import _timelines

    p, w = preset("ethernet-10g", "v100"), get_workload("resnet50", 64)
    rec = recommend(p, w, max_workers=16, ranks_per_node=2)
    assert len(rec.sweeps) > 5  # more architectures than the figure shows
    tl = _timelines(p, w, rec, limit=5)
    assert len(tl) == 5 and tl[0].label.startswith("recommended: ")
    best = {}
    for label, sw in rec.sweeps.items():
        ok = sw.feasible & np.isfinite(sw.iteration_s)
        if label != rec.config.label and ok.any():
            best[label] = float(sw.throughput[ok].max())
    ranked = sorted(best, key=lambda lab: -best[lab])
    shown = [t.label.split(":")[0].removeprefix("best ") for t in tl[1:]]
    assert shown == ranked[:4]
    assert rec.alternatives[0].label in shown  # the runner-up's architecture is drawn
    # a runner-up is drawn as recommend refined it, the alternatives table's bucket (a
    # new user's figure said "hierarchical, bucket 4 MiB" where the table said 97.4 MiB):
    # on A100s over HDR the ring's, tree's and zero1's buckets are refined off the grid
    from costmodel import format_bytes

    p8 = preset("ib-hdr-200g", "a100")
    rec8 = recommend(p8, w, max_workers=64, ranks_per_node=8)
    tl8 = _timelines(p8, w, rec8, limit=5)
    checked = 0
    for alt in rec8.alternatives:
        t = next((t for t in tl8 if t.label.startswith(f"best {alt.label}:")), None)
        if t is not None and alt.uses_bucket_bytes:
            assert t.label.endswith(f"bucket {format_bytes(alt.bucket_bytes)}"), t.label
            assert f" {alt.workers} workers" in t.label
            checked += alt.refined
    assert checked >= 2
    # fsdp exchanges per wrapped block: its bucket_bytes is not a setting to show
    for t in tl[1:]:
        arch = t.label.split(":")[0].removeprefix("best ")
        assert ("per block" in t.label) == (arch in ("fsdp", "hsdp")), t.label
        assert ("bucket" in t.label) == (arch not in ("fsdp", "hsdp")), t.label


def test_scaling_legend_stays_off_the_curves(setup, tmp_path, monkeypatch):
    """A new user's report: the top row's legends sat inside the throughput and
    efficiency panels, over the ps and tree curves. The legend has a row of its own: no
    legend box inside a data panel overlaps a curve of the overview, and every curve is
    in it."""
    import tuner._figures as F

    drawn = []
    monkeypatch.setattr(F, "_save", lambda fig, path: drawn.append(fig) or Path(path))
    p, w = setup
    curves = _curves(p, w)
    plot_scaling(curves, tmp_path / "c.png", recommended=("ring", 8))
    (fig,) = drawn
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # savefig's canvas for PNG
    canvas.draw()
    renderer = canvas.get_renderer()
    overview = [
        ax
        for ax in fig.axes
        if ax.get_title() in ("Iteration time", "Throughput", "Scaling efficiency")
    ]
    assert len(overview) == 3
    assert all(ax.get_legend() is None for ax in overview)
    keys = [ax for ax in fig.axes if not ax.axison and ax.get_legend() is not None]
    assert len(keys) == 1
    box = keys[0].get_legend().get_window_extent(renderer)
    for ax in overview:
        assert not box.overlaps(ax.get_window_extent(renderer))
    shown = {t.get_text() for t in keys[0].get_legend().get_texts()}
    assert {c.label for c in curves} <= shown and "recommended" in shown


def test_collective_series_predicts_a_swap_with_its_declared_all_reduces():
    """The fit figure's prediction of a record is the fit's: a swap's declared
    all-reduces ("sync", launch.start_together in the collector's program) are added."""
    p = preset("ethernet-10g", "v100")
    sync = {"allreduces": 2, "message_bytes": 64, "num_ranks": 2, "ranks_per_node": 1}

    def rec(c, S, **kw):
        return {
            "kind": "collective",
            "collective": c,
            "message_bytes": S,
            "num_ranks": 2,
            "ranks_per_node": 1,
            "time_s": {"p10": 1e-3},
            **kw,
        }

    sizes = (1024, 65536)
    series = collective_series(
        p, [rec("all_to_all", S, sync=sync) for S in sizes] + [rec("all_reduce", S) for S in sizes]
    )
    got = {s.collective: s.predicted_s for s in series}
    barrier = 2 * float(collective_time(p, "all_reduce", 64, 2, 1))
    for i, S in enumerate(sizes):
        want = float(collective_time(p, "all_to_all", S, 2, 1)) + barrier
        assert got["all_to_all"][i] == pytest.approx(want, rel=1e-5)
        assert got["all_reduce"][i] == pytest.approx(
            float(collective_time(p, "all_reduce", S, 2, 1)), rel=1e-5
        )


def test_timeline_legend_lists_only_what_its_rows_draw(setup, tmp_path, monkeypatch):
    """A new user's figure of ring-family rows listed "second phase (pull / all-gather)",
    which none of them draws: the legend names only the parts some row has."""
    import tuner._figures as F

    drawn = []
    monkeypatch.setattr(F, "_save", lambda fig, path: drawn.append(fig) or Path(path))
    p, w = setup

    def legend(archs):
        tls = [iteration_timeline(p, w, a, 8, bucket_bytes=25 * 2**20) for a in archs]
        plot_timeline(tls, tmp_path / "t.png")
        return {t.get_text() for t in drawn[-1].legends[0].get_texts()}

    ring = legend(["ring"])
    assert "second phase (pull / all-gather)" not in ring and "forward" in ring
    assert "second phase (pull / all-gather)" in legend(["ring", "ps"])
