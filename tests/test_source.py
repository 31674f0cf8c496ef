"""core/source.py: a record names the code that ran, from a clone, an installed wheel or a copied tree, and
never another checkout's commit (the working directory's, or a ``.git`` older than the files around it)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from qsa_cli.core.errors import InputError
from qsa_cli.core.source import ENV_COMMIT, STAMP, checkout_stamp, commit_label, files_sha256, source_of

ROOT = Path(__file__).resolve().parent.parent
# ``-S``: no site-packages, so the venv's editable qsa cannot answer for the copy under test
PRINT_SOURCE = ("import json; from qsa_cli.core.source import running_source, commit_label; s = running_source(); "
                "print(json.dumps({**s, 'git_commit': commit_label(s)}))")


def run_git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), "-c", "user.name=qsa", "-c", "user.email=qsa@example.invalid", *args]
    return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip()


def copy_tree(to: Path) -> Path:
    """qsa's files as a checkout lays them out (the package, its kernels and configs, the build files)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for folder in ("qsa_cli", "kernels", "configs"):
        shutil.copytree(ROOT / folder, to / folder, ignore=ignore)
    for file in ("pyproject.toml", "setup.py", "README.md", ".gitignore"):
        shutil.copy(ROOT / file, to / file)
    return to


def clone(to: Path) -> Path:
    copy_tree(to)
    run_git(to, "init", "-q")
    run_git(to, "add", ".")
    run_git(to, "commit", "-q", "-m", "qsa")
    return to


def source_in(python_path: Path, cwd: Path, stated: str | None = None) -> dict:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(python_path), **({ENV_COMMIT: stated} if stated else {})}
    out = subprocess.run([sys.executable, "-S", "-c", PRINT_SOURCE], cwd=cwd, env=env, capture_output=True,
                         text=True, check=True)
    return json.loads(out.stdout)


def test_a_clone_names_its_commit_from_any_working_directory(tmp_path: Path) -> None:
    repo = clone(tmp_path / "repo")
    elsewhere = tmp_path / "elsewhere"  # the working directory: another repository (with no qsa_cli to import)
    elsewhere.mkdir()
    (elsewhere / "README.md").write_text("another\n")
    run_git(elsewhere, "init", "-q")
    run_git(elsewhere, "add", ".")
    run_git(elsewhere, "commit", "-q", "-m", "another")
    head = run_git(repo, "rev-parse", "HEAD")
    got = source_in(repo, elsewhere)
    assert got["kind"] == "git" and got["commit"] == head and got["dirty"] is False
    assert got["git_commit"] == head[:12] and got["files_sha256"] == files_sha256(repo / "qsa_cli")
    assert got["version"] == "0.1.0" and got["stated_commit"] is None

    (repo / "README.md").write_text("not code\n")  # outside what runs: still the commit's code
    assert source_in(repo, elsewhere)["dirty"] is False
    (repo / "kernels" / "topk.cu").write_text("// changed\n", encoding="utf-8")
    assert source_in(repo, elsewhere)["git_commit"] == head[:12] + "-dirty"
    run_git(repo, "checkout", "-q", "--", "kernels")
    (repo / "qsa_cli" / "extra.py").write_text("x = 1\n")  # untracked, yet imported as any module
    changed = source_in(repo, elsewhere)
    assert changed["dirty"] is True and changed["files_sha256"] != got["files_sha256"]


def test_a_git_older_than_its_files_is_dirty_and_the_files_hash_names_the_code(tmp_path: Path) -> None:
    """What the device tool's copy does: newer files laid over an earlier clone's ``.git``."""
    repo = clone(tmp_path / "repo")
    old = run_git(repo, "rev-parse", "HEAD")
    newer = copy_tree(tmp_path / "newer")
    (newer / "qsa_cli" / "core" / "geometry.py").write_text("# a later commit's geometry\n")
    shutil.copytree(newer, repo, dirs_exist_ok=True)
    got = source_in(repo, tmp_path)
    assert got["kind"] == "git" and got["commit"] == old and got["git_commit"] == old[:12] + "-dirty"
    assert got["files_sha256"] == files_sha256(newer / "qsa_cli") != files_sha256(ROOT / "qsa_cli")


def test_a_copied_tree_says_it_has_no_commit_and_keeps_a_stated_one(tmp_path: Path) -> None:
    tree = copy_tree(tmp_path / "tree")
    got = source_in(tree, tmp_path)
    assert got["kind"] == "tree" and got["commit"] is None and got["dirty"] is None and got["git_commit"] is None
    assert got["files_sha256"] == files_sha256(ROOT / "qsa_cli")  # the same files as this checkout's
    stated = source_in(tree, tmp_path, stated="0123abc")
    assert stated["stated_commit"] == "0123abc" and stated["commit"] is None


@pytest.mark.parametrize("stated", ["HEAD", "0123ab", "0123ABC", "0123abc; rm", "g" * 40, "a" * 41])
def test_a_stated_commit_that_is_no_commit_is_refused(stated: str) -> None:
    with pytest.raises(InputError, match=f"^{ENV_COMMIT}=.* is not a commit") as info:
        source_of(ROOT / "qsa_cli", stated)
    assert "\n" not in str(info.value)


def test_an_installed_wheel_names_its_version_and_the_commit_its_build_stamped(tmp_path: Path) -> None:
    """Built by pip as a user builds it, installed into an ignored folder inside the clone: the clone's git
    does not describe the installed copy; the wheel's stamp does."""
    repo = clone(tmp_path / "repo")
    head = run_git(repo, "rev-parse", "HEAD")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                            str(repo)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    assert run_git(repo, "status", "--porcelain") == "", "the build leaves the checkout as it was (ignored files only)"
    site = repo / ".venv-test" / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site),
                    *map(str, (tmp_path / "dist").glob("qsa-*.whl"))], check=True, capture_output=True)
    assert json.loads((site / "qsa_cli" / STAMP).read_text()) == {"commit": head, "dirty": False}
    got = source_in(site, tmp_path)
    assert got["kind"] == "wheel" and got["version"] == "0.1.0"
    assert got["commit"] == head and got["dirty"] is False and got["git_commit"] == head[:12]
    assert got["files_sha256"] == files_sha256(repo / "qsa_cli")  # the clone's code, installed

    (site / "qsa_cli" / STAMP).write_text('{"commit": "HEAD", "dirty": false}\n')  # not as setup.py writes it
    unstamped = source_in(site, tmp_path)
    assert unstamped["kind"] == "wheel" and unstamped["commit"] is None and unstamped["git_commit"] is None


def test_a_wheel_from_a_changed_checkout_says_so_and_one_from_no_checkout_has_no_stamp(tmp_path: Path) -> None:
    repo = clone(tmp_path / "repo")
    assert json.loads(checkout_stamp(repo) or "") == {"commit": run_git(repo, "rev-parse", "HEAD"), "dirty": False}
    (repo / "configs" / "ci.yaml").write_text("changed: true\n")
    assert json.loads(checkout_stamp(repo) or "")["dirty"] is True
    assert checkout_stamp(copy_tree(tmp_path / "tree")) is None


def test_the_label_is_the_commit_and_its_state() -> None:
    source = source_of(ROOT / "qsa_cli")
    assert commit_label({**source, "commit": "f" * 40, "dirty": False}) == "f" * 12
    assert commit_label({**source, "commit": "f" * 40, "dirty": True}) == "f" * 12 + "-dirty"
    assert commit_label({**source, "commit": None, "dirty": None}) is None
