"""``ddltune recommend``: the architecture, worker count and bucket size to run."""

from __future__ import annotations

import argparse
import math
import textwrap

from ._common import (
    CLIError,
    UsageError,
    add_host_links_argument,
    add_model_arguments,
    add_nics_argument,
    add_precision_arguments,
    bytes_arg,
    bytes_list_arg,
    int_list_arg,
    load_profile,
    name_list_arg,
    plural,
    positive_float_arg,
    positive_int_arg,
    preset_compute,
    print_json,
)

NAME = "recommend"
HELP = "recommend the architecture, worker count and bucket size for a model on a cluster"
#: Set by :func:`tuner.cli.main`: compiled programs kept between runs (opt out:
#: DDLTUNE_NO_COMPILATION_CACHE=1). No X64: jax's default float32 is enough here
#: (relative error ~1e-7 on sums of a few hundred bucket times) and halves the
#: search time compared with float64.
COMPILATION_CACHE = True
DESCRIPTION = """\
Search every gradient-exchange architecture — parameter servers (dedicated or
colocated, 1, 2, 4, … servers), peer-to-peer, ring and tree all-reduce, and
with several ranks per node also host parameter servers, hybrid and
hierarchical all-reduce — for every worker count up to --max-workers and every
gradient bucket size (0 = one collective per tensor, 64 KiB … 1 GiB, and
PyTorch DDP's 25 MiB), with the cost model under a fitted profile (--profile)
or datasheet presets (--preset/--device). The best bucket size is then refined
continuously. Prints the choice with its predicted step time and 90% interval,
throughput, scaling efficiency, where the time goes, the probability that it
beats the runner-up architecture, why it wins, and the runner-ups.

Objectives: throughput (most samples/s, default), cost (cheapest per sample:
needs --price-per-hour, and --server-price-per-hour when dedicated parameter
servers are searched), efficiency (most samples/s at a scaling efficiency of
at least --min-efficiency), min-workers (fewest workers reaching
--target-throughput). --min-efficiency and --target-throughput also constrain
the other objectives.

A profile whose held-out p90 error is over 15% is refused unless --force.
Exit codes: 0 success; 2 bad arguments; 1 no configuration meets the
constraints, or the profile is refused.

The search evaluates the cost model in numpy: nothing is compiled, and a
recommendation takes about a second on a small machine (benchmarks/README.md,
cli_latency.py)."""
EPILOG = """\
examples:
  # datasheet presets: 10 Gb/s Ethernet, V100s, ResNet-50 at 64 images per GPU
  ddltune recommend --preset ethernet-10g --device v100 --model resnet50 --max-workers 64

  # a fitted profile, 8 GPUs per node, a fixed global batch, as JSON
  ddltune recommend --profile profile.json --model bert_base --global-batch 2048 \\
      --max-workers 128 --ranks-per-node 8 --json

  # the cheapest configuration that still scales at 80% or better
  ddltune recommend --preset ib-hdr-200g,nvlink-a100 --device a100 --model gpt2 \\
      --max-workers 256 --ranks-per-node 8 --objective cost --price-per-hour 4.1 \\
      --server-price-per-hour 1.2 --min-efficiency 0.8"""

_OPTIMIZER_STATE = {"sgd": 0.0, "momentum": 1.0, "adam": 2.0}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune recommend``.

    Long because it declares one option per line, each with its help; nothing to split.
    """
    from tuner import RUN_DEFAULTS

    src = parser.add_argument_group("cluster (one of)")
    g = src.add_mutually_exclusive_group(required=True)
    g.add_argument("--profile", metavar="FILE", help="a fitted profile (from 'ddltune calibrate')")
    g.add_argument(
        "--preset",
        metavar="NET[,INTRA]",
        help="datasheet presets instead of a profile: inter-node network (ethernet-10g, "
        "ethernet-25g, ethernet-100g, ib-edr-100g, ib-hdr-200g, ib-ndr-400g), optionally "
        "with the intra-node link (pcie3-x16, pcie4-x16, nvlink-v100, nvlink-a100, "
        "nvlink-h100, shm)",
    )
    src.add_argument(
        "--device",
        metavar="NAME",
        default=None,
        help="device preset with --preset: k80, p100, v100 (default), a100, h100, cpu (whose "
        "small matrix products run slower: m / (m + 16) of its rate for a smallest "
        "dimension m)",
    )
    add_nics_argument(src)
    add_host_links_argument(src)
    wl = parser.add_argument_group("model (one of)")
    m = wl.add_mutually_exclusive_group(required=True)
    add_model_arguments(m)
    b = wl.add_mutually_exclusive_group()
    b.add_argument(
        "--batch-size",
        type=positive_int_arg,
        metavar="B",
        help="samples per worker per step (default 64), fixed as workers are added",
    )
    b.add_argument(
        "--global-batch",
        type=positive_int_arg,
        metavar="B",
        help="a fixed global batch in samples: each of n workers computes ⌈B/n⌉",
    )
    wl.add_argument(
        "--step-time",
        type=positive_float_arg,
        metavar="S",
        help="measured single-worker step time in seconds at the per-worker batch "
        "(replaces the FLOP-based compute time)",
    )
    add_precision_arguments(wl)
    s = parser.add_argument_group("search")
    s.add_argument(
        "--max-workers",
        type=positive_int_arg,
        default=RUN_DEFAULTS["max_workers"],
        metavar="N",
        help="the most workers (ranks, e.g. GPUs) to consider, ≥ 1 "
        f"(default {RUN_DEFAULTS['max_workers']}, as run's and report's)",
    )
    s.add_argument(
        "--ranks-per-node",
        type=positive_int_arg,
        default=None,
        metavar="G",
        help="workers a node holds (default 1; with --profile, the one value it measured); "
        "worker counts are then multiples of G, or 1 … --max-workers on one node when "
        "--max-workers is below G",
    )
    s.add_argument(
        "--arch",
        type=name_list_arg,
        metavar="LIST",
        help="architectures to search, comma-separated: ps (both placements), ps_dedicated, "
        "ps_colocated, ps_host, hybrid, p2p, ring, tree, hierarchical, zero1, zero2, fsdp, "
        "hsdp (default: all that apply)",
    )
    s.add_argument(
        "--bucket-bytes",
        type=bytes_list_arg,
        metavar="LIST",
        help="bucket sizes to search, comma-separated with K/M/G suffixes (powers of 1024), "
        "0 = one collective per tensor (default 0,64K,128K,…,1G and 25M)",
    )
    s.add_argument(
        "--servers",
        type=int_list_arg,
        metavar="LIST",
        help="parameter-server counts to search (default 1,2,4,… up to the worker count)",
    )
    s.add_argument(
        "--no-refine",
        action="store_true",
        help="keep the best grid bucket size (skip the continuous refinement)",
    )
    o = parser.add_argument_group("objective")
    o.add_argument(
        "--objective",
        default="throughput",
        metavar="NAME",
        help="throughput (default), cost, efficiency or min-workers",
    )
    o.add_argument(
        "--min-efficiency",
        type=positive_float_arg,
        metavar="F",
        help="scaling-efficiency floor in (0, 1], e.g. 0.8 (required by --objective efficiency)",
    )
    o.add_argument(
        "--target-throughput",
        type=positive_float_arg,
        metavar="X",
        help="samples/s to reach (required by --objective min-workers)",
    )
    o.add_argument(
        "--price-per-hour",
        type=positive_float_arg,
        metavar="P",
        help="price of one worker-hour, any currency (required by --objective cost)",
    )
    o.add_argument(
        "--server-price-per-hour",
        type=positive_float_arg,
        metavar="P",
        help="price of one dedicated parameter-server-hour, same currency",
    )
    mem = parser.add_argument_group("memory")
    mem.add_argument(
        "--optimizer",
        choices=sorted(_OPTIMIZER_STATE),
        default="momentum",
        help="optimizer, for the memory its state needs: sgd (none), momentum (default, "
        "1× the model), adam (2×)",
    )
    mem.add_argument(
        "--device-memory",
        type=bytes_arg,
        metavar="SIZE",
        help="memory per worker and per server, e.g. 16G (default: the profile's device)",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="recommend even from a profile whose held-out error is over the 15%% limit "
        "(the result is marked unreliable)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON document (keys: architecture, servers, colocated, workers, "
        "bucket_bytes, iteration_time_s, interval_s, throughput_samples_per_s, "
        "scaling_efficiency, breakdown, alternatives, p_best, rationale, warnings, …)",
    )


def _load_profile(args, workload=None):
    from calibration import Profile
    from costmodel import device_flops_per_s

    if args.profile:
        if args.nics_per_node is not None:
            raise UsageError("--nics-per-node applies to --preset; a profile holds its network")
        if args.host_links is not None:
            raise UsageError("--host-links applies to --preset; a profile holds its host links")
        preset_compute(args, workload)  # refuses --compute-dtype
        prof = load_profile(args.profile)
        if args.ranks_per_node is None:  # the measured topology, not a silent g = 1
            from tuner import measured_ranks_per_node

            args.ranks_per_node = measured_ranks_per_node(prof) or 1
        return prof, f"profile {args.profile}"
    if args.ranks_per_node is None:
        args.ranks_per_node = 1
    if args.device is None:
        args.device = "v100"
    dtype, kind = preset_compute(args, workload)
    try:
        prof = Profile.from_preset(
            args.preset,
            args.device,
            nics_per_node=args.nics_per_node,
            compute_dtype=dtype,
            model_kind=kind,
            host_links=args.host_links or 1,
        )
        compute = device_flops_per_s(args.device, dtype, kind)[1]
    except ValueError as e:
        flag = "--compute-dtype" if "dtype" in str(e) else "--preset/--device/--nics-per-node"
        raise UsageError(f"{flag}: {e}") from None
    nics = "" if args.nics_per_node is None else f", {args.nics_per_node} NICs per node"
    if args.host_links is not None:
        nics += f", {args.host_links} host link{'s' if args.host_links != 1 else ''} per node"
    return prof, (
        f"presets {args.preset} + {args.device}{nics} (datasheet prior, nothing measured; "
        f"compute {compute})"
    )


def _load_workload(args):
    from costmodel import get_workload, load_layers

    batch = args.batch_size or 64
    if args.model:
        try:
            w = get_workload(args.model, batch)
        except ValueError as e:
            raise UsageError(f"--model: {e}") from None
    else:
        w = load_layers(args.layers)
        w = w.with_batch_size(batch)
    if args.step_time is not None:
        w = w.with_step_time(args.step_time)
    return w


def transform_workload(w, args):
    """The workload the tuner searches: gradient dtype, then K-step accumulation.

    ``--grad-dtype`` is exact (:func:`costmodel.with_grad_dtype`);
    ``--accumulation-steps`` uses :func:`costmodel.accumulated_workload` (the
    tuner takes a workload; see its docstring for where it differs from the
    closed form :func:`costmodel.accumulate` that ``predict`` uses).
    """
    from costmodel import accumulated_workload, with_activation_checkpointing, with_grad_dtype

    if getattr(args, "grad_dtype", None):
        w = with_grad_dtype(w, args.grad_dtype)
    if getattr(args, "activation_checkpointing", None):
        try:
            w = with_activation_checkpointing(w, args.activation_checkpointing)
        except ValueError as e:
            raise UsageError(f"--activation-checkpointing: {e}") from None
    if (getattr(args, "accumulation_steps", None) or 1) > 1:
        w = accumulated_workload(w, args.accumulation_steps)
    return w


def run(args: argparse.Namespace) -> int:
    """Recommend; print the choice and the runner-ups (or one JSON document)."""
    import tuner

    if args.device is not None and args.profile:
        raise UsageError("--device applies to --preset only; a profile carries its device")
    if args.step_time is not None and args.global_batch is not None and args.batch_size is None:
        raise UsageError(
            "--step-time is the single-worker step time at --batch-size; with --global-batch "
            "give the --batch-size it was measured at"
        )
    if args.servers is not None and args.arch:
        from costmodel import get_architecture

        try:
            any_servers = any(get_architecture(a).uses_servers for a in args.arch)
        except ValueError:
            any_servers = True  # an unknown name: tuner.recommend's error names it
        if not any_servers:
            raise UsageError("--servers applies to ps and hybrid; add one of them to --arch")
    if args.arch:  # the option named in the error (tuner.recommend's names only the word)
        import tuner

        try:
            tuner.resolve_variants(args.arch, max(args.ranks_per_node or 2, 2))
        except ValueError as e:
            raise UsageError(f"--arch: {e}") from None
    base_workload = _load_workload(args)
    profile, source = _load_profile(args, base_workload)
    workload = transform_workload(base_workload, args)
    try:
        rec = tuner.recommend(
            profile,
            workload,
            max_workers=args.max_workers,
            ranks_per_node=args.ranks_per_node,
            architectures=args.arch,
            bucket_bytes=args.bucket_bytes,
            servers=args.servers,
            global_batch=args.global_batch,
            objective=args.objective,
            min_efficiency=args.min_efficiency,
            target_throughput=args.target_throughput,
            price_per_hour=args.price_per_hour,
            server_price_per_hour=args.server_price_per_hour,
            optimizer_state_factor=_OPTIMIZER_STATE[args.optimizer],
            device_memory_bytes=args.device_memory,
            force=args.force,
            refine=not args.no_refine,
        )
    except (tuner.InfeasibleError, tuner.UnreliableProfileError) as e:
        raise CLIError(str(e)) from None
    doc = rec.to_dict()
    # DDP buckets by the parameters' bytes (the workload before --grad-dtype)
    prov = getattr(profile, "provenance", None) or {}
    settings = tuner.framework_settings(
        doc,
        workload,
        param_dtype_bytes=int(base_workload.dtype_bytes),
        grad_dtype=args.grad_dtype,
        device="cpu" if prov.get("backend") == "cpu" else "gpu",
    )
    solo = rec.config.workers == 1  # one process: no DDP, Horovod or servers to set
    if args.json:
        doc["framework_settings"] = {} if solo else settings
        print_json(doc)
        return 0
    print(format_text(rec, base_workload, source, args))
    if solo:
        print("\nFramework settings: none (one process trains without a distributed wrapper)")
        return 0
    print("\nFramework settings (copy into your launch script):\n")
    print(tuner.format_framework_settings(settings))
    return 0


# --------------------------------------------------------------------------- text output


def _exchanges(c, bd: dict, accumulation_steps: int) -> str:
    """What the communication is made of: buckets, or FSDP units × micro-batches."""
    count = bd["num_buckets"]
    if c.uses_bucket_bytes:
        return f"{count:.0f} bucket{'s' if count != 1 else ''}"
    k = max(1, int(accumulation_steps))
    units = count / k
    return f"{units:.0f} FSDP unit{'s' if units != 1 else ''}" + (
        f" × {k} micro-batches" if k > 1 else ""
    )


def _ms(t: float) -> str:
    """A duration, 4 significant digits, with its unit (ns, µs, ms, s): 23.46 s, not 2.346e+04 ms."""
    from costmodel import format_seconds

    return format_seconds(t, digits=4)


def _describe_workload(w, args) -> str:
    from costmodel import format_bytes

    batch = (
        f"global batch {args.global_batch}"
        if args.global_batch
        else f"batch {w.batch_size} per worker"
    )
    grad = getattr(args, "grad_dtype", None)
    nbytes = w.total_params * (2 if grad in ("bf16", "fp16") else w.dtype_bytes)
    k = getattr(args, "accumulation_steps", None) or 1
    steps = f", {k} micro-batches per step" if k > 1 else ""
    ckpt = getattr(args, "activation_checkpointing", None)
    ckpt = f", {ckpt} activation checkpointing" if ckpt and ckpt != "none" else ""
    return (
        f"{w.name}: {w.total_params / 1e6:.3g} M parameters, "
        f"{format_bytes(nbytes)} of gradients{f' ({grad})' if grad else ''}, {batch}{steps}{ckpt}"
    )


def format_text(rec, workload, source: str, args) -> str:
    """The recommendation as text with units on every number."""
    from costmodel import format_bytes

    c = rec.config
    bd = c.breakdown
    lines = [
        f"model:    {_describe_workload(workload, args)}",
        f"cluster:  {source}; up to {plural(args.max_workers, 'worker')}"
        + (f", {args.ranks_per_node} per node" if args.ranks_per_node > 1 else ""),
        f"objective: {rec.objective}",
        "",
        f"Recommended: {c.describe()}" + ("" if rec.reliable else "   [UNRELIABLE: forced]"),
        f"  step time        {_ms(c.iteration_time_s)}  (90% interval "
        f"{_ms(c.interval_s[0])} – {_ms(c.interval_s[1])})",
        f"  throughput       {c.throughput_samples_per_s:,.0f} samples/s",
        f"  scaling eff.     {100 * c.scaling_efficiency:.1f} %",
        f"  compute          {_ms(bd['forward_s'] + bd['backward_s'])} "
        f"(forward {_ms(bd['forward_s'])}, backward {_ms(bd['backward_s'])})",
        "  communication    none (one worker)"
        if c.workers == 1
        else f"  communication    {_ms(bd['communication_s'])} in {_exchanges(c, bd, getattr(args, 'accumulation_steps', None) or 1)}, "
        f"exposed {_ms(bd['exposed_communication_s'])}",
        f"  update           {_ms(bd['update_s'])}",
    ]
    if c.cost_per_sample is not None:
        lines.append(f"  cost             {c.cost_per_sample * 1e6:.4g} per million samples")
    lines.append(
        "  p_best           "
        + (
            "n/a (one worker: nothing to compare)"
            if c.workers == 1
            else "n/a (no parameter uncertainty, or a single architecture)"
            if not math.isfinite(rec.p_best)
            else f"{100 * rec.p_best:.0f} % (chance it beats the runner-up architecture)"
        )
    )
    lines.append("")
    lines += textwrap.wrap("Why: " + rec.rationale, width=96, subsequent_indent="     ")
    if rec.alternatives:
        lines += ["", "Runner-ups:"]
        head = (
            f"  {'architecture':<16}{'servers':>8}{'workers':>8}{'bucket':>12}"
            f"{'step':>12}{'90% interval':>22}{'samples/s':>12}{'eff.':>8}"
        )
        lines.append(head)
        for a in rec.alternatives:
            bucket = (
                "per block"
                if not a.uses_bucket_bytes
                else "per tensor"
                if a.bucket_bytes == 0
                else format_bytes(a.bucket_bytes)
            )
            interval = f"{_ms(a.interval_s[0])} – {_ms(a.interval_s[1])}"
            lines.append(
                f"  {a.label:<16}{(a.servers or '-')!s:>8}{a.workers:>8} {bucket:>11}"
                f" {_ms(a.iteration_time_s):>11} {interval:>21}"
                f"{a.throughput_samples_per_s:>12,.0f}{100 * a.scaling_efficiency:>7.1f}%"
            )
    if rec.warnings:
        lines += ["", "Warnings:"]
        for w in rec.warnings:
            lines += textwrap.wrap(w, width=94, initial_indent="  - ", subsequent_indent="    ")
    return "\n".join(lines)
