"""``ddltune predict``: the cost model's prediction for given configurations.

Two modes: an *iteration* breakdown per (architecture, servers, workers, bucket
size) of a model, or a *collective*'s time, algbw and busbw per message size.
Parsing and formatting only; the numbers come from
:func:`tuner.predict_iterations` and :func:`tuner.predict_collective`.
"""

from __future__ import annotations

import argparse

from ._common import (
    UsageError,
    add_host_links_argument,
    add_model_arguments,
    add_nics_argument,
    add_precision_arguments,
    bytes_list_arg,
    int_list_arg,
    load_profile,
    message_bytes_list_arg,
    model_workload_arg,
    name_list_arg,
    plural,
    positive_float_arg,
    positive_int_arg,
    preset_compute,
    print_json,
    safe_text,
)

NAME = "predict"
HELP = "predict iteration times per architecture, or a collective's time per size"
DESCRIPTION = """\
Predict with the cost model, from datasheet presets (--preset/--device) or a
fitted profile (--profile), in one of two modes:

iteration mode (--model or --layers, with --arch and --workers): one row per
configuration — every architecture × servers (for ps and hybrid) × workers ×
bucket size — with the breakdown of one synchronous SGD iteration: forward,
backward, all communication, the part of it not hidden behind backward
("exposed"), the update, the iteration time (ms), throughput (samples/s over
all workers) and scaling efficiency (%: throughput / (workers × one worker's
throughput without any communication)).

collective mode (--collective with --num-ranks and --message-bytes): a table
per rank count, one row per message size with the time (µs), algbw = S/t and busbw = algbw × factor
(GB/s = 1e9 bytes/s), as nccl-tests defines them (factor: all_reduce
2(n-1)/n; reduce_scatter, all_gather, all_to_all (n-1)/n; others 1).

Sizes take nccl-tests suffixes: K, M, G are powers of 1024 (64M = 64 MiB).
With --profile, each row also gets a 90% prediction interval (parameter
uncertainty and held-out residual spread of the fit)."""
EPILOG = """\
examples:
  # the seed paper's comparison: 1PS vs peer-to-peer vs ring all-reduce, 10 GbE, V100s
  ddltune predict --preset ethernet-10g --device v100 --model resnet50 \\
      --arch ps,p2p,ring --workers 4,8,16,32

  # two parameter servers, colocated, against ring with 8 GPUs per node, 2 bucket sizes
  ddltune predict --preset ib-hdr-200g,nvlink-a100 --device a100 --model bert_large \\
      --arch ps,ring,hierarchical --servers 2 --colocated --workers 16,64 \\
      --ranks-per-node 8 --bucket-bytes 25M,100M --json

  # your model from a layer file, with a measured single-GPU step time of 0.41 s at batch 32
  ddltune predict --preset ethernet-25g --layers my_model.json --batch-size 32 \\
      --step-time 0.41 --arch ring --workers 2,4,8

  # a collective: all_reduce over 16 ranks (2 nodes of 8), at 1 KiB, 1 MiB, 64 MiB and 1 GiB
  ddltune predict --preset ib-edr-100g,nvlink-v100 --collective all_reduce \\
      --num-ranks 16 --ranks-per-node 8 --message-bytes 1K,1M,64M,1G

  # all_to_all's congestion against the rank count, one rank per node
  ddltune predict --preset ethernet-10g --collective all_to_all --num-ranks 2,3,8 \\
      --message-bytes 1M

Exit codes: 0 success; 2 bad arguments (unknown names, values out of range);
1 a file that cannot be read or is malformed."""

#: Interval level of ``--profile`` predictions.
LEVEL = 0.9

#: :func:`tuner.cli.main` switches float64 on for this subcommand and keeps
#: compiled programs between runs (opt out: DDLTUNE_NO_COMPILATION_CACHE=1).
X64 = True
COMPILATION_CACHE = True


def _usage_error(parser: argparse.ArgumentParser, message: str):
    # argparse prints the whole usage block; ddltune errors are one line.
    parser.exit(2, f"ddltune {NAME}: error: {message} (see 'ddltune {NAME} --help')\n")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune predict``.

    Long because it declares one option per call, each with its help text;
    there is nothing to split.
    """
    parser.error = lambda message: _usage_error(parser, message)  # one-line usage errors

    src = parser.add_argument_group("cluster (one of)")
    g = src.add_mutually_exclusive_group()
    g.add_argument(
        "--preset",
        metavar="NET[,INTRA]",
        help="datasheet presets: inter-node network (ethernet-10g, ethernet-25g, "
        "ethernet-100g, ib-edr-100g, ib-hdr-200g, ib-ndr-400g), optionally with the "
        "intra-node link (pcie3-x16 (default), pcie4-x16, nvlink-v100, nvlink-a100, "
        "nvlink-h100, shm)",
    )
    g.add_argument(
        "--profile",
        metavar="FILE",
        help="a fitted profile (from 'ddltune calibrate'); adds 90%% prediction intervals",
    )
    src.add_argument(
        "--device",
        metavar="NAME",
        help="device preset with --preset: k80, p100, v100 (default), a100, h100, cpu (whose "
        "small matrix products run slower: m / (m + 16) of its rate for a smallest "
        "dimension m)",
    )

    it = parser.add_argument_group("iteration mode")
    m = it.add_mutually_exclusive_group()
    add_model_arguments(m)
    it.add_argument(
        "--batch-size",
        type=positive_int_arg,
        metavar="B",
        help="samples per worker per step, ≥ 1 (default 64)",
    )
    it.add_argument(
        "--step-time",
        type=positive_float_arg,
        metavar="S",
        help="measured single-worker step time in seconds at the batch size; replaces "
        "the compute time estimated from FLOPs",
    )
    it.add_argument(
        "--arch",
        type=name_list_arg,
        metavar="LIST",
        help="comma-separated architectures: ps (parameter servers), ps_host (each "
        "node's CPU), hybrid (all-reduce in a node, servers across), p2p, ring, tree, "
        "hierarchical, and the sharded ones: zero1, zero2 (DeepSpeed ZeRO stages), fsdp "
        "(FULL_SHARD), hsdp (HYBRID_SHARD)",
    )
    it.add_argument(
        "--servers",
        type=int_list_arg,
        metavar="LIST",
        help="parameter servers k ≥ 1 for ps and hybrid, comma-separated (default 1)",
    )
    it.add_argument(
        "--colocated",
        action="store_true",
        help="ps servers run on k of the workers (default: dedicated machines)",
    )
    it.add_argument(
        "--workers",
        type=int_list_arg,
        metavar="LIST",
        help="numbers of workers (data-parallel ranks) n ≥ 1, comma-separated",
    )
    it.add_argument(
        "--bucket-bytes",
        type=bytes_list_arg,
        metavar="LIST",
        help="gradient bucket caps in bytes, comma-separated (default 25M, PyTorch DDP's); "
        "0 = one collective per tensor",
    )

    co = parser.add_argument_group("collective mode")
    co.add_argument(
        "--collective",
        metavar="NAME",
        help="all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, reduce, "
        "sendrecv, ps_push, ps_pull",
    )
    co.add_argument(
        "--algorithm",
        choices=("ring", "tree", "hierarchical", "halving_doubling"),
        help="the collective's algorithm (default ring): all_reduce ring, tree or "
        "hierarchical; reduce_scatter ring or halving_doubling (gloo's, what "
        "XLA:CPU runs and a CPU profile measured)",
    )
    co.add_argument(
        "--num-ranks",
        type=int_list_arg,
        metavar="LIST",
        help="ranks in the collective n ≥ 1, comma-separated (one table per count)",
    )
    co.add_argument(
        "--message-bytes",
        type=message_bytes_list_arg,
        metavar="LIST",
        help="message sizes S in bytes, comma-separated, nccl-tests' convention (the "
        "full array for all_gather and reduce_scatter)",
    )

    parser.add_argument(
        "--ranks-per-node",
        type=positive_int_arg,
        metavar="G",
        default=None,
        help="workers (ranks) a node holds, sharing its network link, ≥ 1 (default 1; with "
        "--profile, the one value the profile measured); a job of fewer workers runs on "
        "one node, and the output says so",
    )
    add_precision_arguments(it)
    add_nics_argument(src)
    add_host_links_argument(src)
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON document {"rows": [...]} (SI units: s, bytes, bytes/s)',
    )


# ---------------------------------------------------------------------------
# Inputs
# ---------------------------------------------------------------------------
_ITERATION_FLAGS = ("model", "layers", "batch_size", "step_time", "arch", "servers", "workers")
_ITERATION_FLAGS += ("bucket_bytes", "grad_dtype", "accumulation_steps")
_COLLECTIVE_FLAGS = ("collective", "algorithm", "num_ranks", "message_bytes")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _mode(args) -> str:
    given_it = [d for d in _ITERATION_FLAGS if getattr(args, d) not in (None, False)]
    if args.colocated:
        given_it.append("colocated")
    given_co = [d for d in _COLLECTIVE_FLAGS if getattr(args, d) is not None]
    if given_it and given_co:
        raise UsageError(
            f"{_flag(given_co[0])} (collective mode) cannot be combined with "
            f"{_flag(given_it[0])} (iteration mode); run them separately"
        )
    if given_co:
        missing = [d for d in ("collective", "num_ranks", "message_bytes") if d not in given_co]
        if missing:
            raise UsageError(
                f"collective mode needs {', '.join(_flag(d) for d in missing)} "
                "(e.g. --collective all_reduce --num-ranks 8 --message-bytes 1K,1M,1G)"
            )
        return "collective"
    if not given_it:
        raise UsageError(
            "say what to predict: --model NAME (or --layers FILE) with --arch LIST and "
            "--workers LIST, or --collective NAME with --num-ranks N and --message-bytes LIST"
        )
    missing = [d for d in ("arch", "workers") if getattr(args, d) is None]
    if args.model is None and args.layers is None:
        missing.insert(0, "model")
    if missing:
        raise UsageError(
            f"iteration mode needs {', '.join(_flag(d) for d in missing)} "
            "(e.g. --model resnet50 --arch ps,p2p,ring --workers 4,8,16,32)"
        )
    return "iteration"


def _cluster(args, workload=None):
    """(ClusterParams, profile or None, description dict); ``workload``: for the compute rate."""
    from costmodel import device_flops_per_s, preset

    if args.profile is not None:
        if args.device is not None:
            raise UsageError("--device applies to --preset; a profile already holds the device")

        if args.nics_per_node is not None:
            raise UsageError("--nics-per-node applies to --preset; a profile holds its network")
        if args.host_links is not None:
            raise UsageError("--host-links applies to --preset; a profile holds its host links")
        preset_compute(args, workload)  # refuses --compute-dtype
        profile = load_profile(args.profile)  # a bad file names it (exit 1)
        if args.ranks_per_node is None:  # the measured topology, not a silent g = 1
            from tuner import measured_ranks_per_node

            args.ranks_per_node = measured_ranks_per_node(profile) or 1
        return profile.params, profile, {"profile": str(args.profile)}
    if args.preset is None:
        raise UsageError(
            "give the cluster: --preset NET[,INTRA] [--device NAME] (datasheet presets, "
            "e.g. --preset ethernet-10g --device v100) or --profile FILE (a fitted profile)"
        )
    device = args.device or "v100"
    if args.ranks_per_node is None:
        args.ranks_per_node = 1
    dtype, kind = preset_compute(args, workload)
    try:
        params = preset(
            args.preset,
            device,
            nics_per_node=args.nics_per_node,
            compute_dtype=dtype,
            model_kind=kind,
            host_links=args.host_links or 1,
        )
        compute = device_flops_per_s(device, dtype, kind)[1]
    except ValueError as e:  # names the preset and lists the choices
        msg = str(e)
        flag = (
            "--compute-dtype" if "dtype" in msg else "--device" if "device" in msg else "--preset"
        )
        raise UsageError(f"{flag}: {e}") from None
    desc = {"preset": args.preset, "device": device, "compute": compute}
    if args.nics_per_node is not None:
        desc["nics_per_node"] = args.nics_per_node
    if args.host_links is not None:
        desc["host_links"] = args.host_links
    return params, None, desc


def _workload(args):
    from costmodel import with_activation_checkpointing

    w = model_workload_arg(args.model, args.layers, args.batch_size or 64)
    if args.step_time is not None:
        w = w.with_step_time(args.step_time)
    if args.activation_checkpointing:
        try:
            w = with_activation_checkpointing(w, args.activation_checkpointing)
        except ValueError as e:
            raise UsageError(f"--activation-checkpointing: {e}") from None
    return w


# ---------------------------------------------------------------------------
# The two modes: check the flags, then one call to tuner
# ---------------------------------------------------------------------------
def _iteration_rows(args, cluster):
    """(rows, workload)."""
    from costmodel import ARCHITECTURE_NAMES, DEFAULT_BUCKET_BYTES, format_choices, get_architecture
    from tuner import predict_iterations

    archs = list(dict.fromkeys(args.arch))
    for a in archs:
        if a not in ARCHITECTURE_NAMES:
            raise UsageError(
                f"--arch: unknown architecture {a!r}; valid: {format_choices(ARCHITECTURE_NAMES, a)}"
            )
    if args.colocated and "ps" not in archs:
        raise UsageError("--colocated applies to the ps architecture; add ps to --arch")
    if args.servers is not None and not any(get_architecture(a).uses_servers for a in archs):
        raise UsageError("--servers applies to ps and hybrid; add one of them to --arch")
    workload = _workload(args)
    rows = predict_iterations(
        cluster,
        workload,
        archs,
        args.workers,
        servers=args.servers or [1],
        bucket_bytes=args.bucket_bytes or [DEFAULT_BUCKET_BYTES],
        ranks_per_node=args.ranks_per_node,
        colocated=args.colocated,
        level=LEVEL,
        grad_dtype=args.grad_dtype,
        accumulation_steps=args.accumulation_steps or 1,
    )
    return rows, workload


def _collective_rows(args, cluster) -> list[dict]:
    from costmodel import get_collective
    from tuner import predict_collective

    big = [n for n in args.num_ranks if n > 2**24]
    if big:
        raise UsageError(f"--num-ranks: at most 2^24 = {2**24:,} ranks, got {big[0]:,}")
    try:
        get_collective(args.collective, args.algorithm)
    except ValueError as e:  # lists the valid names
        flag = "--collective" if "unknown collective" in str(e) else "--algorithm"
        raise UsageError(f"{flag}: {e}") from None
    return [
        row
        for n in dict.fromkeys(args.num_ranks)
        for row in predict_collective(
            cluster,
            args.collective,
            args.message_bytes,
            n,
            ranks_per_node=args.ranks_per_node,
            algorithm=args.algorithm,
            level=LEVEL,
        )
    ]


# ---------------------------------------------------------------------------
# Output (every line through safe_text: names come from user files)
# ---------------------------------------------------------------------------
def _say(text: str = "") -> None:
    print(safe_text(text))


def _table(head: list[str], lines: list[list[str]], right: set[int]) -> None:
    from tuner import format_table

    _say("\n".join(format_table(lines, head=head, right=right)))


def _time_unit(rows) -> tuple[float, str]:
    """The table's one time unit: seconds where a step takes 10 s or more (a new user's
    25-s steps read "25000.00" in ms), else milliseconds."""
    top = max((float(r["iteration_s"]) for r in rows), default=0.0)
    return (1.0, "s") if top >= 10.0 else (1e-3, "ms")


def _print_iterations(rows, cluster: dict, workload_line: str) -> None:
    from costmodel import Breakdown, format_bytes

    parts = Breakdown.FIELDS[: Breakdown.FIELDS.index("iteration_s")]  # forward … overhead
    with_interval = rows and "interval_s" in rows[0]
    scale, unit = _time_unit(rows)

    def _t(x: float) -> str:
        return f"{x / scale:.2f}" if unit == "ms" else f"{x:.3f}"

    head = ["arch", "servers", "workers", "ranks/node", "bucket", f"iteration {unit}"]
    head += [f"90% interval {unit}"] if with_interval else []
    head += [
        f"{what} {unit}"
        for what in ("forward", "backward", "comm", "exposed", "update", "overhead")
    ]
    head += ["samples/s", "efficiency %"]
    lines = []
    for r in rows:
        arch = r["architecture"] + (" (colocated)" if r["colocated"] else "")
        line = [
            arch,
            "-" if r["servers"] is None else str(r["servers"]),
            str(r["workers"]),
            str(r["ranks_per_node"]),
            "per tensor" if r["bucket_bytes"] == 0 else format_bytes(r["bucket_bytes"]),
            _t(r["iteration_s"]),
        ]
        if with_interval:
            lo, hi = r["interval_s"]
            line.append(f"{_t(lo)} – {_t(hi)}")
        line += [_t(r[k]) for k in parts] + [
            f"{r['throughput_samples_per_s']:.1f}",
            f"{100 * r['scaling_efficiency']:.1f}",
        ]
        lines.append(line)
    _say(f"{workload_line}; cluster: {_describe(cluster)}")
    _table(head, lines, right=set(range(1, len(head))))
    _say(
        "\niteration = forward + backward + exposed + update + overhead (the fixed cost "
        "of a step); comm = all gradient exchange; exposed = the part not hidden behind "
        "backward (plus backward's slowdown while overlapping); efficiency = throughput / "
        "(workers × one worker's throughput without communication)"
    )


def _print_collectives(rows, cluster: dict) -> None:
    from costmodel import format_bytes

    r0 = rows[0]
    with_interval = "interval_s" in r0
    _say(
        f"{r0['collective']} ({r0['algorithm']}), {plural(r0['num_ranks'], 'rank')}, "
        f"{r0['ranks_per_node']} per node; cluster: {_describe(cluster)}"
    )
    head = ["size", "bytes", "time µs"] + (["90% interval µs"] if with_interval else [])
    head += ["algbw GB/s", "busbw GB/s"]
    lines = []
    for r in rows:
        line = [
            format_bytes(r["message_bytes"]),
            str(r["message_bytes"]),
            f"{r['time_s'] * 1e6:.2f}",
        ]
        if with_interval:
            lo, hi = r["interval_s"]
            line.append(f"{lo * 1e6:.2f} – {hi * 1e6:.2f}")
        for key in ("algbw", "busbw"):
            line.append("-" if r[key] is None else f"{r[key] / 1e9:.3f}")
        lines.append(line)
    _table(head, lines, right=set(range(1, len(head))))


def _describe(cluster: dict) -> str:
    if "profile" in cluster:
        return f"profile {cluster['profile']}"
    compute = f"; compute {cluster['compute']}" if cluster.get("compute") else ""
    return (
        f"presets {cluster['preset']} + {cluster['device']} (datasheet, nothing measured{compute})"
    )


def _warn(rows) -> None:
    import sys

    for w in dict.fromkeys(w for r in rows for w in r.get("warnings", ())):
        print(f"ddltune {NAME}: warning: {w}", file=sys.stderr)


def check(args: argparse.Namespace) -> None:
    """The options' combination, checked before JAX is imported (:func:`tuner.cli.main`).

    Raises:
        UsageError: collective and iteration options mixed, or a mode's
            required option missing (names it, with an example).
    """
    _mode(args)


def run(args: argparse.Namespace) -> int:
    """Predict and print (a table, or ``{"rows": [...]}`` with ``--json``).

    float64 (``X64``, set by :func:`tuner.cli.main`) so that printed times and
    bandwidths are exact to the digits shown. Rows at a topology the profile
    never measured carry ``warnings``, also printed once each on stderr.
    """
    from costmodel import format_bytes

    mode = _mode(args)
    params, profile, cluster = _cluster(args, _workload(args) if mode != "collective" else None)
    source = params if profile is None else profile
    if mode == "collective":
        rows = _collective_rows(args, source)
        doc = {"rows": rows, "cluster": cluster}
        _warn(rows)
        if args.json:
            print_json(doc)
        else:
            for k, n in enumerate(dict.fromkeys(r["num_ranks"] for r in rows)):
                _say() if k else None
                _print_collectives([r for r in rows if r["num_ranks"] == n], cluster)
        return 0
    rows, w = _iteration_rows(args, source)
    grad_bytes = rows[0]["gradient_bytes"] if rows else w.total_param_bytes
    steps = args.accumulation_steps or 1
    workload = {
        "name": w.name,
        "batch_size": w.batch_size,
        "parameters": w.total_params,
        "gradient_bytes": grad_bytes,
        "grad_dtype": args.grad_dtype or "fp32",
        "accumulation_steps": steps,
        "step_time_s": w.step_time_s,
    }
    _warn(rows)
    if args.json:
        print_json({"rows": rows, "cluster": cluster, "workload": workload})
        return 0
    step = "" if w.step_time_s is None else f", measured step {w.step_time_s:g} s"
    dtype = f" ({args.grad_dtype})" if args.grad_dtype else ""
    accum = (
        f"; {steps} micro-batches per step (exchanged once, in the last backward, by "
        "DDP/PS/ZeRO-1; in every micro-batch by ZeRO-2, FSDP and HSDP)"
        if steps > 1
        else ""
    )
    line = (
        f"{w.name}: {w.total_params / 1e6:.1f} M parameters, "
        f"{format_bytes(grad_bytes)} of gradients{dtype}, batch {w.batch_size} per worker"
        f"{step}{accum}"
    )
    _print_iterations(rows, cluster, line)
    return 0
