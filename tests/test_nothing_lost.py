"""Issue 26: nothing lost, on every path.

A job smaller than a node is answered (``--ranks-per-node`` is the node's
capacity), folder outputs keep the user's files, outputs are regular files or
new names, every input read is bounded, errors name the file or option, and
long commands check their plan before any process starts.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import tuner
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
