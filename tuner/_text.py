"""Escaping of user text for the files ddltune writes (``report.md``).

User strings (model and layer names, device kinds, file paths, notes) reach the
report from files the user or a third party wrote. :func:`markdown_escape`
makes such a string render as the literal text it is in any CommonMark or
GitHub-flavoured renderer: no HTML (``<script>``), no link, image, emphasis,
heading, list, table cell or code span is formed from it.
"""

from __future__ import annotations

import re

__all__ = ["markdown_escape", "strip_controls"]

# CommonMark 0.31, section 2.4: any ASCII punctuation may be backslash-escaped.
# These are the ones that can start or end Markdown structure (inline or, at the
# start of a line, block) or a GFM table cell / autolink / strikethrough.
_MD_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:&\"'=$])")
#: C0 (but tab, newline), DEL, C1, and the Unicode bidirectional controls (ALM,
#: LRM, RLM, LRE, RLE, PDF, LRO, RLO, LRI, RLI, FSI, PDI: Unicode UAX #9), which
#: reorder the text a reader sees (CVE-2021-42574, "Trojan Source").
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def strip_controls(value) -> str:
    """``str(value)`` without control characters: C0 except tab and newline, DEL,
    C1 (0x80–0x9f) and the Unicode bidirectional controls (U+202E RIGHT-TO-LEFT
    OVERRIDE and its kin, Unicode UAX #9), which would reorder what is shown.

    Example:
        >>> strip_controls("evil\u202efdp.exe\x07")
        'evilfdp.exe'
    """
    return _CONTROL.sub("", str(value))


# The few that let a string become HTML, a link, a code span or a new table cell.
_MD_MINIMAL = re.compile(r"([\\`<>&|\[\]])")


def markdown_escape(value, *, inline: bool = True, minimal: bool = False) -> str:
    r"""``str(value)`` as literal Markdown text.

    Every ASCII punctuation character that CommonMark or GFM could read as
    structure is backslash-escaped (CommonMark 0.31 §2.4: a backslash before
    ASCII punctuation yields that character literally), so ``<script>`` stays
    text and is never passed through as raw HTML (§6.6) nor ``[x](javascript:…)``
    turned into a link; ``&`` is escaped so that no entity (``&lt;``) is decoded.
    Control characters (:func:`strip_controls`: C0 except tab/newline, DEL,
    C1, bidirectional controls) are removed.

    Args:
        value: anything; converted with ``str``.
        inline: True (default) for text inside a line or a table cell: newlines
            become spaces, so a value cannot start a new block. False keeps
            newlines (each line's leading structure is still escaped).
        minimal: escape only what can make HTML, a link, a code span or a
            table cell (``\\ ` < > & | [ ]``), so ordinary prose (``held-out``,
            ``1.5 ms``) stays readable in the raw file; emphasis and line-start
            structure are then not escaped.

    Returns:
        The escaped text.

    Example:
        >>> markdown_escape("<script>alert(1)</script>")
        '\\<script\\>alert\\(1\\)\\</script\\>'
        >>> markdown_escape("a|b *c*")
        'a\\|b \\*c\\*'
        >>> markdown_escape("<b>held-out</b> 1.5 ms", minimal=True)
        '\\<b\\>held-out\\</b\\> 1.5 ms'
    """
    text = strip_controls(value)
    if inline:
        text = text.replace("\r", " ").replace("\n", " ")
    return (_MD_MINIMAL if minimal else _MD_SPECIAL).sub(r"\\\1", text)
