"""The docs site builds with `mkdocs build --strict` and renders in headless Chromium
(issue 14): a screenshot of the home page and of the server guide, each a real picture
(not blank, not tiny). Needs the `chromium` Debian package (scripts/test installs it on
CI or as root, like redis-server)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-f", str(ROOT / "mkdocs.yml"), "-d", str(out)],
        capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return out


def test_every_page_is_built_and_the_api_reference_is_generated(site: Path) -> None:
    for page in ("index.html", "quickstart/index.html", "concepts/index.html", "server/index.html",
                 "client/index.html", "cli/index.html", "deployment/index.html", "security/index.html",
                 "migration/index.html", "observability/index.html", "server_framework/index.html",
                 "host/index.html", "choosing_a_deployment/index.html"):
        assert (site / page).is_file(), page
    api = (site / "api" / "index.html").read_text()
    assert "Tracing" in api and "call_tool" in api  # rendered from the docstrings
    assert "Many servers, one catalog" in api and "JwtVerifier" in api  # the whole surface
    assert "Threat model" in (site / "security" / "index.html").read_text()  # SECURITY.md included


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "headless Chromium is missing: apt-get install chromium (scripts/test does it on CI)"
    return found


def png_pixels(png: bytes) -> tuple[int, int, bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, width, height, data = 8, 0, 0, b""
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos:pos + 4])
        kind = png[pos + 4:pos + 8]
        body = png[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            data += body
        pos += 12 + length
    return width, height, zlib.decompress(data)


@pytest.mark.parametrize("page", ["index.html", "server/index.html"])
def test_pages_render_in_headless_chromium(site: Path, tmp_path: Path, page: str) -> None:
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
         f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900",
         f"--screenshot={shot}", (site / page).as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.is_file(), done.stderr[-2000:]
    png = shot.read_bytes()
    width, height, pixels = png_pixels(png)
    assert (width, height) == (1280, 900)
    assert len(png) > 20_000, "a rendered docs page compresses to far more than a blank one"
    assert len(set(pixels)) > 64, "the screenshot is (nearly) one colour"
    blank = (width * 3 + 1) * height
    assert len(pixels) >= blank  # RGB(A) scanlines plus filter bytes: the whole picture
