"""A user's own adapter (qsa_cli/engine/adapter.py, qsa_cli/qsa_adapter.h) without a device: its table read
and checked from a fake library's memory, the example adapter (tests/fake_adapter.py, the one docs/engine.md
shows) built with the fake engine for every card it targets, its files in the cache key, its failures one
line, its variants and their record, qsa info's listing."""

from __future__ import annotations

import ctypes
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from fake_adapter import ADAPTER, ENTRIES, write_adapter
from fake_engine import write_fake_engine
from fake_nvcc import builds, write_fake_nvcc
from record_factory import seed_record
from test_engine import exported, needs_nvcc

from qsa_cli.core.errors import EngineBuildError, EngineError, GeometryError
from qsa_cli.core.geometry import SELECT_CAP, Call
from qsa_cli.engine.adapter import (
    ADAPTER_HEADER,
    ADAPTER_INCLUDE,
    CHECKOUT_ADAPTER,
    MAX_ENTRIES,
    SCORER,
    SCRATCH_BYTES,
    TABLE_SYMBOL,
    TOPK,
    AdapterEntry,
    TableEntry,
    adapter_source,
    read_table,
)
from qsa_cli.engine.adapter_launch import adapter_scorer_launcher, adapter_topk_launcher
from qsa_cli.engine.attach import adapter_variants, attached
from qsa_cli.engine.build import build_engine, engine_cache_dir
from qsa_cli.engine.checkout import EngineCheckout
from qsa_cli.inputs import synthetic_scorer_inputs
from qsa_cli.output.info import info_blocks, info_csv
from qsa_cli.output.layout import text_of
from qsa_cli.record.load import load_record
from qsa_cli.record.schema import InfoReport

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("QSA_CACHE_DIR", str(tmp_path / "cache"))
    return engine_cache_dir()


# ---- the table, read from memory as the loaded library holds it ----------------------------------------

_KEPT: list[Any] = []  # the fake functions and names a table points at, kept alive (a copied entry keeps none)


def _function(kind: Any, result: int = 1) -> int:
    made = kind(lambda *args: result)
    _KEPT.append(made)
    return ctypes.cast(made, ctypes.c_void_p).value or 0


def _text(text: str | None) -> bytes | None:
    if text is None:
        return None
    _KEPT.append(text.encode())
    return _KEPT[-1]


def _entry(name: str | None, kind: str | None = "scores", *, exact: int = 1, needs_scratch: int = 0,
           scorer: bool | None = None, topk: bool | None = None, scratch: bool | None = None,
           window: str | None = None) -> TableEntry:
    """A table entry: a scorer's or a top-k's function by its kind unless given (True: one, False: none)."""
    scorer = kind == "scores" if scorer is None else scorer
    topk = kind == "topk" if topk is None else topk
    scratch = bool(needs_scratch) if scratch is None else scratch
    return TableEntry(_text(name), _text(kind), exact, needs_scratch,
                      _function(SCORER) if scorer else None, _function(TOPK) if topk else None,
                      _function(SCRATCH_BYTES, 4096) if scratch else None, _text(window))


def _table(*entries: TableEntry) -> Any:
    """The entries and the ending one (a null name) in memory, as a library's table is."""
    return (TableEntry * (len(entries) + 1))(*entries, _entry(None, None, scorer=False))


def test_a_table_is_read_entry_by_entry() -> None:
    table = _table(_entry("mine"), _entry("rough", exact=0), _entry("staged", "topk", needs_scratch=1, window="mine"),
                   _entry("dispatched-after", "topk", window="scores"))
    entries = read_table(ctypes.addressof(table), "my.cu")
    assert [e.name for e in entries] == ["mine", "rough", "staged", "dispatched-after"]
    assert [(e.stage, e.exact, e.scratch_bytes is not None, e.window_scorer) for e in entries] == [
        ("scores", True, False, None), ("scores", False, False, None), ("topk", True, True, "mine"),
        ("topk", True, False, "scores")]
    assert SCRATCH_BYTES(entries[2].scratch_bytes)(3) == 4096 and all(e.function for e in entries)
    assert entries[2].record() == {"name": "staged", "kind": "topk", "exact": True, "scratch": True,
                                   "window_scorer": "mine"}


BAD_TABLES = [
    ((_entry("a.b"),), 0, "its name is not a letter then letters, digits, '_' or '-'"),
    ((_entry("2fast"),), 0, "its name is not a letter"),
    ((_entry("x" * 41),), 0, "(at most 40)"),
    ((_entry("ok"), _entry("topk-split", "topk")), 1, "its name is a kind every checkout has (scores, "),
    ((_entry("mine"), _entry("mine")), 1, "an earlier entry has its name"),
    ((_entry("mine", "score", scorer=True),), 0, "its kind 'score' is not one of scores, topk"),
    ((_entry("mine", None, scorer=True),), 0, "its kind None is not one of scores, topk"),
    ((_entry("mine", exact=2),), 0, "its exact is 2, not 0 or 1"),
    ((_entry("mine", "topk", needs_scratch=-1, scratch=True),), 0, "its needs_scratch is -1, not 0 or 1"),
    ((_entry("mine", scorer=False),), 0, "a scores entry with no scorer function"),
    ((_entry("mine", "topk", topk=False),), 0, "a topk entry with no topk function"),
    ((_entry("mine", topk=True),), 0, "a scores entry with a topk function"),
    ((_entry("mine", "topk", scorer=True),), 0, "a topk entry with a scorer function"),
    ((_entry("mine", window="scores"),), 0, "a scores entry with a scratch or a window scorer"),
    ((_entry("mine", "topk", needs_scratch=1, scratch=False),), 0, "needs scratch but has no scratch_bytes function"),
    ((_entry("mine", "topk", scratch=True),), 0, "has a scratch_bytes function but needs_scratch is 0"),
    ((_entry("sel", "topk", window="mine"),), 0, "its window scorer 'mine' is not one of scores, scores-ref"),
    ((_entry("sel", "topk", window="sel"),), 0, "its window scorer 'sel' is not one of"),
]


@pytest.mark.parametrize(("entries", "index", "message"), BAD_TABLES, ids=[m for _, _, m in BAD_TABLES])
def test_a_bad_entry_is_one_line_naming_it(entries: tuple[TableEntry, ...], index: int, message: str) -> None:
    table = _table(*entries)  # alive while it is read
    with pytest.raises(EngineError) as info:
        read_table(ctypes.addressof(table), "my.cu")
    text = str(info.value)
    name = entries[index].name
    assert text.startswith(f"adapter my.cu: {TABLE_SYMBOL}[{index}] ({name and name.decode()!r}): "), text
    assert message in text and "\n" not in text


def test_an_empty_or_endless_table_is_refused() -> None:
    empty = _table()
    with pytest.raises(EngineError, match=f"adapter my.cu: {TABLE_SYMBOL} names no entry$"):
        read_table(ctypes.addressof(empty), "my.cu")
    endless = (TableEntry * (MAX_ENTRIES + 1))(*(_entry(f"e{i}") for i in range(MAX_ENTRIES + 1)))
    with pytest.raises(EngineError, match=f"no entry with a null name to end it within {MAX_ENTRIES} entries"):
        read_table(ctypes.addressof(endless), "my.cu")


# ---- the variants of a loaded adapter -------------------------------------------------------------------


def _loaded(*entries: AdapterEntry) -> Any:
    return SimpleNamespace(name="pr", adapter={e.name: e for e in entries})


def test_the_entries_are_variants_of_the_checkout() -> None:
    lib = _loaded(AdapterEntry("fast", "scores", True, 1), AdapterEntry("rough", "scores", False, 2),
                  AdapterEntry("mine", "topk", True, 3, 4, window_scorer="fast"),
                  AdapterEntry("after", "topk", True, 5, window_scorer="scores"))
    variants = {v.name: v for v in adapter_variants(lib, ("scores", "scores-ref", "topk"))}
    assert list(variants) == ["pr.fast", "pr.rough", "pr.mine", "pr.after"]
    assert [v.exact for v in variants.values()] == [True, False, True, True]
    assert [(v.stage, v.model, v.launch.name) for v in variants.values()] == [
        ("scores", "butterfly", "adapter-scores"), ("scores", "butterfly", "adapter-scores"),
        ("topk", "reference", "adapter-topk"), ("topk", "reference", "adapter-topk")]
    assert variants["pr.mine"].window_scorer == "pr.fast" and variants["pr.after"].window_scorer == "pr.scores"
    assert all(v.engine.checkout == "pr" and v.engine.kind == v.name[3:] and v.role == "variant"
               for v in variants.values())
    # a checkout without its decode scorer here: nothing to follow in a window
    assert adapter_variants(lib, ("scores-ref",))[3].window_scorer is None


def test_the_launchers_check_their_arguments_before_the_device() -> None:
    lib = _loaded(AdapterEntry("fast", "scores", True, 1))
    inputs = synthetic_scorer_inputs(Call(4096, 2, 8192), 0)
    variant = SimpleNamespace(name="pr.fast", engine=SimpleNamespace(kind="fast"))
    with pytest.raises(GeometryError, match="scores must be C-contiguous float32"):
        adapter_scorer_launcher(lib, variant, inputs, np.zeros((2, 4), np.float32))
    scores = np.zeros((2, inputs.max_blocks), np.float32)
    with pytest.raises(GeometryError, match="ids must be C-contiguous int32"):
        adapter_topk_launcher(lib, variant, scores, inputs.steps, np.zeros((2, SELECT_CAP), np.int64))


# ---- the example adapter, built with the fake engine -----------------------------------------------------


def test_the_docs_show_the_tested_adapter() -> None:
    """docs/engine.md's example is tests/fake_adapter.py's, byte for byte: the adapter the tests build and run."""
    text = (ROOT / "docs" / "engine.md").read_text()
    shown = re.search(r"```cpp\n(.*?)```", text, re.S)
    assert shown is not None and shown.group(1) == ADAPTER


def test_the_header_is_package_data() -> None:
    tomllib = pytest.importorskip("tomllib") if sys.version_info >= (3, 11) else pytest.importorskip("tomli")
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "qsa_adapter.h" in config["qsa_cli"] and ADAPTER_HEADER.is_file()
    assert ADAPTER_HEADER.parent == ROOT / "qsa_cli"


def test_the_example_beside_the_checkout_is_built_with_it_and_recorded(cache: Path, tmp_path: Path) -> None:
    """``--adapter``'s file compiled with the checkout (qsa_adapter.h's folder on the include path), its files in
    the record. nvcc's stand-in builds (tests/fake_nvcc.py): a real library's table is read in
    test_the_checkouts_own_adapter_is_built_and_its_includes_are_in_the_key, and tests/test_engine.py compiles
    the example for every card (test_the_fake_compiles_for_every_card_without_spills)."""
    checkout = EngineCheckout(write_fake_engine(tmp_path / "strata"), "fake")
    adapter = write_adapter(tmp_path / "mine" / "my_adapter.cu")
    nvcc = write_fake_nvcc(tmp_path / "fake-nvcc")
    build = build_engine(checkout, 80, nvcc, adapter=adapter_source(checkout, adapter))
    (command,) = builds(nvcc)
    assert build.compiled and f" -I {ADAPTER_INCLUDE} {adapter} " in command
    built = build.provenance["adapter"]
    assert built["path"] == str(adapter) and built["origin"] == "--adapter"
    assert set(built["sources"]) >= {"my_adapter.cu", str(ADAPTER_HEADER)}
    assert built["sha256"] == built["sources"]["my_adapter.cu"]


@needs_nvcc
def test_the_checkouts_own_adapter_is_built_and_its_includes_are_in_the_key(cache: Path, tmp_path: Path) -> None:
    """Built and loaded as a run does it: a real library, its table read from it; then its keys."""
    root = write_fake_engine(tmp_path / "strata")
    helper = root / "helper.cuh"
    helper.write_text("#pragma once\n#define STAGED_ROW 2051\n")
    write_adapter(root / CHECKOUT_ADAPTER, ADAPTER.replace('#include "qsa_adapter.h"\n',
                                                           '#include "qsa_adapter.h"\n#include "helper.cuh"\n'))
    with attached((f"own={root}",), 80, {}) as found:
        (provenance,) = found.provenance
        names = [v.name for v in found.variants]
        lib = found.libraries["own"]
    assert TABLE_SYMBOL in exported(lib.build.library)
    assert tuple(lib.adapter) == ENTRIES
    assert [(e.stage, e.exact, e.scratch_bytes is not None, e.window_scorer) for e in lib.adapter.values()] == [
        ("scores", True, False, None), ("topk", True, True, "scores-all"), ("scores", False, False, None)]
    assert SCRATCH_BYTES(lib.adapter["topk-staged"].scratch_bytes)(3) == 3 * SELECT_CAP * 4
    assert names[-3:] == [f"own.{e}" for e in ENTRIES]
    assert provenance["variants"][-3:] == names[-3:]
    adapter = provenance["adapter"]
    assert adapter["origin"] == "checkout" and adapter["path"] == str((root / CHECKOUT_ADAPTER).resolve())
    assert "helper.cuh" in adapter["sources"]
    assert [e["name"] for e in adapter["entries"]] == list(ENTRIES) and adapter["entries"][2]["exact"] is False
    json.dumps(provenance)  # plain data for the run record
    # the keys alone from here: nvcc's stand-in (tests/fake_nvcc.py) builds in milliseconds
    nvcc = write_fake_nvcc(tmp_path / "fake-nvcc")
    checkout = EngineCheckout(root, "own")
    before = build_engine(checkout, 80, nvcc, adapter=adapter_source(checkout, None))
    helper.write_text("#pragma once\n#define STAGED_ROW 2051  // changed\n")
    again = build_engine(checkout, 80, nvcc, adapter=adapter_source(checkout, None))
    assert again.compiled and again.provenance["cache_key"] != before.provenance["cache_key"]
    plain = build_engine(checkout, 80, nvcc)  # --adapter's absence is no adapter only where the checkout carries none
    assert plain.provenance["cache_key"] != again.provenance["cache_key"] and "adapter" not in plain.provenance


@needs_nvcc
def test_a_build_failure_names_the_adapter_and_nvccs_first_error(cache: Path, tmp_path: Path) -> None:
    checkout = EngineCheckout(write_fake_engine(tmp_path / "strata"), "fake")
    broken = write_adapter(tmp_path / "broken.cu", ADAPTER.replace("return QSA_ADAPTER_REFUSED;", "return nope;"))
    with pytest.raises(EngineBuildError) as info:
        build_engine(checkout, 80, adapter=adapter_source(checkout, broken))
    first = str(info.value).splitlines()[0]
    assert first.startswith(f"fake: adapter {broken} failed to compile: {broken}(")
    assert 'error: identifier "nope" is undefined' in first
    assert not list(cache.glob("*.so")) and not list(cache.glob(".build-*"))


# ---- the record and qsa info ------------------------------------------------------------------------------


ENTRY_RECORDS = [{"name": "scores-all", "kind": "scores", "exact": True, "scratch": False, "window_scorer": None},
                 {"name": "topk-staged", "kind": "topk", "exact": True, "scratch": True,
                  "window_scorer": "scores-all"}]


def test_a_record_with_an_adapter_reads_back(tmp_path: Path) -> None:
    data = seed_record().to_dict()
    data["settings"]["engines"] = [{"name": "fake", "variants": ["fake.scores-all"], "adapter": {
        "path": "/src/my_adapter.cu", "origin": "--adapter", "sha256": "ab" * 32,
        "sources": {"my_adapter.cu": "ab" * 32}, "entries": ENTRY_RECORDS}}]
    (tmp_path / "r.json").write_text(json.dumps(data))
    back = load_record(tmp_path / "r.json")
    assert back.settings["engines"][0]["adapter"]["entries"] == ENTRY_RECORDS


def test_info_lists_the_adapters_entries() -> None:
    report = InfoReport({}, None, [], {}, [], no_device="no CUDA device", adapters=[{
        "checkout": "fake", "path": "/src/my_adapter.cu", "origin": "--adapter", "sha256": "ab" * 32,
        "arch": "sm_75", "entries": ENTRY_RECORDS}])
    text = text_of(info_blocks(report), 100)
    assert "Adapter /src/my_adapter.cu of engine checkout fake (--adapter), as built for" in text
    cells = [[c.strip() for c in line.split("│")[1:-1]] for line in text.splitlines() if "fake.topk-staged" in line]
    assert cells == [["fake.topk-staged", "topk", "yes", "yes", "fake.scores-all"]]
    csv = info_csv(report)
    assert "adapter,fake.topk-staged,scratch,True" in csv and "adapter,fake,sha256," + "ab" * 32 in csv
