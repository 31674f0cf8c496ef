"""The engine adapter without a GPU: a fake checkout (tests/fake_engine.py, both API generations) built through
qsa_cli/engine/ with nvcc (compile only; skipped without nvcc), its library's symbols, the cache, the errors a
checkout can cause, PATH@REV checkouts, what a header declares (functions and optional parameters), the
switches a checkout's sources read, and the variants a card runs under which switches."""

from __future__ import annotations

import ctypes
import dataclasses
import difflib
import json
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from fake_adapter import write_adapter
from fake_engine import (FUNCTIONS, GENERATIONS, NEWER, PARAMETERS, QSA_KERNEL_FILES, SEED, SWITCHES, git,
                         write_fake_engine)
from fake_nvcc import compiles, write_fake_nvcc
from test_nvcc import ARCHS, spills, unemitted_launcher_kernels

from qsa_cli.core.errors import EngineBuildError, EngineError, RevisionError
from qsa_cli.core.geometry import SELECT_CAP, Call
from qsa_cli.core.git import folder_at_revision
from qsa_cli.engine.adapter import ADAPTER_INCLUDE, TABLE_SYMBOL
from qsa_cli.engine.build import BUILD_FLAGS, SHIM, build_engine, engine_cache_dir, find_nvcc, shim_macro
from qsa_cli.engine.checkout import (
    ENGINE_FILES,
    HOST_PATHS,
    INCLUDE_DIR,
    SOURCE,
    EngineCheckout,
    EngineSpec,
    declared_in,
    open_engine,
    parse_engine_spec,
    switches_read,
)
from qsa_cli.engine.domains import answered_cc, engine_variants, variant_refusal
from qsa_cli.engine.launch import engine_scorer_launcher, engine_topk_launcher
from qsa_cli.engine.library import INDEX_SHAPES, load_engine, shim_symbol
from qsa_cli.inputs import synthetic_scorer_inputs
from qsa_cli.kernels import KernelError, kernel_dir

SHIM_OWN = ("qsa_shim_functions", "qsa_shim_index_shapes", "qsa_shim_exception", "qsa_shim_last_error",
            "qsa_shim_error_name", "qsa_shim_error_string")


def _has_nvcc() -> bool:
    try:
        find_nvcc()
    except EngineError:
        return False
    return True


needs_nvcc = pytest.mark.skipif(not _has_nvcc(), reason="no nvcc on PATH or in $CUDA_HOME/bin")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path / "cache"))
    return engine_cache_dir()


@pytest.fixture
def fake(tmp_path: Path) -> EngineCheckout:
    return EngineCheckout(write_fake_engine(tmp_path / "strata"), "fake")


def exported(library: Path) -> set[str]:
    """The dynamic symbols the library defines (``nm -D``)."""
    out = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True, check=True)
    return {line.split()[-1] for line in out.stdout.splitlines() if line.strip()}


# The seed's checkout without its split launch (an older engine's: qsa_topk_split_bytes kept, one path of a pair
# left out) and the newer generation's (neither split function; its optional parameters): each library has the
# shim's wrappers of the paths its checkout declares and none of the others. The whole seed's wrappers are
# compiled in test_the_fake_compiles_for_every_card_without_spills, as is every card's device code (the same for
# both generations): here cards before sm_90, whose cluster kernel is the fake's stub, build in 4.6 s, not 7.5.
@needs_nvcc
@pytest.mark.parametrize(("generation", "arch", "without"), [(SEED, 80, ("qsa_block_topk_split",)), (NEWER, 86, ())],
                         ids=["seed-without-split-80", "newer-86"])
def test_fake_builds_and_exports_the_shim(cache: Path, tmp_path: Path, generation: str, arch: int,
                                          without: tuple[str, ...]) -> None:
    fake = EngineCheckout(write_fake_engine(tmp_path / "strata", generation=generation, without=without), "fake")
    paths = tuple(f for f in (*FUNCTIONS[generation], *PARAMETERS[generation]) if f not in without)
    assert fake.declared_functions() == paths
    build = build_engine(fake, arch)
    assert build.compiled and build.library.parent == cache and build.library.is_file()
    symbols = exported(build.library)
    wanted = {*SHIM_OWN, *(shim_symbol(f) for f in paths)}
    assert wanted <= symbols, f"missing: {sorted(wanted - symbols)}"
    lacking = {shim_symbol(f) for f in HOST_PATHS if f not in paths}
    assert not lacking & symbols, "a path it lacks has no wrapper"
    dll = ctypes.CDLL(str(build.library))
    assert not [symbol for symbol in lacking if hasattr(dll, symbol)], "nor does the loader find one"
    lib = load_engine(build)  # no driver needed: nothing here calls into CUDA
    assert lib.functions == paths
    assert lib.index_shapes() == INDEX_SHAPES
    if generation == SEED:
        assert lib.split_bytes(8) > 0
        # no split variant without the split launch, and its refusal says why in one line
        assert engine_variants(lib, 80, {}) == ("scores", "scores-ref", "topk", "topk-ref")
        reason = variant_refusal(lib, "topk-split", 80, {})
        assert reason is not None and "declares no qsa_block_topk_split" in reason and "\n" not in reason
        # a user's adapter without its table (qsa_adapter.h) builds, and its library, one without the table's symbol
        # as this one is, is refused once loaded, in a line naming the adapter
        tableless = str(tmp_path / "tableless.cu")
        with pytest.raises(EngineError, match=rf"^adapter {re.escape(tableless)}: it defines no extern \"C\" "
                                              rf"{TABLE_SYMBOL}\[\] \(qsa_adapter.h\)$"):
            load_engine(dataclasses.replace(build, provenance={**build.provenance, "adapter": {"path": tableless}}))
    else:  # the multi-CTA path's scratch: the split's layout in int32s (tests/fake_engine.py)
        assert lib.multi_scratch_ints(8) == 8 * lib.multi_scratch_ints(1) > 0
    assert lib.switches == SWITCHES[generation]
    p = build.provenance
    assert p["name"] == "fake" and p["path"] == str(fake.path) and p["commit"] is None and p["revision"] is None
    assert p["arch"] == f"sm_{arch}" and f"-arch=sm_{arch}" in p["flags"] and "release" in p["nvcc"]
    assert {f"-D{shim_macro(f)}={int(f in paths)}" for f in HOST_PATHS} <= set(p["flags"])
    assert set(ENGINE_FILES) <= set(p["sources"])
    assert str(kernel_dir().resolve() / "topk.cu") in p["sources"], "an include by absolute path counts too"
    assert p["functions"] == list(paths) and p["switches"] == list(SWITCHES[generation])
    record = json.loads((cache / f"{p['cache_key']}.json").read_text())
    assert record["library_sha256"] == p["library_sha256"] and record["switches"] == p["switches"]
    json.dumps(p)  # plain data for the run record


def _compiled_fake(root: Path) -> tuple[int, str, set[str]]:
    """The seed's fake with the shim and the example adapter (tests/fake_adapter.py), as build.py and
    ``--adapter`` build them (its flags and defines), for every card of ARCHS in one library, with
    ptxas's report: (nvcc's status, its log, the symbols)."""
    write_fake_engine(root, generation=SEED)
    declared = EngineCheckout(root).declared_functions()
    library = root / "fake.so"
    adapter = write_adapter(root.parent / "my_adapter.cu")
    cmd = [str(find_nvcc()), *BUILD_FLAGS, *(f"-gencode=arch=compute_{a},code=sm_{a}" for a in ARCHS),
           "-Xptxas", "-v", *(f"-D{shim_macro(f)}={int(f in declared)}" for f in HOST_PATHS),
           "-I", str(root / INCLUDE_DIR), "-I", str(ADAPTER_INCLUDE), str(adapter), str(root / SOURCE), str(SHIM),
           "-o", str(library)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    return proc.returncode, proc.stdout + proc.stderr, exported(library) if proc.returncode == 0 else set()


@needs_nvcc
def test_the_fake_compiles_for_every_card_without_spills(tmp_path: Path) -> None:
    """For sm_75, sm_80, sm_86 and sm_90: every kernel of the fake (qsa's, and its own) and of the example adapter
    without a spill. The seed's fake alone: the newer generation's kernels are the same ones
    (test_the_generations_differ_in_host_code_alone), so its compile would check nothing more; its host code
    builds in test_fake_builds_and_exports_the_shim. This is the every-card compile of qsa's kernel files the
    fake includes (QSA_KERNEL_FILES), which tests/test_nvcc.py leaves to it: each launcher's kernels are
    emitted for the newest card, as that module checks of the files it compiles itself."""
    root = tmp_path / "strata"
    status, log, symbols = _compiled_fake(root)
    assert status == 0, log
    included = re.findall(rf'#include "{re.escape(str(kernel_dir()))}/(\w+\.cu)"', (root / SOURCE).read_text())
    assert sorted(included) == sorted(QSA_KERNEL_FILES), "the files test_nvcc.py leaves to this compile"
    assert {shim_symbol(f) for f in (*FUNCTIONS[SEED], *PARAMETERS[SEED])} <= symbols
    assert TABLE_SYMBOL in symbols, "the example adapter's table"
    assert all(re.search(rf"Compiling entry function '[^']+' for 'sm_{arch}'", log) for arch in ARCHS), "every card's"
    assert not spills(log), "the fake spills registers:\n" + "\n".join(spills(log))
    missing = unemitted_launcher_kernels(QSA_KERNEL_FILES, log, max(ARCHS))
    assert not missing, "the fake's compile does not emit:\n" + "\n".join(missing)


# Where device code starts in CUDA source: a kernel, a device function or variable.
_DEVICE = re.compile(r"__global__|__device__|__constant__")
# What, in a line of host code, chooses or makes device code: a preprocessor line (an include, an arch's branch),
# a template, or explicit template arguments (not a cast's), which may instantiate a kernel.
_MAKES_DEVICE = re.compile(r"^\s*#|\btemplate\b|\w(?<!_cast)<(?!<)")
_LAUNCHED = re.compile(r"(\S+?)\s*<<<")  # a launch's kernel (a template's, with its arguments, ends in '>')
_PLAIN_KERNEL = re.compile(r"__global__ void (\w+)\(")


def _device_code(source: str) -> list[str]:
    """Each kernel, device function or variable of ``source``, from its line to the end of its declaration or of
    its body (its braces matched)."""
    blocks = []
    for found in re.finditer(rf"^.*(?:{_DEVICE.pattern})", source, re.M):
        end, body = source.find(";", found.start()), source.find("{", found.start())
        if body != -1 and not 0 <= end < body:
            depth = 0
            for end in range(body, len(source)):
                depth += {"{": 1, "}": -1}.get(source[end], 0)
                if depth == 0:
                    break
        blocks.append(source[found.start():end + 1])
    return blocks


def _device_differences(seed: str, newer: str) -> list[str]:
    """Device code that one text has and the other has not (_device_code's), and the lines where they differ that
    choose or make device code: those _MAKES_DEVICE matches, and launches of a kernel other than a plain one both
    define (a template kernel launched is compiled for the arguments it deduces)."""
    plain = set(_PLAIN_KERNEL.findall(seed)) & set(_PLAIN_KERNEL.findall(newer))
    changed = [line[2:] for line in difflib.ndiff(seed.splitlines(), newer.splitlines()) if line[:2] in ("- ", "+ ")]
    return [*(set(_device_code(seed)) ^ set(_device_code(newer))),
            *(line for line in changed
              if _MAKES_DEVICE.search(line) or any(kernel not in plain for kernel in _LAUNCHED.findall(line)))]


def test_the_generations_differ_in_host_code_alone(tmp_path: Path) -> None:
    """Why one generation's every-card compile is enough: the generations' files differ only in host code (which
    host functions there are, their parameters and bodies, the switches read), and the shim, built with each
    one's defines, has no device code, so ptxas compiles the same kernels for both."""
    trees = [write_fake_engine(tmp_path / generation, generation=generation) for generation in GENERATIONS]
    texts = {relative: [(tree / relative).read_text() for tree in trees] for relative in ENGINE_FILES}
    seed, newer = texts[SOURCE]
    assert seed != newer
    assert {relative: _device_differences(*pair) for relative, pair in texts.items()} == dict.fromkeys(ENGINE_FILES, [])
    shim = SHIM.read_text()
    assert not re.search(rf"{_DEVICE.pattern}|__CUDA_ARCH|<<<", shim)
    # and the check sees device code change: a kernel's body, a template kernel launched for other arguments
    assert _device_differences(seed, newer.replace("b % kTcInexactStride == 0", "b % kTcInexactStride == 1"))
    assert _device_differences(seed, newer.replace("launch_halve_of<4>", "launch_halve_of<5>"))


@pytest.fixture
def fake_nvcc(tmp_path: Path) -> Path:
    """nvcc's stand-in for the cache's tests (tests/fake_nvcc.py): the cache's rules hold whatever the compiler
    makes, and the real compiler's builds are the tests above."""
    return write_fake_nvcc(tmp_path / "fake-nvcc")


def test_cache_is_reused_and_rebuilt_when_a_source_byte_changes(cache: Path, fake: EngineCheckout,
                                                                 fake_nvcc: Path) -> None:
    relative = "include/strata/kernels/qsa.hpp"
    first = build_engine(fake, 80, fake_nvcc)
    again = build_engine(fake, 80, fake_nvcc)
    assert first.compiled and not again.compiled and again.library == first.library
    assert again.provenance["library_sha256"] == first.provenance["library_sha256"]
    header = fake.path / relative
    header.write_bytes(header.read_bytes().replace(b"// Fake engine", b"// Fake engina", 1))
    changed = build_engine(fake, 80, fake_nvcc)
    assert changed.compiled and changed.library != first.library
    assert changed.provenance["sources"][relative] != first.provenance["sources"][relative]
    assert not list(cache.glob(".build-*")), "no temporary build folder is left behind"
    assert compiles(fake_nvcc) == 2


def test_a_corrupted_cached_library_is_rebuilt(cache: Path, fake: EngineCheckout, fake_nvcc: Path) -> None:
    build = build_engine(fake, 80, fake_nvcc)
    data = bytearray(build.library.read_bytes())
    data[len(data) // 2] ^= 0xFF
    build.library.write_bytes(bytes(data))
    rebuilt = build_engine(fake, 80, fake_nvcc)
    assert rebuilt.compiled and rebuilt.library == build.library
    assert rebuilt.library.read_bytes() != bytes(data)
    (cache / f"{build.provenance['cache_key']}.json").unlink()  # a library whose record is gone: built again
    assert build_engine(fake, 80, fake_nvcc).compiled
    assert not build_engine(fake, 80, fake_nvcc).compiled
    assert compiles(fake_nvcc) == 3


def test_builds_of_one_key_at_once_build_it_once(cache: Path, fake: EngineCheckout, fake_nvcc: Path) -> None:
    """Parallel jobs (a runner's, the GPU suite's workers) building one checkout: one compiles, the others wait
    for it and take the cache's library."""
    with ThreadPoolExecutor(4) as pool:
        builds = list(pool.map(lambda _: build_engine(fake, 80, fake_nvcc), range(4)))
    assert compiles(fake_nvcc) == 1 and sum(b.compiled for b in builds) == 1
    assert len({b.library for b in builds}) == 1 and len({b.provenance["library_sha256"] for b in builds}) == 1


@pytest.mark.parametrize("missing", ENGINE_FILES)
def test_a_missing_file_is_one_line_naming_it(tmp_path: Path, missing: str) -> None:
    root = write_fake_engine(tmp_path / "strata")
    (root / missing).unlink()
    with pytest.raises(EngineError, match=f"missing {missing}") as info:
        EngineCheckout(root)
    assert "\n" not in str(info.value)


def test_a_checkout_that_is_not_a_folder(tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="no such directory"):
        EngineCheckout(tmp_path / "nowhere")


@needs_nvcc
def test_a_syntax_error_carries_nvcc_log(cache: Path, fake: EngineCheckout) -> None:
    source = fake.path / SOURCE
    source.write_text(source.read_text() + "\nthis is not C++\n")
    with pytest.raises(EngineBuildError) as info:
        build_engine(fake, 80)
    message = str(info.value)
    assert isinstance(info.value, EngineError) and isinstance(info.value, KernelError)  # printed whole, as kernel logs
    assert "failed to compile for sm_80" in message.splitlines()[0]
    assert "qsa_select.cu(" in message and "error" in message, message
    assert not list(cache.glob("*.so")) and not list(cache.glob(".build-*"))


def test_declared_functions_skip_comments(tmp_path: Path) -> None:
    checkout = EngineCheckout(write_fake_engine(tmp_path / "strata", without=("qsa_block_topk_cluster",)))
    header = checkout.path / "include/strata/kernels/qsa_select.hpp"
    header.write_text(header.read_text() + "\n// bool qsa_block_topk_cluster(const float* scores);\n"
                      "/* size_t qsa_block_topk_cluster(\n int64_t nq); */\n")
    declared = checkout.declared_functions()
    assert "qsa_block_topk_cluster" not in declared and "qsa_block_topk" in declared


# A newer generation's declarations as its header writes them (our own text, in the engine's form): doc
# comments between the parameters, a parameter's default, and a block comment inside a parameter list.
NEWER_HEADER = """\
#pragma once
#include "strata/kernels/qsa.hpp"
namespace strata::kernels {
/// scores [nq, max_blocks]
void qsa_block_scores(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps, int64_t nq,
                      int64_t max_blocks, const QsaShapes& s, float* scores, void* stream,
                      int64_t active_blocks = -1,    ///< > 0: only this many blocks (the largest n_bid + 1,
                                                     ///< not for a graph)
                      bool decode_dx = false);       ///< a decode call may take the dx scorer (same bits)
/// the same scores on tensor cores: not bitwise
bool qsa_block_scores_tc(const float* pooled, const float* dead, const float* q_idx, const int32_t* steps, int64_t nq,
                         int64_t max_blocks, const QsaShapes& s, float* scores, void* stream, int64_t active_blocks);
void qsa_block_topk(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                    const QsaShapes& s, int32_t* ids, void* stream,
                    int64_t active_blocks = -1,    ///< > 0: no query has more blocks (a comma, here)
                    std::int32_t * /* device */ multi_scratch = nullptr);   ///< qsa_topk_multi_scratch_ints(nq)
int64_t qsa_topk_multi_scratch_ints(int64_t nq);   ///< 0 without the multi-CTA path
bool qsa_block_topk_cluster(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                            const QsaShapes& s, int32_t* ids, void* stream);
void qsa_block_topk_ref(const float* scores, const int32_t* steps, int64_t nq, int64_t max_blocks, int64_t cap,
                        const QsaShapes& s, int32_t* ids, void* stream);
}  // namespace strata::kernels
"""
NEWER_PATHS = ("qsa_block_scores", "qsa_block_topk", "qsa_block_topk_cluster", "qsa_block_topk_ref",
               "qsa_block_scores_tc", "qsa_topk_multi_scratch_ints", "qsa_block_scores.decode_dx",
               "qsa_block_topk.multi_scratch")


def test_a_newer_header_declares_its_functions_and_optional_parameters() -> None:
    assert declared_in(NEWER_HEADER) == NEWER_PATHS


@pytest.mark.parametrize(("change", "lost"), [
    (("bool decode_dx = false);", "int decode_dx = false);"), "qsa_block_scores.decode_dx"),  # another type
    (("bool decode_dx = false);", "bool dx = false);"), "qsa_block_scores.decode_dx"),  # another name
    (("int64_t active_blocks = -1,    ///< > 0: only", "///< > 0: only"), "qsa_block_scores.decode_dx"),  # moved up
    (("int64_t active_blocks = -1,    ///< > 0: no query has more blocks (a comma, here)\n"
      "                    std::int32_t * /* device */ multi_scratch = nullptr);",
      "int64_t active_blocks = -1 /*, int32_t* multi_scratch = nullptr */);"), "qsa_block_topk.multi_scratch"),
    (("int64_t qsa_topk_multi_scratch_ints(int64_t nq);", "// int64_t qsa_topk_multi_scratch_ints(int64_t nq);"),
     "qsa_topk_multi_scratch_ints"),
], ids=["type", "name", "position", "commented-out", "function-commented-out"])
def test_a_parameter_counts_only_where_qsa_passes_it(change: tuple[str, str], lost: str) -> None:
    """The shim passes an optional parameter by position: one of another type, name or place is not that path."""
    old, new = change
    assert old in NEWER_HEADER
    text = NEWER_HEADER.replace(old, new, 1)
    assert declared_in(text) == tuple(p for p in NEWER_PATHS if p != lost)


@pytest.mark.parametrize("generation", GENERATIONS)
def test_each_fake_generation_declares_its_paths_and_reads_its_switches(tmp_path: Path, generation: str) -> None:
    checkout = EngineCheckout(write_fake_engine(tmp_path / "strata", generation=generation))
    assert checkout.declared_functions() == (*FUNCTIONS[generation], *PARAMETERS[generation])
    assert checkout.switches() == SWITCHES[generation]


def test_switches_are_the_string_literals_that_spell_a_name_whole() -> None:
    source = """
    static bool on = env_flag("STRATA_TOPK_MULTI");       // "STRATA_IN_A_COMMENT"
    const char* v = std::getenv("STRATA_EMULATE_CC");
    /* getenv("STRATA_IN_A_BLOCK_COMMENT") */
    const char* url = "http://example.invalid/STRATA_NOT_WHOLE";
    printf("set STRATA_QSA_CLUSTER=0 to turn it off\\n");  // a sentence, not a read
    char quote = '"'; const char* last = "STRATA_SELECT_EXACT";
    #define STRATA_SEL_SM80 1
    """
    assert switches_read(source) == {"STRATA_TOPK_MULTI", "STRATA_EMULATE_CC", "STRATA_SELECT_EXACT"}


def _library(functions: tuple[str, ...]) -> object:
    class Library:  # what variant_refusal reads of a loaded library
        name = "fake"

    lib = Library()
    lib.functions = functions  # type: ignore[attr-defined]
    return lib


def test_variants_follow_the_card_and_the_switches() -> None:
    lib = _library(FUNCTIONS[SEED])
    both = ("scores", "scores-ref", "topk", "topk-ref")
    assert engine_variants(lib, 90, {}) == (*both, "topk-cluster")
    assert engine_variants(lib, 86, {}) == (*both, "topk-split")
    assert engine_variants(lib, 75, {}) == (*both, "topk-split")
    assert engine_variants(lib, 90, {"STRATA_EMULATE_CC": "86"}) == (*both, "topk-split")
    assert engine_variants(lib, 90, {"STRATA_QSA_CLUSTER": "0"}) == both
    assert engine_variants(lib, 120, {}) == (*both, "topk-cluster")
    assert "at most 16 queries" in variant_refusal(lib, "topk-cluster", 90, {}, nq=64)
    assert "sm_86 (STRATA_EMULATE_CC=86)" in variant_refusal(lib, "topk-cluster", 90, {"STRATA_EMULATE_CC": "86"})
    with pytest.raises(EngineError, match="STRATA_EMULATE_CC"):
        answered_cc(90, {"STRATA_EMULATE_CC": "sm86"})
    with pytest.raises(ValueError, match="unknown engine variant"):
        variant_refusal(lib, "split", 90, {})
    for kind, missing in (("scores-dx", "qsa_block_scores(..., decode_dx)"), ("scores-tc", "qsa_block_scores_tc"),
                          ("topk-multi", "qsa_topk_multi_scratch_ints or qsa_block_topk(..., multi_scratch)")):
        assert variant_refusal(lib, kind, 90, {}) == f"fake: its qsa_select.hpp declares no {missing}"


def test_a_newer_checkouts_variants_on_each_card() -> None:
    """No split; the dx scorer and the multi-CTA top-k everywhere (their switches implied), the TF32 scorer from
    sm_80; the multi-CTA top-k under STRATA_QSA_CLUSTER=0 too (it implies that where the cluster would run)."""
    lib = _library((*FUNCTIONS[NEWER], *PARAMETERS[NEWER]))
    both = ("scores", "scores-ref", "scores-dx")
    assert engine_variants(lib, 90, {}) == (*both, "scores-tc", "topk", "topk-ref", "topk-cluster", "topk-multi")
    assert engine_variants(lib, 86, {}) == (*both, "scores-tc", "topk", "topk-ref", "topk-multi")
    assert engine_variants(lib, 75, {}) == (*both, "topk", "topk-ref", "topk-multi")
    assert engine_variants(lib, 90, {"STRATA_QSA_CLUSTER": "0"}) == (*both, "scores-tc", "topk", "topk-ref",
                                                                      "topk-multi")
    assert variant_refusal(lib, "topk-split", 86, {}) == ("fake: its qsa_select.hpp declares no qsa_topk_split_bytes "
                                                          "or qsa_block_topk_split")
    assert "qsa_block_scores_tc needs sm_80 or newer" in variant_refusal(lib, "scores-tc", 90, {"STRATA_EMULATE_CC": "75"})


def test_parse_engine_spec(tmp_path: Path) -> None:
    spec = parse_engine_spec("base=/src/strata@v1.4")
    assert (spec.name, spec.path, spec.revision) == ("base", Path("/src/strata"), "v1.4")
    spec = parse_engine_spec("/src/strata")
    assert (spec.name, spec.path, spec.revision) == ("strata", Path("/src/strata"), None)
    assert parse_engine_spec("/src/strata@abc123").name == "strata@abc123"
    assert parse_engine_spec("/src/a=b/strata").path == Path("/src/a=b/strata")
    assert parse_engine_spec("head=../strata@origin/main").revision == "origin/main"
    odd = tmp_path / "me@work"
    odd.mkdir()
    assert parse_engine_spec(str(odd)) == EngineSpec("me@work", odd, None)
    assert parse_engine_spec(f"base={odd}@v2") == EngineSpec("base", odd, "v2")
    for bad, message in (("base=", "no path"), ("/src/strata@", "no revision")):
        with pytest.raises(EngineError, match=message):
            parse_engine_spec(bad)


def test_revision_worktree_checks_out_a_revision(tmp_path: Path) -> None:
    repo = write_fake_engine(tmp_path / "strata")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "first")
    first = git(repo, "rev-parse", "HEAD")
    header = repo / "include/strata/kernels/qsa.hpp"
    old_text = header.read_text()
    header.write_text(old_text + "// second\n")
    assert EngineCheckout(repo).commit() == f"{first}-dirty"
    git(repo, "commit", "-q", "-am", "second")
    assert EngineCheckout(repo).commit() == git(repo, "rev-parse", "HEAD")

    with open_engine(f"base={repo}@{first[:10]}") as checkout:
        assert checkout.name == "base" and checkout.revision == first[:10] and checkout.origin == repo.resolve()
        assert checkout.commit() == first
        assert (checkout.path / "include/strata/kernels/qsa.hpp").read_text() == old_text
        tree = checkout.path
    assert not tree.exists(), "the worktree is removed afterwards"
    assert git(repo, "worktree", "list").count("\n") == 0, "and unregistered"

    with pytest.raises(RevisionError, match="unknown revision 'no-such-tag'") as info, folder_at_revision(repo, "no-such-tag"):
        pass
    assert "\n" not in str(info.value)
    plain = write_fake_engine(tmp_path / "plain")
    with pytest.raises(RevisionError, match="not a git repository"), open_engine(f"{plain}@HEAD"):
        pass


def test_find_nvcc_looks_in_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    with pytest.raises(EngineError, match="nvcc not found"):
        find_nvcc()
    nvcc = tmp_path / "cuda" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text("#!/bin/sh\n")
    nvcc.chmod(0o755)
    assert find_nvcc() == nvcc


def test_launchers_check_their_arguments_before_the_device() -> None:
    nq, mb = 2, 100
    scores, steps = np.zeros((nq, mb), np.float32), np.zeros((nq, 4), np.int32)
    ids = np.zeros((nq, SELECT_CAP), np.int32)
    bad = [
        (("topk-wide", scores, steps, ids), "unknown engine top-k variant"),
        (("topk", scores.astype(np.float64), steps, ids), "scores must be"),
        (("topk-ref", scores, steps, ids[:, :-1]), "ids must be"),
    ]
    for args, message in bad:
        with pytest.raises(ValueError, match=message):
            engine_topk_launcher(None, *args)  # type: ignore[arg-type]
    inputs = synthetic_scorer_inputs(Call(2050, 8, 9000), 0)
    out = np.zeros((8, inputs.max_blocks), np.float32)
    with pytest.raises(ValueError, match="unknown engine scorer variant"):
        engine_scorer_launcher(None, "multi", inputs, out)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="scores must be"):
        engine_scorer_launcher(None, "scores", inputs, out[:, 1:])  # type: ignore[arg-type]
    nine = synthetic_scorer_inputs(Call(2050, 9, 9000), 0)
    with pytest.raises(ValueError, match="at most 8 queries"):
        engine_scorer_launcher(None, "scores", nine, np.zeros((9, 4), np.float32))  # type: ignore[arg-type]


def test_shim_is_package_data() -> None:
    import sys

    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    root = Path(__file__).resolve().parent.parent
    config = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "engine_shim.cu" in config["qsa_cli"]


def test_a_copy_inside_another_repository_has_no_commit(tmp_path: Path) -> None:
    """Only a repository that tracks the checkout's qsa_select.cu names its commit: a copy in an ignored
    or untracked folder of another repository has none (that repository's commit says nothing of it)."""
    outer = tmp_path / "outer"
    outer.mkdir()
    git(outer, "init", "-q")
    (outer / ".gitignore").write_text("copies/\n")
    git(outer, "add", ".gitignore")
    git(outer, "commit", "-q", "-m", "outer")
    assert EngineCheckout(write_fake_engine(outer / "copies" / "strata")).commit() is None
    assert EngineCheckout(write_fake_engine(outer / "untracked")).commit() is None
    tracked = write_fake_engine(outer / "engine")  # a monorepo's engine folder: the repository's commit is its commit
    git(outer, "add", "engine")
    git(outer, "commit", "-q", "-m", "engine")
    assert EngineCheckout(tracked).commit() == git(outer, "rev-parse", "HEAD")
