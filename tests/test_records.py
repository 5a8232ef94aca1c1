"""``shopops.records.Records.load``: the CRM fixtures, decoded again only when their bytes
change (a fork server's children reuse what it decoded before forking)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from shopops.errors import ShopOpsError
from shopops.records import DEFAULT_FIXTURES, Records


@pytest.fixture
def fixtures(tmp_path: Path) -> Path:
    for name in ("customers.json", "orders.json"):
        shutil.copy(DEFAULT_FIXTURES / name, tmp_path / name)
    return tmp_path


def _rewrite_same_size_and_time(path: Path, old: str, new: str) -> None:
    """Change ``old`` to ``new`` (same length) in place, keeping size, inode and mtime."""
    assert len(old) == len(new)
    st = path.stat()
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    after = path.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (
        st.st_ino, st.st_size, st.st_mtime_ns)


def test_the_same_bytes_give_the_same_records(fixtures: Path) -> None:
    first = Records.load(fixtures)
    assert Records.load(fixtures) is first
    assert Records.load(str(fixtures)) is first


def test_a_change_that_keeps_size_inode_and_mtime_is_still_read(fixtures: Path) -> None:
    first = Records.load(fixtures)
    order = next(iter(first.orders))
    renamed = order[:-1] + ("9" if order[-1] != "9" else "8")
    _rewrite_same_size_and_time(fixtures / "orders.json", f'"{order}"', f'"{renamed}"')
    again = Records.load(fixtures)
    assert again is not first
    assert renamed in again.orders and order not in again.orders


def test_another_folder_with_the_same_bytes_names_its_own_source(
        fixtures: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    other = tmp_path_factory.mktemp("other")
    for name in ("customers.json", "orders.json"):
        shutil.copy(fixtures / name, other / name)
    assert Records.load(fixtures).source == str(fixtures)
    assert Records.load(other).source == str(other)


@pytest.mark.parametrize("content, needle", [
    (b"[1, 2]", "must be a JSON object of records"),
    (b"{not json", "cannot read records"),
    (b"\xff\xfe", "cannot read records"),
])
def test_a_bad_file_after_a_good_load_still_raises(fixtures: Path, content: bytes,
                                                   needle: str) -> None:
    Records.load(fixtures)
    (fixtures / "orders.json").write_bytes(content)
    with pytest.raises(ShopOpsError, match=needle):
        Records.load(fixtures)


def test_a_missing_file_after_a_good_load_still_raises(fixtures: Path) -> None:
    Records.load(fixtures)
    (fixtures / "customers.json").unlink()
    with pytest.raises(ShopOpsError, match="cannot read records .*customers.json"):
        Records.load(fixtures)


def test_the_records_are_as_the_files_say(fixtures: Path) -> None:
    records = Records.load(fixtures)
    assert records.orders == json.loads((fixtures / "orders.json").read_text())
    assert records.customers == json.loads((fixtures / "customers.json").read_text())
