"""Protocol revisions as an ordered list: compare by position, never as strings."""

from __future__ import annotations

# Newest first. The stateless revision and the handshake revisions before it.
MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
LEGACY_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
SUPPORTED_VERSIONS: tuple[str, ...] = MODERN_VERSIONS + LEGACY_VERSIONS
LATEST_VERSION = MODERN_VERSIONS[0]

_POSITION = {v: i for i, v in enumerate(SUPPORTED_VERSIONS)}


def version_index(version: str) -> int:
    """Position in SUPPORTED_VERSIONS (0 = newest); -1 when unknown."""
    return _POSITION.get(version, -1)


def is_modern(version: str) -> bool:
    """True for the stateless revisions (per-request `_meta`, no handshake)."""
    return version in MODERN_VERSIONS
