"""How long the ``ddltune`` CLI takes, each command a fresh process, cold and warm.

Commands: ``ddltune --help``; ``predict`` of 12 configurations from presets
(ps, p2p, ring × 4, 8, 16, 32 workers, ResNet-50 on 10 GbE V100s);
``recommend --preset ib-hdr-200g,nvlink-a100 --device a100 --model resnet50
--max-workers 1024 --ranks-per-node 8``. Baseline: ``python -c "import jax"``
(JAX's own import, which every command but ``--help`` pays).

cold: an empty compilation cache (``XDG_CACHE_HOME`` a new empty folder);
warm: the next runs with that cache filled. Wall time and CPU time (user +
system of the child, from ``resource.getrusage(RUSAGE_CHILDREN)``) per run; the
median of ``--repeat`` warm runs. Prints a table and writes
``benchmarks/results/cli_latency.json``.

    PYTHONPATH=. python benchmarks/cli_latency.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMANDS = {
    "import jax (baseline)": ["-c", "import jax"],
    "ddltune --help": ["-m", "tuner.cli", "--help"],
    "predict (12 configs)": [
        *("-m", "tuner.cli", "predict", "--preset", "ethernet-10g", "--device", "v100"),
        *("--model", "resnet50", "--arch", "ps,p2p,ring", "--workers", "4,8,16,32"),
    ],
    "recommend (1024 workers)": [
        *("-m", "tuner.cli", "recommend", "--preset", "ib-hdr-200g,nvlink-a100"),
        *("--device", "a100", "--model", "resnet50", "--max-workers", "1024"),
        *("--ranks-per-node", "8"),
    ],
}


def _once(argv: list[str], env: dict) -> tuple[float, float, int]:
    """(wall s, CPU s, exit code) of one fresh process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode:
        sys.stderr.write(proc.stderr.decode(errors="replace")[-2000:])
    return wall, cpu, proc.returncode


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="warm runs per command (median)")
    parser.add_argument(
        "--output", default=str(Path(__file__).parent / "results" / "cli_latency.json")
    )
    args = parser.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="ddltune-cache-") as cache:
        env = dict(os.environ, XDG_CACHE_HOME=cache)
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env.pop("DDLTUNE_NO_COMPILATION_CACHE", None)
        for name, argv in COMMANDS.items():
            cold = _once(argv, env)
            warm = [_once(argv, env) for _ in range(args.repeat)]
            results.append(
                {
                    "command": name,
                    "argv": argv,
                    "cold_wall_s": cold[0],
                    "cold_cpu_s": cold[1],
                    "warm_wall_s": statistics.median(w[0] for w in warm),
                    "warm_cpu_s": statistics.median(w[1] for w in warm),
                    "warm_runs": [{"wall_s": w[0], "cpu_s": w[1]} for w in warm],
                    "exit_codes": [cold[2], *(w[2] for w in warm)],
                }
            )
            print(f"  {name}: done", file=sys.stderr)
    base = results[0]["warm_cpu_s"]
    load = os.getloadavg()
    doc = {
        "load_average": load,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "jax_import_cpu_s": base,
        "results": results,
    }
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    head = f"{'command':<26}{'cold wall':>10}{'cold CPU':>10}{'warm wall':>10}{'warm CPU':>10}"
    head += f"{'CPU beyond jax':>16}"
    print(f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs")
    print(head)
    for r in results:
        beyond = "" if r is results[0] else f"{r['warm_cpu_s'] - base:+.2f} s"
        print(
            f"{r['command']:<26}{r['cold_wall_s']:>9.2f}s{r['cold_cpu_s']:>9.2f}s"
            f"{r['warm_wall_s']:>9.2f}s{r['warm_cpu_s']:>9.2f}s{beyond:>16}"
        )
    print(f"wrote {out}")
    return 0 if all(c == 0 for r in results for c in r["exit_codes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
