"""docs/configs.md against the loader: every key config.py accepts is in the page's table (and no other),
with its place, default and allowed values; each has a section whose examples load, and whose bad examples
get exactly the error the page quotes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from qsa_cli import config
from qsa_cli.config import ConfigError, load_config
from qsa_cli.dispatch import CALL_KINDS
from qsa_cli.inputs import SCORE_SETS
from qsa_cli.record.vocabulary import KERNEL_STAGES, L2_STATES, SCORER_KEYS

PAGE = Path(__file__).resolve().parent.parent / "docs" / "configs.md"
TEXT = PAGE.read_text()
THRESHOLD_LIMITS = {k for limits in config.THRESHOLD_KEYS.values() for k in limits}


def table() -> dict[str, dict[str, str]]:
    """The key table's rows: key -> {where, type, default, allowed values}."""
    lines = TEXT.splitlines()
    start = lines.index("| key | where | type | default | allowed values |")
    rows = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        key, *cells = [c.strip() for c in line.strip("|").split("|")]
        rows[key.strip("`")] = dict(zip(("where", "type", "default", "allowed"), cells))
    return rows


def sections() -> dict[str, str]:
    """Each ``### `key``` section's text."""
    parts = re.split(r"^### `([a-z_0-9]+)`$", TEXT, flags=re.M)
    return {parts[i]: parts[i + 1].split("\n## ")[0] for i in range(1, len(parts), 2)}


def examples(section: str) -> tuple[list[str], list[tuple[str, str]]]:
    """A section's files that load, and its (file, quoted error) pairs: a block followed by ``→ `error```."""
    good, bad = [], []
    for block, error in re.findall(r"```yaml\n(.*?)```\n(?:\n→ `(.*)`\n)?", section, flags=re.S):
        (bad.append((block, error)) if error else good.append(block))
    return good, bad


def test_the_table_has_every_key_the_loader_accepts_and_no_other() -> None:
    rows = table()
    assert set(rows) == set(config.TOP_KEYS) | THRESHOLD_LIMITS
    assert {k for k, row in rows.items() if "matrix entry" in row["where"]} == set(config.CASE_KEYS)
    assert {k for k, row in rows.items() if row["where"] == "top level"} == set(config.TOP_KEYS) - set(config.CASE_KEYS)
    for limit in THRESHOLD_LIMITS:
        stages = [stage for stage, limits in config.THRESHOLD_KEYS.items() if limit in limits]
        assert re.findall(r"`(\w+)`", rows[limit]["where"]) == ["thresholds", *stages]


def test_the_tables_defaults_and_choices_are_the_loaders() -> None:
    rows = table()
    for key, default in config.DEFAULTS.items():
        shown = default[0] if isinstance(default, tuple) else default
        assert rows[key]["default"] == f"`{shown}`", key
    for key, choices in {"l2": L2_STATES, "kind": CALL_KINDS, "score_sets": SCORE_SETS, "keys": SCORER_KEYS,
                         "stages": KERNEL_STAGES}.items():
        assert re.findall(r"`(\w+)`", rows[key]["allowed"]) == list(choices), key
    for key in ("stages", "contexts", "queries", "capacity"):  # what a block cannot do without
        assert rows[key]["default"] == "required"


def test_every_key_has_a_section_in_the_tables_order() -> None:
    assert list(sections()) == list(table())


@pytest.mark.parametrize("key", list(table()))
def test_a_keys_examples_load_and_its_bad_value_gets_the_quoted_error(key: str, tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = examples(sections()[key])
    assert good and bad, f"{key}: an example and a bad value"
    monkeypatch.chdir(tmp_path)  # the errors name the file as given: sweep.yaml
    for text in good:
        assert re.search(rf"^\s*{key}:", text, flags=re.M), f"{key}'s example does not use it"
        Path("sweep.yaml").write_text(text)
        load_config("sweep.yaml")
    for text, error in bad:
        Path("sweep.yaml").write_text(text)
        with pytest.raises(ConfigError) as caught:
            load_config("sweep.yaml")
        assert str(caught.value) == error


def test_the_commands_page_links_the_page_where_it_names_qsa_sweep() -> None:
    commands = (PAGE.parent / "commands.md").read_text()
    (line,) = [line for line in commands.splitlines() if line.startswith("| `qsa sweep CONFIG`")]
    assert "(configs.md)" in line
