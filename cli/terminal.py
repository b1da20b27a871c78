"""The terminal: whether to colour, the rich console, plain lines, progress.

rich is imported only when something is drawn with it: `dspark check` in CI
writes to a pipe, and importing rich's console and markup machinery would
cost it a sixth of its start-up. Lines are built as styled segments;
`write_lines` prints them through rich when colour is wanted and as plain
text otherwise.

Colour follows https://no-color.org and https://force-color.org: a
non-empty `NO_COLOR` turns it off; a non-empty `FORCE_COLOR` turns it on
even on a pipe, and wins over `NO_COLOR` (force-color.org's reference code
checks it second). `FORCE_COLOR=0` is read as Node's tools read it, colour
level 0: off; nobody writes 0 to mean "on". Colour never changes the
layout: output that is not a terminal gets every path in full, however
narrow the CI log.

Width. On a terminal, finding messages are wrapped to its width (the
`COLUMNS` variable when set, else the terminal's own), at spaces only: a
path or tensor name is never broken, and a word longer than the line stays
whole. Off a terminal a finding stays one line, whatever its length, so
that `grep CODE` and a CI log search find each finding whole; pages laid
out as blocks (`dspark families`, `dspark explain`) keep their lines within
`COLUMNS`, or 100 columns when no width is known.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
import sys
import textwrap
from contextlib import contextmanager
from typing import Any

from dspark.schema.inventory import undecodable_as_bytes
from dspark.schema.units import human_bytes

# (rich style or None, text): a piece of a line, never parsed as markup.
Segment = tuple[str | None, str]

# Width rich lays out a page in when stdout is not a terminal: wide enough
# that no path or tensor name is ever cut to `…` in a CI log.
UNBOUNDED_WIDTH = 100_000


# The width of block pages off a terminal, when COLUMNS does not say.
FALLBACK_WIDTH = 100
# Below this a wrapped line holds too little to read: wrap at this instead.
NARROWEST = 40
# Stands in for a space inside a name while a line is wrapped.
_NO_BREAK = "\u00a0"


def _isatty(stream) -> bool:
    try:
        return hasattr(stream, "isatty") and stream.isatty()
    except ValueError:  # closed
        return False


def colour_wanted(stream=None) -> bool:
    stream = sys.stdout if stream is None else stream
    force = os.environ.get("FORCE_COLOR", "")
    if force and force != "0":
        return True
    if os.environ.get("NO_COLOR") or force == "0":
        return False
    return _isatty(stream)


def is_interactive(stream=None) -> bool:
    """A person at a terminal: progress bars and the terminal's width."""
    return _isatty(sys.stdout if stream is None else stream)


def wrap_width() -> int | None:
    """The width finding messages wrap at: the terminal's, or None (one
    line per finding) off a terminal."""
    if not is_interactive():
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), NARROWEST)
    return max(shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns, NARROWEST)


def page_width() -> int:
    """The width block pages keep within: the terminal's, else `COLUMNS`,
    else `FALLBACK_WIDTH`."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return max(int(columns), NARROWEST)
    if is_interactive():
        return max(shutil.get_terminal_size((FALLBACK_WIDTH, 24)).columns, NARROWEST)
    return FALLBACK_WIDTH


def wrap(text: str, width: int | None, *, first: str = "", indent: str = "", keep: tuple[str | None, ...] = ()) -> list[str]:
    """`text` after `first`, in lines of at most `width` columns, broken at
    spaces only; later lines start with `indent`. The strings in `keep`
    (paths, tensor names) are never broken, spaces and all. `width` None:
    one line."""
    if width is None:
        return [first + text]
    kept = [k for k in keep if k and " " in k]
    for name in kept:
        text = text.replace(name, name.replace(" ", _NO_BREAK))
    lines = textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=indent,
        break_long_words=False, break_on_hyphens=False, drop_whitespace=True,
    ) or [first]
    return [line.replace(_NO_BREAK, " ") for line in lines]


@functools.lru_cache(maxsize=None)
def console():
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:
            # rich would exit 1 here, as if the checkpoint had failed; the
            # closed pipe goes to the one place that maps errors instead.
            self.quiet = True
            raise BrokenPipeError

    colour = colour_wanted()
    return _Console(
        # emoji=False: a tensor named `x:fire:y` must print as it is named.
        highlight=False, soft_wrap=True, emoji=False,
        force_terminal=colour, no_color=not colour, color_system="auto" if colour else None,
        width=None if is_interactive() else UNBOUNDED_WIDTH,
    )


class _LazyConsole:
    """`stdout.print(...)` for the pages that always use rich (inspect's
    tables, convert, smoke); rich is imported on first use."""

    def __getattr__(self, name: str):
        return getattr(console(), name)


stdout = _LazyConsole()


def escape(text: str) -> str:
    """rich's markup escape, imported when needed."""
    from rich.markup import escape as rich_escape

    return rich_escape(text)


def write_lines(lines: list[list[Segment]]) -> None:
    if colour_wanted():
        from rich.text import Text

        for segments in lines:
            console().print(Text.assemble(*[(text, style) if style else text for style, text in segments]))
        return
    sys.stdout.write("".join("".join(text for _, text in segments) + "\n" for segments in lines))
    sys.stdout.flush()


def strict_json(value: Any) -> Any:
    """NaN and Inf are not JSON; they are written as null so that every
    consumer can parse the report (the finding says what was non-finite).
    A byte of a name that is not UTF-8 is written `\\xff`, as the page
    writes it: a lone surrogate escape is no text a strict parser takes."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, str):
        return undecodable_as_bytes(value)
    if isinstance(value, dict):
        return {strict_json(key): strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    return value


def json_text(document: Any) -> str:
    return json.dumps(strict_json(document), indent=2, allow_nan=False) + "\n"


# Payloads under this size stream faster than a bar can draw.
PROGRESS_MIN_BYTES = 256 * 1024 * 1024
# Off a terminal (a CI log, a batch job), one line on stderr per this many bytes.
PROGRESS_LINE_BYTES = 1024**3


def progress_lines(label: str, total: int, stream=None):
    """A progress callable that writes one line per PROGRESS_LINE_BYTES
    done, and one at the end, on stderr: what a log can show of a bar,
    so that a long run off a terminal is seen to be moving."""
    done = 0
    step = PROGRESS_LINE_BYTES
    next_line = min(step, total)

    def advance(count: int) -> None:
        nonlocal done, next_line
        done += count
        if done < next_line:
            return
        shown = min(done, total)
        out = sys.stderr if stream is None else stream
        out.write(f"{label}: {human_bytes(shown)} of {human_bytes(total)} ({100 * shown // max(total, 1)}%)\n")
        out.flush()
        # the next whole step, or the end; past the end, nothing more
        next_line = min((done // step + 1) * step, total) if done < total else math.inf

    return advance


@contextmanager
def progress_bar(wanted: bool, label: str, *, lines_off_terminal: bool = False):
    """A `progress` callable for the library (called once with the total
    bytes, it returns a callable told each chunk's size) that draws a bar on
    a terminal once the payload is large enough, or, off a terminal and with
    `lines_off_terminal`, writes progress lines on stderr. The bar is gone
    when the block ends, whether the work finished, stopped short or failed."""
    bars = []

    def start(total: int):
        if total < PROGRESS_MIN_BYTES:
            return None
        if not is_interactive():
            return progress_lines(label, total) if lines_off_terminal else None
        from rich.progress import BarColumn, DownloadColumn, Progress, TimeRemainingColumn, TransferSpeedColumn

        bar = Progress(
            label, BarColumn(), DownloadColumn(), TransferSpeedColumn(), TimeRemainingColumn(),
            console=console(), transient=True,
        )
        task = bar.add_task(label, total=total)
        bars.append(bar)
        bar.start()
        return lambda count: bar.update(task, advance=count)

    try:
        yield start if wanted else None
    finally:
        for bar in bars:
            bar.stop()
