"""How long the ``ddltune`` CLI takes, each command a fresh process, cold and warm, split by phase.

Commands (issue 21's list): ``ddltune --help``; ``predict`` of 12
configurations from presets (ps, p2p, ring × 4, 8, 16, 32 workers, ResNet-50
on 10 GbE V100s); ``recommend --preset ib-hdr-200g,nvlink-a100 --device a100
--model resnet50 --max-workers 1024 --ranks-per-node 8``; ``calibrate`` of 72
measurements (the first 72 records of the A100 nccl-tests tables in
``tests/data/nccl-tests``: all_reduce and all_gather, 8 ranks on one node) with
three protocol regimes; the same ``recommend`` from that fitted 3-regime
profile; ``report`` from it (ResNet-50, 256 workers). Baseline: ``python -c
"import jax"`` (JAX's own import, which every command but ``--help`` pays).

cold: an empty compilation cache (``XDG_CACHE_HOME`` a new empty folder);
warm: the next runs with that cache filled (the median of ``--repeat``).
Each run's child reports its own split: ``import`` (the packages: jax,
costmodel, calibration, tuner; ``--help`` imports only what the CLI needs),
JAX's ``trace``, ``lower`` (to MLIR) and ``compile`` (XLA) durations from
``jax.monitoring`` (0 when nothing is jitted), and ``run`` (the command's
whole work after the imports, compilation included). Prints a table and
writes ``benchmarks/results/cli_latency.json`` (with the load average).

    PYTHONPATH=. python benchmarks/cli_latency.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NCCL = ROOT / "tests" / "data" / "nccl-tests"

#: The child: times the imports, arms jax.monitoring, runs the CLI, reports on a pipe.
CHILD = r"""
import json, os, sys, time
t0 = time.perf_counter()
argv = json.loads(sys.argv[1])
events = {}
if argv[:1] != ["--help"]:
    import jax.monitoring
    def _listen(event, duration, **_):
        events[event] = events.get(event, 0.0) + duration
    jax.monitoring.register_event_duration_secs_listener(_listen)
    import costmodel, calibration, tuner  # noqa: F401,E401
import tuner.cli
t1 = time.perf_counter()
try:
    rc = tuner.cli.main(argv)
except SystemExit as e:
    rc = int(e.code or 0)
t2 = time.perf_counter()
def pick(word):
    return sum(v for k, v in events.items() if word in k)
out = {"import_s": t1 - t0, "run_s": t2 - t1, "trace_s": pick("jaxpr_trace"),
       "lower_s": pick("to_mlir"), "compile_s": pick("backend_compile"), "rc": rc}
with os.fdopen(int(os.environ["DDLTUNE_BENCH_FD"]), "w") as f:
    f.write(json.dumps(out))
"""

SPLIT = ("import_s", "trace_s", "lower_s", "compile_s", "run_s")


def _commands(work: Path) -> dict:
    m = str(work / "m72.jsonl")
    prof = str(work / "p3.json")
    return {
        "import jax (baseline)": None,
        "ddltune --help": ["--help"],
        "predict (12 configs)": [
            *("predict", "--preset", "ethernet-10g", "--device", "v100"),
            *("--model", "resnet50", "--arch", "ps,p2p,ring", "--workers", "4,8,16,32"),
        ],
        "recommend presets": [
            *("recommend", "--preset", "ib-hdr-200g,nvlink-a100", "--device", "a100"),
            *("--model", "resnet50", "--max-workers", "1024", "--ranks-per-node", "8"),
        ],
        "calibrate 72, 3 regimes": [
            *("calibrate", m, "--regimes", "3"),
            *("--prior-preset", "ib-hdr-200g,nvlink-a100:a100", "-o", prof, "--overwrite"),
        ],
        "recommend 3-regime fit": [
            *("recommend", "--profile", prof, "--model", "resnet50"),
            *("--max-workers", "1024", "--ranks-per-node", "8"),
        ],
        "report 3-regime fit": [
            *("report", "--profile", prof, "--measurements", m, "--model", "resnet50"),
            *("--max-workers", "256", "--ranks-per-node", "8", "-o", str(work / "rep")),
            "--overwrite",
        ],
    }


def _measurements(work: Path, env: dict) -> None:
    """The 72 records: the A100 all_reduce and all_gather tables, imported."""
    lines: list[str] = []
    for c in ("all_reduce", "all_gather"):
        out = work / f"{c}.jsonl"
        src = NCCL / f"nccl_{c}_a100-sxm4-superbench_8gpus_1.txt"
        cmd = [sys.executable, "-m", "tuner.cli", "import-nccl-tests", str(src)]
        cmd += ["--collective", c, "--ranks-per-node", "8", "-o", str(out), "--overwrite"]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        lines += out.read_text().splitlines()
    (work / "m72.jsonl").write_text("\n".join(lines[:72]) + "\n")


def _once(argv: list[str] | None, env: dict) -> dict:
    """Wall and CPU time of one fresh process, with the child's own split."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r, w = os.pipe()
    args = ["-c", "import jax"] if argv is None else ["-c", CHILD, json.dumps(argv)]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, *args],
        env=dict(env, DDLTUNE_BENCH_FD=str(w)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        pass_fds=(w,),
    )
    os.close(w)
    with os.fdopen(r, "rb") as f:
        split = f.read()
    _, err = proc.communicate()
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    out = {"wall_s": wall, "cpu_s": cpu, "rc": proc.returncode}
    if split:
        out.update(json.loads(split))
        out["rc"] = proc.returncode or out["rc"]
    if out["rc"]:
        sys.stderr.write(err.decode(errors="replace")[-2000:])
    return out


def _versions() -> dict:
    """Versions of the packages whose import dominates a command (jax, its ml_dtypes, numpy)."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("jax", "jaxlib", "ml_dtypes", "numpy", "equinox", "scipy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def _bytecode_dirs() -> list[str]:
    """Folders whose modules the commands import: this repository's packages and site-packages."""
    import sysconfig

    own = [str(ROOT / p) for p in ("costmodel", "launch", "calibration", "tuner")]
    return [*own, sysconfig.get_paths()["purelib"]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per command (median)")
    parser.add_argument(
        "--output", default=str(Path(__file__).parent / "results" / "cli_latency.json")
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="ddltune-bench-") as tmp:
        cache, work = Path(tmp) / "cache", Path(tmp) / "work"
        work.mkdir()
        env = dict(os.environ, XDG_CACHE_HOME=str(cache))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.pop("DDLTUNE_NO_COMPILATION_CACHE", None)
        # Bytecode as after any install (pip compiles an installed package; an editable
        # one writes it on its first import): "cold" is about XLA, not Python's parser.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", *_bytecode_dirs()],
            check=False,
            stdout=subprocess.DEVNULL,
        )
        _measurements(work, env)
        shutil.rmtree(cache, ignore_errors=True)  # start truly cold
        cache.mkdir()
        for name, argv in _commands(work).items():
            cold = _once(argv, env)
            warm = [_once(argv, env) for _ in range(args.repeat)]
            med = {k: statistics.median(w.get(k, 0.0) for w in warm) for k in cold}
            results.append(
                {
                    "command": name,
                    "argv": argv,
                    "cold": cold,
                    "warm_median": med,
                    "warm_runs": warm,
                    "exit_codes": [cold["rc"], *(w["rc"] for w in warm)],
                }
            )
            print(f"  {name}: done", file=sys.stderr)
    load = os.getloadavg()
    doc = {
        "load_average": load,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "versions": _versions(),
        "results": results,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    cols = "".join(f"{c[:-2]:>9}" for c in SPLIT)
    print(f"{'command':<26}{'':>5}{'wall':>8}{'CPU':>8}{cols}   (seconds)")
    for r in results:
        for tag in ("cold", "warm"):
            d = r["cold"] if tag == "cold" else r["warm_median"]
            parts = "".join(f"{d.get(c, float('nan')):>9.2f}" for c in SPLIT)
            name = r["command"] if tag == "cold" else ""
            print(f"{name:<26}{tag:>5}{d['wall_s']:>8.2f}{d['cpu_s']:>8.2f}{parts}")
    print(f"wrote {out}")
    return 0 if all(c == 0 for r in results for c in r["exit_codes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
