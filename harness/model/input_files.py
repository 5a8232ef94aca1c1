"""Reading an input file the harness is given (a scenario, a rubric, a targets file, a
``--durations`` summary, a shard's ``run.json``), bounded before it is parsed.

Issue 24 found three holes in "read it, then parse it": a FIFO given as a scenario file hung
``run`` forever (``read_text`` waits for a writer); a deeply nested TOML or JSON file ended
in a ``RecursionError`` traceback (``tomllib`` and the codec recurse once per level); and
nothing bounded how much was read. So every such file is opened without blocking, must be a
regular file (``fstat``), is read up to a size limit, and its nesting (brackets and braces
outside strings and comments) is counted before any parser sees it.
"""

from __future__ import annotations

import os
import re
import stat
from itertools import accumulate
from pathlib import Path

__all__ = ["MAX_JSON_BYTES", "MAX_JSON_NESTING", "MAX_TOML_BYTES", "MAX_TOML_NESTING",
           "InputFileError", "check_nesting", "read_input"]

#: The largest TOML input (scenario, rubric, targets file) read, in bytes: the biggest
#: shipped scenario is ~2 KiB.
MAX_TOML_BYTES = 1024 * 1024
#: The largest JSON input (``run.json``, a ``--durations`` ``summary.json``), in bytes.
MAX_JSON_BYTES = 256 * 1024 * 1024
#: The deepest nesting of arrays and tables a TOML input may have (a scenario needs 3).
MAX_TOML_NESTING = 16
#: The deepest nesting of arrays and objects a JSON input may have (a shard's ``run.json``
#: of ``o1001`` nests 19, measured; ``RecursionError`` starts near 1000).
MAX_JSON_NESTING = 64

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR,
          "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a folder"))


class InputFileError(ValueError):
    """An input file refused before parsing (fields: ``path``, ``reason``); the message
    names the file, what it is and what is allowed."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = str(path), reason


def read_input(path: str | Path, limit_bytes: int) -> str:
    """The text of the regular file ``path`` (UTF-8), at most ``limit_bytes`` bytes.

    Opened with ``O_NONBLOCK`` (a FIFO with no writer does not block the open) and checked
    with ``fstat`` on the open descriptor (no race with a rename).

    Raises:
        InputFileError: cannot be opened or read, not a regular file (a FIFO, a socket, a
            device, a folder), over ``limit_bytes``, not UTF-8.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        try:  # a socket cannot be opened at all (ENXIO): say what it is
            _regular(path, os.stat(path).st_mode)
        except OSError:
            pass
        raise InputFileError(path, f"cannot open: {exc.strerror}") from None
    try:
        _regular(path, os.fstat(fd).st_mode)
        chunks, size = [], 0
        while size <= limit_bytes:
            chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise InputFileError(path, f"cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)
    if size > limit_bytes:
        raise InputFileError(path, f"larger than {limit_bytes} bytes; allowed: at most "
                             f"{limit_bytes}")
    try:
        return b"".join(chunks).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(path, f"not UTF-8 text ({exc.reason} at byte {exc.start})"
                             ) from None


#: A JSON string (its brackets do not count).
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')  # unrolled: 2.5x faster
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def _json_nesting(text: str, path: Path, limit: int) -> None:
    """Strings removed, then everything but brackets, by regular expression; the depth is
    the running sum's maximum. Only a refusal walks the text again, to name the line."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    if max(accumulate(map(_STEP.__getitem__, brackets)), default=0) <= limit:
        return
    depth = 0
    for match in re.finditer(_JSON_STRING.pattern + r"|[\[\]{}]", text):
        depth += _STEP.get(match.group(), 0)
        if depth > limit:
            line = text.count("\n", 0, match.start()) + 1
            raise InputFileError(path, f"line {line}: nested more than {limit} "
                                 f"levels deep; allowed: at most {limit}")
    raise InputFileError(path, f"nested more than {limit} levels deep; allowed: at most "
                         f"{limit}")


def _regular(path: Path, mode: int) -> None:
    if not stat.S_ISREG(mode):
        what = next((name for test, name in _KINDS if test(mode)), "not a regular file")
        raise InputFileError(path, f"is {what}; allowed: a regular file")


def check_nesting(text: str, path: str | Path, limit: int, *, toml: bool) -> None:
    """Refuse ``text`` whose arrays and tables (objects) nest deeper than ``limit``.

    Counts ``[``/``{`` against ``]``/``}`` outside strings (and, for TOML, comments and
    the four string forms), so a bracket inside a string never counts; a TOML table header
    ``[[a]]`` counts 2 for a moment, which is below any useful limit. Malformed text is
    left to the parser.

    Raises:
        InputFileError: deeper than ``limit``, naming the line.
    """
    if not toml:  # by regular expressions: the loop below took 4 s on a 10 MB run.json,
        # this about as long as json.loads
        _json_nesting(text, Path(path), limit)
        return
    depth, line, i, n = 0, 1, 0, len(text)
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
        elif c in "[{":
            depth += 1
            if depth > limit:
                raise InputFileError(Path(path), f"line {line}: nested more than {limit} "
                                     f"levels deep; allowed: at most {limit}")
        elif c in "]}":
            depth = max(0, depth - 1)
        elif toml and c == "#":
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif c == '"' or (toml and c == "'"):
            quote = c * 3 if toml and text.startswith(c * 3, i) else c
            j = i + len(quote)
            while j < n and not text.startswith(quote, j):
                if text[j] == "\\" and c == '"':
                    j += 1
                elif text[j] == "\n":
                    line += 1
                j += 1
            i = j + len(quote)
            continue
        i += 1
