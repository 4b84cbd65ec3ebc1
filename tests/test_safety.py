"""Issue 18: nothing the user had is lost, nothing gets in.

One output path (a folder swapped in by rename, a manifest of ddltune's own
files, symlinks refused, interruptions harmless), a measurement writer that
never empties the old file before a new record exists, --resume only on this
machine's file, bounds up front, terminal/Markdown escaping, and input errors
that name the file and line instead of the raw error they replace.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from calibration import (
    MANIFEST_NAME,
    OutputPathError,
    RecordWriter,
    atomic_replace_dir,
    check_local_bounds,
    host_fingerprint,
    read_manifest,
    read_records,
)
from calibration import _collect as collect_mod
from costmodel import InputFileError, load_layers
from tuner import markdown_escape
from tuner.cli import main
from tuner.cli._common import option_names, safe_text

ROOT = Path(__file__).resolve().parent.parent


def _build(files: dict):
    def build(tmp: Path) -> None:
        for rel, text in files.items():
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp / rel).write_text(text)

    return build


def _record(**over) -> dict:
    rec = {
        "schema": 1,
        "kind": "collective",
        "collective": "all_reduce",
        "message_bytes": 1024,
        "num_ranks": 2,
        "ranks_per_node": 2,
        "dtype": "float32",
        "time_s": {"p10": 1e-5, "median": 1.2e-5},
        "samples_s": [1e-5, 1.2e-5],
        "backend": "cpu",
        "device_kind": "cpu",
        "versions": {},
        "host_fingerprint": host_fingerprint(),
        "timestamp": "2026-01-01T00:00:00Z",
        "source": "test",
    }
    rec.update(over)
    return rec


def _write_jsonl(path: Path, recs) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


# ------------------------------------------------------------------ 1. one output path


def test_overwrite_keeps_user_files_and_replaces_only_ddltunes(tmp_path):
    out = tmp_path / "proj"
    atomic_replace_dir(out, _build({"index.html": "v1", "figures/a.png": "a1", "old.md": "x"}))
    assert read_manifest(out) == {"index.html", "figures/a.png", "old.md", MANIFEST_NAME}
    (out / "figures" / "fig1.pdf").write_text("mine")
    (out / "figures" / "sub").mkdir()
    (out / "figures" / "sub" / "notes.txt").write_text("mine too")
    (out / "empty").mkdir()
    os.symlink("/nonexistent/target", out / "mylink")

    atomic_replace_dir(out, _build({"index.html": "v2", "figures/a.png": "a2"}), overwrite=True)
    assert (out / "index.html").read_text() == "v2"
    assert (out / "figures" / "a.png").read_text() == "a2"
    assert not (out / "old.md").exists()  # ddltune's, no longer written: dropped
    assert (out / "figures" / "fig1.pdf").read_text() == "mine"
    assert (out / "figures" / "sub" / "notes.txt").read_text() == "mine too"
    assert (out / "empty").is_dir()
    assert os.readlink(out / "mylink") == "/nonexistent/target"  # carried as a link
    assert read_manifest(out) == {"index.html", "figures/a.png", MANIFEST_NAME}
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".proj.")]  # no leftovers


def test_without_overwrite_a_non_empty_folder_is_refused(tmp_path, tree):
    out = tmp_path / "proj"
    out.mkdir()
    (out / "x").write_text("mine")
    with pytest.raises(FileExistsError, match="--overwrite"):
        atomic_replace_dir(out, _build({"index.html": "v"}))
    assert tree(out) == {"x": hashlib.sha256(b"mine").hexdigest()}


def test_a_user_file_where_ddltune_writes_is_refused_not_replaced(tmp_path, tree):
    out = tmp_path / "proj"
    atomic_replace_dir(out, _build({"index.html": "v1"}))
    (out / "report.md").write_text("mine")  # not ddltune's (not in the manifest)
    before = tree(out)
    with pytest.raises(OutputPathError, match=r"report\.md.*not ddltune's"):
        atomic_replace_dir(out, _build({"index.html": "v2", "report.md": "r"}), overwrite=True)
    assert tree(out) == before


def test_symlinked_output_folder_is_refused(tmp_path, tree):
    real = tmp_path / "real"
    real.mkdir()
    (real / "keep").write_text("k")
    (tmp_path / "link").symlink_to(real)
    with pytest.raises(OutputPathError, match="link.*symbolic link"):
        atomic_replace_dir(tmp_path / "link", _build({"index.html": "v"}), overwrite=True)
    assert tree(real) == {"keep": hashlib.sha256(b"k").hexdigest()}


def test_an_exception_while_building_leaves_the_old_folder_byte_identical(tmp_path, tree):
    out = tmp_path / "proj"
    atomic_replace_dir(out, _build({"index.html": "v1", "figures/a.png": "a"}))
    (out / "figures" / "fig1.pdf").write_text("mine")
    before = tree(out)

    def build(tmp):
        (tmp / "index.html").write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_replace_dir(out, build, overwrite=True)
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj"]


def test_sigint_during_the_build_leaves_the_old_folder_byte_identical(tmp_path, tree):
    out = tmp_path / "proj"
    atomic_replace_dir(out, _build({"index.html": "v1", "figures/a.png": "a"}))
    (out / "figures" / "fig1.pdf").write_text("mine")
    before = tree(out)
    ready = tmp_path / "ready"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from calibration import atomic_replace_dir
        def build(tmp):
            (tmp / "index.html").write_text("v2")
            (tmp / "figures").mkdir()
            (tmp / "figures" / "a.png").write_text("one of six")
            Path({str(ready)!r}).write_text("x")
            time.sleep(60)
        atomic_replace_dir({str(out)!r}, build, overwrite=True)
        """
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stderr=subprocess.PIPE)
    try:
        for _ in range(600):
            if ready.exists() or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert ready.exists(), proc.stderr.read().decode()
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    assert tree(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["proj", "ready"]


def test_sigint_during_the_swap_is_held_until_the_new_folder_is_in_place(tmp_path, monkeypatch):
    out = tmp_path / "proj"
    atomic_replace_dir(out, _build({"index.html": "v1"}))
    (out / "fig1.pdf").write_text("mine")
    real_rename = os.rename
    calls = []

    def rename_and_interrupt(a, b):
        if not calls:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C right at the first rename
        calls.append((a, b))
        real_rename(a, b)

    monkeypatch.setattr(os, "rename", rename_and_interrupt)
    with pytest.raises(KeyboardInterrupt):
        atomic_replace_dir(out, _build({"index.html": "v2"}), overwrite=True)
    assert len(calls) == 2  # both renames ran before the interrupt was delivered
    assert (out / "index.html").read_text() == "v2"
    assert (out / "fig1.pdf").read_text() == "mine"


# ------------------------------------------------------------------ 1. the measurement writer


def test_overwrite_keeps_the_old_file_until_the_first_new_record(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(message_bytes=b) for b in (1024, 2048)])
    before = path.read_bytes()
    w = RecordWriter(path, "overwrite")
    assert path.read_bytes() == before  # nothing measured yet: the old file is intact
    w.close()  # interrupted before any record
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]

    with RecordWriter(path, "overwrite") as w:
        assert path.read_bytes() == before
        w.write(_record(message_bytes=4096))
        assert [r["message_bytes"] for r in read_records(path)] == [4096]  # on disk now
        w.write(_record(message_bytes=8192))
    assert [r["message_bytes"] for r in read_records(path)] == [4096, 8192]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.jsonl"]


def test_resume_appends(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [_record()])
    with RecordWriter(path, "resume") as w:
        assert len(w.existing_keys) == 1
        w.write(_record(message_bytes=2048))
    assert [r["message_bytes"] for r in read_records(path)] == [1024, 2048]


@pytest.mark.parametrize("mode", ["new", "overwrite", "resume"])
def test_a_dangling_symlink_output_is_refused_and_nothing_is_created(tmp_path, mode):
    target = tmp_path / "elsewhere" / "t.jsonl"
    link = tmp_path / "m.jsonl"
    link.symlink_to(target)
    with pytest.raises(OutputPathError, match="symbolic link"):
        RecordWriter(link, mode)
    assert not target.exists() and not target.parent.exists()


@pytest.mark.parametrize("mode", ["overwrite", "resume"])
def test_a_symlink_to_an_existing_file_is_refused_and_the_target_untouched(tmp_path, mode):
    target = _write_jsonl(tmp_path / "target.jsonl", [_record()])
    before = target.read_bytes()
    link = tmp_path / "m.jsonl"
    link.symlink_to(target)
    with pytest.raises(OutputPathError, match="symbolic link"):
        RecordWriter(link, mode)
    assert target.read_bytes() == before and link.is_symlink()


def test_cli_collect_on_a_symlink_is_one_line_and_starts_nothing(tmp_path, capsys):
    target = _write_jsonl(tmp_path / "target.jsonl", [_record()])
    before = target.read_bytes()
    (tmp_path / "m.jsonl").symlink_to(target)
    code = main(["collect", "--launcher", "local", "-o", str(tmp_path / "m.jsonl"), "--overwrite"])
    err = capsys.readouterr().err
    assert code == 1 and "symbolic link" in err and len(err.strip().splitlines()) == 1
    assert target.read_bytes() == before


# ------------------------------------------------------------------ 2. bounds up front


def test_too_many_local_workers_are_refused_unless_forced(monkeypatch):
    monkeypatch.setattr(collect_mod, "_cores", lambda: 2)
    with pytest.raises(ValueError, match=r"--workers 100000 on 2 CPU cores.*--force"):
        check_local_bounds([2, 100000], 1024)
    check_local_bounds([8], 1024)  # 4 per core: allowed, up to the bound
    with pytest.raises(ValueError, match=r"--workers 9 on 2 CPU cores: more than 4 local"):
        check_local_bounds([2, 9], 1024)  # one past the bound: refused
    check_local_bounds([9], 1024, force=True)
    check_local_bounds([100000], 0, force=True)


def test_buffers_beyond_available_memory_are_refused(monkeypatch):
    monkeypatch.setattr(collect_mod, "mem_available_bytes", lambda: 8 * 1024**3)
    with pytest.raises(ValueError, match=r"--max-bytes 1024 GiB.*MemAvailable"):
        check_local_bounds([2], 1024**4, force=True)  # --force does not lift it
    check_local_bounds([2], 64 * 1024**2)
    # the bound itself: max_bytes × 4 buffers × workers within the 8 GiB available
    check_local_bounds([2], 1024**3)  # 1 GiB × 4 × 2 = 8 GiB: fits exactly
    with pytest.raises(ValueError, match=r"--max-bytes 1 GiB × 4 buffers × 2 processes"):
        check_local_bounds([2], 1024**3 + 1)  # one byte more: refused
    with pytest.raises(ValueError, match=r"--workers 3\) = 12 GiB of buffers"):
        check_local_bounds([2, 3], 1024**3)  # the largest launch counts


def test_cli_collect_refuses_100000_workers_before_anything_starts(tmp_path, capsys):
    out = tmp_path / "m.jsonl"
    code = main(["collect", "--launcher", "local", "--workers", "100000", "-o", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and "--workers 100000" in err and "--force" in err
    assert not out.exists()


def test_cli_collect_names_the_option_not_the_parameter(tmp_path, capsys):
    code = main(
        ["collect", "--launcher", "local", "--min-bytes", "4K", "--max-bytes", "1K",
         "-o", str(tmp_path / "m.jsonl")]
    )  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "--max-bytes" in err and " max_bytes" not in err


def test_option_names_rewrites_whole_words_only():
    assert option_names("max_bytes and --max-bytes and xmax_bytes", ["max_bytes"]) == (
        "--max-bytes and --max-bytes and xmax_bytes"
    )


# ------------------------------------------------------------------ 3. resume keys


def test_resume_refuses_another_hosts_file_saying_whose(tmp_path):
    path = _write_jsonl(
        tmp_path / "m.jsonl",
        [_record(backend="gpu", device_kind="NVIDIA A100", host_fingerprint="0123abcd0123abcd")],
    )
    with pytest.raises(InputFileError, match=r"m\.jsonl:1: measured elsewhere.*gpu.*A100.*0123"):
        RecordWriter(path, "resume")


def test_resume_refuses_another_backend_on_the_same_host(tmp_path):
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(backend="gpu", device_kind="NVIDIA A100")])
    with RecordWriter(path, "resume") as w, pytest.raises(ValueError, match="backend gpu"):
        w.write(_record(message_bytes=2048))  # measured here on cpu
    assert len(read_records(path)) == 1


def test_resume_refuses_another_emulated_cluster_shape(tmp_path):
    emu = {"nodes": 2, "ranks_per_node": 2, "rate_bits_per_s": 1e9, "goodput_bytes_per_s": 1e8}
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(num_ranks=4, emulated=emu)])
    with pytest.raises(InputFileError, match="emulated"):
        RecordWriter(path, "resume")  # a real machine
    other = dict(emu, rate_bits_per_s=1e10)
    with pytest.raises(InputFileError, match="emulated"):
        RecordWriter(path, "resume", emulated=other)
    same = dict(emu, goodput_bytes_per_s=9e7)  # the self-check varies: not part of the key
    with RecordWriter(path, "resume", emulated=same) as w:
        assert len(w.existing_keys) == 1


def test_host_fingerprint_uses_a_per_machine_salt(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a"))
    a = host_fingerprint()
    assert a == host_fingerprint()  # stable on this machine
    salt = tmp_path / "a" / "ddltune" / "host-salt"
    assert len(salt.read_bytes()) == 32 and (salt.stat().st_mode & 0o777) == 0o600
    plain = hashlib.sha256(("ddltune:" + socket.gethostname()).encode()).hexdigest()[:16]
    assert a != plain  # not the fixed-salt hash anyone can recompute from a host name
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "b"))
    assert host_fingerprint() != a  # another machine (salt) → another fingerprint


# ------------------------------------------------------------------ 4. escaping


def test_safe_text_strips_terminal_control():
    osc52 = "cpu\x1b]52;c;aGVsbG8=\x07"
    assert safe_text(osc52) == "cpu"
    assert safe_text("a\x1b[2J\x1b[31mb\x9b1mc\x9d0;t\x9c\rd\x00e\x7f") == "abcde"
    assert safe_text("tab\tnl\nü 日本") == "tab\tnl\nü 日本"


def test_show_and_predict_print_no_escape_sequences(tmp_path, capsys):
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(device_kind="cpu\x1b]52;c;aGk=\x07evil")])
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "cpuevil" in out
    layers = tmp_path / "l.json"
    layers.write_text(
        json.dumps({"name": "m\x1b[2Jx", "layers": [{"name": "w", "params": 10, "fwd_flops": 1}]})
    )
    code = main(
        ["predict", "--preset", "ethernet-10g", "--layers", str(layers), "--arch", "ring",
         "--workers", "2"]
    )  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "\x1b" not in out and "mx" in out


def test_markdown_escape_keeps_user_text_literal():
    md = markdown_escape("<script>alert(1)</script> [x](javascript:y) *b* | &lt; # h")
    import re

    assert not re.search(r"(?<!\\)[<>\[\]()&*|#]", md)  # every one of them escaped
    assert md.replace("\\", "") == "<script>alert(1)</script> [x](javascript:y) *b* | &lt; # h"
    assert "\n" not in markdown_escape("a\n# heading")


# ------------------------------------------------------------------ 5. input errors name file:line


@pytest.mark.parametrize(
    "over, match",
    [
        (
            {"message_bytes": 10**308},
            r"m\.jsonl:2: 'message_bytes' must be an integer in \[1, 2\^50",
        ),
        ({"time_s": {"p10": 5e-324}}, r"m\.jsonl:2: 'time_s\.p10' must be a finite time in"),
        ({"time_s": {"p10": 1e308}}, r"m\.jsonl:2: 'time_s\.p10'"),
        ({"samples_s": [1e-5, 1e7]}, r"m\.jsonl:2: 'samples_s' holds"),
        ({"num_ranks": 10**30}, r"m\.jsonl:2: 'num_ranks'"),
    ],
)
def test_out_of_range_numbers_name_the_line(tmp_path, over, match):
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(), _record(**over)])
    with pytest.raises(InputFileError, match=match):
        read_records(path)


@pytest.mark.parametrize("key", ["num_ranks", "ranks_per_node", "message_bytes"])
def test_a_missing_field_reads_missing_not_none(tmp_path, key):
    rec = _record()
    del rec[key]
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(), rec])
    with pytest.raises(
        InputFileError, match=rf"m\.jsonl:2: '{key}' .*got nothing \(the field is missing\)$"
    ):
        read_records(path)
    rec[key] = None  # a JSON null is a value, and reads as the file spells it
    path = _write_jsonl(tmp_path / "m.jsonl", [_record(), rec])
    with pytest.raises(InputFileError, match=rf"m\.jsonl:2: '{key}' .*got null$"):
        read_records(path)


def test_deep_json_names_the_line_not_a_recursion_error(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(_record()) + "\n" + "[" * 200_000 + "]" * 200_000 + "\n")
    with pytest.raises(InputFileError, match=r"m\.jsonl:2: JSON nested deeper than 64 levels$"):
        read_records(path)
    path.write_text('{"a":' * 100 + "1" + "}" * 100 + "\n")
    with pytest.raises(InputFileError, match=r"m\.jsonl:1: JSON nested deeper than 64"):
        read_records(path)


def test_a_large_junk_file_fails_on_its_head(tmp_path):
    path = tmp_path / "junk.jsonl"
    with open(path, "wb") as fh:
        fh.write(b"this is not json " * 64 * 1024 * 20)  # 22 MB, one line, no newline
    with pytest.raises(InputFileError, match=r"junk\.jsonl:1: not a JSON Lines"):
        read_records(path)
    path.write_bytes(b"{" + b"x" * (5 * 1024**2))  # starts right, one 5 MiB line
    with pytest.raises(InputFileError, match=r"junk\.jsonl:1: line longer than 4 MiB"):
        read_records(path)
    path.write_bytes(b"\x00\x01binary")
    with pytest.raises(InputFileError, match="binary"):
        read_records(path)


def test_show_refuses_deep_and_junk_files_with_one_line(tmp_path, capsys):
    deep = tmp_path / "deep.json"
    deep.write_text('{"a":' * 200_000 + "1" + "}" * 200_000)
    assert main(["show", str(deep)]) == 1
    assert "nested deeper" in capsys.readouterr().err
    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"junk " * 4 * 1024**2)
    assert main(["show", str(junk)]) == 1
    assert "not a ddltune file" in capsys.readouterr().err


@pytest.mark.parametrize(
    "layer, match",
    [
        ({"name": "w", "params": 10**30}, r"'params' must be >= 1 and <= 1e13"),
        ({"name": "w", "params": 10, "fwd_flops": 10**400}, r"'fwd_flops' must be finite"),
    ],
)
def test_layer_file_numbers_out_of_range_name_the_line(tmp_path, layer, match):
    path = tmp_path / "l.json"
    path.write_text('{\n "layers": [\n  ' + json.dumps(layer) + "\n ]\n}\n")
    with pytest.raises(InputFileError, match=r"l\.json:3: .*" + match):
        load_layers(path)


def test_layer_file_depth_and_size_limits(tmp_path):
    path = tmp_path / "l.json"
    path.write_text('{"layers": ' + "[" * 200_000 + "]" * 200_000 + "}")
    with pytest.raises(InputFileError, match="nested deeper than 64"):
        load_layers(path)
    with open(path, "wb") as fh:
        fh.truncate(65 * 1024**2)  # sparse: no disk used
    with pytest.raises(InputFileError, match="64 MiB limit"):
        load_layers(path)


# ------------------------------------------------------------------ 7. small items


def test_the_same_file_read_twice_warns(tmp_path):
    from calibration import DuplicateRecordWarning

    path = _write_jsonl(tmp_path / "m.jsonl", [_record(), _record(message_bytes=2048)])
    with pytest.warns(DuplicateRecordWarning, match=r"m\.jsonl:1 repeats .*m\.jsonl:1.*1 more"):
        assert len(read_records([path, path])) == 4


def test_nccl_tests_import_refuses_huge_and_binary_files(tmp_path):
    from calibration import parse_nccl_tests

    big = tmp_path / "big.txt"
    with open(big, "wb") as fh:
        fh.truncate(17 * 1024**2)  # sparse
    with pytest.raises(InputFileError, match="17 MiB, more than the 16 MiB"):
        parse_nccl_tests(big)
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"# nccl-tests\x00\x01")
    with pytest.raises(InputFileError, match="binary data"):
        parse_nccl_tests(binary)


def test_predict_takes_more_ranks_per_node_than_workers_as_one_node(capsys):
    # issue 26: --ranks-per-node is the node's capacity (tests/test_nothing_lost.py)
    code = main(
        ["predict", "--preset", "ethernet-10g", "--model", "resnet50", "--arch", "ring",
         "--workers", "4", "--ranks-per-node", "8"]
    )  # fmt: skip
    assert code == 0 and "4 workers fit on one node of 8 ranks" in capsys.readouterr().err


# ------------------------------------------------------------------ 6. cluster coordinator


def test_coordinator_binds_the_address_the_ranks_dial(monkeypatch):
    from launch._launch import coordinator_bind_address

    monkeypatch.delenv("JAX_COORDINATOR_BIND_ADDRESS", raising=False)
    assert coordinator_bind_address("192.0.2.7:12345") == "192.0.2.7:12345"
    assert coordinator_bind_address("[2001:db8::1]:12345") == "[2001:db8::1]:12345"
    # A host name that resolves to loopback only on rank 0's node (Debian's
    # 127.0.1.1 line): binding there would lock the other nodes out.
    monkeypatch.setattr(socket, "getaddrinfo", lambda *a, **k: [(2, 1, 6, "", ("127.0.1.1", 0))])
    assert coordinator_bind_address("node001:12345") is None
    monkeypatch.setenv("JAX_COORDINATOR_BIND_ADDRESS", "10.0.0.1:1")
    assert coordinator_bind_address("192.0.2.7:12345") is None  # jax reads the variable


@pytest.mark.parametrize("code, jax_loaded, want", [(130, True, "_exit"), (130, False, "exit"),
                                                    (0, True, "exit"), (1, True, "exit")])  # fmt: skip
def test_the_console_script_ends_an_interrupted_jax_process_without_teardown(
    monkeypatch, code, jax_loaded, want
):
    """After Ctrl-C with JAX loaded, console_main ends with os._exit(130), flushed: the
    interpreter's teardown beside XLA's still-running threads crashed (exit 139 in 2 of 2
    interrupts of `ddltune calibrate` of a default run's records, at 3 and 5 s,
    reproduced 2026-12-07; 130 with this); every other exit goes through sys.exit."""
    import tuner.cli as cli

    calls = []
    monkeypatch.setattr(cli, "main", lambda: code)
    monkeypatch.setattr(cli.os, "_exit", lambda c: calls.append(("_exit", c)))
    monkeypatch.setattr(cli.sys, "exit", lambda c: calls.append(("exit", c)))
    if not jax_loaded:
        monkeypatch.delitem(sys.modules, "jax", raising=False)
    cli.console_main()
    assert calls[0] == (want, code)


def test_the_current_folder_or_one_holding_it_is_never_replaced(tmp_path, monkeypatch):
    """`-o .`, `-o ""` and `-o ..` name a folder the rename-swap cannot replace (it failed
    with a raw "OSError: [Errno 16] Device or resource busy"): refused in one line, the
    folder and everything in it left as it was; a folder beside or below is accepted."""
    from calibration import OutputPathError, atomic_replace_dir, refuse_current_folder

    here = tmp_path / "work"
    here.mkdir()
    (here / "notes.txt").write_text("mine")
    monkeypatch.chdir(here)
    for given, why in ((".", "is the current folder"), ("", "is empty"),
                       ("..", "or holds it"), (str(here), "is the current folder")):  # fmt: skip
        with pytest.raises(OutputPathError, match=why):
            refuse_current_folder(given, "-o")
        with pytest.raises(OutputPathError, match=why):
            atomic_replace_dir(given, lambda d: (d / "x").write_text("x"), overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]
    assert [p.name for p in here.iterdir()] == ["notes.txt"]
    assert refuse_current_folder("out", "-o") == Path("out")
    assert refuse_current_folder(tmp_path / "beside", "-o") == tmp_path / "beside"
