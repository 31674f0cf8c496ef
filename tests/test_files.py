"""Output paths: checked before a command measures, written whole with the permissions open() gives."""

import os
import stat

import pytest

from qsa_cli.core.files import OutputError, atomic_write, check_writable


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def umask_027():
    old = os.umask(0o027)
    yield
    os.umask(old)


def test_a_new_file_gets_the_umask(tmp_path, umask_027):
    path = tmp_path / "r.json"
    with atomic_write(path) as fh:
        fh.write("{}")
    assert path.read_text() == "{}" and mode(path) == 0o640


def test_an_existing_file_keeps_its_permissions(tmp_path, umask_027):
    path = tmp_path / "r.json"
    path.write_text("old")
    path.chmod(0o604)
    with atomic_write(path) as fh:
        fh.write("new")
    assert path.read_text() == "new" and mode(path) == 0o604


def test_a_read_only_file_is_refused_and_kept(tmp_path):
    path = tmp_path / "r.json"
    path.write_text("keep")
    path.chmod(0o444)
    with pytest.raises(OutputError, match="read-only"):
        with atomic_write(path) as fh:
            fh.write("new")
    assert path.read_text() == "keep" and sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]


def test_a_failed_block_leaves_nothing(tmp_path):
    with pytest.raises(RuntimeError):
        with atomic_write(tmp_path / "r.json") as fh:
            fh.write("half")
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_one_output_error(tmp_path):
    with pytest.raises(OutputError, match="cannot write"):
        with atomic_write(tmp_path / "nowhere" / "r.json"):
            pass


def _problem(path, what: str = "--json") -> str:
    with pytest.raises(OutputError) as refused:
        check_writable(path, what)
    return str(refused.value)


def test_check_writable(tmp_path):
    check_writable(tmp_path / "new.json", "--json")
    (tmp_path / "old.json").write_text("{}")
    check_writable(tmp_path / "old.json", "--json")
    (tmp_path / "file").write_text("")
    (tmp_path / "sub").mkdir()
    locked = tmp_path / "locked"
    locked.mkdir()
    (tmp_path / "ro.json").write_text("{}")
    (tmp_path / "ro.json").chmod(0o444)
    assert _problem(tmp_path / "nowhere" / "r.json") == f"--json {tmp_path / 'nowhere' / 'r.json'}: no such folder {tmp_path / 'nowhere'}"
    assert _problem(tmp_path / "file" / "r.json").endswith(f"{tmp_path / 'file'} is not a folder")
    assert _problem(tmp_path / "sub", "-o/--output") == f"-o/--output {tmp_path / 'sub'}: is a folder"
    assert _problem(tmp_path / "ro.json").endswith("ro.json: read-only")
    assert _problem("/dev/null", "--junit") == "--junit /dev/null: not a regular file"
    locked.chmod(0o555)
    try:
        assert _problem(locked / "r.json").endswith(f"folder {locked} is not writable")
    finally:
        locked.chmod(0o755)


def test_a_link_and_a_name_too_long_are_refused_and_nothing_is_written_through_a_link(tmp_path):
    (tmp_path / "run-41.json").write_text("{}")
    (tmp_path / "latest.json").symlink_to("run-41.json")
    (tmp_path / "dangling.json").symlink_to("gone.json")
    for link in ("latest.json", "dangling.json"):
        assert _problem(tmp_path / link) == f"--json {tmp_path / link}: is a symbolic link (qsa writes no file " \
                                            "through a link: name its target, or remove the link first)"
        with pytest.raises(OutputError, match="is a symbolic link"), atomic_write(tmp_path / link) as fh:
            fh.write("[]")
    assert (tmp_path / "run-41.json").read_text() == "{}" and (tmp_path / "latest.json").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling.json", "latest.json", "run-41.json"]
    long = tmp_path / ("x" * 300 + ".json")
    assert _problem(long) == f"--json {long}: File name too long"
