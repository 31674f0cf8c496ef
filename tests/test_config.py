"""YAML sweeps: the shipped configs load, cases expand as documented, every mistake names file:line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from qsa_cli.catalog import qsa_catalog
from qsa_cli.config import ConfigError, SweepCase, Thresholds, config_path, load_config, shipped_configs
from qsa_cli.core.geometry import MAX_QUERIES, PROMPT_QUERIES
from qsa_cli.inputs import SCORE_SETS


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


MINIMAL = """
stages: [scores]
contexts: [32K]
queries: [1, 4]
capacity: 512K
"""


def test_every_shipped_config_loads() -> None:
    names = shipped_configs()
    assert {"sm75-decode", "selftest", "ci"} <= set(names)
    for name in names:
        config = load_config(name)
        assert config.cases() and config.source.endswith(f"{name}.yaml")
        for case in config.cases():
            case.call  # noqa: B018 - a valid geometry


def test_sm75_decode_is_the_seeds_tables() -> None:
    c = load_config("sm75-decode")
    assert (c.iterations, c.l2) == (50, "clean")  # the state its earlier records were measured in
    scores = {(x.ctx, x.nq) for x in c.cases("scores")}
    assert scores == {(ctx, nq) for ctx in (32768, 131072, 420000) for nq in (1, 3, 4, 6, 8)}
    topk = {(x.ctx, x.nq, x.kind, x.score_set) for x in c.cases("topk")}
    assert topk == {(ctx, nq, "decode", "continuous") for ctx in (9000, 131072, 420000, 524288) for nq in (1, 3, 6)}
    assert {x.capacity for x in c.cases()} == {524288}
    assert c.thresholds["scores"] == Thresholds(min_speedup=1.0)


def test_selftest_is_spec_section_6() -> None:
    c = load_config("selftest")
    pairs = {(x.ctx, x.capacity) for x in c.cases()}
    assert {(9000, 9000), (135160, 135160), (135176, 135176), (2100, 262144), (9000, 262144), (32768, 262144),
            (262144, 262144), (300001, 524288), (524288, 524288), (1048576, 1048576)} <= pairs
    calls = {(x.kind, x.nq) for x in c.cases()}
    assert calls == {("decode", MAX_QUERIES), ("prompt", PROMPT_QUERIES)}
    assert {x.score_set for x in c.cases()} == set(SCORE_SETS)
    assert c.iterations == 0 and c.stages == ("topk",)


def test_iterations_auto_is_the_stopping_rules_count(tmp_path: Path) -> None:
    assert load_config(write(tmp_path, MINIMAL + "iterations: auto\n")).iterations == "auto"


def test_minimal_sweep_uses_defaults(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, MINIMAL))
    assert (c.iterations, c.warmup, c.l2, c.seed, c.description) == (50, 5, "dirty", 0, "")
    assert c.cases() == [SweepCase("scores", 32768, 1, 524288), SweepCase("scores", 32768, 4, 524288)]
    assert c.variants_for("scores", qsa_catalog()) == qsa_catalog().names("scores")  # all of them


def test_sizes_single_values_and_paired_capacities(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, """
        stages: topk
        contexts: [2100, 9K, 1m, "420000"]
        capacity: [4K, 16384, 1M, 512K]
        queries: 3
        score_sets: [equal, levels64]
        variants: {topk: [split, wide]}
    """))
    assert [(x.ctx, x.capacity) for x in c.cases()][::2] == [(2100, 4096), (9216, 16384), (1048576, 1048576),
                                                             (420000, 524288)]
    assert [x.score_set for x in c.cases()][:2] == ["equal", "levels64"]
    assert c.variants_for("topk", qsa_catalog()) == ("split", "wide")


def test_scorer_keys_per_block(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, """
        capacity: 64K
        contexts: [32K]
        queries: 2
        matrix:
          - {stages: [scores, topk], keys: [synthetic, adversarial], score_sets: [equal, adversarial]}
          - {stages: [scores], keys: adversarial}
          - {stages: [scores], contexts: [9K]}
    """))
    assert [(x.stage, x.ctx, x.keys, x.score_set) for x in c.cases()] == [
        ("scores", 32768, "synthetic", None), ("scores", 32768, "adversarial", None),
        ("topk", 32768, "synthetic", "equal"), ("topk", 32768, "synthetic", "adversarial"),
        ("scores", 9216, "synthetic", None),
    ]


def test_matrix_blocks_override_the_top_level_and_repeat_cases_once(tmp_path: Path) -> None:
    c = load_config(write(tmp_path, """
        capacity: 262144
        queries: [1]
        matrix:
          - {stages: [scores, topk], contexts: [32K]}
          - {stages: [topk], contexts: [32K, 65536], kind: decode}
          - {stages: [topk], contexts: [65536], kind: prompt, queries: [64]}
        thresholds:
          scores: {min_speedup: 1, max_floor_ratio: 2.5}
    """))
    assert [(x.stage, x.ctx, x.nq, x.kind) for x in c.cases()] == [
        ("scores", 32768, 1, "decode"), ("topk", 32768, 1, "decode"), ("topk", 65536, 1, "decode"),
        ("topk", 65536, 64, "prompt"),
    ]
    assert c.stages == ("scores", "topk")
    assert c.thresholds == {"scores": Thresholds(1.0, 2.5)}


def test_a_merge_key_repeats_a_block_and_its_own_keys_win(tmp_path: Path) -> None:
    """The block form of the issue's file: the second entry is the first (merged) at 2 queries."""
    c = load_config(write(tmp_path, """
        iterations: 2
        capacity: 32768
        matrix:
          - &b
            stages: [scores]
            contexts: [20000]
            queries: [1]
          - <<: *b
            queries: [2]
          - <<: *b
            contexts: [9000]
            queries: [3]
    """))
    assert [(x.stage, x.ctx, x.nq) for x in c.cases()] == [("scores", 20000, 1), ("scores", 20000, 2),
                                                           ("scores", 9000, 3)]


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        (MINIMAL + "contxts: [1]\n", 5, "unknown key 'contxts' (expected one of description, iterations"),
        (MINIMAL + "iterations: fifty\n", 5, "iterations must be an integer or auto (got 'fifty')"),
        (MINIMAL + "iterations: 2.5\n", 5, "iterations must be an integer"),
        (MINIMAL + "warmup: -1\n", 5, "warmup must be >= 0"),
        (MINIMAL + "l2: hot\n", 5, "l2 must be one of clean, dirty, warm (got 'hot')"),
        (MINIMAL + "l2: cold\n", 5, "l2 'cold' is now 'clean' (the read flush; 'dirty' flushes by writing)"),
        (MINIMAL + "seed: [1]\n", 5, "expected a single value"),
        (MINIMAL + "queries: 2\n", 5, "key 'queries' given twice"),
        ("stages: [scores, window]\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\n", 1, "stage must be one of scores, topk"),
        ("stages: [scores]\ncontexts: [32Q]\nqueries: [1]\ncapacity: 1K\n", 2, "a context must be a number of cells"),
        ("stages: [scores]\ncontexts: [0]\nqueries: [1]\ncapacity: 1K\n", 2, "a context must be a number of cells"),
        ("stages: [scores]\ncontexts: []\nqueries: [1]\ncapacity: 1K\n", 2, "contexts is an empty list"),
        ("stages: [scores]\ncontexts:\n  - 1K\n  - 64K\nqueries: [1]\ncapacity: 32K\n", 4,
         "context 65536, capacity 32768, queries 1: capacity must be >= context"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [1, 9]\ncapacity: 1K\n", 3, "a decode call has at most 8 queries"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [0]\ncapacity: 1K\n", 3, "queries must be >= 1"),
        ("stages: [scores]\ncontexts: [1K, 2K]\nqueries: [1]\ncapacity: [1K, 2K, 4K]\n", 4,
         "capacity lists 3 values for 2 contexts"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [1]\ncapacity: 9001\n", 4, "capacity 9001 is not a multiple of 4"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [1]\n", 1, "missing key 'capacity'"),
        ("stages: [scores, topk]\nkind: prompt\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\n", 2,
         "a prompt call is a top-k case only"),
        ("stages: [topk]\nscore_sets: [gaussian]\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\n", 2,
         "score set must be one of continuous, levels64, equal, adversarial"),
        (MINIMAL + "keys: [synthetic, random]\n", 5, "keys must be one of synthetic, adversarial (got 'random')"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\nmatrix:\n  - keys: {a: 1}\n", 6,
         "keys must be a value or a list of values, not a mapping"),
        (MINIMAL + "variants:\n  scores: [multi, wide]\n", 6,
         f"a scores variant must be one of {', '.join(qsa_catalog().names('scores'))} (got 'wide')"),
        (MINIMAL + "variants:\n  topk: [wide]\n", 6, "variants for stage 'topk', which no case runs"),
        (MINIMAL + "thresholds:\n  scores: {min_speedup: 0}\n", 6, "min_speedup must be a number > 0"),
        ("stages: [topk]\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\nthresholds:\n  topk:\n    max_floor_ratio: 2\n", 7,
         "unknown key 'max_floor_ratio' (expected one of min_speedup)"),
        ("capacity: 1K\nmatrix:\n  - stages: [topk]\n    contexts: [1K]\n    querys: [1]\n", 5, "unknown key 'querys'"),
        ("capacity: 1K\nmatrix:\n  - stages: [topk]\n    contexts: [1K]\n", 3, "missing key 'queries'"),
        ("matrix: {stages: [topk]}\n", 1, "matrix must be a value or a list of values, not a mapping"),
        ("- stages\n", 1, "a sweep file must be a mapping"),
        ("stages: [scores\ncontexts: [1K]\n", 2, "not valid YAML"),
        (MINIMAL + "<<: 5\n", 5, "a merge key (<<) expected a mapping or list of mappings for merging"),
        ("stages: [scores]\ncontexts: [1K]\nqueries: [1]\ncapacity: 1K\nseed: !!python/name:os.system x\n", 5,
         "not a plain value (could not determine a constructor"),
    ],
)
def test_errors_name_file_and_line(tmp_path: Path, text: str, line: int, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_config(path)
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(f"{path}:{line}: "), text
    assert message in text, text


def test_empty_and_missing_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="empty file"):
        load_config(write(tmp_path, "# nothing\n"))
    with pytest.raises(ConfigError, match="no such config file .*shipped: .*sm75-decode"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(ConfigError, match="no such config file"):
        load_config("sm99-nothing")


def test_config_path_prefers_a_real_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ci.yaml").write_text(MINIMAL)
    assert config_path("ci.yaml") == Path("ci.yaml")
    assert config_path("ci").parent.name == "configs"
