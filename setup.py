"""The one build step pyproject.toml cannot say: a wheel built from a git checkout carries the commit it was
built from, and whether qsa's files differed from it (``qsa_cli/source_stamp.json``, read by core/source.py),
so the records of an installed qsa name their code."""

import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))  # the stamp is written by qsa's own git code (core/source.py), from this tree

from qsa_cli.core.source import STAMP, checkout_stamp  # noqa: E402


class StampedBuildPy(build_py):
    def run(self) -> None:
        super().run()
        stamp = checkout_stamp(ROOT)
        if stamp is not None and not getattr(self, "editable_mode", False):  # an editable install runs the checkout
            (Path(self.build_lib) / "qsa_cli" / STAMP).write_text(stamp)


setup(cmdclass={"build_py": StampedBuildPy})
