"""The wheel must carry every subpackage, the kernels and the configs (a plain `pip install .`)."""

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")


def test_every_subpackage_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(config["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "qsa_cli").rglob("__init__.py")}
    assert found <= listed, f"missing from pyproject packages: {sorted(found - listed)}"
    assert config["package-dir"] == {"qsa_cli.kernel_src": "kernels", "qsa_cli.config_files": "configs"}


def test_kernel_sources_and_configs_are_package_data():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert {"*.cu", "*.cuh"} <= set(config["qsa_cli.kernel_src"])
    assert list(ROOT.glob("kernels/*.cu")) and list(ROOT.glob("configs/*.yaml"))
    assert config["qsa_cli.config_files"] == ["*.yaml"]


def test_installed_layout_finds_its_kernels_and_configs(tmp_path):
    """As a wheel lays it out: qsa_cli/ with kernel_src/ and config_files/ inside, no checkout beside it."""
    import shutil
    import subprocess

    site = tmp_path / "site"
    shutil.copytree(ROOT / "qsa_cli", site / "qsa_cli", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "kernels", site / "qsa_cli" / "kernel_src")
    shutil.copytree(ROOT / "configs", site / "qsa_cli" / "config_files")
    code = ("from qsa_cli import kernels, config; print(kernels.kernel_dir()); print(config.shipped_dir()); "
            "print(len(kernels.source_text('topk.cu')) > 0, config.shipped_configs())")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(site)},
                         capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0] == str(site / "qsa_cli" / "kernel_src")
    assert out[1] == str(site / "qsa_cli" / "config_files")
    assert out[2] == "True ['ci', 'selftest', 'sm75-decode']"
