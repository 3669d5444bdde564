"""Tool, prompt and resource descriptions from docstrings (Google and Sphinx styles)."""

from __future__ import annotations

import inspect
import re

# Compiled on first use (re's cache), not at import: a docstring without a colon has
# no section and no argument line, and never needs them.
_SECTION = r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$"
_GOOGLE_ARG = r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$"
_SPHINX_ARG = r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$"


def parse_docstring(doc: str | None) -> tuple[str | None, dict[str, str]]:
    """The summary (text before any section) and per-argument descriptions."""
    if not doc:
        return None, {}
    lines = _lines(doc)
    if ":" not in doc:  # all summary (every section, argument and field line has a colon)
        return ("\n".join(lines).strip() or None), {}
    return _sections(lines)


def _lines(doc: str) -> list[str]:
    """`doc`'s lines, indentation removed as `inspect.cleandoc` removes it. The text is
    cut where `str.splitlines` cuts (CR, form feed, U+2028 and the others too) before
    `cleandoc` sees it: `cleandoc` cuts at LF only and would take those other breaks for
    indentation, so one text's summary changed with what followed it."""
    return inspect.cleandoc("\n".join(doc.splitlines())).splitlines()


def _sections(lines: list[str]) -> tuple[str | None, dict[str, str]]:
    """The full parse of cleaned lines: Google and Sphinx sections and argument lines."""
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        m = re.match(_SECTION, line)
        if m:
            section = m.group(1)
            current = None
            continue
        sm = re.match(_SPHINX_ARG, line)
        if sm:
            current = sm.group(1)
            params[current] = sm.group(2).strip()
            section = "Args"
            continue
        if line.strip().startswith(":"):
            section = "other"
            continue
        if section is None:
            summary.append(line)
        elif section in ("Args", "Arguments", "Parameters"):
            gm = re.match(_GOOGLE_ARG, line)
            if gm and (len(line) - len(line.lstrip())) <= 4:
                current = gm.group(1).lstrip("*")
                params[current] = gm.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    text = "\n".join(summary).strip()
    return (text or None), params


