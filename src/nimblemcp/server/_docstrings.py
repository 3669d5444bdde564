"""Tool, prompt and resource descriptions from docstrings (Google and Sphinx styles)."""

from __future__ import annotations

import inspect
import re

_SECTION = re.compile(r"^\s*(Args|Arguments|Parameters|Returns|Raises|Yields|Examples?|Notes?):\s*$")
_GOOGLE_ARG = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_SPHINX_ARG = re.compile(r"^\s*:param\s+(?:\w+\s+)?(\w+)\s*:\s*(.*)$")


def parse_docstring(doc: str | None) -> tuple[str | None, dict[str, str]]:
    """The summary (text before any section) and per-argument descriptions."""
    if not doc:
        return None, {}
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None
    current: str | None = None
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            current = None
            continue
        sm = _SPHINX_ARG.match(line)
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
            gm = _GOOGLE_ARG.match(line)
            if gm and (len(line) - len(line.lstrip())) <= 4:
                current = gm.group(1).lstrip("*")
                params[current] = gm.group(2).strip()
            elif current and line.strip():
                params[current] = (params[current] + " " + line.strip()).strip()
    text = "\n".join(summary).strip()
    return (text or None), params


