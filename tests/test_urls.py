"""One origin function for the client and the server (issue 32, point 5): the RFC 6454
triple, default ports filled in, and never an exception for a peer's bad URL."""

from __future__ import annotations

from nimblemcp.client.auth import resource_matches
from nimblemcp.types._urls import origin, origin_and_path


def test_origins_fill_default_ports_and_ignore_case_and_paths() -> None:
    assert origin("HTTPS://AS.Example/a?b#c") == ("https", "as.example", 443)
    assert origin("http://h:80/x") == origin("http://h/y") == ("http", "h", 80)
    assert origin("http://h:8080/") != origin("http://h/")
    assert origin("http://[::1]:9000/mcp") == ("http", "::1", 9000)
    assert origin("https://u:p@h/") == ("https", "h", 443)


def test_a_bad_port_is_its_own_origin_and_never_raises() -> None:
    for bad in ("http://h:99999/", "http://h:x/", "http://h:-1/"):
        assert origin(bad)[2] is None and origin(bad) != origin("http://h/")
    # A server's metadata naming a resource with a bad port does not match, nor raise.
    assert resource_matches("https://mcp.example/mcp", "https://mcp.example:bad/mcp") is False
    assert resource_matches("https://mcp.example/mcp", "https://MCP.example:443/") is True


def test_origin_and_path_for_well_known_urls() -> None:
    assert origin_and_path("https://as.example/tenant/") == ("https://as.example", "/tenant")
    assert origin_and_path("https://as.example") == ("https://as.example", "")
