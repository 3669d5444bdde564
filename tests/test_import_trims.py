"""Issue 18: work moved off the import path keeps its meaning (docstring parsing without
colons skips the regexes; the header-value check is a byte table, not a regex)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nimblemcp.errors import HeaderMismatch
from nimblemcp.server._docstrings import parse_docstring
from nimblemcp.types._tool_headers import decode_header_value

colon_free = st.text(alphabet=st.characters(blacklist_characters=":", blacklist_categories=("Cs",)), max_size=200)


@given(colon_free)
def test_a_colon_free_docstring_parses_as_it_would_with_a_section_after_it(doc: str) -> None:
    """The fast path (no colon: no section, no argument line) gives what the full parser
    gives when a section follows the same text."""
    fast = parse_docstring(doc)
    assert fast[1] == {}
    assert fast == parse_docstring(doc + "\n\nNotes:\n    more")


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
