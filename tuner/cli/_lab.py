"""``ddltune lab``: an emulated cluster on this machine (check it, clean up after killed runs)."""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from ._common import CLIError, UsageError, plural, print_json

NAME = "lab"

JUDGED_BURSTS = 8
"""``lab check`` judges a size from this many token buckets up: the bucket's head
start is then at most 1/8 of its wire time."""
HELP = "an emulated cluster on this machine: network namespaces joined by shaped links"
DESCRIPTION = """\
Build an emulated cluster on this machine and check it, or remove what a
killed run left. NODESxRANKS@RATE (e.g. 4x1@200mbit) makes NODES Linux network
namespaces, each a node with its own host name and one NIC (a veth link into a
bridge in a namespace of its own) shaped to RATE in both directions with tc's
token bucket (tbf); RANKS ranks share each node (over its loopback, as GPUs of
a node over NVLink) and its NIC. Rates are tc's: kbit, mbit, gbit (SI, bits per
second, headers included). Addresses come from 198.18.0.0/15 (RFC 2544's
benchmarking range) inside those namespaces only: nothing is added to this
machine's own network, and there is no route out. Everything is removed when
the command ends, fails or is interrupted.

'check' builds the cluster, runs one bulk TCP transfer per link (all at once,
node i to node i+1), prints each link's goodput and wire rate, times one
message of each size (1 KiB ... 16 MiB, node 0 to node 1) against the link's
alpha + S/R, and removes the cluster; it fails when a link reaches less than
90% of the rate (this machine's cores cannot keep up; it says which rate it
can emulate) or a bandwidth-bound size (wire time >= 4 alpha, and at least
8 token buckets, whose head start is then at most 1/8) misses alpha + S/R by
more than 25%.
'clean' removes the namespaces of runs that were killed (ddlt<PID>..., PID
gone). 'collect', 'validate' and 'run' take the same --emulate option.

Needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN (a container started with
--cap-add NET_ADMIN --cap-add SYS_ADMIN), and iproute2 (ip, tc) and
util-linux (unshare). See README 'An emulated cluster on one machine'."""
EPILOG = """\
examples:
  ddltune lab check --emulate 2x1@200mbit
  ddltune lab check --emulate 4x2@100mbit --seconds 2 --json
  ddltune collect --emulate 2x1@200mbit --collectives all_reduce -o emu.jsonl
  ddltune lab clean
"""


def add_emulate_argument(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--emulate NODESxRANKS@RATE`` (parsed later by :func:`emulated`)."""
    parser.add_argument(
        "--emulate",
        default=None,
        required=required,
        metavar="NODESxRANKS@RATE",
        help="run the ranks in an emulated cluster on this machine: NODES network namespaces "
        "with RANKS ranks each, every NIC shaped to RATE both ways (tc units: kbit, mbit, gbit), "
        "e.g. 2x1@200mbit; needs root or CAP_NET_ADMIN+CAP_SYS_ADMIN (see 'ddltune lab --help')",
    )


def parse_spec(text: str):
    """The :class:`launch.EmulateSpec` of ``--emulate``; a bad spec is a usage error."""
    from launch import parse_emulate

    try:
        return parse_emulate(text, "--emulate")
    except ValueError as e:
        raise UsageError(str(e)) from None


def check_emulated_plan(
    text: str, counts, max_bytes: int, *, force: bool = False, force_option: str | None = "--force"
):
    """The ``--emulate`` spec, once its process counts fit this machine, before it is built.

    Every count of ``counts`` (the launches' processes) must fit the cluster's
    ranks, and the largest must pass :func:`calibration.check_local_bounds`
    (cores and memory): a refusal after the namespaces and their self-check
    cost seconds for nothing. ``force_option``: the caller's option that lifts the
    core bound, offered in the refusal (``None``: the caller has none).

    Raises:
        UsageError: naming ``--emulate`` (and ``--workers``), the bound and what to
            change; a cluster of one rank (a collective needs two).
    """
    from calibration import check_local_bounds

    spec = parse_spec(text)
    if spec.num_ranks < 2:
        raise UsageError(
            f"--emulate {spec.text} has {spec.num_ranks} rank; a collective needs at least 2: "
            f"emulate 2 or more (e.g. 2x1@{spec.text.split('@', 1)[1]})"
        )
    counts = list(counts) or [spec.num_ranks]
    if max(counts) > spec.num_ranks:
        raise UsageError(
            f"--workers {max(counts)} exceeds the emulated cluster {spec.text} "
            f"({spec.num_ranks} ranks); emulate more ranks or lower --workers"
        )
    try:
        check_local_bounds(
            counts,
            max_bytes,
            force=force,
            what=f"--emulate {spec.text} ({max(counts)} ranks)",
            force_option=force_option,
        )
    except ValueError as e:
        raise UsageError(str(e)) from None
    return spec


@contextlib.contextmanager
def emulated(args: argparse.Namespace, *, check_seconds: float = 1.5, quiet: bool = False):
    """Yield a started, self-checked :class:`launch.EmulatedCluster` for ``args.emulate``.

    Yields ``None`` when ``--emulate`` was not given. Removes the cluster on
    the way out, whatever happens. Emulation errors become one-line CLI errors.
    """
    text = getattr(args, "emulate", None)
    if not text:
        yield None
        return
    from launch import EmulatedCluster, EmulationError

    spec = parse_spec(text)
    try:
        with EmulatedCluster(spec) as cluster:
            if not quiet and spec.nodes > 1:
                print(
                    f"# emulated cluster {spec.text}: built; checking each link's rate "
                    f"({check_seconds:g} s per check) …",
                    file=sys.stderr,
                    flush=True,
                )
            checks = cluster.self_check(check_seconds)
            if not quiet and checks:
                worst = min(c.goodput_bytes_per_s for c in checks)
                print(
                    f"# emulated cluster {spec.text}: {plural(spec.nodes, 'node')} × "
                    f"{plural(spec.ranks_per_node, 'rank')}, NICs at {spec.rate_bits_per_s / 1e6:g} Mbit/s; self-check: TCP "
                    f"goodput ≥ {worst * 8 / 1e6:.1f} Mbit/s on each of {len(checks)} links",
                    file=sys.stderr,
                )
            yield cluster
    except EmulationError as e:
        raise CLIError(str(e)) from e


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Options of ``ddltune lab``: the actions ``check`` and ``clean``."""
    sub = parser.add_subparsers(dest="lab_action", metavar="ACTION")
    check = sub.add_parser(
        "check",
        help="build an emulated cluster, measure each link, remove it",
        description="Build the emulated cluster --emulate describes, run one bulk TCP transfer "
        "per link (all links at once), print each link's goodput; then time single messages "
        "of each size over one link against α + S/R; remove everything. Exit 1 when a link "
        "reaches less than --min-fraction of the rate or a size misses α + S/R by more than "
        "--size-tolerance.",
        epilog="example:\n  ddltune lab check --emulate 2x1@200mbit",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_emulate_argument(check, required=True)
    check.add_argument(
        "--seconds",
        type=float,
        default=1.0,
        metavar="S",
        help="transfer time per link, seconds, 0.3…30 (default %(default)s)",
    )
    check.add_argument(
        "--min-fraction",
        type=float,
        default=0.9,
        metavar="F",
        help="pass when every link's wire rate reaches F × the set rate, 0 < F ≤ 1 "
        "(default %(default)s)",
    )
    check.add_argument(
        "--size-tolerance",
        type=float,
        default=0.25,
        metavar="F",
        help="pass when one message of every size (1 KiB, 4 KiB, … up to 16 MiB, node 0 to "
        "node 1 alone) whose wire time is at least 4 α, and at least 8 token buckets, crosses "
        "within F of the link's α + S/R, "
        "0 < F ≤ 1 (default %(default)s; smaller sizes are shown, not judged: a loaded "
        "machine's α jitters by tens of percent)",
    )
    check.add_argument("--json", action="store_true", help="print one JSON document")
    check.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )
    clean = sub.add_parser(
        "clean",
        help="remove the namespaces killed runs left",
        description="Remove every ddlt<PID>n<i> / ddlt<PID>br network namespace (and its "
        "/etc/netns folder) whose PID no longer runs, killing what still runs inside.",
        epilog="example:\n  ddltune lab clean",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    clean.add_argument("--json", action="store_true", help="print one JSON document")
    clean.add_argument(
        "--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )


def run(args: argparse.Namespace) -> int:
    """Run ``lab check`` or ``lab clean``."""
    action = getattr(args, "lab_action", None)
    if action is None:
        raise UsageError("lab: choose an action: 'check' or 'clean' (see 'ddltune lab --help')")
    from launch import EmulationError

    try:
        if action == "clean":
            return _clean(args)
        return _check(args)
    except EmulationError as e:
        raise CLIError(str(e)) from e


def _clean(args: argparse.Namespace) -> int:
    from launch import clean_stale

    removed = clean_stale()
    if args.json:
        print_json({"removed": removed})
    elif removed:
        print(f"removed {len(removed)} namespaces left by killed runs: {', '.join(removed)}")
    else:
        print("nothing to clean: no namespace of a killed run is left")
    return 0


def _check(args: argparse.Namespace) -> int:
    from costmodel import format_bytes, format_seconds
    from launch import STOLEN_FRACTION, EmulatedCluster, EmulationError

    spec = parse_spec(args.emulate)
    if not 0.3 <= args.seconds <= 30:
        raise UsageError(f"--seconds must be between 0.3 and 30, got {args.seconds:g}")
    if not 0 < args.min_fraction <= 1:
        raise UsageError(f"--min-fraction must be in (0, 1], got {args.min_fraction:g}")
    tol = args.size_tolerance
    if not 0 < tol <= 1:
        raise UsageError(f"--size-tolerance must be in (0, 1], got {tol:g}")
    failure = None
    with EmulatedCluster(spec) as cluster:
        setup_s = cluster.setup_s
        t0 = time.monotonic()
        try:
            checks = cluster.self_check(args.seconds, args.min_fraction)
        except EmulationError as e:
            failure = str(e)
            checks = cluster.checks
        # a link that failed its self-check is not timed per size: the command stops there
        sizes = cluster.size_check() if spec.nodes >= 2 and failure is None else []
        rate_b = spec.rate_bits_per_s / 8
        alpha0 = (sizes[0].expected_s - sizes[0].wire_bytes / rate_b) if sizes else 0.0
        # judged where the wire time is at least 4 α (below, a loaded machine's α jitters)
        # and the message at least JUDGED_BURSTS buckets (a full bucket crosses at veth
        # speed: 4 KiB over 50 Mbit/s took 0.64 of α + S/R, its first 3,028 B free)
        judged = [
            c
            for c in sizes
            if c.wire_bytes / rate_b >= 4 * alpha0
            and c.wire_bytes >= JUDGED_BURSTS * cluster.burst_bytes
        ]
        off = [c for c in judged if abs(c.ratio - 1.0) > tol]
        if off and failure is None:
            worst = max(off, key=lambda c: abs(c.ratio - 1.0))
            failure = (
                f"size check failed: {len(off)} of {len(judged)} bandwidth-bound message sizes "
                f"miss the link's α + S/R by more than {tol:.0%} (worst "
                f"{format_bytes(worst.message_bytes)}: {worst.ratio:.2f}× of "
                f"{format_seconds(worst.expected_s)}): the token bucket ({cluster.burst_bytes} B) "
                "is not a NIC's, or this machine was busy; run it again on a quieter machine"
            )
            steal = cluster.size_check_steal_fraction
            if steal is not None and steal >= STOLEN_FRACTION:
                failure += (
                    f" (the hypervisor took {steal:.0%} of its CPU time meanwhile, 'steal' in "
                    "/proc/stat)"
                )
        check_s = time.monotonic() - t0
        doc = {
            "emulate": spec.text,
            "nodes": spec.nodes,
            "ranks_per_node": spec.ranks_per_node,
            "rate_bits_per_s": spec.rate_bits_per_s,
            "burst_bytes": cluster.burst_bytes,
            "limit_bytes": cluster.limit_bytes,
            "mtu": cluster.mtu,
            "addresses": [n.address for n in cluster.nodes],
            "links": [c.as_dict() for c in checks],
            "steal_fraction": cluster.check_steal_fraction,
            "alpha_s": alpha0 if sizes else None,
            "size_check_steal_fraction": cluster.size_check_steal_fraction,
            "sizes": [c.as_dict() | {"judged": c in judged} for c in sizes],
            "size_tolerance": tol,
            "goodput_bytes_per_s": cluster.provenance()["goodput_bytes_per_s"],
            "passed": failure is None,
            "setup_s": setup_s,
            "check_s": check_s,
        }
        t1 = time.monotonic()
    doc["teardown_s"] = time.monotonic() - t1
    if args.json:
        if failure:
            doc["error"] = failure
        print_json(doc)
    else:
        rate = spec.rate_bits_per_s
        print(
            f"# emulated cluster {spec.text}: {plural(spec.nodes, 'node')} × {plural(spec.ranks_per_node, 'rank')}, "
            f"NICs at {rate / 1e6:g} Mbit/s both ways (tbf burst {cluster.burst_bytes} B, "
            f"queue {cluster.limit_bytes} B, MTU {cluster.mtu})"
        )
        print(f"# {'link':>8} {'goodput(Mbit/s)':>16} {'wire(Mbit/s)':>13} {'of rate':>8}")
        for c in checks:
            print(
                f"  {c.sender:>3}→{c.receiver:<4} {c.goodput_bytes_per_s * 8 / 1e6:>16.1f} "
                f"{c.wire_bits_per_s / 1e6:>13.1f} {c.wire_bits_per_s / rate:>8.1%}"
            )
        if not checks:
            print("  (one node: no link to check)")
        elif doc["steal_fraction"] is not None:
            print(
                f"# the hypervisor took {doc['steal_fraction']:.1%} of the CPUs' time during "
                "the last check ('steal' in /proc/stat; ≥ "
                f"{STOLEN_FRACTION:.0%} stalls the shapers and is checked again)"
            )
        if sizes:
            alpha = sizes[0].expected_s - sizes[0].wire_bytes * 8 / rate
            print(
                f"# one message, node 0→1, median of 5 after idle; expected α + S/R with "
                f"α = {alpha * 1e3:.3f} ms"
            )
            print(f"# {'size':>9} {'measured(ms)':>13} {'α+S/R(ms)':>10} {'ratio':>6}")
            for c in sizes:
                flag = "" if abs(c.ratio - 1.0) <= tol else "  off"
                if c not in judged:
                    flag += "  (α- or bucket-bound: not judged)"
                print(
                    f"  {format_bytes(c.message_bytes):>9} {c.median_s * 1e3:>13.3f} "
                    f"{c.expected_s * 1e3:>10.3f} {c.ratio:>6.2f}{flag}"
                )
        print(
            f"# set up in {setup_s:.2f} s, checked in {check_s:.2f} s, removed in "
            f"{doc['teardown_s']:.2f} s; " + ("passed" if failure is None else "FAILED")
        )
    if failure:
        raise CLIError(failure)
    return 0
