"""Error types shared by every ddltune layer.

Static problems (unknown names, impossible configurations) raise ``ValueError``
at construction or trace time, as equinox does. Problems in a file raise
:class:`InputFileError`, which names the file and the line.
"""

from __future__ import annotations

import difflib
import os

__all__ = ["InputFileError", "format_choices", "read_text_bounded"]


class InputFileError(ValueError):
    """A file the user gave is malformed; the message names the file and line.

    Attributes:
        path: the file's path as given.
        line: 1-based line number, or ``None`` when the problem is the whole file.
        reason: what is wrong, in words.
    """

    def __init__(self, path: str, line: int | None, reason: str):
        self.path = str(path)
        self.line = line
        self.reason = reason
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {reason}")


def format_choices(choices, given=None) -> str:
    """Format a list of valid names for an error message, with the nearest to a typo.

    Args:
        choices: the valid names (any iterable of strings or objects with ``str``).
        given: the name the user gave, or ``None``. Where one valid name is close
            to it (:func:`difflib.get_close_matches`, ratio ≥ 0.6, ignoring case,
            '-' and '_'), the list ends with "(did you mean 'that'?)".

    Example:
        >>> format_choices(["ring", "ps"])
        'ps, ring'
        >>> format_choices(["ring", "ps"], given="rng")
        "ps, ring (did you mean 'ring'?)"
    """
    names = sorted(str(c) for c in choices)
    text = ", ".join(names)
    if isinstance(given, str) and given:

        def key(s: str) -> str:
            return s.lower().replace("-", "").replace("_", "")

        by_key = {key(n): n for n in names}
        near = difflib.get_close_matches(key(given), list(by_key), n=1, cutoff=0.6)
        if near and by_key[near[0]] != given:
            text += f" (did you mean {by_key[near[0]]!r}?)"
    return text


def read_text_bounded(path, limit_bytes: int, what: str = "file") -> str:
    """The UTF-8 text of a file, reading at most ``limit_bytes`` + 1 bytes.

    The bound holds whatever the file is: a regular file, a pipe or a device
    such as ``/dev/zero`` (whose size ``stat`` gives as 0) — nothing larger is
    ever held in memory. A leading UTF-8 byte-order mark is dropped.

    Args:
        path: the file.
        limit_bytes: the largest accepted size, bytes.
        what: how the message names the kind of file ("layer file", "config.json").

    Returns:
        The decoded text.

    Raises:
        InputFileError: naming ``path``: larger than ``limit_bytes``, missing,
            a folder, unreadable, or not UTF-8 (with the line of the first bad byte).
    """
    path_str = os.fspath(path)
    try:
        with open(path_str, "rb") as f:
            data = f.read(limit_bytes + 1)
    except FileNotFoundError:
        raise InputFileError(path_str, None, "no such file") from None
    except IsADirectoryError:
        raise InputFileError(path_str, None, f"is a directory, not a {what}") from None
    except OSError as e:
        raise InputFileError(path_str, None, f"cannot read: {e.strerror or e}") from None
    if len(data) > limit_bytes:
        raise InputFileError(
            path_str,
            None,
            f"more than a {what}'s {limit_bytes / 1024**2:g} MiB limit: is this the right file?",
        )
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise InputFileError(path_str, line, f"not UTF-8 text ({e.reason})") from None
