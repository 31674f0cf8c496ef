"""The kernel loader's CPU side: finding, inlining and hashing kernels/ (no GPU needed)."""

import re

import pytest

from qsa_cli import kernels


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
