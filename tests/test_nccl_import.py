"""nccl-tests import: every real output in tests/data/nccl-tests, layouts, detection, bad input.

Known rows are checked against the text of each file (sizes in bytes, times in
µs → s); bus bandwidths against nccl-tests' factors (doc/PERFORMANCE.md),
computed here independently of the importer.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import pytest

from calibration import import_nccl_tests, parse_nccl_tests, read_records, validate_record
from costmodel import InputFileError

DATA = Path(__file__).parent / "data" / "nccl-tests"
FLAG = {
    "collective": "--collective",
    "num_ranks": "--num-ranks",
    "ranks_per_node": "--ranks-per-node",
}

# file → (flags the file cannot tell, collective, n, g, device_kind, rows > 0, size-0 rows
# skipped, known rows: (size, out-of-place µs, in-place µs) as printed)
CASES = {
    "nccl_all_gather_2080ti-pcie_2gpus_1.txt": (
        {}, "all_gather", 2, 2, "NVIDIA GeForce RTX 2080 Ti", 26, 2,
        [(32, "10.52", "10.01"), (1048576, "181.1", "179.1"), (1073741824, "141614", "139719")],
    ),
    "nccl_all_gather_a100-sxm4-superbench_8gpus_1.txt": (
        {"collective": "all_gather"}, "all_gather", 8, 8, "A100-SXM4-40GB", 29, 5,
        [(32, "35.03", "34.15"), (134217728, "698.6", "657.3"), (8589934592, "33646", "32669")],
    ),
    "nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt": (
        {"collective": "all_gather", "ranks_per_node": 8}, "all_gather", 16, 8, "NVIDIA H100",
        26, 5,
        [(256, "86.95", "88.21"), (67108864, "517.87", "444.29"),
         (8589934592, "42668.7", "42630.7")],
    ),
    "nccl_all_reduce_2080ti-pcie_2gpus_1.txt": (
        {}, "all_reduce", 2, 2, "NVIDIA GeForce RTX 2080 Ti", 28, 0,
        [(8, "12.25", "12.00"), (65536, "40.10", "39.88"), (1073741824, "268588", "268461")],
    ),
    "nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt": (
        {"collective": "all_reduce"}, "all_reduce", 8, 8, "A100-SXM4-40GB", 32, 2,
        [(4, "34.73", "35.30"), (128, "34.53", "43.78"), (8589934592, "63896", "63959")],
    ),
    "nccl_all_reduce_h100-nebius-ib_16gpus_1.txt": (
        {"ranks_per_node": 8}, "all_reduce", 16, 8, "NVIDIA H100", 31, 0,
        [(8, "45.72", "29.78"), (1048576, "87.08", "77.82"), (8589934592, "34448.4", "34381.0")],
    ),
    "nccl_all_reduce_v100-pcie-nonvlink_4gpus_1.txt": (
        {"collective": "all_reduce"}, "all_reduce", 4, 4, "Tesla V100-PCIE-32GB", 25, 0,
        [(8, "13.37", "14.59"), (2097152, "299.0", "299.0"), (134217728, "21410", "21407")],
    ),
    "nccl_alltoall_2080ti-pcie_2gpus_1.txt": (
        {}, "all_to_all", 2, 2, "NVIDIA GeForce RTX 2080 Ti", 26, 2,
        [(32, "13.51", "13.11"), (262144, "53.51", "47.45"), (1073741824, "116573", "113591")],
    ),
    "nccl_reduce_scatter_a100-sxm4-superbench_8gpus_1.txt": (
        {"collective": "reduce_scatter"}, "reduce_scatter", 8, 8, "A100-SXM4-40GB", 29, 5,
        [(32, "35.06", "35.14"), (8388608, "147.3", "166.8"), (8589934592, "32464", "32502")],
    ),
}  # fmt: skip


def test_every_data_file_is_covered():
    assert sorted(p.name for p in DATA.glob("*.txt")) == sorted(CASES)
    for p in DATA.glob("*.txt"):
        assert p.read_text().startswith("# source: https://"), f"{p.name} must name its source"


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_file_imports(name, tmp_path):
    flags, coll, n, g, device, nrows, zero, known = CASES[name]
    path = DATA / name
    t = parse_nccl_tests(path, **flags)
    assert (t.collective, t.num_ranks, t.ranks_per_node) == (coll, n, g)
    assert t.device_kind == device
    assert len(t.rows) == nrows and t.skipped_zero_size == zero and t.skipped_truncated == 0
    assert t.dtypes == ("float32",)
    for key in flags:
        assert t.sources[key] == f"{FLAG[key]} flag"

    out = tmp_path / "m.jsonl"
    summary = import_nccl_tests(path, out, **flags)
    recs = read_records(out)
    assert summary["records"] == len(recs) == 2 * nrows
    f = summary["files"][0]
    assert (f["collective"], f["num_ranks"], f["ranks_per_node"], f["rows"]) == (coll, n, g, nrows)
    for rec in recs:
        validate_record({k: v for k, v in rec.items() if not k.startswith("_")})
        assert rec["source"] == str(path) and rec["backend"] == "gpu"
        assert rec["device_kind"] == device and "samples_s" not in rec
        assert set(rec["time_s"]) == {"mean"}
        assert rec["message_bytes"] > 0 and rec["wrong"] == 0
    assert [r["in_place"] for r in recs[:2]] == [False, True]

    text_rows = {}
    for line in path.read_text().splitlines():
        tok = line.split()
        if len(tok) > 8 and tok[0].isdigit():
            text_rows.setdefault(int(tok[0]), tok)
    for size, oop_us, ip_us in known:
        tok = text_rows[size]
        # the printed times appear in the row, out-of-place before in-place
        i = tok.index(oop_us)
        assert ip_us in tok[i + 1 :]
        by_place = {r["in_place"]: r for r in recs if r["message_bytes"] == size}
        assert by_place[False]["time_s"]["mean"] == pytest.approx(float(oop_us) * 1e-6, rel=1e-12)
        assert by_place[True]["time_s"]["mean"] == pytest.approx(float(ip_us) * 1e-6, rel=1e-12)


def _busbw_factor(coll, n):
    # nccl-tests doc/PERFORMANCE.md, written out independently of costmodel
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
            "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n}[coll]  # fmt: skip


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_file_bandwidths_match_detected_ranks(name):
    """busbw = algbw × factor(n) and algbw = size/time on the large rows, with the detected n."""
    flags, coll, n, *_ = CASES[name]
    t = parse_nccl_tests(DATA / name, **flags)
    big = [r for r in t.rows if r.out_of_place.algbw_bytes_per_s > 1e9]
    assert len(big) >= 5
    for r in big:
        for v in (r.out_of_place, r.in_place):
            # each printed value is rounded to 0.01 GB/s; times to 4-5 significant digits
            assert v.busbw_bytes_per_s == pytest.approx(
                v.algbw_bytes_per_s * _busbw_factor(coll, n), abs=0.016e9
            )
            assert v.algbw_bytes_per_s == pytest.approx(
                r.message_bytes / v.time_s, rel=1e-3, abs=0.006e9
            )


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][0]))
def test_omitting_a_needed_flag_names_it(name):
    flags = CASES[name][0]
    for key in flags:
        rest = {k: v for k, v in flags.items() if k != key}
        with pytest.raises(InputFileError) as e:
            parse_nccl_tests(DATA / name, **rest)
        msg = str(e.value)
        assert msg.startswith(str(DATA / name))
        mentioned = {f for f in FLAG.values() if f in msg}
        assert mentioned == {FLAG[key]}, msg


def test_what_each_file_needs_is_exactly_what_it_cannot_tell():
    # files that need no flag parse bare; the rest fail bare, naming all their flags
    for name, (flags, *_) in CASES.items():
        if not flags:
            parse_nccl_tests(DATA / name)
            continue
        with pytest.raises(InputFileError) as e:
            parse_nccl_tests(DATA / name)
        assert {f for f in FLAG.values() if f in str(e.value)} == {FLAG[k] for k in flags}


def test_sources_say_where_values_came_from():
    t = parse_nccl_tests(DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt")
    assert t.sources["collective"] == "command line, line 3"
    assert t.sources["num_ranks"].startswith("device lines")
    assert t.sources["ranks_per_node"] == "device lines (1 host)"
    t = parse_nccl_tests(DATA / "nccl_all_reduce_h100-nebius-ib_16gpus_1.txt", ranks_per_node=8)
    assert "Collective test concluded" in t.sources["collective"]
    assert t.sources["num_ranks"].startswith("the busbw/algbw ratio")
    assert t.sources["device_kind"] == "'# hardware:' comment"
    t = parse_nccl_tests(
        DATA / "nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt",
        collective="all_gather",
        ranks_per_node=8,
    )
    assert t.sources["num_ranks"].startswith("the count column")


def test_na_and_old_error_columns_are_noted():
    t = parse_nccl_tests(DATA / "nccl_alltoall_2080ti-pcie_2gpus_1.txt")
    assert t.rows[0].out_of_place.wrong == 0 and t.rows[0].in_place.wrong is None
    assert any("N/A" in note for note in t.notes)
    t = parse_nccl_tests(
        DATA / "nccl_all_reduce_v100-pcie-nonvlink_4gpus_1.txt", collective="all_reduce"
    )
    assert t.rows[0].out_of_place.max_error == pytest.approx(1e-7)
    assert any("error" in note and "not a count" in note for note in t.notes)


# ----------------------------------------------------------------- contradicting flags


@pytest.mark.parametrize(
    "name, flags, words",
    [
        ("nccl_all_reduce_2080ti-pcie_2gpus_1.txt", {"num_ranks": 4}, ["--num-ranks 4", "device lines", "2"]),
        ("nccl_all_reduce_2080ti-pcie_2gpus_1.txt", {"ranks_per_node": 1}, ["--ranks-per-node 1", "device lines"]),
        ("nccl_all_reduce_2080ti-pcie_2gpus_1.txt", {"collective": "all_gather"}, ["--collective all_gather", "all_reduce_perf"]),
        ("nccl_all_reduce_h100-nebius-ib_16gpus_1.txt", {"num_ranks": 8, "ranks_per_node": 8}, ["--num-ranks 8", "busbw/algbw", "16"]),
        ("nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt", {"collective": "broadcast"}, ["--collective broadcast", "busbw"]),
        # a ratio above what any rank count gives (all_gather's (n−1)/n < 1): it raised OverflowError
        ("nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt", {"collective": "all_gather"}, ["--collective all_gather", "busbw/algbw", "no number of ranks"]),
        ("nccl_all_reduce_a100-sxm4-superbench_8gpus_1.txt", {"collective": "all_to_all"}, ["--collective all_to_all", "no number of ranks"]),
        ("nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt", {"collective": "all_reduce", "ranks_per_node": 8}, ["--collective all_reduce", "count"]),
        ("nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt", {"collective": "reduce_scatter", "ranks_per_node": 8}, ["--collective reduce_scatter", "redop", "none"]),
        ("nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt", {"collective": "all_gather", "num_ranks": 8, "ranks_per_node": 8}, ["--num-ranks 8", "count column", "16"]),
        ("nccl_all_gather_h100-gke-a3mega-tcpxo_16gpus_1.txt", {"collective": "all_gather", "ranks_per_node": 3}, ["ranks per node 3", "divide", "16"]),
    ],
)  # fmt: skip
def test_flag_contradicting_the_file_is_an_error_naming_both(name, flags, words):
    with pytest.raises(InputFileError) as e:
        parse_nccl_tests(DATA / name, **flags)
    for w in words:
        assert w in str(e.value), str(e.value)


def test_flags_that_agree_with_the_file_are_accepted():
    t = parse_nccl_tests(
        DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt",
        collective="all_reduce",
        num_ranks=2,
        ranks_per_node=2,
    )
    assert t.sources["num_ranks"].startswith("device lines")
    t = parse_nccl_tests(DATA / "nccl_alltoall_2080ti-pcie_2gpus_1.txt", collective="alltoall")
    assert t.collective == "all_to_all"


@pytest.mark.parametrize(
    "kwargs",
    [{"collective": "gather"}, {"num_ranks": 0}, {"ranks_per_node": -1}, {"num_ranks": 2.0}],
)
def test_invalid_arguments_are_value_errors(kwargs):
    with pytest.raises(ValueError) as e:
        parse_nccl_tests(DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt", **kwargs)
    assert not isinstance(e.value, InputFileError)


# ----------------------------------------------------------------- synthetic variants

HEAD = """\
# nccl-tests version 2.13.11 nccl-headers=21805 nccl-library=21903
# Collective test starting: all_reduce_perf
# nThread 1 nGpus 2 minBytes 8 maxBytes 32 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid  17 on      node1 device  0 [0000:07:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid  17 on      node1 device  1 [0000:08:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
ROWS = [
    "           8             2     float     sum      -1    12.25    0.00    0.00      0    12.00    0.00    0.00      0",
    "          16             4     float     sum      -1    11.77    0.00    0.00      0    11.69    0.00    0.00      0",
    "          32             8     float     sum      -1    12.86    0.00    0.00      0    11.59    0.00    0.00      0",
]  # fmt: skip
FOOT = "# Out of bounds values : 0 OK\n# Avg bus bandwidth    : 0.001\n#\n"


def _write(tmp_path, text, name="run.txt"):
    p = tmp_path / name
    p.write_text(text)
    return p


def _good(rows=None):
    return HEAD + "\n".join(ROWS if rows is None else rows) + "\n" + FOOT


def test_synthetic_good_file_and_versions(tmp_path):
    t = parse_nccl_tests(_write(tmp_path, _good()))
    assert (t.collective, t.num_ranks, t.ranks_per_node) == ("all_reduce", 2, 2)
    assert t.device_kind == "NVIDIA H100 80GB HBM3"
    assert t.versions == {"nccl-tests": "2.13.11", "nccl": "2.19.3"}
    assert [r.message_bytes for r in t.rows] == [8, 16, 32]
    assert t.rows[2].out_of_place.time_s == 12.86e-6 and t.rows[2].in_place.time_s == 11.59e-6


def test_launcher_prefixes_info_lines_and_multi_node_devices(tmp_path):
    # Open MPI --tag-output prefixes, NCCL INFO lines inside the table, 2 hosts × 2 ranks
    lines = [
        "$ mpirun -np 4 -N 2 --bind-to numa ./build/all_gather_perf -b 8 -e 16 -f 2 -g 1",
        "[1,0]<stdout>:# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5",
        "[1,0]<stdout>:#  Rank  0 Group  0 Pid  11 on  gpu-a device  0 [0000:07:00] NVIDIA A100-SXM4-80GB",
        "[1,0]<stdout>:#  Rank  1 Group  0 Pid  12 on  gpu-a device  1 [0000:08:00] NVIDIA A100-SXM4-80GB",
        "[1,0]<stdout>:#  Rank  2 Group  0 Pid  13 on  gpu-b device  0 [0000:07:00] NVIDIA A100-SXM4-80GB",
        "[1,0]<stdout>:#  Rank  3 Group  0 Pid  14 on  gpu-b device  1 [0000:08:00] NVIDIA A100-SXM4-80GB",
        "[1,0]<stdout>:#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "gpu-a:11:11 [0] NCCL INFO Launch mode Parallel",
        "[1,0]<stdout>:          16             1     float    none      -1    20.00    0.00    0.00      0    21.00    0.00    0.00      0",
        "[1,0]<stdout>:          32             2     float    none      -1    22.00    0.00    0.00      0    23.00    0.00    0.00      0",
        "[1,0]<stdout>:# Out of bounds values : 0 OK",
    ]  # fmt: skip
    t = parse_nccl_tests(_write(tmp_path, "\n".join(lines) + "\n"))
    assert (t.collective, t.num_ranks, t.ranks_per_node) == ("all_gather", 4, 2)
    assert t.hosts == ("gpu-a", "gpu-b")
    assert [r.message_bytes for r in t.rows] == [16, 32]
    # the launcher line alone would tell the same: drop the device lines
    t2 = parse_nccl_tests(_write(tmp_path, "\n".join(lines[:2] + lines[6:]) + "\n", "b.txt"))
    assert (t2.num_ranks, t2.ranks_per_node) == (4, 2)
    assert t2.sources["ranks_per_node"] == "launcher command (line 1)"


def test_unequal_ranks_per_host_is_an_error(tmp_path):
    text = _good().replace("Pid  17 on      node1 device  1", "Pid  18 on      node2 device  1")
    text = text.replace("nGpus 2", "nGpus 1")
    text = text.replace(
        "#\n#    ",
        "#  Rank  2 Group  0 Pid  19 on      node2 device  0 [0000:09:00] NVIDIA H100 80GB HBM3\n#\n#    ",
        1,
    )
    # three ranks (node1: 1, node2: 2); all_reduce rows with busbw 0.00 do not pin n
    with pytest.raises(InputFileError, match="unequal ranks per host"):
        parse_nccl_tests(_write(tmp_path, text))


def test_per_iteration_columns_and_timestamp(tmp_path):
    head = (
        "# Collective test starting: all_reduce_perf\n"
        "# nThread 1 nGpus 2 minBytes 8 maxBytes 8 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#  Rank  0 Group  0 Pid  17 on node1 device  0 [0000:07:00] NVIDIA H100\n"
        "#  Rank  1 Group  0 Pid  17 on node1 device  1 [0000:08:00] NVIDIA H100\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
        "    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max"
        "    i_p99    i_cv%            timestamp\n"
    )
    row = (
        "     1048576        262144     float     sum      -1    156.5    6.70    6.70       0"
        "    150.1    170.2    169.9     3.10    155.0    6.77    6.77       0    149.0    171.0"
        "    170.5     2.90  2025-01-31 12:00:00\n"
    )
    t = parse_nccl_tests(_write(tmp_path, head + row))
    v = t.rows[0].out_of_place
    assert (v.time_s, v.min_s, v.max_s) == (156.5e-6, 150.1e-6, 170.2e-6)
    assert t.rows[0].in_place.time_s == 155.0e-6
    recs = t.to_records()
    assert recs[0]["time_s"] == {"mean": 156.5e-6, "min": 150.1e-6, "max": 170.2e-6}


def test_old_layout_without_header_lines_blank_redop(tmp_path):
    # old alltoall printed an empty redop field under a 'redop' header
    text = (
        "# nThread 1 nGpus 4 minBytes 64 maxBytes 128 step: 2(factor) warmup iters: 5 iters: 20 validation: 1\n"
        "#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error\n"
        "          64             4   float             20.00    0.00    0.00  0e+00    21.00    0.00    0.00  0e+00\n"
        "         128             8   float             22.00    0.01    0.00  0e+00    23.00    0.01    0.00  0e+00\n"
    )  # fmt: skip
    t = parse_nccl_tests(_write(tmp_path, text), collective="alltoall", ranks_per_node=4)
    assert (t.collective, t.num_ranks) == ("all_to_all", 4)  # from the count column
    assert [r.in_place.time_s for r in t.rows] == [21e-6, 23e-6]


def test_cut_device_list_is_not_counted_and_unknown_device(tmp_path):
    # nccl-tests ends an over-long device list with "..."; such a list does not count ranks
    text = _good().replace("NVIDIA H100 80GB HBM3\n#\n", "NVIDIA H1...\n#\n", 1)
    t = parse_nccl_tests(_write(tmp_path, text), num_ranks=2, ranks_per_node=2)
    assert t.sources["num_ranks"] == "--num-ranks flag"
    assert any("incomplete" in note for note in t.notes)
    # no device lines and no '# hardware:' comment: device_kind 'unknown', with a note
    bare = "\n".join(line for line in _good().splitlines() if "Rank" not in line)
    t = parse_nccl_tests(_write(tmp_path, bare, "b.txt"), num_ranks=2, ranks_per_node=2)
    assert t.device_kind == "unknown" and t.sources["device_kind"] == "not in the file"
    # here the header (nGpus 2) and n = 2 mean one process, hence one node
    t = parse_nccl_tests(_write(tmp_path, bare, "c.txt"), num_ranks=2)
    assert t.ranks_per_node == 2 and t.sources["ranks_per_node"].startswith("header")


# ----------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    "text",
    [
        '{"schema": 1, "kind": "collective"}\n',
        "size,count,type,time\n8,2,float,12.5\n",
        "Hello world\nThis is not a benchmark log.\n",
        "\x00\x01\x02binary\xff",
    ],
)
def test_not_nccl_tests_output(tmp_path, text):
    with pytest.raises(InputFileError, match="not nccl-tests output") as e:
        parse_nccl_tests(_write(tmp_path, text))
    assert e.value.line is None and e.value.path.endswith("run.txt")


def test_empty_file(tmp_path):
    with pytest.raises(InputFileError, match="empty"):
        parse_nccl_tests(_write(tmp_path, "\n  \n"))


def _row_line(text, needle):
    return 1 + next(i for i, line in enumerate(text.splitlines()) if needle in line)


@pytest.mark.parametrize(
    "bad_row, needle, match",
    [
        ("          16             4     float     sum      -1    11.77    0.00    0.00      0    11.69", "11.69", "cut short"),
        ("          16             4     float     sum      -1      nan    0.00    0.00      0    11.69    0.00    0.00      0", "nan", "NaN"),
        ("          16             4     float     sum      -1     0.00    0.00    0.00      0    11.69    0.00    0.00      0", "11.69", "time is 0.00"),
        ("          16             4     float     sum      -1   -11.77    0.00    0.00      0    11.69    0.00    0.00      0", "-11.77", "time is -11.77"),
        ("          16             4     float     sum      -1    11.77    fast    0.00      0    11.69    0.00    0.00      0", "fast", "algbw 'fast' is not a number"),
        ("          16             4     float     sum      -1    11.77    0.00    0.00    1.5    11.69    0.00    0.00      0", "1.5", "#wrong must be a count"),
        ("          16             4     float     sum      -1    11.77    0.00    0.00      0    11.69    0.00    0.00      0   7", "   7", "has 14 fields"),
        ("          16             4   float17     sum      -1    11.77    0.00    0.00      0    11.69    0.00    0.00      0", "float17", "unknown nccl-tests data type"),
    ],
)  # fmt: skip
def test_bad_row_names_file_and_line(tmp_path, bad_row, needle, match):
    text = _good([ROWS[0], bad_row, ROWS[2]])
    p = _write(tmp_path, text)
    with pytest.raises(InputFileError, match=match) as e:
        parse_nccl_tests(p)
    assert e.value.path == str(p)
    assert e.value.line == _row_line(text, needle)
    assert str(e.value).startswith(f"{p}:{e.value.line}: ")


def test_truncated_last_row_is_skipped_with_a_warning(tmp_path):
    text = HEAD + "\n".join(ROWS[:2]) + "\n" + ROWS[2][:60]  # the file ends mid-row
    p = _write(tmp_path, text)
    with pytest.warns(UserWarning, match="cut short") as caught:
        t = parse_nccl_tests(p)
    assert [r.message_bytes for r in t.rows] == [8, 16] and t.skipped_truncated == 1
    assert caught[0].filename == __file__  # the warning points at the caller's line
    out = tmp_path / "m.jsonl"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        s = import_nccl_tests(p, out)
    assert s["files"][0]["skipped_truncated"] == 1 and s["records"] == 4
    assert any("cut short" in note for note in s["files"][0]["notes"])


def test_two_tables_in_one_file_is_an_error(tmp_path):
    text = _good() + _good()
    with pytest.raises(InputFileError, match="2 nccl-tests result tables"):
        parse_nccl_tests(_write(tmp_path, text))


def test_two_test_names_in_one_file(tmp_path):
    # nccl-tests' own header wins over an echoed command line naming another test
    text = "$ ./build/all_gather_perf -g 2\n" + _good()
    t = parse_nccl_tests(_write(tmp_path, text))
    assert t.collective == "all_reduce" and "header" in t.sources["collective"]
    assert any("ignored all_gather_perf" in note for note in t.notes)
    # without the header, two command lines are ambiguous: --collective chooses
    text = "$ ./build/all_gather_perf -g 2\n" + _good().replace(
        "# Collective test starting: all_reduce_perf", "$ ./build/all_reduce_perf -g 2"
    )
    p = _write(tmp_path, text, "b.txt")
    with pytest.raises(InputFileError, match="two different tests.*--collective"):
        parse_nccl_tests(p)
    assert parse_nccl_tests(p, collective="all_reduce").collective == "all_reduce"
    # two nccl-tests headers naming different tests contradict each other
    text = _good() + "# Collective test concluded: all_gather_perf\n"
    with pytest.raises(InputFileError, match="two different tests"):
        parse_nccl_tests(_write(tmp_path, text, "c.txt"))


def test_unsupported_test_binary(tmp_path):
    text = _good().replace("all_reduce_perf", "hypercube_perf")
    with pytest.raises(InputFileError, match="hypercube_perf"):
        parse_nccl_tests(_write(tmp_path, text))


def test_duplicate_device_lines_suggest_independent_processes(tmp_path):
    text = _good().replace("#  Rank  1 Group", "#  Rank  0 Group")
    with pytest.raises(InputFileError, match="rank 0 more than once"):
        parse_nccl_tests(_write(tmp_path, text))


def test_missing_file():
    with pytest.raises(FileNotFoundError):
        parse_nccl_tests("/nonexistent/all_reduce.txt")


# ----------------------------------------------------------------- writing


def test_existing_output_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "m.jsonl"
    out.write_text("keep me\n")
    with pytest.raises(FileExistsError, match="overwrite"):
        import_nccl_tests(DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt", out)
    assert out.read_text() == "keep me\n"
    s = import_nccl_tests(DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt", out, mode="overwrite")
    assert len(read_records(out)) == s["records"] == 56


def test_nothing_half_written_when_a_later_file_is_bad(tmp_path):
    bad = _write(tmp_path, _good([ROWS[0], ROWS[1].replace("11.77", "nan"), ROWS[2]]))
    good = DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt"
    out = tmp_path / "m.jsonl"
    with pytest.raises(InputFileError):
        import_nccl_tests([good, bad], out)
    assert not out.exists()
    out.write_text("old\n")
    with pytest.raises(InputFileError):
        import_nccl_tests([good, bad], out, mode="overwrite")
    assert out.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl", "run.txt"]  # no temp file


def test_several_files_into_one_output(tmp_path):
    names = [n for n, c in CASES.items() if not c[0]]
    out = tmp_path / "m.jsonl"
    s = import_nccl_tests([DATA / n for n in names], out)
    recs = read_records(out)
    assert s["records"] == len(recs) == sum(2 * CASES[n][5] for n in names)
    assert {r["collective"] for r in recs} == {"all_reduce", "all_gather", "all_to_all"}
    lines = out.read_text().splitlines()
    assert all(json.loads(line)["schema"] == 1 for line in lines)


def test_mode_must_be_new_or_overwrite(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        import_nccl_tests(
            DATA / "nccl_all_reduce_2080ti-pcie_2gpus_1.txt", tmp_path / "m", mode="resume"
        )


def test_records_keep_in_place_and_out_of_place_separately(tmp_path):
    out = tmp_path / "m.jsonl"
    import_nccl_tests(
        DATA / "nccl_all_gather_a100-sxm4-superbench_8gpus_1.txt", out, collective="all_gather"
    )
    recs = read_records(out)
    big = {(r["message_bytes"], r["in_place"]): r["time_s"]["mean"] for r in recs}
    # 8 GiB row: out-of-place 33646 µs, in-place 32669 µs
    assert big[(8589934592, False)] == 33646e-6 and big[(8589934592, True)] == 32669e-6
    assert all(math.isfinite(v) and v > 0 for v in big.values())
    assert re.fullmatch(r"[0-9a-f]{16}", recs[0]["host_fingerprint"])
