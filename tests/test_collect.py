"""ddltune collect: planning, cluster detection, CLI usage, and the measuring logic on
several virtual CPU devices in one process (no jax.distributed; fast).

The multi-process runs (real workers, faults, resume, reaping) are in
``test_collect_multiprocess.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from calibration import (
    COLLECT_PATTERNS,
    collect,
    record_key,
    summary_rows,
    validate_record,
)
from calibration._worker import Faults, message_sizes, plan_points
from costmodel import BUSBW_FACTOR, InputFileError
from launch import detect_cluster
from tuner.cli import main

CONFIG = {
    "collectives": list(COLLECT_PATTERNS),
    "sizes": [1024, 4096],
    "dtype": "float32",
    "suite": ["collectives", "compute"],
    "matmul_sizes": [32],
}


# --------------------------------------------------------------------------- plan


def test_message_sizes_follow_nccl_tests_b_e_f():
    assert message_sizes(1024, 64 * 1024**2, 4) == [1024 * 4**k for k in range(9)]
    assert message_sizes(1024, 4 * 1024**2, 4)[-1] == 4 * 1024**2
    with pytest.raises(ValueError, match="step_factor"):
        message_sizes(1024, 4096, 1)
    with pytest.raises(ValueError, match="max_bytes"):
        message_sizes(4096, 1024, 2)


def test_plan_sizes_ranks_and_keys():
    plan = plan_points(CONFIG, 3, 3, num_processes=3)
    coll = [p for p in plan if p["kind"] == "collective"]
    assert len(coll) == len(COLLECT_PATTERNS) * 2
    by = {(p["collective"], p["count"]) for p in coll}
    # 1 KiB of float32 = 256 elements; split patterns round down to a multiple of n = 3.
    assert ("all_reduce", 256) in by and ("reduce_scatter", 255) in by
    assert ("all_gather", 255) in by and ("all_to_all", 255) in by
    for p in coll:
        assert p["message_bytes"] == 4 * p["count"]
        assert p["num_ranks"] == 3 and p["ranks_per_node"] == 3  # ps_push/pull: all processes
    comp = [p for p in plan if p["kind"] == "compute"]
    mm = [p for p in comp if p["op"] == "matmul"]
    assert sorted(p["num_ranks"] for p in mm) == [1, 3]  # rank 0 alone, and all at once
    assert all(p["flops"] == 2.0 * 32**3 for p in mm)
    ops = {(p["op"], p["shape"].get("model"), p["shape"].get("layer")) for p in comp}
    assert ("forward", "mlp", 0) in ops and ("backward", "cnn", 0) in ops
    lin = next(p for p in comp if p["op"] == "backward" and p["shape"].get("type") == "linear")
    s = lin["shape"]
    assert lin["flops"] == 4.0 * s["batch"] * s["in"] * s["out"]
    keys = [record_key(p) for p in plan]
    assert len(set(keys)) == len(keys), "every point must have its own resume key"


def test_plan_one_rank_per_node_has_no_alone_duplicate():
    """With one rank per node, "rank 0 alone" and "every process at once" are both
    1-rank matmul records: the same resume key, two different machines (on an
    emulated cluster whose nodes share cores, 10.4 against 24.4 ms for 1024³).
    Only the concurrent one, which the job's training sees, is planned."""
    plan = plan_points(CONFIG, 4, 1, num_processes=4)
    mm = [p for p in plan if p["kind"] == "compute" and p["op"] == "matmul"]
    assert mm and all(p["num_ranks"] == 1 and not p["solo"] for p in mm)
    keys = [record_key(p) for p in plan]
    assert len(set(keys)) == len(keys)


def test_plan_of_several_nodes_measures_each_node_at_once():
    """4 nodes × 2 ranks also measure every collective within the nodes, all at once:
    the keys of a 1 × 2 job (which --resume then skips), marked nodes_at_once."""
    plan = plan_points(CONFIG, 8, 2, num_processes=8, nodes=4)
    coll = [p for p in plan if p["kind"] == "collective"]
    hier = [p for p in coll if p.get("algorithm")]
    whole = [p for p in coll if p["num_ranks"] == 8 and not p.get("algorithm")]
    within = [p for p in coll if p["num_ranks"] == 2]
    # within the nodes: all but reduce_scatter (gloo's psum_scatter is wrong with several
    # groups at once on CPU, jax-ml/jax#40830); on GPU every collective
    assert len(whole) == len(COLLECT_PATTERNS) * 2 and len(within) == len(whole) - 2
    assert "reduce_scatter" not in {p["collective"] for p in within}
    gpu = plan_points(CONFIG, 8, 2, backend="gpu", num_processes=8, nodes=4)
    assert sum(p.get("collective") == "reduce_scatter" and "nodes_at_once" in p for p in gpu) == 2
    # and the hierarchical all-reduce of the whole job, at every size: its own keys
    assert [
        (p["collective"], p["algorithm"], p["num_ranks"], p["ranks_per_node"]) for p in hier
    ] == [("all_reduce", "hierarchical", 8, 2)] * 2
    assert len(coll) == len(whole) + len(within) + len(hier)
    assert all(p["count"] % 2 == 0 for p in hier)
    assert all(p["ranks_per_node"] == 2 and p["nodes_at_once"] == 4 for p in within)
    assert all("nodes_at_once" not in p for p in whole)
    assert "within each of 4 nodes at once" in within[0]["desc"]
    alone = plan_points(CONFIG, 2, 2, num_processes=2)
    assert {record_key(p) for p in within} <= {record_key(p) for p in alone}
    keys = [record_key(p) for p in plan]
    assert len(set(keys)) == len(keys)
    # one node, one rank per node, or ranks not in whole blocks: nothing within nodes
    for args, nodes in (((8, 8), 1), ((8, 1), 8), ((8, 2), 3)):
        other = plan_points(CONFIG, *args, num_processes=8, nodes=nodes)
        assert all("nodes_at_once" not in p and "algorithm" not in p for p in other)


def test_collect_tables_name_the_series_within_nodes_and_the_hierarchical_all_reduce():
    from calibration import summary_rows
    from tuner.cli._collect import format_tables

    base = {"kind": "collective", "collective": "all_reduce", "message_bytes": 4096,
            "dtype": "float32", "backend": "cpu", "time_s": {"p10": 1e-3}}  # fmt: skip
    recs = [
        base | {"num_ranks": 4, "ranks_per_node": 2},
        base | {"num_ranks": 2, "ranks_per_node": 2, "nodes_at_once": 2},
        base | {"num_ranks": 4, "ranks_per_node": 2, "algorithm": "hierarchical"},
    ]
    heads = [ln for ln in format_tables(summary_rows(recs)).splitlines() if ln.startswith("# ")]
    heads = [h for h in heads if "ranks" in h]
    assert heads == [
        "# 4 ranks (2 per node), float32; time = p10 of the repetitions",
        "# 2 ranks within each of 2 nodes at once, float32; time = p10 of the repetitions",
        "# 4 ranks (2 per node), hierarchical all_reduce, float32; time = p10 of the repetitions",
    ]


def test_plan_puts_every_swap_behind_start_together_and_declares_it():
    """A swap (two ranks sending to each other) runs one direction after the other
    on XLA:CPU over gloo when one rank comes late: on an emulated 5 × 1 cluster every
    16 MiB all_to_all on 2 ranks took 2.2× its wire time. The collector starts each
    swap on 2 ranks behind launch.start_together and the record says so ("sync"):
    all_to_all, sendrecv, all_gather and reduce_scatter (their only peer); on 3 or
    more ranks nothing (the barrier cost more than a small exchange there)."""
    from calibration._worker import swaps

    def synced(plan):
        return {
            (p["collective"], p["message_bytes"]): p.get("sync")
            for p in plan
            if p["kind"] == "collective" and not p.get("nodes_at_once")
        }

    two = synced(plan_points(CONFIG, 2, 1, num_processes=2))
    for (name, size), sync in two.items():
        if name in ("all_to_all", "sendrecv", "all_gather", "reduce_scatter"):
            block = size // 4 // (2 if name == "all_gather" else 1)  # a rank's input floats
            assert sync == {
                "allreduces": 2,
                "message_bytes": 4 * min(block, 16),
                "num_ranks": 2,
                "ranks_per_node": 1,
            }, name
        else:
            assert sync is None, name
    three = synced(plan_points(CONFIG, 3, 3, num_processes=3))
    assert three and not any(three.values())
    assert not swaps("all_reduce", 2) and not swaps("ps_push", 2) and not swaps("all_to_all", 1)
    # within each node at once: a swap of a node's 2 ranks, over those ranks
    plan = plan_points(CONFIG, 8, 2, num_processes=8, nodes=4)
    within = [p for p in plan if p.get("nodes_at_once") and p["collective"] == "all_to_all"]
    assert within and all(
        p["sync"]["num_ranks"] == 2 == p["sync"]["ranks_per_node"] for p in within
    )
    assert not any(p.get("sync") for p in plan if not p.get("nodes_at_once"))


def test_plan_single_rank_measures_no_collective():
    plan = plan_points(CONFIG, 1, 1, num_processes=1)
    assert plan and all(p["kind"] == "compute" for p in plan)
    assert all(p["num_ranks"] == 1 for p in plan)


def test_fault_spec_parsing():
    f = Faults("exit:1@3, hang:0@2,wrong:all_reduce")
    assert f.exit == {(1, 3)} and f.hang == {(0, 2)} and f.wrong == {"all_reduce"}
    assert not Faults("").exit


# --------------------------------------------------------------------------- clusters


@pytest.mark.parametrize(
    "env, expected",
    [
        (
            {
                "SLURM_JOB_ID": "7",
                "SLURM_STEP_NODELIST": "n[1-2]",
                "SLURM_NTASKS": "8",
                "SLURM_PROCID": "5",
                "SLURM_LOCALID": "1",
            },
            ("slurm", 8, 5, 1, True),
        ),
        (
            {
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_RANK": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_MCA_orte_hnp_uri": "1.0;tcp://10.0.0.1:1",
            },
            ("openmpi", 4, 2, 0, True),
        ),
        (
            {
                "OMPI_COMM_WORLD_SIZE": "4",
                "OMPI_COMM_WORLD_RANK": "3",
                "OMPI_COMM_WORLD_LOCAL_RANK": "1",
            },
            ("openmpi5", 4, 3, 1, False),
        ),
        ({"PMI_SIZE": "2", "PMI_RANK": "1", "MPI_LOCALRANKID": "1"}, ("mpich", 2, 1, 1, False)),
    ],
)
def test_detect_cluster(env, expected):
    c = detect_cluster(env)
    assert (c.kind, c.num_processes, c.process_id, c.local_process_id, c.jax_detects) == expected


def test_no_cluster_outside_launchers():
    assert detect_cluster({"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n1"}) is None  # salloc shell
    assert detect_cluster({}) is None


# --------------------------------------------------------------------------- API / CLI usage


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"collectives": ["all_reduce", "bogus"]}, "collectives: unknown 'bogus'"),
        ({"workers": [0]}, "workers must be an integer ≥ 1"),
        ({"budget_s": 0}, "budget_s"),
        ({"dtype": "float16"}, "dtype"),
        ({"suite": "compute,io"}, "suite: unknown 'io'"),
        ({"resume": True, "overwrite": True}, "exclude each other"),
        ({"max_iters": 2, "iters": 5}, "max_iters"),
        ({"launcher": "ssh"}, "launcher"),
    ],
)
def test_collect_rejects_bad_arguments(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        collect(tmp_path / "m.jsonl", **kwargs)
    assert not (tmp_path / "m.jsonl").exists()


def test_cli_usage_errors_exit_2(tmp_path, capsys):
    out = str(tmp_path / "m.jsonl")
    assert main(["collect", "--collectives", "all_reduce,bogus", "-o", out]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bogus" in err and "all_reduce" in err
    assert main(["collect", "--max-bytes", "4X", "-o", out]) == 2
    assert main(["collect", "--resume", "--overwrite", "-o", out]) == 2
    assert main(["collect", "--workers", "0", "-o", out]) == 2


def test_cli_refuses_existing_file_with_hint(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    out.write_text('{"x": 1}\n')
    assert main(["collect", "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert "--resume" in err and "--overwrite" in err and str(out) in err
    assert out.read_text() == '{"x": 1}\n'  # untouched
    # --resume on a malformed file names the file and line instead of appending to it.
    with pytest.raises(InputFileError, match=r"m\.jsonl:1"):
        collect(out, resume=True)


def test_cli_help_has_example(capsys):
    assert main(["collect", "--help"]) == 0
    text = capsys.readouterr().out
    assert "ddltune collect --workers 2 --max-bytes 4M -o m.jsonl" in text
    assert "--budget-s" in text and "srun" in text


def test_summary_rows_busbw():
    rec = {
        "kind": "collective",
        "collective": "all_reduce",
        "message_bytes": 4096,
        "num_ranks": 4,
        "ranks_per_node": 4,
        "dtype": "float32",
        "backend": "cpu",
        "time_s": {"p10": 1e-5, "median": 2e-5},
        "wrong": 0,
    }
    (row,) = summary_rows([rec])
    assert row["statistic"] == "p10" and row["time_s"] == 1e-5
    assert row["algbw"] == pytest.approx(4096 / 1e-5)
    assert row["busbw"] == pytest.approx(row["algbw"] * BUSBW_FACTOR("all_reduce", 4))
    assert row["count"] == 1024
    (row,) = summary_rows([dict(rec, backend="gpu")])
    assert row["statistic"] == "median"


# --------------------------------------------------------------------------- measuring logic

_VIRTUAL = textwrap.dedent(
    """
    import json, sys
    from calibration._worker import Faults, run
    from calibration._records import record_key
    base = dict(iters=3, max_iters=6, warmup_iters=1, budget_s=0.01, existing_keys=[])
    out = {}
    msgs = []
    cfg = dict(base, collectives=%(names)r, sizes=[1024, 4096], dtype="float32",
               suite=["collectives", "compute"], matmul_sizes=[32])
    out["full"] = run(cfg, msgs.append, faults=Faults(""))
    out["full_msgs"] = msgs
    recs = [m["record"] for m in msgs if m["type"] == "record"]
    # A deliberately wrong reduction (pmax for psum) and a wrong fan-out must be flagged.
    msgs = []
    cfg = dict(base, collectives=["all_reduce", "sendrecv", "ps_pull", "all_to_all"],
               sizes=[1024], dtype="bfloat16", suite=["collectives"])
    out["wrong"] = run(cfg, msgs.append,
                       faults=Faults("wrong:all_reduce,wrong:ps_pull,wrong:all_to_all"))
    out["wrong_msgs"] = msgs
    # Resume: points already in the file are skipped.
    msgs = []
    cfg = dict(base, collectives=["all_reduce", "sendrecv"], sizes=[1024, 4096], dtype="float32",
               suite=["collectives"], existing_keys=[list(record_key(r)) for r in recs
                                  if (r.get("collective"), r.get("message_bytes"))
                                  in {("all_reduce", 1024), ("all_reduce", 4096), ("sendrecv", 1024)}])
    out["resume"] = run(cfg, msgs.append, faults=Faults(""))
    out["resume_msgs"] = msgs
    # Interleaved rounds: every point compiled, then timed in 3 passes.
    msgs = []
    cfg = dict(base, collectives=["all_reduce", "ps_push"], sizes=[1024, 4096], dtype="float32",
               suite=["collectives"], rounds=3)
    out["rounds"] = run(cfg, msgs.append, faults=Faults("wrong:ps_push"))
    out["rounds_msgs"] = msgs
    # The barrier every timed call waits on (launch.Ranks): one rank per device here.
    from launch import Ranks
    ranks = Ranks(every_local_device=True)
    out["ranks"] = [ranks.n, [i for i, _ in ranks.local], Ranks().n]
    out["sync"] = [ranks.sync(True, {0: 0.1, 1: 0.4, 2: 0.2, 3: 0.3}, {2: 1}),
                   ranks.sync(False, {0: 0.5}), ranks.sync(False, {3: 0.25}, {})]
    print("RESULT" + json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def virtual_run():
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=4", JAX_PLATFORMS="cpu"
    )
    env.pop("DDLTUNE_COLLECT_FAULT", None)
    code = _VIRTUAL % {"names": list(COLLECT_PATTERNS)}
    p = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=240
    )
    assert p.returncode == 0, p.stderr[-3000:]
    line = next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT"))
    return json.loads(line[len("RESULT") :])


def test_ranks_barrier_carries_rank0_stop_the_slowest_time_and_any_wrong(virtual_run):
    # Four virtual devices of one process: each a rank with every_local_device, else one rank.
    assert virtual_run["ranks"] == [4, [0, 1, 2, 3], 1]
    (stop, t, wrong), (stop2, t2, wrong2), (_, t3, _) = virtual_run["sync"]
    assert stop is True and t == pytest.approx(0.4, rel=1e-6) and wrong == 1
    assert stop2 is False and t2 == pytest.approx(0.5, rel=1e-6) and wrong2 == 0
    assert t3 == pytest.approx(0.25, rel=1e-6)  # a rank other than 0 can be the slowest


def _records(msgs):
    return [m["record"] for m in msgs if m["type"] == "record"]


def test_virtual_devices_every_record_valid(virtual_run):
    assert virtual_run["full"]["num_ranks"] == 4
    assert virtual_run["full"]["ranks_per_node"] == 4
    recs = _records(virtual_run["full_msgs"])
    for r in recs:
        validate_record(r)
        assert json.loads(json.dumps(r, allow_nan=False)) == r
        assert r["source"] == "ddltune collect"
        assert len(r["samples_s"]) == r["time_s"]["count"] >= 3
        assert r["time_s"]["min"] <= r["time_s"]["p10"] <= r["time_s"]["median"]
    coll = [r for r in recs if r["kind"] == "collective"]
    assert {(r["collective"], r["message_bytes"]) for r in coll} == {
        (c, s) for c in COLLECT_PATTERNS for s in (1024, 4096)
    }
    for r in coll:
        assert r["wrong"] == 0, r["collective"]
        assert r["num_ranks"] == 4 and r["ranks_per_node"] == 4
        assert r["num_hosts"] == 1  # one process: one host
        assert "ranks_per_machine" not in r  # the node's ranks are the machine's
        assert r["dtype"] == "float32" and r["compile_s"] > 0
    bad = dict(coll[0])
    for value in (0, 2, 2.0, True, "1", None):  # 4 ranks, 4 on the busiest host: 1 host
        bad["num_hosts"] = value
        with pytest.raises(ValueError, match=r"'num_hosts' must be an integer in \[1, 1\] for 4"):
            validate_record(bad)
    # 8 ranks, at most 2 per host: 4 to 7 hosts (a new user's 3 and 8 were accepted)
    spread = dict(coll[0], num_ranks=8, ranks_per_node=2)
    for value in (3, 8):
        with pytest.raises(ValueError, match=r"in \[4, 7\] for 8 ranks with at most 2 per host"):
            validate_record(dict(spread, num_hosts=value))
    for value in (4, 7):
        validate_record(dict(spread, num_hosts=value))
    # the ranks sharing one machine's cores: at least a node's
    validate_record(dict(spread, num_hosts=4, ranks_per_machine=8))
    for value in (1, 0, 2.5, "8"):
        with pytest.raises(ValueError, match=r"'ranks_per_machine' .* \[ranks_per_node = 2"):
            validate_record(dict(spread, num_hosts=4, ranks_per_machine=value))
    # an all-reduce's algorithm, part of its resume key (the ring's key as before the field)
    ar = next(r for r in coll if r["collective"] == "all_reduce")
    hier = dict(ar, algorithm="hierarchical")
    validate_record(hier)
    assert record_key(hier) == (*record_key(ar), "hierarchical")
    assert record_key(dict(ar, algorithm="ring")) == record_key(ar)
    validate_record(dict(ar, nodes_at_once=4))  # 4 ranks of one node, 4 such nodes at once
    for rec, msg in (
        (dict(ar, algorithm="butterfly"), "'algorithm' 'butterfly' is not an all_reduce algo"),
        (dict(coll[-1], algorithm="ring"), "has one algorithm: leave the field out"),
        (dict(ar, nodes_at_once=1), "'nodes_at_once' .* must be an integer ≥ 2"),
        (dict(ar, nodes_at_once="4"), "'nodes_at_once'"),
        (dict(spread, num_hosts=4, nodes_at_once=4), "on a record of one node"),
    ):
        with pytest.raises(ValueError, match=msg):
            validate_record(rec)
    # 4 ranks: no swap is started behind the two all-reduces (only 2 ranks' are)
    assert not any(r.get("sync") for r in coll)
    a2a = dict(
        next(r for r in coll if r["collective"] == "all_to_all"),
        sync={"allreduces": 2, "message_bytes": 128, "num_ranks": 4, "ranks_per_node": 4},
    )
    validate_record(a2a)
    for bad_sync in ({"allreduces": 0, "message_bytes": 8, "num_ranks": 4}, [2], {"allreduces": 2}):
        with pytest.raises(ValueError, match="'sync' must be"):
            validate_record(dict(a2a, sync=bad_sync))
    comp = [r for r in recs if r["kind"] == "compute"]
    assert {r["op"] for r in comp} == {"matmul", "forward", "backward"}
    # One process: compute ran once, by itself (no "rank 0 alone" duplicate).
    assert all(r["num_ranks"] == 1 for r in comp)
    assert len([r for r in comp if r["op"] == "matmul"]) == 1


def test_virtual_devices_progress_messages(virtual_run):
    msgs = virtual_run["full_msgs"]
    plan = [m for m in msgs if m["type"] == "plan"]
    points = [m for m in msgs if m["type"] == "point"]
    assert plan[0]["points"] == len(points) == len(_records(msgs))
    assert [m["i"] for m in points] == list(range(len(points)))
    assert all("measuring" in m["where"] for m in points)


def test_wrong_results_are_flagged(virtual_run):
    recs = {r["collective"]: r for r in _records(virtual_run["wrong_msgs"])}
    assert recs["all_reduce"]["wrong"] == recs["all_reduce"]["time_s"]["count"] > 0
    assert recs["ps_pull"]["wrong"] > 0
    assert recs["sendrecv"]["wrong"] == 0  # bfloat16 results are exact otherwise
    assert recs["all_to_all"]["wrong"] > 0
    assert all(r["dtype"] == "bfloat16" for r in recs.values())


def test_resume_skips_known_points(virtual_run):
    assert virtual_run["resume"]["skipped"] == 3
    recs = _records(virtual_run["resume_msgs"])
    assert [(r["collective"], r["message_bytes"]) for r in recs] == [("sendrecv", 4096)]


def test_interleaved_rounds_time_every_point_in_each_pass(virtual_run):
    msgs = virtual_run["rounds_msgs"]
    kinds = [m["type"] for m in msgs]
    recs = _records(msgs)
    assert len(recs) == 4 and virtual_run["rounds"]["measured"] == 4
    # records only after the last pass; each point: compiled once, timed in 3 passes
    assert kinds.index("record") > max(i for i, k in enumerate(kinds) if k == "point")
    points = [m["where"] for m in msgs if m["type"] == "point"]
    assert sum("compiling" in w for w in points) == 4
    assert [sum(f"round {r}/3" in w for w in points) for r in (1, 2, 3)] == [4, 4, 4]
    for r in recs:
        validate_record(r)
        assert r["rounds"] == 3
        # at least iters (3) samples: ⌈3/3⌉ per pass, 3 passes; at most ⌈6/3⌉ per pass
        assert 3 <= r["time_s"]["count"] == len(r["samples_s"]) <= 6
    by = {r["collective"]: r for r in recs if r["message_bytes"] == 1024}
    assert by["all_reduce"]["wrong"] == 0
    assert by["ps_push"]["wrong"] == by["ps_push"]["time_s"]["count"]  # counted in every pass


def test_atomic_write_gives_the_file_the_umask_mode_and_keeps_the_old_on_refusal(tmp_path):
    from calibration._records import atomic_write_text

    old = os.umask(0o022)
    try:
        path = atomic_write_text(tmp_path / "a" / "r.md", "one")
        assert path.read_text() == "one"
        assert (path.stat().st_mode & 0o777) == 0o644  # readable by colleagues, not 0600
        with pytest.raises(FileExistsError, match="overwrite"):
            atomic_write_text(path, "two", overwrite=False)
        assert path.read_text() == "one"
        atomic_write_text(path, "three")
        assert path.read_text() == "three" and (path.stat().st_mode & 0o777) == 0o644
        assert [p.name for p in path.parent.iterdir()] == ["r.md"]  # no temporary left
    finally:
        os.umask(old)


def test_resume_drops_a_truncated_last_line_and_says_so(tmp_path):
    from calibration import RecordWriter, host_fingerprint
    from calibration._records import RecordRepairWarning

    rec = {
        "schema": 1,
        "kind": "collective",
        "collective": "all_reduce",
        "message_bytes": 4096,
        "num_ranks": 2,
        "ranks_per_node": 2,
        "dtype": "float32",
        "wrong": 0,
        "in_place": False,
        "time_s": {"p10": 1e-5, "median": 2e-5},
        "samples_s": [1e-5, 2e-5],
        "backend": "cpu",
        "device_kind": "cpu",
        "versions": {},
        "host_fingerprint": host_fingerprint(),  # --resume: this machine's file
        "timestamp": "2026-01-01T00:00:00Z",
        "source": "test",
    }
    validate_record(rec)
    path = tmp_path / "m.jsonl"
    good = json.dumps(rec) + "\n"
    path.write_text(good + good[:40])  # a run killed while writing its second line
    with pytest.warns(RecordRepairWarning, match=r"m.jsonl:2: dropped a truncated last line"):
        writer = RecordWriter(path, "resume")
    writer.close()
    assert path.read_text() == good
    assert len(writer.existing_keys) == 1


def test_progress_moves_through_the_rounds_before_the_records_arrive(capsys):
    """Interleaved collection writes its records after the last round: the bar follows
    the workers' ``done`` (points' worth of timing finished) instead of sitting at 0
    and jumping to the end (from a new user's trial: '0/78' for 46 of 47 s)."""
    from calibration._collect import _local_handler, _Progress

    class Writer:
        def write(self, rec):
            pass

    points, rounds = 4, 3
    bar = _Progress(2 * points, True)
    seen = []
    for launch in range(2):  # two worker counts: the second continues from the first
        written: list = []
        h = _local_handler(Writer(), written, bar, {}, points, 2, None)
        for k in range(points):  # compiling: nothing timed yet
            h(0, {"type": "point", "i": k, "where": "compiling", "done": 0.0})
            seen.append(bar.position())
        for r in range(rounds):
            for k in range(points):
                h(0, {"type": "point", "i": k, "where": "x", "done": (r * points + k) / rounds})
                h(1, {"type": "point", "i": k, "where": "x", "done": 99.0})  # not rank 0's
                seen.append(bar.position())
        assert bar.position() == launch * points + 3  # (2·4 + 3) / 3 before any record
        for _ in range(points):
            h(0, {"type": "record", "record": {"kind": "collective"}})
            seen.append(bar.position())
        assert bar.position() == (launch + 1) * points
    assert seen == sorted(seen)  # never backward
    assert seen[points] == 0 and seen[points + 4] == 1  # moves within the first round
    bar.close()
    # a worker that sends no 'done' (measure in turn, older workers): records move it
    bar = _Progress(2, True)
    h = _local_handler(Writer(), [], bar, {}, 2, 1, None)
    h(0, {"type": "point", "i": 0, "where": "x"})
    h(0, {"type": "record", "record": {}})
    assert bar.position() == 1
    bar.close()


def test_default_matmuls_add_two_thin_ones_that_matmul_sizes_replace():
    """Without --matmul-sizes the compute suite times the square matmuls and two thin
    ones, a batch of 16 and of 64 through a 1024 × 1024 matrix (what pins down
    gemm_half_dim); --matmul-sizes replaces all of them with its square sizes."""
    default = plan_points({**CONFIG, "matmul_sizes": None}, 1, 1, num_processes=1)
    shapes = {tuple(p["shape"][k] for k in "mnk") for p in default if p["op"] == "matmul"}
    assert shapes == {(128, 128, 128), (256, 256, 256), (512, 512, 512), (1024, 1024, 1024),
                      (16, 1024, 1024), (64, 1024, 1024)}  # fmt: skip
    thin = next(p for p in default if p["op"] == "matmul" and p["shape"]["m"] == 16)
    assert thin["flops"] == 2.0 * 16 * 1024 * 1024 and "16×1024×1024" in thin["desc"]
    given = plan_points(CONFIG, 1, 1, num_processes=1)
    assert [p["shape"] for p in given if p["op"] == "matmul"] == [{"m": 32, "n": 32, "k": 32}]


def test_wrong_reduce_scatters_on_cpu_are_named_as_the_gloo_bug():
    """A new user's idle machine reported 7 wrong reduce_scatter calls (512 KiB – 8 MiB
    on 2 ranks) and was told it was overloaded or faulty: XLA:CPU's gloo reduce-scatter
    returns wrong values intermittently (jax-ml/jax#40830; 512 KiB on 8 ranks here too).
    Only when that explains every wrong record: another collective or a GPU leaves the
    machine suspect; no wrong record, no note."""
    from calibration import known_wrong_cause
    from tuner._run import _wrong_results_note

    def rec(c="reduce_scatter", S=2**20, n=2, wrong=3, backend="cpu"):
        return {"kind": "collective", "collective": c, "message_bytes": S, "num_ranks": n,
                "wrong": wrong, "backend": backend}  # fmt: skip

    ok = rec(wrong=0, c="all_reduce")
    assert "jax-ml/jax#40830" in known_wrong_cause([ok, rec(), rec(S=2**19, n=8)])
    assert "jax-ml/jax#40830" in _wrong_results_note([ok, rec()])
    assert "faulty machine" not in _wrong_results_note([ok, rec()])
    for suspect in (rec(c="all_reduce"), rec(backend="gpu")):
        assert known_wrong_cause([rec(), suspect]) is None
        assert "faulty machine" in _wrong_results_note([rec(), suspect])
    assert known_wrong_cause([ok]) is None and _wrong_results_note([ok]) is None


@pytest.mark.parametrize(("collective", "code"), [("reduce_scatter", 0), ("all_reduce", 1)])
def test_collect_fails_a_job_on_wrong_results_except_the_gloo_reduce_scatter_bug(
    tmp_path, capsys, monkeypatch, collective, code
):
    """The emulated SLURM's `srun … ddltune collect` failed its whole job (exit 1) on one
    wrong reduce_scatter of 512 KiB on 8 ranks, XLA:CPU's gloo bug (jax-ml/jax#40830):
    that is a warning, the records kept; any other wrong result still fails the job."""
    import calibration
    from calibration import CollectResult
    from tuner.cli import main

    path = tmp_path / "m.jsonl"
    t = {"min": 1e-3, "p10": 1e-3, "median": 1e-3, "mean": 1e-3, "p90": 1e-3, "iqr": 0.0,
         "max": 1e-3, "count": 5}  # fmt: skip
    rec = {"kind": "collective", "collective": collective, "message_bytes": 2**19,
           "num_ranks": 8, "ranks_per_node": 2, "wrong": 1, "backend": "cpu",
           "dtype": "float32", "time_s": t}  # fmt: skip

    def fake_collect(output, **kw):
        return CollectResult(path=path, written=1, skipped=0, wrong=1, elapsed_s=1.0,
                             launches=[], records=[rec])  # fmt: skip

    monkeypatch.setattr(calibration, "collect", fake_collect)
    assert main(["collect", "--json", "-o", str(path)]) == code
    err = capsys.readouterr().err
    assert "1 measured calls returned wrong results" in err
    assert ("jax-ml/jax#40830" in err) == (code == 0)


def _a_record(size: int) -> dict:
    from calibration import provenance, time_statistics

    t = 1e-4
    rec = {
        "schema": 1,
        "kind": "collective",
        "collective": "all_reduce",
        "message_bytes": size,
        "num_ranks": 2,
        "ranks_per_node": 2,
        "dtype": "float32",
        "wrong": 0,
        "time_s": time_statistics([t, 1.1 * t]),
        "samples_s": [t, 1.1 * t],
    }
    return rec | provenance("test", backend="cpu", device_kind="cpu")


@pytest.mark.parametrize("complete", [0, 2])
def test_an_interrupted_collect_says_what_it_kept_and_leaves_no_empty_file(
    tmp_path, capsys, monkeypatch, complete
):
    """Ctrl-C in `ddltune collect` (no -o: measurements.jsonl in the current folder, as
    its own advice runs it): before any point was complete a new user's trial found only
    "ddltune: interrupted" and an empty measurements.jsonl; now no file is left and the
    message says why nothing was written. With points written, it names how many and
    --resume. Exit 130 either way; a file that existed before is never removed."""
    import calibration

    def interrupted_collect(path, **kw):
        with calibration.RecordWriter(path, "resume" if kw.get("resume") else "new") as w:
            for k in range(complete):
                w.write(_a_record(1024 * (k + 1) * (3 if kw.get("resume") else 1)))
            raise KeyboardInterrupt

    monkeypatch.setattr(calibration, "collect", interrupted_collect)
    monkeypatch.chdir(tmp_path)
    assert main(["collect", "--max-bytes", "4K", "--no-progress"]) == 130
    err = capsys.readouterr().err
    out = tmp_path / "measurements.jsonl"
    if complete:
        assert "interrupted: 2 records written to measurements.jsonl stay valid" in err
        assert "--resume" in err and out.read_text().count("\n") == 2
        # resumed and interrupted again: the new records follow the old ones, counted alone
        before = out.read_bytes()
        assert main(["collect", "--max-bytes", "4K", "--no-progress", "--resume"]) == 130
        assert "interrupted: 2 records written" in capsys.readouterr().err
        assert out.read_bytes().startswith(before) and out.read_text().count("\n") == 4
    else:
        assert "interrupted before any point was complete" in err and "nothing written" in err
        assert not out.exists()
        # an (empty) file the user had is never removed
        out.write_text("")
        assert main(["collect", "--max-bytes", "4K", "--no-progress", "--resume"]) == 130
        assert out.exists()


_SWAPS = textwrap.dedent(
    """
    import json
    from calibration._worker import Faults, run
    base = dict(iters=3, max_iters=6, warmup_iters=1, budget_s=0.01, existing_keys=[],
                sizes=[1024, 4096], suite=["collectives"])
    out = {}
    for dtype, faults in (("float32", ""), ("bfloat16", "wrong:all_to_all,wrong:sendrecv")):
        msgs = []
        cfg = dict(base, collectives=["all_to_all", "sendrecv", "all_gather", "all_reduce"],
                   dtype=dtype)
        run(cfg, msgs.append, faults=Faults(faults))
        out[dtype] = [m["record"] for m in msgs if m["type"] == "record"]
    print("RESULT" + json.dumps(out))
    """
)


def test_two_ranks_time_their_swaps_behind_start_together_and_check_them():
    """Two ranks (two virtual devices): the swap patterns run behind the barrier inside the
    timed program, their records declare it and pass; a wrong swap result is still caught."""
    env = dict(
        os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu"
    )
    env.pop("DDLTUNE_COLLECT_FAULT", None)
    p = subprocess.run(
        [sys.executable, "-c", _SWAPS], env=env, capture_output=True, text=True, timeout=240
    )
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(next(ln for ln in p.stdout.splitlines() if ln.startswith("RESULT"))[6:])
    for r in out["float32"]:
        validate_record(r)
        assert r["num_ranks"] == 2 and r["wrong"] == 0, r["collective"]
        if r["collective"] == "all_reduce":
            assert "sync" not in r
        else:
            assert r["sync"]["allreduces"] == 2 and r["sync"]["num_ranks"] == 2
    wrong = {r["collective"]: r["wrong"] for r in out["bfloat16"]}
    assert wrong["all_to_all"] > 0 and wrong["sendrecv"] > 0
    assert wrong["all_gather"] == 0 and wrong["all_reduce"] == 0
