import pytest

from sandbox.engine.paths import UnsafePath, check_no_overlap, confine


@pytest.mark.parametrize("path, expected", [
    ("a.txt", "a.txt"),
    ("data/in.txt", "data/in.txt"),
    ("./x/./y.bin", "x/y.bin"),
    ("deep/er/file", "deep/er/file"),
    # Absolute paths inside the sandbox: the work directory, and /mnt (its .mnt folder).
    ("/sandbox/a.txt", "a.txt"),
    ("/sandbox/data/in.txt", "data/in.txt"),
    ("/mnt/b", ".mnt/b"),
    ("/mnt/data//db.sqlite", ".mnt/data/db.sqlite"),
])
def test_confine_accepts_relative_paths(path, expected):
    assert confine(path) == expected


@pytest.mark.parametrize("path, reason", [
    ("", "empty"),
    ("/etc/passwd", "under /sandbox (the work directory) or /mnt"),
    ("/tmp/x", "under /sandbox"),
    ("/mnt", "under /sandbox"),
    ("/mnt/", "directory"),
    ("/mnt/../etc/passwd", "'..'"),
    ("/sandbox/../etc/passwd", "'..'"),
    ("/sandboxes/x", "under /sandbox"),
    ("../etc/passwd", "'..'"),
    ("a/../../b", "'..'"),
    ("a/..", "'..'"),
    ("dir/", "directory"),
    (".", "work directory"),
    ("a\x00b", "NUL"),
    ("x" * 300, "longer"),
])
def test_confine_refuses_escapes_and_nonsense(path, reason):
    with pytest.raises(UnsafePath) as exc:
        confine(path)
    assert reason in str(exc.value)


def test_overlap_refuses_file_used_as_folder_and_source_name():
    check_no_overlap(["a/b", "a/c", "d"], "main.py")
    with pytest.raises(UnsafePath, match="also given as a file"):
        check_no_overlap(["a", "a/b"], "main.py")
    with pytest.raises(UnsafePath, match="source file"):
        check_no_overlap(["main.py"], "main.py")
    with pytest.raises(UnsafePath, match="source file"):
        check_no_overlap(["main.py/x"], "main.py")
