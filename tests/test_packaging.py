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
