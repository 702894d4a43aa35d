import io
import tarfile

from sandbox.engine import tarball
from sandbox.engine.backends.docker import FrameDemuxer, exit_code_from_docker
from sandbox.engine.output import CappedBuffer, decode_output


def test_capped_buffer_keeps_the_first_bytes_and_flags_the_rest():
    buf = CappedBuffer(5)
    assert buf.write(b"abc")
    assert not buf.truncated
    assert not buf.write(b"defg")
    assert buf.getvalue() == b"abcde"
    assert buf.truncated


def test_capped_buffer_exact_fit_is_not_truncated():
    buf = CappedBuffer(4)
    assert buf.write(b"abcd")
    assert buf.getvalue() == b"abcd" and not buf.truncated


def test_decode_replaces_only_invalid_bytes():
    assert decode_output(b"\xff\xfeok \xe4\xb8\xad") == "\ufffd\ufffdok \u4e2d"


def test_demuxer_splits_frames_across_reads():
    frames = b"\x01\x00\x00\x00\x00\x00\x00\x03abc" + b"\x02\x00\x00\x00\x00\x00\x00\x02xy"
    demux = FrameDemuxer()
    got = []
    for i in range(0, len(frames), 3):  # arbitrary chunking
        got += demux.feed(frames[i:i + 3])
    assert got == [(1, b"abc"), (2, b"xy")]


def test_signal_exit_codes_become_negative():
    assert exit_code_from_docker(0) == 0
    assert exit_code_from_docker(1) == 1
    assert exit_code_from_docker(137) == -9
    assert exit_code_from_docker(139) == -11
    assert exit_code_from_docker(255) == 255


def test_pack_round_trips_and_unpack_skips_links():
    packed = tarball.pack({"a.txt": b"A", "d/e/f.bin": b"\x00\x01"})
    assert tarball.unpack_regular_files(packed, ["a.txt", "d/e/f.bin"]) == {
        "a.txt": b"A", "d/e/f.bin": b"\x00\x01"}

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        link = tarfile.TarInfo("leak")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
        folder = tarfile.TarInfo("dir")
        folder.type = tarfile.DIRTYPE
        tar.addfile(folder)
    assert tarball.unpack_regular_files(buf.getvalue(), ["leak", "dir"]) == {}
    assert tarball.unpack_regular_files(b"", ["x"]) == {}
