"""Text from an implementation, made safe to show: control characters become visible.

A worker's stderr, a scenario's description, a delivery's subject: any of it may hold
terminal escape sequences (``ESC [ 2 J`` clears a screen), carriage returns that overwrite a
line, bidirectional overrides that reorder what a reader sees (CVE-2021-42574, "Trojan
Source") or bytes XML cannot carry. ``visible`` spells each such character as a Python-style
escape (``\\x1b``, ``\\u202e``), so the console, ``report.md`` and ``report.html`` show
what is there and never act on it. HTML escaping itself is jinja2's autoescape, not this.
"""

from __future__ import annotations

import re

__all__ = ["visible", "visible_line"]

# C0 controls except \t and \n, DEL, C1 controls, bidi embeddings/overrides/isolates, lone
# surrogates (from surrogateescape'd bytes), and the two XML 1.0 non-characters.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e"
                      "\u2066-\u2069\ud800-\udfff\ufffe\uffff]")
_NEWLINES = re.compile("[\t\n]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match[0])
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with every control character other than tab and newline spelled out.

    Args:
        text: any string (``str(x)`` is taken for non-strings).

    Returns:
        the same text where e.g. ``"\\x1b[31m"`` (ESC) becomes the four characters
        ``\\x1b`` followed by ``[31m``; tabs and newlines are kept.
    """
    return _CONTROL.sub(_escape, str(text))


def visible_line(text: str) -> str:
    """Like ``visible``, and tabs and newlines too (``\\n``): for one console line."""
    return _NEWLINES.sub(_escape, visible(text))
