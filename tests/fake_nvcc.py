"""A stand-in for nvcc where a test checks qsa's build cache, not a compiler (engine/build.py): it answers
``--version`` and writes to ``-o`` a "library" whose bytes are the sha256 of its command line and of every
input file's bytes, so a changed source makes other bytes, as nvcc would, in milliseconds instead of seconds.
Each call is logged to ``calls.log`` beside it, so a test can count the compiles."""

from __future__ import annotations

import stat
import sys
from pathlib import Path

SCRIPT = '''#!{python}
import hashlib, pathlib, sys
args = sys.argv[1:]
with open({log!r}, "a") as log:
    log.write(" ".join(args) + "\\n")
if args == ["--version"]:
    print("nvcc: NVIDIA (R) Cuda compiler driver (fake)\\nCuda compilation tools, release 0.0, V0.0.0 (fake)")
    sys.exit(0)
digest = hashlib.sha256(" ".join(a for a in args if a != args[args.index("-o") + 1]).encode())
for arg in args:
    path = pathlib.Path(arg)
    if path.suffix in (".cu", ".cuh", ".hpp", ".h") and path.is_file():
        digest.update(path.read_bytes())
pathlib.Path(args[args.index("-o") + 1]).write_bytes(b"fake library " + digest.digest())
'''


def write_fake_nvcc(folder: Path) -> Path:
    """The fake nvcc as ``folder/nvcc``; its log of calls is ``folder/calls.log``."""
    folder.mkdir(parents=True, exist_ok=True)
    nvcc = folder / "nvcc"
    nvcc.write_text(SCRIPT.format(python=sys.executable, log=str(folder / "calls.log")))
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    return nvcc


def builds(nvcc: Path) -> list[str]:
    """The command lines of the builds (calls other than ``--version``) the fake nvcc has made, in turn."""
    log = nvcc.parent / "calls.log"
    return [line for line in log.read_text().splitlines() if line.strip() != "--version"] if log.exists() else []


def compiles(nvcc: Path) -> int:
    """How many builds the fake nvcc has made."""
    return len(builds(nvcc))
