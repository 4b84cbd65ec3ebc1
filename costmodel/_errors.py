"""Error types shared by every ddltune layer.

Static problems (unknown names, impossible configurations) raise ``ValueError``
at construction or trace time, as equinox does. Problems in a file raise
:class:`InputFileError`, which names the file and the line.
"""

from __future__ import annotations

__all__ = ["InputFileError", "format_choices"]


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


def format_choices(choices) -> str:
    """Format a list of valid names for an error message.

    Example:
        >>> format_choices(["ring", "ps"])
        'ps, ring'
    """
    return ", ".join(sorted(str(c) for c in choices))
