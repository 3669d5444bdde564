"""Issue 18: work moved off the import path keeps its meaning (docstring parsing without
colons skips the regexes; the header-value check is a byte table, not a regex)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nimblemcp.errors import HeaderMismatch
from nimblemcp.server._docstrings import _lines, _sections, parse_docstring
from nimblemcp.types._tool_headers import decode_header_value

colon_free = st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), max_size=200)


@given(colon_free)
def test_a_colon_free_docstring_parses_as_the_full_parser_parses_it(doc: str) -> None:
    """The fast path (no colon: no section, no argument line) gives what the full parser
    gives for the same text."""
    fast = parse_docstring(doc)
    assert fast[1] == {}
    assert fast == _sections(_lines(doc))


# Deeper than any indentation a 200-character text can have (a tab expands to 8 columns):
# the section appended below leaves the margin `cleandoc` removes to the text itself.
_DEEP = " " * 2000


@given(colon_free)
def test_a_colon_free_docstring_parses_as_it_would_with_a_section_after_it(doc: str) -> None:
    """A section after the same text leaves its summary as it was."""
    fast = parse_docstring(doc)
    assert fast[1] == {}
    assert fast == parse_docstring(doc + "\n\n" + _DEEP + "Notes:\n" + _DEEP + "    more")


@pytest.mark.parametrize("doc", ["0\n\r0", "0\n\x0c0", "a\n\x1c b", "x\u2028y\r\nz", "a\n b"])
def test_line_breaks_other_than_lf_cut_lines_whatever_follows(doc: str) -> None:
    """Found by the property above: CR (and the other breaks `str.splitlines` knows) was
    counted as indentation by `cleandoc`, so the summary of '0\\n\\r0' was '0\\n0' alone
    and '0\\n\\n0' with a section after it."""
    summary = parse_docstring(doc)[0]
    assert summary == parse_docstring(doc + "\n\n" + _DEEP + "Notes:\n" + _DEEP + "    more")[0]
    assert summary is not None and summary.count("\n") == len(doc.splitlines()) - 1


def test_docstrings_with_sections_still_parse() -> None:
    doc = """Add two numbers.

    Args:
        a: the first
        b (int): the second,
            continued
    Returns:
        the sum
    """
    assert parse_docstring(doc) == ("Add two numbers.", {"a": "the first", "b": "the second, continued"})
    assert parse_docstring("Echo.\n\n:param text: what to echo") == ("Echo.", {"text": "what to echo"})
    assert parse_docstring("Echo the text back.") == ("Echo the text back.", {})
    assert parse_docstring("") == (None, {})
    assert parse_docstring("   \n  ") == (None, {})


@pytest.mark.parametrize("byte", range(256))
def test_header_value_bytes_outside_rfc9110_field_values_are_refused(byte: int) -> None:
    raw = b"ab" + bytes([byte]) + b"cd"
    allowed = byte == 0x09 or 0x20 <= byte <= 0x7E
    if allowed:
        assert decode_header_value(raw, "Mcp-Param-X") == raw.decode("ascii")
    else:
        with pytest.raises(HeaderMismatch, match="invalid characters"):
            decode_header_value(raw, "Mcp-Param-X")
