"""--kernels DIR: qsa's kernel sources from a copy the user edits (no device needed for these checks)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from qsa_cli import kernels
from qsa_cli.cli import main
from qsa_cli.session import Settings, session


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


def test_a_session_records_the_copy_and_its_hash(copy: Path) -> None:
    """What a GPU run with --kernels records (on the CPU backend the command line refuses the option: the
    models would run, not the copy's kernels)."""
    installed_hash = kernels.sources_hash()
    topk = copy / "topk.cu"
    topk.write_text(topk.read_text() + "\n// an edit of the copy\n")
    with session(Settings(backend="cpu", kernels=copy, iters=0), "topk-parity", []) as s:
        data = s.record.to_dict()
    assert data["settings"]["kernels"] == str(copy.resolve())
    assert data["kernel_source_hash"] == kernels.sources_hash(copy) != installed_hash
    # the folder is the run's (its catalog's), not the process's: nothing else compiles from it afterwards
    assert kernels.kernel_dir() != copy.resolve() and kernels.sources_hash() == installed_hash


def test_the_selftest_checks_the_copys_constants(copy: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The check a device's selftest makes of the copy's header (without a device the command line refuses
    --kernels: the copy's kernels would not run)."""
    from qsa_cli.runs import selftest

    monkeypatch.setattr(selftest, "SELFTEST_SCORER_CASES", ())  # the constants row is what this test is about
    monkeypatch.setattr(selftest, "SELFTEST_TOPK_CASES", ())
    header = copy / "qsa_common.cuh"
    header.write_text(header.read_text().replace("#define QSA_TOP_K 2048", "#define QSA_TOP_K 1024"))
    _, rows = selftest.selftest(Settings(kernels=copy), False, [])
    assert not rows[0].passed and rows[0].detail == "QSA_TOP_K = 1024 but geometry.TOP_K = 2048"


@pytest.mark.parametrize("argv", [("select-bench", "3001", "2", "1", "4096", "--backend", "cpu"), ("selftest",)])
def test_a_copy_whose_kernels_would_not_run_is_refused(capsys: pytest.CaptureFixture[str], copy: Path, argv) -> None:
    """Its sources broken, so a run that passed would have proved nothing about them."""
    (copy / "scores.cu").write_text((copy / "scores.cu").read_text() + "garbage !!! {{\n")
    code, out, err = run(capsys, *argv, "--kernels", str(copy))
    assert (code, out) == (2, "") and err.startswith("qsa: error: --kernels ") and err.count("\n") == 1, err


@pytest.mark.parametrize(("make", "message"), [
    (lambda d: d / "none", "no such folder"),
    (lambda d: (d / "kernels" / "topk.cu").unlink() or d / "kernels", "no topk.cu"),
])
def test_a_folder_that_is_not_a_copy_is_one_line(capsys: pytest.CaptureFixture[str], copy: Path, make, message) -> None:
    folder = make(copy.parent)
    code, out, err = run(capsys, "select-bench", "3001", "2", "1", "4096", "--backend", "cpu", "--kernels", str(folder))
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
