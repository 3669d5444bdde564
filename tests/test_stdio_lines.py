"""The stdio server's line splitter (transports/stdio/_lines.py): lines reach the
handler in the read callback, however the bytes are cut; oversized lines are skipped
whole and reported once, as soon as they are over; stopping holds back even the rest of
the read at hand; a file (not a pipe) is read by a thread."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from nimblemcp.transports.stdio._lines import LineSplitter, read_lines


def split(chunks: list[bytes], max_line: int = 10) -> list[bytes | None]:
    got: list[bytes | None] = []
    loop = asyncio.new_event_loop()
    try:
        closed: asyncio.Future[None] = loop.create_future()
        splitter = LineSplitter(got.append, closed, max_line)
        for chunk in chunks:
            splitter.data_received(chunk)
        splitter.eof_received()
        assert closed.done()
    finally:
        loop.close()
    return got


def test_several_lines_in_one_read() -> None:
    assert split([b'{"a":1}\n{"b":2}\n\n']) == [b'{"a":1}\n', b'{"b":2}\n', b"\n"]


@pytest.mark.parametrize("cut", [1, 2, 3, 5, 8])
def test_lines_cut_anywhere_arrive_whole(cut: int) -> None:
    data = b'{"a":1}\n{"bb":22}\nxyz\n'
    chunks = [data[i:i + cut] for i in range(0, len(data), cut)]
    assert split(chunks) == [b'{"a":1}\n', b'{"bb":22}\n', b"xyz\n"]


def test_last_line_without_newline_is_delivered_at_eof() -> None:
    assert split([b"one\ntw", b"o"]) == [b"one\n", b"two"]
    assert split([b"one\n  "]) == [b"one\n"]  # trailing whitespace is not a message


@pytest.mark.parametrize("chunks", [
    [b"0123456789ABC\nok\n"],                 # over the limit inside one read
    [b"0123456789", b"ABCDEF", b"\nok\n"],   # over the limit across reads
    [b"01234", b"56789ABCDEFGH", b"IJ\nok\n"],
])
def test_oversized_line_is_skipped_whole_and_reported_once(chunks: list[bytes]) -> None:
    assert split(chunks) == [None, b"ok\n"]


@pytest.mark.parametrize("chunks", [
    [b"ok\n0123456789ABC"],          # over within one read, no newline yet
    [b"ok\n0123456789", b"ABC"],     # over across reads
])
def test_an_oversized_line_is_reported_before_its_newline_arrives(chunks: list[bytes]) -> None:
    got: list[bytes | None] = []
    loop = asyncio.new_event_loop()
    splitter = LineSplitter(got.append, loop.create_future(), 10)
    loop.close()
    for chunk in chunks:
        splitter.data_received(chunk)
    assert got == [b"ok\n", None]  # a reader that gives up on it need not wait for the rest
    splitter.data_received(b"DEF\nnext\n")
    assert got == [b"ok\n", None, b"next\n"]  # skipped to its newline, reported once


def test_stopping_inside_on_line_stops_the_rest_of_that_read() -> None:
    got: list[bytes | None] = []
    loop = asyncio.new_event_loop()
    splitter = LineSplitter(got.append, loop.create_future(), 10)
    loop.close()

    def on_line(line: bytes | None) -> None:
        got.append(line)
        if line == b"stop\n":
            splitter.stopped = True

    splitter.on_line = on_line
    splitter.data_received(b"a\nstop\nb\nc")
    splitter.data_received(b"d\n")
    splitter.eof_received()
    assert got == [b"a\n", b"stop\n"]


def test_oversized_line_at_eof_is_reported() -> None:
    assert split([b"ok\n0123456789ABCDEF"]) == [b"ok\n", None]


def test_a_line_exactly_at_the_limit_passes() -> None:
    assert split([b"0123456789\n"]) == [b"0123456789\n"]
    assert split([b"01234", b"56789\n"]) == [b"0123456789\n"]


async def test_regular_file_is_read_by_a_thread(tmp_path: Path) -> None:
    path = tmp_path / "input.jsonl"
    path.write_bytes(b'{"a":1}\n' * 3 + b"tail")
    got: list[bytes | None] = []
    with path.open("rb") as f:
        closed = await read_lines(f.fileno(), got.append, 1024)
        await asyncio.wait_for(closed, 5)
    assert got == [b'{"a":1}\n'] * 3 + [b"tail"]
