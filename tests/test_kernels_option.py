"""--kernels DIR: qsa's kernel sources from a copy the user edits (no device needed for these checks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from qsa_cli import kernels
from qsa_cli.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ended:
        main(list(argv))
    out, err = capsys.readouterr()
    return ended.value.code, out, err


@pytest.fixture
def copy(tmp_path: Path) -> Path:
    """A copy of the installed kernels/."""
    installed = kernels.kernel_dir()
    target = tmp_path / "kernels"
    shutil.copytree(installed, target)
    return target


def test_a_run_records_the_copy_and_its_hash(capsys: pytest.CaptureFixture[str], copy: Path, tmp_path: Path) -> None:
    installed_hash = kernels.sources_hash()
    topk = copy / "topk.cu"
    topk.write_text(topk.read_text() + "\n// an edit of the copy\n")
    record = tmp_path / "run.json"
    code, out, err = run(capsys, "topk-parity", "3001", "2", "1", "4096", "0", "--backend", "cpu",
                         "--kernels", str(copy), "--json", str(record))
    assert code == 0, err
    data = json.loads(record.read_text())
    assert data["settings"]["kernels"] == str(copy.resolve())
    assert data["kernel_source_hash"] == kernels.sources_hash(copy) != installed_hash
    # the folder is the run's (its catalog's), not the process's: nothing else compiles from it afterwards
    assert kernels.kernel_dir() != copy.resolve() and kernels.sources_hash() == installed_hash


def test_the_selftest_checks_the_copys_constants(capsys: pytest.CaptureFixture[str], copy: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from qsa_cli.runs import selftest

    monkeypatch.setattr(selftest, "SELFTEST_SCORER_CASES", ())  # the constants row is what this test is about
    monkeypatch.setattr(selftest, "SELFTEST_TOPK_CASES", ())
    header = copy / "qsa_common.cuh"
    header.write_text(header.read_text().replace("#define QSA_TOP_K 2048", "#define QSA_TOP_K 1024"))
    code, out, err = run(capsys, "selftest", "--kernels", str(copy))
    assert code == 1, err
    assert "QSA_TOP_K = 1024 but geometry.TOP_K = 2048" in " ".join(out.split())


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "none", "no such folder"),
    (lambda d: (d / "kernels" / "topk.cu").unlink() or d / "kernels", "no topk.cu"),
])
def test_a_folder_that_is_not_a_copy_is_one_line(capsys: pytest.CaptureFixture[str], copy: Path, make, message) -> None:
    folder = make(copy.parent)
    code, out, err = run(capsys, "select-bench", "3001", "2", "1", "4096", "--backend", "cpu", "--kernels", str(folder))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
