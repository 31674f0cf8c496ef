"""The kernel loader's CPU side: finding, inlining and hashing kernels/ (no GPU needed)."""

import json
import re
import sys
import types

import numpy as np
import pytest

from qsa_cli import kernels
from qsa_cli.kernels import declared_traits, kernel_dir
from qsa_cli.launch.topk_cluster import WAITS_FOR_PRIOR_GRID


def test_every_source_inlines_the_header_once_and_includes_no_toolkit_header():
    for path in kernels.kernel_dir().glob("*.cu"):
        text = kernels.source_text(path.name)
        assert '#include "' not in text, f"{path.name}: a local include was not inlined"
        # NVRTC is given no include path: a toolkit header would compile in one install and not another
        assert not re.search(r"^\s*#\s*include\s*<", text, re.MULTILINE), f"{path.name} includes a toolkit header"
        assert text.count("#define QSA_IDX_DIM") == 1


def test_sources_hash_covers_every_file():
    names = {p.name for p in kernels.source_files(kernels.kernel_dir())}
    assert {"qsa_common.cuh", "scores.cu", "topk.cu", "topk_cluster.cu", "bench.cu"} <= names
    assert re.fullmatch(r"[0-9a-f]{64}", kernels.sources_hash())


def test_missing_source_is_a_kernel_error():
    with pytest.raises(kernels.KernelError, match="not found"):
        kernels.source_text("no_such_kernel.cu")


def test_compile_options_keep_ieee_arithmetic():
    opts = " ".join(kernels.COMPILE_OPTIONS)
    assert "--fmad=false" in opts and "--ftz=false" in opts and "fast" not in opts


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path))
    assert kernels.cache_dir() == tmp_path


# ---- the disk cache: keyed by the NVRTC version too, a binary loaded only when its checksum holds -----------


class FakeCompiler:
    """NVRTC's stand-in: each compile a fresh, seeded binary (a recompile is seen as other bytes)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> tuple[bytes, dict[str, str]]:
        self.calls += 1
        rng = np.random.default_rng(self.calls)
        return rng.integers(0, 256, 4096, dtype=np.uint8).tobytes(), {"f<1>": f"_Z1fILi1EEvv{self.calls}"}


def test_a_cached_binary_is_loaded_while_its_checksum_holds(monkeypatch, tmp_path):
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path))
    nvrtc = FakeCompiler()
    first = kernels.cached("k" * 64, nvrtc)
    assert kernels.cached("k" * 64, nvrtc) == first and nvrtc.calls == 1
    assert kernels.cached("j" * 64, nvrtc) != first and nvrtc.calls == 2  # another key, another entry


@pytest.mark.parametrize("damage", ["one byte flipped", "cut short", "binary gone", "names gone", "names not JSON",
                                    "names of an older qsa"])
def test_a_damaged_cache_entry_is_compiled_again_and_rewritten(monkeypatch, tmp_path, damage):
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path))
    nvrtc = FakeCompiler()
    first = kernels.cached("k" * 64, nvrtc)
    binary, names = tmp_path / f"{'k' * 64}.bin", tmp_path / f"{'k' * 64}.json"
    if damage == "one byte flipped":
        data = bytearray(binary.read_bytes())
        data[1234] ^= 0x01
        binary.write_bytes(bytes(data))
    elif damage == "cut short":
        binary.write_bytes(binary.read_bytes()[:1000])
    elif damage == "binary gone":
        binary.unlink()
    elif damage == "names gone":
        names.unlink()
    elif damage == "names not JSON":
        names.write_text('{"sha256": ')
    else:  # before the checksum, an entry's JSON was its names alone
        names.write_text(json.dumps(first[1]))
    again = kernels.cached("k" * 64, nvrtc)
    assert nvrtc.calls == 2 and again != first, "compiled again, never loaded"
    assert kernels.cached("k" * 64, nvrtc) == again and nvrtc.calls == 2, "and the entry rewritten whole"


def test_an_unwritable_cache_costs_only_a_compile(monkeypatch, tmp_path):
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path / "file" / "cache"))  # below a file: cannot be made
    nvrtc = FakeCompiler()
    first = kernels.cached("k" * 64, nvrtc)
    assert kernels.cached("k" * 64, nvrtc) != first and nvrtc.calls == 2  # nothing kept: compiled each time


def test_another_nvrtc_version_is_another_cache_entry(monkeypatch, tmp_path):
    """kernels._compile through a stand-in CuPy: the key names the NVRTC version, so a binary another
    compiler made is never loaded."""
    version = [(12, 4)]
    compiled: list[tuple[str, ...]] = []

    def compile_using_nvrtc(text, options, name_expressions, filename):
        compiled.append(tuple(options))
        return f"binary of {filename} by {version[0]}".encode(), {n: n for n in name_expressions}

    cupy = types.ModuleType("cupy")
    cupy.__version__ = "13.6.0"
    cuda = types.ModuleType("cupy.cuda")
    cuda.compiler = types.SimpleNamespace(compile_using_nvrtc=compile_using_nvrtc)
    cuda.nvrtc = types.SimpleNamespace(getVersion=lambda: version[0])
    cupy.cuda = cuda
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path))
    folder = kernels.kernel_dir()
    assert kernels.nvrtc_version() == "12.4"
    first = kernels._compile("bench.cu", ("read_floor_kernel",), "90", "", folder)
    assert kernels._compile("bench.cu", ("read_floor_kernel",), "90", "", folder) == first and len(compiled) == 1
    version[0] = (12, 8)
    assert kernels._compile("bench.cu", ("read_floor_kernel",), "90", "", folder) != first and len(compiled) == 2
    assert compiled[0] == kernels.COMPILE_OPTIONS  # exactly qsa's options, none added


def test_a_source_declares_its_traits_on_lines_of_their_own(tmp_path):
    """The cluster kernel says it waits for the grid before it (its launcher reads that); a header's
    declaration counts for the source that includes it, one after code does not."""
    assert declared_traits(kernel_dir(), "topk_cluster.cu") == {WAITS_FOR_PRIOR_GRID}
    assert declared_traits(kernel_dir(), "topk.cu") == frozenset()
    (tmp_path / "a.cu").write_text('// qsa-declares: x\n  //qsa-declares:y  \nint z;  // qsa-declares: no\n'
                                   '#include "b.cuh"\n')
    (tmp_path / "b.cuh").write_text("// qsa-declares: from-header\n")
    assert declared_traits(tmp_path, "a.cu") == {"x", "y", "from-header"}
