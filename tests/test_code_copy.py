"""An implementation's folder is copied as root without trusting it (``harness.sandbox.code_copy``):
only folders and regular files, within a size budget, never through a symlink."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.sandbox import users as sandbox
from harness.sandbox.code_copy import (
    MAX_BYTES,
    CopyRefused,
    copy_file,
    copy_tree,
    harness_reports,
)

pytestmark = pytest.mark.io


def package(tmp_path: Path) -> Path:
    src = tmp_path / "impl" / "shopops"
    (src / "sub").mkdir(parents=True)
    (src / "__init__.py").write_text("X = 1\n")
    (src / "sub" / "m.py").write_bytes(b"\x00\xffbytes\n")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "x.pyc").write_bytes(b"old")
    return src


def test_a_plain_package_is_copied_byte_for_byte_without_its_caches(tmp_path: Path) -> None:
    src = package(tmp_path)
    copy_tree(src, tmp_path / "out", skip=("__pycache__", "*.pyc"))
    assert (tmp_path / "out" / "__init__.py").read_text() == "X = 1\n"
    assert (tmp_path / "out" / "sub" / "m.py").read_bytes() == b"\x00\xffbytes\n"
    assert not (tmp_path / "out" / "__pycache__").exists()


@pytest.mark.parametrize("make", ["symlink-to-root", "symlink-to-secret", "symlink-loop",
                                  "fifo", "symlinked-subfolder", "hard-link-to-secret"])
def test_anything_but_folders_and_files_refuses_the_folder(tmp_path: Path, make: str) -> None:
    src = package(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET")
    secret.chmod(0o600)
    entry = src / "sub" / "bad"
    if make == "symlink-to-root":
        entry.symlink_to("/")
    elif make == "symlink-to-secret":
        entry.symlink_to(secret)
    elif make == "symlink-loop":
        entry.symlink_to(src / "sub" / "bad2")
        (src / "sub" / "bad2").symlink_to(entry)
    elif make == "fifo":
        os.mkfifo(entry)
    elif make == "hard-link-to-secret":
        os.link(secret, entry)
    else:
        entry.symlink_to(tmp_path)  # a folder reached through a symlink: not walked
    with pytest.raises(CopyRefused) as err:
        copy_tree(src, tmp_path / "out")
    assert "sub/bad" in str(err.value) and "only folders and regular files" in str(err.value)
    copied = [p.read_bytes() for p in (tmp_path / "out").rglob("*") if p.is_file()]
    assert b"TOPSECRET" not in b"".join(copied)


def test_a_huge_sparse_file_is_refused_without_being_read(tmp_path: Path) -> None:
    src = package(tmp_path)
    with open(src / "big.bin", "wb") as f:
        f.truncate(2 << 30)  # 2 GiB, no blocks: refused by its size, nothing read
    with pytest.raises(CopyRefused, match=f"{MAX_BYTES >> 20} MiB"):
        copy_tree(src, tmp_path / "out")
    assert not (tmp_path / "out" / "big.bin").exists()


def test_a_module_file_through_a_symlink_is_refused(tmp_path: Path) -> None:
    secret = tmp_path / "secret.py"
    secret.write_text("TOPSECRET = 1\n")
    (tmp_path / "shopops.py").symlink_to(secret)
    with pytest.raises(CopyRefused, match="regular file"):
        copy_file(tmp_path / "shopops.py", tmp_path / "out.py")
    assert not (tmp_path / "out.py").exists()


def test_install_code_leaves_nothing_of_a_refused_folder(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    area = tmp_path / "area"
    area.mkdir()
    monkeypatch.setattr(sandbox, "area", lambda: area)
    src = package(tmp_path)
    (src / "root").symlink_to("/")
    with pytest.raises(sandbox.CodeRefused, match="'root' is a symlink"):
        sandbox.install_code(src.parent, "shopops")
    assert list(area.iterdir()) == []


def test_folders_count_against_the_entry_limit(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("harness.sandbox.code_copy.MAX_FILES", 20)
    src = package(tmp_path)
    for i in range(30):
        (src / f"empty{i:02d}").mkdir()  # no file at all: 200,000 of these took 41 s
    with pytest.raises(CopyRefused, match="more than 20 files and folders"):
        copy_tree(src, tmp_path / "out")


def test_a_name_with_a_newline_or_an_undecodable_byte_is_quoted(tmp_path: Path) -> None:
    src = package(tmp_path)
    os.symlink("/", os.path.join(os.fsencode(src), b"x\nall fine, score 10 of 10\xff"))
    with pytest.raises(CopyRefused) as err:
        copy_tree(src, tmp_path / "out")
    assert "\n" not in str(err.value) and "'x\\nall fine, score 10 of 10\\udcff'" in str(
        err.value)


def test_a_report_naming_an_undecodable_file_name_is_written(tmp_path: Path) -> None:
    """A grade's text may carry a name's undecodable byte (``surrogateescape``): the report
    is written with a backslash escape instead of failing with ``UnicodeEncodeError``
    (``report.md`` and ``report.html`` were never written)."""
    from harness.grading.safe_io import write_sealed

    name = os.fsdecode(b"/tmp/u\xff")
    path = write_sealed(tmp_path / "report.md", f"replay: --sut {name}\n")
    assert path.read_text(encoding="utf-8") == "replay: --sut /tmp/u\\udcff\n"


# ---------------------------------------------------------------- the harness's own reports

def _target_with_reports(tmp_path: Path) -> Path:
    """A target folder after ``shopops-chaos run … --sut .`` ran in it: ``reports/`` with
    a run folder, ``latest`` pointing at it, and a stale temporary ``latest``."""
    folder = tmp_path / "submission"
    (folder / "reports" / "20261203T120000Z-42" / "executions").mkdir(parents=True)
    (folder / "loop.py").write_text("X = 1\n")
    (folder / "reports" / "20261203T120000Z-42" / "summary.json").write_text("{}")
    (folder / "reports" / "grade-20261203T120001Z-43").mkdir()
    (folder / "reports" / "latest").symlink_to("20261203T120000Z-42")
    (folder / "reports" / ".latest.44.tmp").symlink_to("20261203T120000Z-42")
    return folder


def test_a_target_folders_harness_reports_are_left_out_never_read(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay command a grade prints (``--sut .``) writes ``reports/latest``, a symlink,
    into the folder it runs in: the next install of that folder leaves the harness's
    reports out instead of refusing the folder (it refused: the next grade could not run)."""
    area = tmp_path / "area"
    area.mkdir()
    monkeypatch.setattr(sandbox, "area", lambda: area)
    folder = _target_with_reports(tmp_path)
    (folder / "reports" / "20261203T120000Z-42" / "executions" / "db").symlink_to("/")
    assert harness_reports(folder)
    copy = sandbox.install_target(folder)
    assert (copy / "loop.py").read_text() == "X = 1\n"
    assert not (copy / "reports").exists()


@pytest.mark.parametrize("make", [
    "symlink-to-root", "latest-to-root", "latest-up", "latest-to-missing", "module-file",
    "reports-is-a-symlink", "run-folder-is-a-symlink", "fifo"])
def test_a_reports_folder_laid_out_otherwise_is_the_implementations_and_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: str) -> None:
    """Naming a folder ``reports`` smuggles nothing: one that is not exactly the harness's
    layout is copied like any folder, so a symlink or a FIFO in it refuses the folder."""
    area = tmp_path / "area"
    area.mkdir()
    monkeypatch.setattr(sandbox, "area", lambda: area)
    folder = _target_with_reports(tmp_path)
    reports = folder / "reports"
    latest = reports / "latest"
    if make == "symlink-to-root":
        (reports / "evil").symlink_to("/")
    elif make == "latest-to-root":
        latest.unlink()
        latest.symlink_to("/")
    elif make == "latest-up":
        latest.unlink()
        latest.symlink_to("../20261203T120000Z-42")
    elif make == "latest-to-missing":
        latest.unlink()
        latest.symlink_to("20261203T999999Z-1")
    elif make == "module-file":
        (reports / "__init__.py").write_text("")
        (reports / "bad").symlink_to("/")
    elif make == "reports-is-a-symlink":
        os.rename(reports, folder / "real")
        reports.symlink_to(folder / "real")
    elif make == "run-folder-is-a-symlink":
        (reports / "20261203T130000Z-7").symlink_to("/")
    else:
        os.mkfifo(reports / "20261203T130000Z-7")
    assert not harness_reports(folder)
    with pytest.raises(sandbox.CodeRefused):
        sandbox.install_target(folder)
    assert list(area.iterdir()) == []


def test_a_reports_package_of_the_implementation_is_copied(tmp_path: Path) -> None:
    folder = tmp_path / "submission"
    (folder / "reports").mkdir(parents=True)
    (folder / "reports" / "__init__.py").write_text("Y = 2\n")
    assert not harness_reports(folder)
    copy_tree(folder, tmp_path / "out", leave_out=())
    assert (tmp_path / "out" / "reports" / "__init__.py").read_text() == "Y = 2\n"
