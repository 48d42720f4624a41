"""`stage SRC DEST`: copies once, skips the second time, resumes, refuses to fill the disk."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from {{ cookiecutter.module_name }}.__main__ import main
from {{ cookiecutter.module_name }}.data import staging

pytestmark = pytest.mark.slow  # not the user's loop: `make test-all` runs it

PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"


def make_source(root: Path) -> dict[str, bytes]:
    """A small dataset: a big file (resumable) and small files in subfolders."""
    files = {
        "big.bin": os.urandom(3 * 1024 * 1024 + 123),
        "a/one.txt": b"one\n",
        "a/b/two.txt": b"two\n" * 100,
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return files


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    # Small chunks so that a 3 MiB file is "big": it resumes instead of starting over.
    monkeypatch.setattr(staging, "CHUNK_BYTES", 256 * 1024)
    monkeypatch.setattr(staging, "RESUME_MIN_BYTES", 1024 * 1024)


def test_copies_once_then_skips(tmp_path: Path, small_chunks: None) -> None:
    files = make_source(tmp_path / "src")
    first = staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert (first.copied, first.skipped) == (3, 0)
    assert first.bytes_copied == sum(len(d) for d in files.values())
    for rel, data in files.items():
        assert (tmp_path / "dest" / rel).read_bytes() == data

    second = staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert (second.copied, second.skipped, second.bytes_copied) == (0, 3, 0)
    # Without the index, equal files are recognised by size and SHA-256.
    (tmp_path / "dest" / staging.INDEX).unlink()
    third = staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert (third.copied, third.skipped) == (0, 3)


def test_changed_file_is_copied_again(tmp_path: Path, small_chunks: None) -> None:
    make_source(tmp_path / "src")
    staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    (tmp_path / "src" / "a" / "one.txt").write_bytes(b"ONE\n")  # same size, new content
    report = staging.stage(
        tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False, verify=True
    )
    assert (report.copied, report.skipped) == (1, 2)
    assert (tmp_path / "dest" / "a" / "one.txt").read_bytes() == b"ONE\n"


def test_resumes_after_interruption(
    tmp_path: Path, small_chunks: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = make_source(tmp_path / "src")
    written = 0

    class InterruptingBar:  # the progress bar sees every chunk written
        def update(self, n: int) -> None:
            nonlocal written
            written += n
            if written >= 2 * 1024 * 1024:  # stop in the middle of big.bin
                raise KeyboardInterrupt

        def close(self) -> None:
            pass

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr(staging, "progress_bar", lambda *args, **kwargs: InterruptingBar())
        staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert not (tmp_path / "dest" / "big.bin").exists()  # never a half file under the real name
    assert list((tmp_path / "dest").glob(".big.bin.*.partial"))

    report = staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert report.resumed == 1
    big = len(files["big.bin"])
    # Only the rest of big.bin (and the files not reached) is copied again.
    assert report.bytes_copied == big - 2 * 1024 * 1024
    for rel, data in files.items():
        assert (tmp_path / "dest" / rel).read_bytes() == data
    assert not list((tmp_path / "dest").glob(".*.partial"))


def test_hidden_names_are_not_staged(tmp_path: Path) -> None:
    """A hidden file or anything in a hidden folder (Jupyter's checkpoints, macOS's `._`
    copies) is no data: `prepare`'s readers leave them out too."""
    make_source(tmp_path / "src")
    for name in ("._one.txt", "a/.ipynb_checkpoints/one-checkpoint.txt", ".cache/b/two.txt"):
        (tmp_path / "src" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "src" / name).write_text("not data")
    dest = tmp_path / "dest"
    assert staging.stage(tmp_path / "src", dest, progress=False).copied == 3
    found = sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*"))
    assert found == [staging.INDEX, "a", "a/b", "a/b/two.txt", "a/one.txt", "big.bin"]


def test_refuses_when_disk_too_full_and_writes_nothing(
    tmp_path: Path,
    small_storage: tuple[Path, bool],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`stage` to a disk without room (a 6 MiB tmpfs: less than the spare it keeps): one line,
    and none of its folders made (an empty data/raw/<name>/ and its class folders were left)."""
    storage, mounted = small_storage
    make_source(tmp_path / "src")
    if not mounted:
        monkeypatch.setattr(staging, "free_bytes", lambda _: 1000)
    dest = storage / "data/raw/digits"
    assert main(["stage", str(tmp_path / "src"), str(dest), "--params", str(PARAMS)]) == 2
    assert "GiB free, but copying needs" in capsys.readouterr().err
    assert not (storage / "data").exists()


def test_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_source(tmp_path / "src")
    args = ["stage", str(tmp_path / "src"), str(tmp_path / "dest"), "--params", str(PARAMS)]
    assert main(args) == 0
    assert "3 copied" in capsys.readouterr().out
    assert main(args) == 0
    assert "0 copied" in capsys.readouterr().out
    missing = ["stage", str(tmp_path / "nope"), str(tmp_path / "d"), "--params", str(PARAMS)]
    assert main(missing) == 2
    assert "does not exist" in capsys.readouterr().err


def test_many_files_list_their_folder_once_and_old_partial_copies_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Staging a folder of N images reads its destination's names once, not once per file (20,000
    files took 197 s so, 64 s now); a partial copy of another version of a file still goes."""
    (tmp_path / "src" / "cls").mkdir(parents=True)
    for i in range(50):
        (tmp_path / "src" / "cls" / f"{i}.png").write_bytes(b"png")
    folder = tmp_path / "dest" / "cls"
    folder.mkdir(parents=True)
    older = folder / ".7.png.999-1.partial"  # a copy cut off when the source was another version
    older.write_bytes(b"p")
    listed: list[Path] = []
    scandir = os.scandir
    monkeypatch.setattr(os, "scandir", lambda path=".": listed.append(Path(path)) or scandir(path))
    report = staging.stage(tmp_path / "src", tmp_path / "dest", reserve_bytes=0, progress=False)
    assert report.copied == 50 and (folder / "7.png").read_bytes() == b"png"
    assert not older.exists()
    assert listed.count(folder) <= 2
