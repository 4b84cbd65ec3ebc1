"""One output path for everything ddltune writes into a folder.

:func:`atomic_replace_dir` builds new content in a temporary sibling folder and
swaps it in by rename once it is complete, so that:

* an interruption (Ctrl-C, an exception, a crash) while building leaves the
  previous folder byte-identical: nothing in it is touched until the build has
  finished;
* ``overwrite=True`` replaces only the files ddltune wrote last time, as listed
  in the folder's manifest (:data:`MANIFEST_NAME`); every other entry (a user's
  ``figures/fig1.pdf``, a ``sub/`` folder, a link) is carried into the new
  folder unchanged (hard-linked, or copied where a hard link is impossible) and
  the old folder is only then retired;
* symbolic links are never followed: an output path that is a link is refused
  with a one-line :class:`OutputPathError` naming it, and links inside the old
  folder are carried over as links.

The swap itself (two renames and the clean-up) runs with SIGINT, SIGTERM and
SIGHUP held (from the main thread), so a Ctrl-C arriving then is delivered
right after the new folder is in place. Between the two renames the target name
is absent for a moment (Linux has no portable atomic exchange of two
non-empty folders from Python); a hard crash (SIGKILL, power loss) in that
window leaves the previous content complete in the hidden sibling
``.<name>.old-*``.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import signal
import stat
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from costmodel import InputFileError

__all__ = [
    "MANIFEST_NAME",
    "OutputPathError",
    "atomic_replace_dir",
    "check_output_file",
    "read_manifest",
    "refuse_current_folder",
    "refuse_symlink",
]

#: Name of ddltune's manifest inside an output folder: the files it wrote there.
MANIFEST_NAME = ".ddltune-manifest.json"
_MANIFEST_FORMAT = "ddltune-output-manifest/1"


class OutputPathError(InputFileError):
    """An output path ddltune will not write to (a symbolic link, a file where a folder
    belongs, a user's file where ddltune would write its own); one line naming the path."""

    def __init__(self, path, reason: str):
        super().__init__(str(path), None, reason)


def refuse_symlink(path: str | os.PathLike, what: str = "output") -> Path:
    """Refuse an output path that is a symbolic link (dangling or not).

    Args:
        path: the path ddltune is about to write.
        what: how the message names it (``"output"``, ``"-o"``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputPathError: if ``path`` is a symbolic link; ddltune never writes
            through one (the link's target may lie outside the folder the user
            meant).
    """
    path = Path(path)
    if path.is_symlink():
        raise OutputPathError(
            path,
            f"{what} is a symbolic link (to {os.readlink(path)!r}); ddltune does not write "
            "through links: remove the link or give the real path",
        )
    return path


def refuse_current_folder(path: str | os.PathLike, what: str = "output folder") -> Path:
    """Refuse, as a folder ddltune replaces as a whole, the current folder or one holding it.

    A report or run folder is built beside itself and swapped in by rename
    (:func:`atomic_replace_dir`); the folder the user stands in cannot be (``-o .``
    or ``-o ""`` failed with "OSError: [Errno 16] Device or resource busy").

    Args:
        path: the folder ddltune is about to replace.
        what: how the message names it (``"-o"``, ``"the report folder"``).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputPathError: if ``path`` is empty, the current folder or an ancestor of it.
    """
    if os.fspath(path) == "":
        raise OutputPathError("''", f"{what} is empty; give a folder, e.g. -o ddltune-report")
    path = Path(path)
    here, there = Path.cwd().resolve(), path.resolve()
    if there == here or there in here.parents:
        raise OutputPathError(
            path,
            f"{what} is the current folder{'' if there == here else ' or holds it'}; ddltune "
            "replaces its folder as a whole: give it a folder of its own, e.g. -o ddltune-report",
        )
    return path


_KINDS = (
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISDIR, "a folder"),
)


def refuse_input(path: str | os.PathLike, inputs, what: str = "output") -> None:
    """Refuse an output that is one of the command's input files (the same file, by inode).

    Raises:
        OutputPathError: naming ``what`` and the path.
    """
    for f in inputs:
        try:
            same = os.path.samefile(path, f)
        except OSError:  # either does not exist (yet): not the same file
            same = False
        if same:
            raise OutputPathError(
                path, f"{what} is one of the inputs ({f}): writing it would replace that data; "
                "choose another output file"
            )  # fmt: skip


def check_output_file(
    path: str | os.PathLike, *, overwrite: bool = True, what: str = "output", inputs=()
) -> Path:
    """Refuse, before any work, an output file ddltune cannot or must not write.

    An output is a regular file or a new name: a symbolic link (dangling or
    not), a device node (``/dev/null``), a FIFO, a socket or a folder is
    refused whatever ``overwrite`` says (ddltune replaces a file by rename,
    which would turn a device node into a regular file). The folder that will
    hold it must take a new file: a temporary one is created and removed there,
    so a read-only or full file system is found now, not after a long fit.

    Args:
        path: the output file.
        overwrite: an existing regular file may be replaced.
        what: how the message names it (``"-o"``, ``"--measurements"``).
        inputs: the files the command reads; the output may be none of them
            (``--overwrite`` would replace the data with its result).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        OutputPathError: a link or a special file, a folder that cannot take
            the file, or one of ``inputs``; the message names ``path``.
        FileExistsError: ``path`` is a regular file and ``overwrite`` is false.
    """
    path = refuse_symlink(Path(path), what)
    refuse_input(path, inputs, what)
    try:
        mode = os.stat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # a new name (its folder is probed below)
        mode = None
    except OSError as e:
        raise OutputPathError(path, f"{what}: cannot be examined ({e.strerror})") from None
    if mode is not None:
        for test, kind in _KINDS:
            if test(mode):
                raise OutputPathError(
                    path,
                    f"{what} is {kind}, not a regular file; ddltune writes only regular files "
                    "(or new names): give another path",
                )
        if not overwrite:
            raise FileExistsError(f"{path} already exists; pass --overwrite to replace it")
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise OutputPathError(
            path, f"{what}: its folder {parent} cannot take a new file ({e.strerror})"
        ) from None
    return path


def read_manifest(folder: str | os.PathLike, manifest_name: str = MANIFEST_NAME) -> set[str]:
    """The relative paths (POSIX, no ``..``) ddltune recorded as its own in ``folder``.

    Args:
        folder: an output folder.
        manifest_name: the manifest's file name inside it.

    Returns:
        The set of relative file paths; empty when there is no manifest (a folder
        ddltune did not write, or wrote before manifests existed: then nothing in
        it counts as ddltune's and nothing is deleted).

    Raises:
        OutputPathError: if the manifest exists but is not ddltune's format, is
            a link, or lists a path outside the folder.
    """
    mpath = Path(folder) / manifest_name
    if not mpath.exists() and not mpath.is_symlink():
        return set()
    refuse_symlink(mpath, "the manifest")
    try:
        doc = json.loads(mpath.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise OutputPathError(mpath, f"unreadable ddltune manifest ({e})") from None
    if not isinstance(doc, dict) or doc.get("format") != _MANIFEST_FORMAT:
        raise OutputPathError(mpath, f"not a ddltune manifest (expected format {_MANIFEST_FORMAT})")
    files = doc.get("files")
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise OutputPathError(mpath, "'files' must be a list of relative paths")
    out = set()
    for f in files:
        parts = Path(f).parts
        if not parts or Path(f).is_absolute() or ".." in parts:
            raise OutputPathError(mpath, f"lists {f!r}, a path outside the folder")
        out.add(Path(f).as_posix())
    return out | {manifest_name}


def _walk(folder: Path) -> tuple[list[str], list[str]]:
    """``(entries, empty_dirs)`` under ``folder``, relative POSIX paths, links not followed.

    ``entries`` are files and symbolic links (a link to a folder is one entry).
    """
    entries, empty = [], []
    for root, dirs, files in os.walk(folder, followlinks=False):
        rel = Path(root).relative_to(folder)
        for d in list(dirs):
            if (Path(root) / d).is_symlink():
                entries.append((rel / d).as_posix())
                dirs.remove(d)
        for f in files:
            entries.append((rel / f).as_posix())
        if not dirs and not files and rel != Path("."):
            empty.append(rel.as_posix())
    return entries, empty


def _carry(src: Path, dst: Path) -> None:
    """Put ``src`` (a file or link of the old folder) at ``dst`` without changing ``src``."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    if src.is_symlink():
        os.symlink(os.readlink(src), dst)
        return
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError as e:  # another file system inside the folder, or no hard links
        if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copy2(src, dst, follow_symlinks=False)


@contextlib.contextmanager
def _signals_held():
    """Hold SIGINT/SIGTERM/SIGHUP inside the block; deliver them after it.

    Python-level handlers that only note the signal (a thread's signal mask
    would not do: a process-directed signal goes to any thread not blocking
    it, and Python then runs its handler in the main thread at once). Outside
    the main thread, where handlers cannot be set, the block runs as is.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    saved = {}
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        saved[sig] = signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        for sig in dict.fromkeys(pending):
            signal.raise_signal(sig)


def _fsync_dir(path: Path) -> None:
    """fsync a folder so that a rename in it survives a crash (best effort)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_replace_dir(
    target: str | os.PathLike,
    build_fn: Callable[[Path], object],
    *,
    overwrite: bool = False,
    manifest_name: str = MANIFEST_NAME,
    replaces: Callable[[str], bool] | None = None,
) -> Path:
    """Build a folder beside ``target`` and swap it in by rename when complete.

    (Long for its documentation and the clean-up of every exit path: the body
    is a sequence of checks, the build, the carry-over and the swap.)

    ``build_fn(tmp)`` writes the new content into the empty folder ``tmp`` (a
    sibling of ``target`` on the same file system). Every file it leaves there
    is ddltune's and is listed in the manifest ``manifest_name`` written into
    the new folder. When ``target`` already exists (and ``overwrite``): entries
    of the old folder not listed in its manifest are the user's and are carried
    into the new folder unchanged (hard links; links stay links); the files the
    old manifest lists are dropped with the old folder. With ``replaces``, the
    old entries dropped are instead exactly those it names (the files this
    output writes, whether or not a manifest lists them: ``--overwrite`` asked
    for them); every other entry is carried, and those the old manifest listed
    stay in the new one (e.g. ``report --overwrite`` into a ``run`` folder
    keeps its measurements and profile as ddltune's).

    Interruption: any exception (``KeyboardInterrupt`` included) from
    ``build_fn`` or before the swap removes the temporary folder and leaves
    ``target`` untouched; the swap runs with SIGINT/SIGTERM/SIGHUP held.

    Args:
        target: the output folder (created if missing; its parent too).
        build_fn: called once with the temporary folder's path; its return value
            is ignored.
        overwrite: replace an existing non-empty ``target``; without it an
            existing non-empty folder is refused.
        manifest_name: the manifest's file name (default :data:`MANIFEST_NAME`).
        replaces: ``replaces(rel)`` is true for the relative POSIX paths this
            output owns (replaced or removed on ``overwrite``); ``None``: the
            files the old manifest lists.

    Returns:
        ``target`` as a :class:`~pathlib.Path`.

    Raises:
        OutputPathError: ``target`` (or its manifest) is a symbolic link, or
            ``target`` is not a folder, or is the current folder or holds it
            (:func:`refuse_current_folder`), or the new content would replace a user
            file (one not in the old manifest); nothing is changed.
        FileExistsError: ``target`` is a non-empty folder and ``overwrite`` is
            false; the message suggests ``--overwrite``.
        OutputPathError: the file system is full or read-only (ENOSPC, EDQUOT,
            EROFS, EFBIG while building, or no sibling folder can be made): the
            message names ``target``; the old folder is unchanged.
        Exception: whatever ``build_fn`` raises, after the clean-up.
    """
    target = refuse_symlink(refuse_current_folder(target, "the output folder"), "the output folder")
    exists = target.exists()
    if exists and not target.is_dir():
        raise OutputPathError(target, "exists and is not a folder; ddltune writes a folder there")
    if exists and any(target.iterdir()) and not overwrite:
        raise FileExistsError(
            f"{target} already exists and is not empty; pass --overwrite to replace what "
            "ddltune wrote there (other files are kept)"
        )
    old_own = read_manifest(target, manifest_name) if exists else set()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.new-", dir=target.parent))
    except OSError as e:  # a read-only or full file system: say so before any work
        raise OutputPathError(
            target, f"cannot create its new content beside it in {target.parent} ({e.strerror})"
        ) from None
    os.chmod(tmp, 0o777 & ~_umask())
    backup = None
    try:
        build_fn(tmp)
        refuse_symlink(tmp / manifest_name, "the manifest")
        built, _ = _walk(tmp)
        built = sorted(set(built) - {manifest_name})
        kept_own = []
        if exists:
            entries, empty = _walk(target)
            dropped = old_own if replaces is None else {e for e in entries if replaces(e)}
            carried = [e for e in entries if e not in dropped and e != manifest_name]
            clash = sorted(set(carried) & set(built))
            if clash:
                raise OutputPathError(
                    target / clash[0],
                    "is not ddltune's (not in its manifest) and the new output writes a file "
                    "of that name; move it away or choose another output folder",
                )
            for e in carried:  # the old folder is only read
                _carry(target / e, tmp / e)
            for d in empty:
                (tmp / d).mkdir(parents=True, exist_ok=True)
            kept_own = [e for e in carried if e in old_own]
        (tmp / manifest_name).write_text(
            json.dumps({"format": _MANIFEST_FORMAT, "files": sorted({*built, *kept_own})}, indent=1)
            + "\n",
            encoding="utf-8",
        )
        for root, _dirs, files in os.walk(tmp):
            for f in files:
                if not (Path(root) / f).is_symlink():
                    with open(Path(root) / f, "rb") as fh:
                        os.fsync(fh.fileno())
        with _signals_held():
            if exists:
                backup = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=target.parent))
                os.rmdir(backup)
                os.rename(target, backup)
            os.rename(tmp, target)
            _fsync_dir(target.parent)
            if backup is not None:
                shutil.rmtree(backup, ignore_errors=True)
                backup = None
    except BaseException as e:
        if backup is not None and not target.exists():
            os.rename(backup, target)  # the swap failed half-way: put the old folder back
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError) and e.errno in _NO_ROOM:  # name the output, not a temp file
            raise OutputPathError(
                target,
                f"could not be written ({e.strerror}); "
                + ("the previous content is unchanged" if exists else "nothing was left there"),
            ) from e
        raise
    return target


#: errno values that mean the output's file system cannot take it.
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
