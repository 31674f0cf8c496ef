"""Every command, fed bad input, ends with one line on stderr and exit status 2: never a traceback,
and never a file left behind (new, partial or changed).

Each row is (command line, a fragment of the one line). In a command line, ``@name`` is a file of
FILES made in the test's folder first and ``%name`` a path there that is left as it is (it may not
exist); the command runs in that folder.
"""

from __future__ import annotations

import errno
import io
import json
import os
import resource
import shlex
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import numpy as np
import pytest
from fake_adapter import write_adapter
from fake_engine import NEWER, SELECT_HPP, write_fake_engine
from record_factory import seed_record

from qsa_cli.cli import COMMANDS, load_command, main
from qsa_cli.commands import history as history_command
from qsa_cli.core import files
from qsa_cli.core.geometry import Call
from qsa_cli.device import probe
from qsa_cli.inputs import synthetic_scorer_inputs, synthetic_scores
from qsa_cli.kernels import kernel_dir
from qsa_cli.record import baselines

ROOT = Path(__file__).resolve().parent.parent
SMALL = ("100", "2", "1", "100")  # CTX Q ITERS CAP of a tiny decode call
CPU = ("--backend", "cpu")


def _record(change: Callable[[dict], object] = lambda data: None) -> Callable[[Path], None]:
    """A record file: the hand-made seed record, its JSON form changed by ``change``."""
    def write(path: Path) -> None:
        data = seed_record().to_dict()
        change(data)
        path.write_text(json.dumps(data))
    return write


def _text(text: str) -> Callable[[Path], None]:
    return lambda path: path.write_text(text)


def _link_to_a_record(path: Path) -> None:
    """latest.json -> run-41.json, an earlier run's record: the habit a --json through a link would break."""
    _record()(path.with_name("run-41.json"))
    path.symlink_to("run-41.json")


def _read_only(path: Path) -> None:
    path.write_text("keep me\n")
    path.chmod(0o444)


def _scorer_arrays() -> dict[str, np.ndarray]:
    i = synthetic_scorer_inputs(Call(100, 2, 100), 0)
    return {"pooled": i.pooled, "dead": i.dead, "q": i.q, "steps": i.steps}


def _topk_arrays() -> dict[str, np.ndarray]:
    t = synthetic_scores(Call(100, 2, 100), "continuous", 0)
    return {"scores": t.scores, "steps": t.steps}


def _npz(arrays: Callable[[], dict[str, np.ndarray]], change: Callable[[dict], object] = lambda a: None,
         ) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        a = arrays()
        change(a)
        with open(path, "wb") as fh:
            np.savez(fh, **a)
    return write


def _truncated(write: Callable[[Path], None]) -> Callable[[Path], None]:
    def cut(path: Path) -> None:
        write(path)
        data = path.read_bytes()
        path.write_bytes(data[: len(data) // 2])
    return cut


def _zip(members: dict[str, bytes | None]) -> Callable[[Path], None]:
    """A zip archive of these members (None: the top-k array of that name, as numpy.savez writes it)."""
    def write(path: Path) -> None:
        arrays = _topk_arrays()
        with zipfile.ZipFile(path, "w") as z:
            for name, data in members.items():
                if data is None:
                    buffer = io.BytesIO()
                    np.save(buffer, arrays[name.removesuffix(".npy")])
                    data = buffer.getvalue()
                z.writestr(name, data)
    return write


def _broken_kernels(path: Path) -> None:
    shutil.copytree(kernel_dir(), path)
    (path / "scores.cu").write_text((path / "scores.cu").read_text() + "garbage !!! {{\n")


def _engine(header: Callable[[str], str] | None = lambda text: text, *, remove: str = "") -> Callable[[Path], None]:
    """A fake engine checkout (tests/fake_engine.py), its qsa_select.hpp's text changed by ``header`` (None: its
    bytes made not UTF-8), ``remove``: a file of it deleted."""
    def write(path: Path) -> None:
        write_fake_engine(path)
        hpp = path / SELECT_HPP
        if header is None:
            hpp.write_bytes(hpp.read_bytes() + b"\xff\xfe\n")
        else:
            hpp.write_text(header(hpp.read_text()))
        if remove:
            (path / remove).unlink()
    return write


def _engine_with_adapter(data: bytes) -> Callable[[Path], None]:
    """A fake engine checkout carrying its own adapter, qsa_adapter.cu, of these bytes."""
    def write(path: Path) -> None:
        write_fake_engine(path)
        (path / "qsa_adapter.cu").write_bytes(data)
    return write


def _history_store(path: Path) -> None:
    """A baseline folder of two runs of one card, at two commits (qsa history's input)."""
    for i in range(2):
        run = seed_record(seed=i)
        run.device["memory_bytes"] = 11 * 2**30
        run.git_commit, run.created = f"c{i}" + "0" * 10, f"2026-12-0{i + 1}T00:00:00+00:00"
        baselines.promote(run, f"run{i}.json", path)


def _set(changes: dict[str, object]) -> Callable[[dict], None]:
    return lambda a: a.update(changes)


def _sweep(body: str) -> Callable[[Path], None]:
    """A sweep file: one tiny block of scorer cases, ``body`` added (a key given in it replaces the block's)."""
    block = {"iterations": "1", "stages": "[scores]", "contexts": "[100]", "queries": "[2]", "capacity": "100"}
    given = {line.split(":")[0] for line in body.splitlines() if line and not line.startswith(" ")}
    lines = [f"{k}: {v}" for k, v in block.items() if k not in given]
    return _text("\n".join(lines) + "\n" + body)


def _steps(change: Callable[[np.ndarray], object]) -> Callable[[dict], None]:
    def edit(a: dict) -> None:
        change(a["steps"])
    return edit


FILES: dict[str, Callable[[Path], None]] = {
    # records
    "good.json": _record(),
    "good-copy.json": _record(),
    "other-card.json": _record(lambda d: d["device"].update(name="NVIDIA H200")),
    "incomplete.json": _record(lambda d: d.update(incomplete=True)),
    "parity-only.json": _record(lambda d: d.update(measurements=[])),
    "samples-text.json": _record(lambda d: d["measurements"][3].update(samples_us="12.5")),
    "samples-1e308.json": _record(lambda d: d["measurements"][3].update(samples_us=[1e308] * 3)),
    "case-ctx-text.json": _record(lambda d: d["measurements"][0]["case"].update(ctx="9000")),
    "no-case.json": _record(lambda d: d["parity"][1].pop("case")),
    "threshold-name.json": _record(lambda d: d["thresholds"].append(
        {"stage": "scores", "case": d["measurements"][0]["case"], "name": "fast", "value": 1.0, "limit": 2.0,
         "passed": True})),
    "clocks-text.json": _record(lambda d: d["measurements"][0]["clocks_before"].update(sm_mhz="fast")),
    "dispatch-number.json": _record(lambda d: d["settings"].update(dispatch=7)),
    "measurements-object.json": _record(lambda d: d.update(measurements={})),
    "unknown-field.json": _record(lambda d: d.update(comment="edited by hand")),
    "no-created.json": _record(lambda d: d.pop("created")),
    "schema-99.json": _record(lambda d: d.update(schema_version=99)),
    "truncated.json": _truncated(_record()),
    "not-json.json": _text("hello\n"),
    "known-no-reason.yaml": _text("- variant: cluster\n  tool: racecheck\n  match: topk_cluster.cu\n"),
    "known-mapping.yaml": _text("variant: cluster\n"),
    "empty.json": _text(""),
    "list.json": _text("[]\n"),
    "binary.json": lambda path: path.write_bytes(b"\xff\xfe\x00\x81"),
    # sweeps
    "bad-syntax.yaml": _text("stages: [scores\n"),
    "empty.yaml": _text(""),
    "list.yaml": _text("- scores\n- topk\n"),
    "unknown-key.yaml": _sweep("contxts: [100]\n"),
    "no-capacity.yaml": _text("stages: [scores]\ncontexts: [100]\nqueries: [2]\n"),
    "bad-stage.yaml": _sweep("stages: [decode]\n"),
    "bad-size.yaml": _sweep("contexts: [lots]\n"),
    "zero-queries.yaml": _sweep("queries: [0]\n"),
    "nine-queries.yaml": _sweep("queries: [9]\n"),
    "odd-capacity.yaml": _sweep("capacity: 102\n"),
    "capacities.yaml": _sweep("contexts: [100, 200]\ncapacity: [100, 200, 400]\n"),
    "small-capacity.yaml": _sweep("contexts: [200]\n"),
    "negative-iterations.yaml": _sweep("iterations: -1\n"),
    "bad-l2.yaml": _sweep("l2: tepid\n"),
    "cold-l2.yaml": _sweep("l2: cold\n"),
    "threshold-stage.yaml": _sweep("thresholds:\n  topk:\n    min_speedup: 1\n"),
    "threshold-text.yaml": _sweep("thresholds:\n  scores:\n    min_speedup: fast\n"),
    "bad-variant.yaml": _sweep("variants:\n  scores: [quick]\n"),
    "twice.yaml": _sweep("seed: 1\nseed: 2\n"),
    "prompt-scores.yaml": _sweep("kind: prompt\n"),
    "matrix-number.yaml": _sweep("matrix: 5\n"),
    "merge-scalar.yaml": _sweep("<<: 5\n"),
    "python-tag.yaml": _sweep("seed: !!python/name:os.system x\n"),
    "hex-context.yaml": _sweep("contexts: [0x64]\n"),
    "underscore-context.yaml": _sweep("contexts: [1_00]\n"),
    "binary.yaml": lambda path: path.write_bytes(b"stages: \xff\xfe\n"),
    "control-character.yaml": _sweep("description: a bell \x07\n"),
    "huge-iterations.yaml": _sweep("iterations: 100000000000\n"),
    "huge-warmup.yaml": _sweep("warmup: 100000000000\n"),
    "negative-seed.yaml": _sweep("seed: -1\n"),
    "known-not-yaml.yaml": _text("- variant: cluster\n  tool: racecheck: memcheck\n"),
    "known-unclosed.yaml": _text("- {variant: cluster, tool: racecheck\n"),
    "topk-only.yaml": _sweep("stages: [topk]\n"),
    "engine-list.yaml": _sweep("engine: [../strata]\n"),
    "engine-name.yaml": _sweep("engine:\n  base.pr: ../strata\n"),
    "engine-number.yaml": _sweep("engine:\n  base: 7\n"),
    "engine-variant.yaml": _sweep("engine:\n  base: ../strata\nvariants:\n  scores: [pr.scores]\n"),
    "engine-kind.yaml": _sweep("engine:\n  base: ../strata\nvariants:\n  scores: [base.topk]\n"),
    # input files
    "scorer.npz": _npz(_scorer_arrays),
    "topk.npz": _npz(_topk_arrays),
    "text.npz": _text("not a zip\n"),
    "npy-renamed.npz": lambda path: np.save(open(path, "wb"), _topk_arrays()["scores"]),
    "empty-file.npz": _text(""),
    "zip-of-text.npz": _zip({"scores.npy": None, "steps": b"not an array\n"}),
    "bad-header.npz": _zip({"scores.npy": b"\x93NUMPY\x01\x00garbage", "steps.npy": None}),
    "truncated.npz": _truncated(_npz(_topk_arrays)),
    "empty.npz": _npz(dict),
    "no-steps.npz": _npz(_topk_arrays, lambda a: a.pop("steps")),
    "scores-float64.npz": _npz(_topk_arrays, lambda a: a.update(scores=a["scores"].astype(np.float64))),
    "scores-1d.npz": _npz(_topk_arrays, lambda a: a.update(scores=a["scores"][0])),
    "steps-int64.npz": _npz(_topk_arrays, lambda a: a.update(steps=a["steps"].astype(np.int64))),
    "steps-3-columns.npz": _npz(_topk_arrays, lambda a: a.update(steps=a["steps"][:, :3])),
    "steps-n_kv.npz": _npz(_topk_arrays, _steps(lambda s: s.__setitem__((0, 1), s[0, 1] + 1))),
    "steps-past-capacity.npz": _npz(_topk_arrays, _steps(lambda s: s.__setitem__((1, slice(None)), [400, 401, 100, 401]))),
    "steps-other-rows.npz": _npz(_topk_arrays, lambda a: a.update(steps=a["steps"][:1])),
    "object-array.npz": _npz(_topk_arrays, lambda a: a.update(scores=np.array([{"a": 1}], dtype=object))),
    "pooled-64.npz": _npz(_scorer_arrays, lambda a: a.update(pooled=a["pooled"][:, :64].copy())),
    "pooled-2-rows.npz": _npz(_scorer_arrays, lambda a: a.update(pooled=a["pooled"][:2])),
    "no-queries.npz": _npz(_scorer_arrays, lambda a: a.update(q=a["q"][:0], steps=a["steps"][:0])),
    "dead-int32.npz": _npz(_scorer_arrays, lambda a: a.update(dead=a["dead"].astype(np.int32))),
    "nine-queries.npz": _npz(_scorer_arrays, lambda a: a.update(q=np.repeat(a["q"][:1], 9, axis=0),
                                                                steps=np.repeat(a["steps"][1:], 9, axis=0))),
    # engine checkouts
    "engine-good": _engine(),
    "engine-newer": lambda path: write_fake_engine(path, generation=NEWER),
    "engine-empty": lambda path: path.mkdir(),
    "engine-no-header": _engine(remove=SELECT_HPP),
    "engine-open-brace": _engine(lambda text: text + "garbage !!! {{\n"),
    "engine-open-comment": _engine(lambda text: text + "/* a note left open\n"),
    "engine-stray-paren": _engine(lambda text: text + "int x);\n"),
    "engine-no-functions": _engine(lambda text: "// nothing here\n#pragma once\n"),
    "engine-not-text": _engine(None),
    "engine-missing.yaml": _sweep("engine:\n  base: nowhere\n"),
    "limit-exact.yaml": _sweep("limits:\n  halve:\n    max_ulps: 8\n"),
    "engine-bad-adapter": _engine_with_adapter(b"// mine\n\xff\xfe\n"),
    # a user's adapters (tests/fake_adapter.py)
    "adapter-good.cu": lambda path: write_adapter(path),
    "adapter-not-text.cu": lambda path: path.write_bytes(b"// \xff\xfe\n"),
    "adapter-dir.cu": lambda path: path.mkdir(),
    "adapter.txt": lambda path: write_adapter(path),
    # output targets
    "dir": lambda path: path.mkdir(),
    "latest.json": _link_to_a_record,
    # a copy of qsa's kernels whose scorer does not compile
    "kernels-copy": _broken_kernels,
    "plain.txt": _text("a file, not a folder\n"),
    "read-only.json": _read_only,
    "read-only.npz": _read_only,
    "read-only.xml": _read_only,
    # a run a baseline folder may take (its card named whole), a folder of two such runs, a step summary so far
    "card.json": _record(lambda d: d["device"].update(memory_bytes=11 * 2**30)),
    "store": _history_store,
    "summary.md": _text("### an earlier step's summary\n"),
}

BAD: list[tuple[tuple[str, ...], str]] = [
    # arguments and option values
    (("select-bench", "100", "2", "1"), "takes CTX Q ITERS CAP (got 3"),
    (("select-bench", "lots", "2", "1", "100"), "CTX must be a number of cells such as 32768, 32K or 1M (got 'lots')"),
    (("select-bench", "１００", "2", "1", "100", *CPU), "CTX must be a number of cells such as 32768, 32K or 1M (got '１００')"),
    (("select-bench", "1_00", "2", "1", "100", *CPU), "CTX must be a number of cells such as 32768, 32K or 1M (got '1_00')"),
    (("select-bench", "100", "２", "1", "100", *CPU), "Q must be an integer (got '２')"),
    (("select-bench", "100", "2", "1", "1K5", *CPU), "CAP must be a number of cells such as 32768, 32K or 1M (got '1K5')"),
    (("select-bench", *SMALL, *CPU, "--json", "%" + "x" * 300 + ".json"), "File name too long"),
    (("select-bench", *SMALL, *CPU, "--json", "@latest.json"), "--json latest.json: is a symbolic link"),
    (("select-bench", *SMALL, "--warmup", "-1", *CPU), "Invalid value for '--warmup'"),
    (("select-bench", *SMALL, "--seed", "x", *CPU), "Invalid value for '--seed'"),
    (("select-bench", *SMALL, "--device", "-1"), "Invalid value for '--device'"),
    (("select-bench", *SMALL, *CPU, "--lock-clocks", "0"), "expected SM_MHZ or SM_MHZ,MEM_MHZ"),
    (("select-bench", "--inputs", "@scorer.npz", "--iters", "0", *CPU), "ITERS must be > 0"),
    (("select-bench", "--config", "ci", "--dump", "%scores.npz"), "--config takes no"),
    (("select-bench", "--config", "@topk-only.yaml", *CPU), "has no scores cases"),
    (("select-bench", *SMALL, "--l2", "lukewarm", *CPU), "Invalid value for '--l2'"),
    (("select-bench", *SMALL, "--l2", "cold"), "Invalid value for '--l2': 'cold' is now 'clean' (the read flush; "
                                               "'dirty' flushes by writing)"),
    # --timer nvbench: an unknown timer, the CPU backend, another L2 state than nvbench's cold (cuda-bench is not
    # installed here: tests/test_nvbench_timer.py refuses its absence with a stand-in put in its place)
    (("select-bench", *SMALL, "--timer", "nsight", *CPU), "Invalid value for '--timer'"),
    (("select-bench", *SMALL, "--timer", "nvbench", *CPU), "--timer nvbench times CUDA launches: it needs --backend "
                                                           "gpu"),
    (("topk-parity", *SMALL, "--timer", "nvbench", "--l2", "clean"), "--timer nvbench flushes the L2 by writing it "
                                                                     "before each cold sample: it times --l2 dirty"),
    # the stopping rule: its bounds, a rule that could never be met, and its options with an exact ITERS
    (("select-bench", "100", "2", "many", "100", *CPU), "ITERS must be an integer or auto (got 'many')"),
    (("select-bench", "--inputs", "@scorer.npz", "--iters", "some", *CPU), "Invalid value for '--iters': 'some' is "
                                                                          "not an integer or auto"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--max-noise", "0"), "Invalid value for '--max-noise'"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--max-noise", "nan"), "Invalid value for '--max-noise': "
                                                                            "'nan' is not a number"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--max-noise", "101"), "Invalid value for '--max-noise'"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--min-samples", "9"), "Invalid value for '--min-samples': 9 "
                                                                             "is not in the range 10<=x<=10000"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--timeout", "0"), "Invalid value for '--timeout'"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--timeout", "inf"), "Invalid value for '--timeout'"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--min-time", "-1"), "Invalid value for '--min-time'"),
    (("select-bench", "100", "2", "auto", "100", *CPU, "--min-time", "20"), "--min-time 20 s is more than --timeout "
                                                                           "15 s: the stopping rule could never be met"),
    (("select-bench", *SMALL, *CPU, "--max-noise", "1"), "--max-noise is the stopping rule's: it applies when ITERS is "
                                                        "auto (here ITERS is 1, an exact count)"),
    (("topk-parity", "--selftest", *CPU, "--timeout", "5"), "--timeout is the stopping rule's: it applies when ITERS "
                                                          "is auto (here ITERS is 0, an exact count, parity only)"),
    (("sweep", "@topk-only.yaml", *CPU, "--min-samples", "30"), "--min-samples is the stopping rule's"),
    (("topk-parity", *SMALL, "3", *CPU), "COUNT must be 0"),
    (("topk-parity", "2000", "1025", "1", "2000", "1", *CPU), "a prompt call has at most 1024 queries"),
    (("topk-parity", "--selftest", "--inputs", "@topk.npz", *CPU), "--selftest takes no"),
    (("topk-parity", "--inputs", "@topk.npz", "--count", "2", *CPU), "Invalid value for '--count'"),
    (("topk-parity", "--config", "ci", "--selftest"), "--config takes no"),
    (("topk-parity", "--config", "@bad-syntax.yaml", *CPU), "not valid YAML"),
    (("selftest", "--seed", "x"), "Invalid value for '--seed'"),
    (("selftest", "--require-gpu"), "--require-gpu: "),
    (("sweep",), "Missing argument 'CONFIG'"),
    (("sweep", "no-such-sweep", *CPU), "no such config file"),
    (("sweep", "@dir", *CPU), "no such config file"),
    (("window-bench", "100", "2", "0", "100"), "ITERS must be > 0"),
    # limits on inexact variants' measures: a measure, a value, a variant that is exact or absent
    (("select-bench", *SMALL, *CPU, "--limit", "max_ulp=1"), "--limit: no measure 'max_ulp' to limit"),
    (("select-bench", *SMALL, *CPU, "--limit", "max_ulps"), "--limit: limit 'max_ulps': expected [VARIANT:]MEASURE"),
    (("topk-parity", *SMALL, *CPU, "--limit", "min_id_fraction=2"), "limit min_id_fraction must be between 0 and 1"),
    (("select-bench", *SMALL, *CPU, "--limit", "halve:max_ulps=1"), "a limit for 'halve': it is exact"),
    (("sweep", "@topk-only.yaml", *CPU, "--limit", "nowhere:max_ulps=1"), "a limit for 'nowhere': the run has no"),
    (("sweep", "@limit-exact.yaml", *CPU), "limit-exact.yaml:8: a limit for 'halve': it is exact"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--limit", "multi:max_ulps=1"),
     "a limit for 'multi': it is exact"),
    (("info", "--device", "first"), "Invalid value for '--device'"),
    (("gate",), "Missing option '--baseline'"),
    (("gate", "--baseline", "%none.json", "--results", "@good.json"), "none.json: no such file"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--tolerance", "1.5"), "Invalid value for '--tolerance': 1.5 is not in the range 0<=x<1"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--tolerance", "-1"), "Invalid value"),
    (("gate", "--baseline", "@good.json", "--results", "@other-card.json"), "the baseline is not comparable"),
    (("gate", "--baseline", "@incomplete.json", "--results", "@good.json"), "the baseline record is incomplete"),
    (("gate", "--baseline", "@good.json", "--results", "@incomplete.json"), "the results record is incomplete"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--json", "%gate.json"), "with --results"),
    (("gate", "--baseline", "@good.json", "--config", "@unknown-key.yaml"), "unknown key 'contxts'"),
    (("report",), "Missing argument 'FILE...'"),
    (("report", "--merge", "@good.json", "@other-card.json"), "cannot merge"),
    (("plot", "@good.json"), "Missing option '-o'"),
    (("plot", "@good.json", "-o", "%plot.bmp"), "unknown image type '.bmp'"),
    (("plot", "@parity-only.json", "-o", "%plot.png"), "no timed measurements"),
    (("plot", "@samples-1e308.json", "-o", "%plot.png"), "3 of 3 samples are not a time > 0 and <= 1e+09 µs (the "
                                                         "first: 1e+308)"),
    (("nonsense",), "No such command"),
    # bad and hand-edited records, through each command that reads them
    (("report", "@not-json.json"), "not a JSON result record"),
    (("report", "@empty.json"), "not a JSON result record"),
    (("report", "@binary.json"), "not a JSON result record"),
    (("report", "@truncated.json"), "not a JSON result record"),
    (("report", "@list.json"), "not a qsa result record"),
    (("report", "@schema-99.json"), "schema version 99 is not supported"),
    (("report", "@dir"), "not a JSON result record"),
    (("report", "--markdown", "@samples-text.json"), "measurements[3].samples_us: expected a list of numbers"),
    (("report", "--markdown", "@case-ctx-text.json"), "measurements[0].case.ctx: expected an integer"),
    (("report", "@no-case.json"), "parity[1]: missing field 'case'"),
    (("report", "@threshold-name.json"), 'thresholds[0].name: expected "min_speedup" or "max_floor_ratio"'),
    (("report", "--markdown", "@clocks-text.json"), "measurements[0].clocks_before.sm_mhz: expected an integer or null"),
    (("report", "@dispatch-number.json"), "settings.dispatch: expected an object"),
    (("report", "@unknown-field.json"), "unknown field 'comment'"),
    (("report", "@no-created.json"), "missing field 'created'"),
    (("gate", "--baseline", "@samples-text.json", "--results", "@good.json"), "samples-text.json: measurements[3]"),
    (("gate", "--baseline", "@good.json", "--results", "@measurements-object.json"), "expected a list of objects"),
    (("gate", "--baseline", "@good.json", "--results", "@truncated.json"), "not a JSON result record"),
    (("plot", "@case-ctx-text.json", "-o", "%plot.png"), "case.ctx: expected an integer"),
    (("plot", "@truncated.json", "-o", "%plot.png"), "not a JSON result record"),
    # bad sweep files
    *((("sweep", f"@{name}", *CPU), message) for name, message in [
        ("bad-syntax.yaml", "bad-syntax.yaml:2: not valid YAML"),
        ("empty.yaml", "empty file"),
        ("list.yaml", "a sweep file must be a mapping"),
        ("unknown-key.yaml", "unknown key 'contxts'"),
        ("no-capacity.yaml", "missing key 'capacity'"),
        ("bad-stage.yaml", "stage must be one of"),
        ("bad-size.yaml", "a context must be a number of cells"),
        ("zero-queries.yaml", "queries must be >= 1"),
        ("nine-queries.yaml", "a decode call has at most 8 queries"),
        ("odd-capacity.yaml", "capacity 102 is not a multiple of 4"),
        ("capacities.yaml", "capacity lists 3 values for 2 contexts"),
        ("small-capacity.yaml", "capacity must be >= context"),
        ("negative-iterations.yaml", "iterations must be >= 0"),
        ("bad-l2.yaml", "l2 must be one of"),
        ("cold-l2.yaml", "l2 'cold' is now 'clean'"),
        ("threshold-stage.yaml", "thresholds for stage 'topk', which no case runs"),
        ("threshold-text.yaml", "min_speedup must be a number > 0"),
        ("bad-variant.yaml", "a scores variant must be one of"),
        ("twice.yaml", "key 'seed' given twice"),
        ("prompt-scores.yaml", "a prompt call is a top-k case only"),
        ("matrix-number.yaml", "a matrix entry must be a mapping"),
        ("merge-scalar.yaml", "merge-scalar.yaml:6: a merge key (<<) expected a mapping or list of mappings"),
        ("python-tag.yaml", "python-tag.yaml:6: not a plain value (could not determine a constructor"),
        ("hex-context.yaml", "a context must be a number of cells such as 32768, 32K or 1M (got '0x64')"),
        ("underscore-context.yaml", "a context must be a number of cells such as 32768, 32K or 1M (got '1_00')"),
        ("binary.yaml", "binary.yaml: cannot read"),
        ("control-character.yaml", "control-character.yaml: not valid YAML (special characters are not allowed)"),
        ("huge-iterations.yaml", "huge-iterations.yaml:5: iterations must be <= 10000 (got 100000000000)"),
        ("huge-warmup.yaml", "huge-warmup.yaml:6: warmup must be <= 10000 (got 100000000000)"),
        ("negative-seed.yaml", "negative-seed.yaml:6: seed must be >= 0 (got -1)"),
    ]),
    # bad input files
    *((("topk-parity", "--inputs", f"@{name}", "--iters", "1", *CPU), message) for name, message in [
        ("text.npz", "not a readable .npz file (not a zip archive of .npy arrays"),
        ("truncated.npz", "not a readable .npz file"),
        ("empty.npz", "missing array(s) scores, steps (has none)"),
        ("no-steps.npz", "missing array(s) steps"),
        ("scores-float64.npz", "array 'scores' must be float32 (got float64)"),
        ("scores-1d.npz", "array 'scores' must have shape [*, *]"),
        ("steps-int64.npz", "array 'steps' must be int32"),
        ("steps-3-columns.npz", "array 'steps' must have shape [2, 4]"),
        ("steps-n_kv.npz", "breaks n_kv == pos + 1"),
        ("steps-past-capacity.npz", "breaks n_bid < max_blocks - 1"),
        ("steps-other-rows.npz", "array 'steps' must have shape [2, 4] (got [1, 4])"),
        ("object-array.npz", "not a readable .npz file (array 'scores' holds Python objects (an object array))"),
        ("npy-renamed.npz", "not a readable .npz file (a single .npy array; an .npz holds named arrays"),
        ("empty-file.npz", "not a readable .npz file (an empty file)"),
        ("zip-of-text.npz", "not a readable .npz file (member 'steps' is not a .npy array)"),
        ("bad-header.npz", "not a readable .npz file (array 'scores' cannot be read"),
        ("scorer.npz", "missing array(s) scores (has dead, pooled, q, steps)"),
        ("dir", "Invalid value for '--inputs': File 'dir' is a directory"),
    ]),
    (("topk-parity", "--inputs", "%none.npz", *CPU), "none.npz: no such file"),
    *((("select-bench", "--inputs", f"@{name}", "--iters", "1", *CPU), message) for name, message in [
        ("pooled-64.npz", "array 'pooled' must have shape [*, 128]"),
        ("pooled-2-rows.npz", "array 'pooled' needs at least 3 rows"),
        ("no-queries.npz", "array 'q' has no queries"),
        ("dead-int32.npz", "array 'dead' must be float32"),
        ("nine-queries.npz", "a decode call has at most 8 queries"),
        ("topk.npz", "missing array(s) pooled, dead, q"),
        ("npy-renamed.npz", "npy-renamed.npz: not a readable .npz file (a single .npy array"),
        ("text.npz", "text.npz: not a readable .npz file (not a zip archive"),
    ]),
    # output paths: refused before anything runs
    (("select-bench", *SMALL, *CPU, "--json", "%missing/run.json"), "--json missing/run.json: no such folder missing"),
    (("select-bench", *SMALL, *CPU, "--json", "@read-only.json"), "--json read-only.json: read-only"),
    (("select-bench", *SMALL, *CPU, "--dump", "@dir"), "--dump dir: is a folder"),
    (("select-bench", *SMALL, *CPU, "--dump", "@plain.txt/out.npz"), "plain.txt is not a folder"),
    (("topk-parity", *SMALL, *CPU, "--dump", "@read-only.npz"), "--dump read-only.npz: read-only"),
    (("topk-parity", "--selftest", *CPU, "--json", "%missing/selftest.json"), "no such folder missing"),
    (("topk-parity", "--config", "@topk-only.yaml", *CPU, "--json", "@dir"), "--json dir: is a folder"),
    (("sweep", "@topk-only.yaml", *CPU, "--json", "/dev/null"), "--json /dev/null: not a regular file"),
    (("select-bench", *SMALL, *CPU, "--dump", "/dev/full"), "--dump /dev/full: not a regular file"),
    (("GITHUB_STEP_SUMMARY=/dev/full", "gate", "--baseline", "@good.json", "--results", "@good.json"),
     "GITHUB_STEP_SUMMARY /dev/full: not a regular file"),
    (("selftest", "--json", "%missing/selftest.json"), "--json missing/selftest.json: no such folder"),
    (("window-bench", *SMALL, "--json", "@read-only.json"), "--json read-only.json: read-only"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--junit", "%missing/gate.xml"), "--junit"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--junit", "@read-only.xml"), "read-only"),
    (("gate", "--baseline", "@good.json", "--json", "@dir"), "--json dir: is a folder"),
    (("plot", "@good.json", "-o", "%missing/plot.png"), "-o/--output missing/plot.png: no such folder missing"),
    (("plot", "@good.json", "-o", "@dir"), "-o/--output dir: is a folder"),
    (("plot", "@good.json", "-o", "@read-only.json"), "-o/--output read-only.json: read-only"),
    # --kernels: a folder of qsa's kernel sources
    (("select-bench", *SMALL, *CPU, "--kernels", "%none"), "--kernels none: no such folder"),
    (("selftest", "--kernels", "@dir"), "--kernels dir: no qsa_common.cuh"),
    # engine checkouts, variants and roles, before any device is looked for
    (("select-bench", *SMALL, *CPU, "--engine", "x@"), "--engine: engine 'x@': no revision after '@'"),
    (("select-bench", *SMALL, *CPU, "--engine", "@engine-good"), "--engine runs an engine checkout's kernels: it "
                                                                  "needs --backend gpu"),
    # a checkout's own problem, before the backend, the device or the sanitizer is said to be missing
    (("select-bench", *SMALL, *CPU, "--engine", "%strata"), "engine checkout strata: no such directory"),
    (("select-bench", *SMALL, "--engine", "%strata"), "engine checkout strata: no such directory"),
    (("select-bench", *SMALL, "--engine", "@engine-empty"), "engine-empty: missing src/kernels/cuda/qsa_select.cu"),
    (("topk-parity", *SMALL, "--engine", "@engine-no-header"), "missing include/strata/kernels/qsa_select.hpp"),
    (("topk-parity", *SMALL, *CPU, "--engine", "@engine-open-brace"),
     "engine-open-brace: include/strata/kernels/qsa_select.hpp: line 29: '{' is never closed"),
    (("window-bench", "4099", "2", "2", "8192", "--engine", "@engine-open-comment"),
     "qsa_select.hpp: line 29: a /* comment is never closed"),
    (("sweep", "@topk-only.yaml", "--engine", "@engine-stray-paren"), "qsa_select.hpp: line 29: ')' closes nothing"),
    (("sweep", "@topk-only.yaml", *CPU, "--engine", "@engine-no-functions"),
     "qsa_select.hpp: it declares none of qsa's host functions (qsa_block_scores, "),
    (("sweep", "@engine-missing.yaml"), "/nowhere: no such directory"),
    (("sweep", "@engine-missing.yaml", *CPU), "/nowhere: no such directory"),
    (("selftest", "--engine", "@engine-empty"), "engine-empty: missing src/kernels/cuda/qsa_select.cu"),
    (("selftest", "--require-gpu", "--engine", "%strata"), "engine checkout strata: no such directory"),
    (("sanitize", "--engine", "@engine-not-text"), "engine-not-text: cannot read include/strata/kernels/qsa_select.hpp"),
    (("gate", "--baseline", "@good.json", "--engine", "@engine-open-brace"), "'{' is never closed"),
    (("info", "--engine", "%strata"), "engine checkout strata: no such directory"),
    (("info", "--engine", "@engine-open-brace"), "engine-open-brace: include/strata/kernels/qsa_select.hpp: line 29"),
    (("info", "--engine", "@engine-no-functions"), "it declares none of qsa's host functions"),
    (("info", "--engine", "a=strata", "--engine", "a=strata2"), "two engine checkouts are named 'a'"),
    # a user's adapter: its file checked as it is parsed, a checkout's own before anything is built
    (("select-bench", *SMALL, "--engine", "@engine-good", "--adapter", "%none.cu"), "--adapter none.cu: no such file"),
    (("topk-parity", *SMALL, "--engine", "@engine-good", "--adapter", "@adapter-dir.cu"),
     "--adapter adapter-dir.cu: not a file"),
    (("window-bench", *SMALL, "--engine", "@engine-good", "--adapter", "@adapter.txt"),
     "--adapter adapter.txt: not a .cu file"),
    (("info", "--engine", "@engine-good", "--adapter", "@adapter-not-text.cu"),
     "--adapter adapter-not-text.cu: not UTF-8 text (byte 3)"),
    (("selftest", "--engine", "@engine-good", "--adapter", "%none.cu"), "--adapter none.cu: no such file"),
    (("select-bench", *SMALL, *CPU, "--adapter", "@adapter-good.cu"),
     "an adapter adds variants to an engine checkout: name one with --engine"),
    (("info", "--adapter", "@adapter-good.cu"), "an adapter adds variants to an engine checkout"),
    (("sanitize", "--adapter", "@adapter-good.cu"), "an adapter adds variants to an engine checkout"),
    (("sanitize", "--engine", "@engine-bad-adapter"), "engine-bad-adapter/qsa_adapter.cu: not UTF-8 text (byte 8)"),
    (("select-bench", *SMALL, "--engine", "@engine-bad-adapter"), "qsa_adapter.cu: not UTF-8 text (byte 8)"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--adapter", "@adapter-good.cu"),
     "--adapter adds variants to the run the gate makes; with --results it makes none"),
    (("STRATA_QSA_CLUSTER=banana", "info"), "STRATA_QSA_CLUSTER must be 0 or 1 (got 'banana')"),
    (("QSA_PDL=banana", "info"), "QSA_PDL must be 0 or 1 (got 'banana')"),
    (("PATH=/nonexistent", "CUDA_HOME=/nonexistent", "select-bench", *SMALL, "--engine", "@engine-good"),
     "nvcc not found on PATH or in $CUDA_HOME/bin"),
    (("topk-parity", *SMALL, *CPU, "--variants", "wide,fast"), "--variants: no variant 'fast'"),
    (("topk-parity", *SMALL, *CPU, "--variants", ","), "--variants: no variant named"),
    (("select-bench", *SMALL, *CPU, "--variants", "halve,x.scores[STRATA_SCORES_RS=0,STRATA_TOPK_OLD=1]"),
     "--variants: no variant 'x.scores[STRATA_SCORES_RS=0,STRATA_TOPK_OLD=1]'"),
    (("select-bench", *SMALL, *CPU, "--engine", "@engine-good", "--variants", "engine-good.scores[STRATA_SCORES_DX=1]"),
     "variant 'engine-good.scores[STRATA_SCORES_DX=1]': checkout engine-good reads no STRATA_SCORES_DX (its sources "
     "read STRATA_EMULATE_CC, STRATA_QSA_CLUSTER, STRATA_SCORES_MULTI, STRATA_SCORES_RS)"),
    (("topk-parity", *SMALL, *CPU, "--engine", "@engine-newer", "--candidate", "engine-newer.topk[STRATA_TOPK_SPLIT=1]"),
     "checkout engine-newer reads no STRATA_TOPK_SPLIT (its sources read STRATA_EMULATE_CC, STRATA_QSA_CLUSTER, "),
    (("topk-parity", *SMALL, *CPU, "--engine", "@engine-newer", "--variants", "engine-newer.topk-multi[STRATA_TOPK_MULTI=0]"),
     "topk-multi runs under STRATA_TOPK_MULTI=1 (its path), so it cannot set STRATA_TOPK_MULTI=0"),
    (("select-bench", *SMALL, *CPU, "--engine", "@engine-newer", "--variants", "engine-newer.scores[STRATA_TOPK_MULTI_N=x]"),
     "STRATA_TOPK_MULTI_N must be a positive count (got 'x')"),
    (("select-bench", *SMALL, *CPU, "--baseline", "slowest"), "--baseline: no variant 'slowest'"),
    (("select-bench", *SMALL, *CPU, "--candidate", "cluster2"), "--candidate: no variant 'cluster2'"),
    (("sweep", "@engine-list.yaml", *CPU), "engine must be a mapping"),
    (("sweep", "@engine-name.yaml", *CPU), "engine name 'base.pr': letters, digits"),
    (("sweep", "@engine-number.yaml", *CPU), "engine 'base': expected a checkout's path"),
    (("sweep", "@engine-variant.yaml", *CPU), "a scores variant must be one of"),
    (("sweep", "@engine-kind.yaml", *CPU), "(got 'base.topk')"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--engine", "%strata"),
     "--engine adds variants to the run the gate makes"),
    (("compare", "%a", "%b", *SMALL, *CPU), "compare runs the sides' kernels: it needs --backend gpu"),
    (("compare", "%a", "%b", *SMALL, "--engine", "%c"), "compare takes its variants from BASE and CANDIDATE, not --engine"),
    (("compare", "%a", "%b", *SMALL, "--variants", "halve"), "not --variant"),
    (("compare", "%a", "%b", "100", "2", "1"), "compare takes CTX Q ITERS CAP (got 3"),
    (("compare", "%a", "%b", "100", "2", "1", "100", "--config", "ci"), "--config takes no CTX Q ITERS CAP"),
    (("compare", "%a", "%b", "100", "2", "1", "100", "--tolerance", "1.5"), "Invalid value for '--tolerance'"),
    (("compare", "%a@", "%b", *SMALL), "no revision after '@'"),
    # qsa sanitize: its arguments and its known-hazards file, before compute-sanitizer is looked for
    (("sanitize", "--tools", "memcheck,leakcheck"), "--tools: unknown tool 'leakcheck'"),
    (("sanitize", "--jobs", "0"), "--jobs"),
    (("sanitize", "--json", "%missing/sanitize.json"), "--json missing/sanitize.json: no such folder missing"),
    (("sanitize", "--known", "%none.yaml"), "none.yaml: cannot read"),
    (("sanitize", "--known", "@known-no-reason.yaml"), "entry 0: needs exactly variant, tool, match and reason"),
    (("sanitize", "--known", "@known-mapping.yaml"), "a list of known hazards expected"),
    (("sanitize", "--known", "@known-not-yaml.yaml"), "known-not-yaml.yaml:2: not valid YAML (mapping values are not "
                                                       "allowed here)"),
    (("sanitize", "--known", "@known-unclosed.yaml"), "known-unclosed.yaml:2: not valid YAML (expected ',' or '}'"),
    (("sanitize", "--known", "@binary.yaml"), "binary.yaml: cannot read ('utf-8' codec can't decode"),
    # a capacity is whole blocks, and ITERS and the warm-up are bounded, as in a sweep file
    (("select-bench", "100", "2", "1", "102", *CPU), "capacity 102 is not a multiple of 4 cells (one block holds 4)"),
    (("topk-parity", "100", "2", "1", "32767", "0", *CPU), "capacity 32767 is not a multiple of 4 cells"),
    (("window-bench", "100", "2", "1", "102"), "capacity 102 is not a multiple of 4 cells"),
    (("compare", "%a", "%b", "100", "2", "1", "102"), "capacity 102 is not a multiple of 4 cells"),
    (("select-bench", "100", "2", "10001", "100", *CPU), "ITERS must be <= 10000 (got 10001)"),
    (("topk-parity", "--inputs", "@topk.npz", "--iters", "100000000000", *CPU), "ITERS must be <= 10000"),
    (("compare", "%a", "%b", "100", "2", "10001", "100"), "ITERS must be <= 10000 (got 10001)"),
    (("select-bench", *SMALL, *CPU, "--warmup", "1000000000000"), "Invalid value for '--warmup': 1000000000000 is "
                                                                  "not in the range 0<=x<=10000"),
    (("sweep", "@topk-only.yaml", *CPU, "--warmup", "10001"), "Invalid value for '--warmup'"),
    # a seed numpy cannot take, named by its option
    (("select-bench", *SMALL, *CPU, "--seed", "-1"), "Invalid value for '--seed': -1 is not in the range x>=0"),
    (("topk-parity", *SMALL, *CPU, "--seed", "-1"), "Invalid value for '--seed'"),
    (("selftest", "--seed", "-1"), "Invalid value for '--seed'"),
    (("sanitize", "--seed", "-1"), "Invalid value for '--seed'"),
    # the switches of the environment, each in its domain, whether or not it decides anything in the run
    (("STRATA_SCORES_HALVE=banana", "select-bench", *SMALL, *CPU), "STRATA_SCORES_HALVE must be 0 or 1 (got 'banana')"),
    (("QSA_PDL=banana", "select-bench", *SMALL, *CPU), "QSA_PDL must be 0 or 1 (got 'banana')"),
    (("QSA_SOURCE_COMMIT=HEAD", "select-bench", *SMALL, *CPU), "QSA_SOURCE_COMMIT='HEAD' is not a commit"),
    (("QSA_SOURCE_COMMIT=0123ABC", "selftest"), "QSA_SOURCE_COMMIT='0123ABC' is not a commit"),
    (("QSA_PDL=2", "topk-parity", *SMALL, *CPU), "QSA_PDL must be 0 or 1 (got '2')"),
    (("STRATA_TOPK_SPLIT=7", "select-bench", *SMALL, *CPU), "STRATA_TOPK_SPLIT must be 0 or 1 (got '7')"),
    (("STRATA_TOPK_SPLIT=yes", "sweep", "@topk-only.yaml", *CPU), "STRATA_TOPK_SPLIT must be 0 or 1 (got 'yes')"),
    (("STRATA_SCORES_HALVE=2", "selftest"), "STRATA_SCORES_HALVE must be 0 or 1 (got '2')"),
    # --kernels where its kernels would not run: the record would name sources that never compiled
    (("select-bench", *SMALL, *CPU, "--kernels", "@kernels-copy"), "--kernels does not apply to --backend cpu: the CPU "
                                                                  "backend compiles no kernels"),
    (("topk-parity", *SMALL, *CPU, "--kernels", "@kernels-copy"), "--kernels does not apply to --backend cpu"),
    (("sweep", "@topk-only.yaml", *CPU, "--kernels", "@kernels-copy"), "--kernels does not apply to --backend cpu"),
    (("selftest", "--kernels", "@kernels-copy"), "no device here to compile and run its kernels"),
    # roles that compare nothing
    (("select-bench", *SMALL, *CPU, "--variants", "multi", "--baseline", "halve"), "--baseline halve: it is the "
                                                                                  "candidate too"),
    (("select-bench", *SMALL, *CPU, "--baseline", "halve"), "so the before and after would be one variant (give "
                                                           "--candidate another)"),
    (("topk-parity", *SMALL, *CPU, "--candidate", "wide"), "--candidate wide: it is the baseline too"),
    (("select-bench", *SMALL, *CPU, "--variants", "multi", "--candidate", "reference"),
     "--candidate reference: --variants leaves it out, so the before and after would compare nothing"),
    # two of a command's files that are one
    (("select-bench", *SMALL, *CPU, "--json", "%out.json", "--dump", "%out.json"), "--json and --dump name one file, "
                                                                                  "out.json: give each its own"),
    (("topk-parity", "--inputs", "@topk.npz", "--iters", "1", *CPU, "--dump", "@topk.npz"),
     "--inputs and --dump name one file, topk.npz"),
    (("sweep", "@topk-only.yaml", *CPU, "--json", "@topk-only.yaml"), "--config and --json name one file"),
    (("select-bench", "--config", "@topk-only.yaml", *CPU, "--json", "@topk-only.yaml"), "--config and --json name"),
    (("gate", "--baseline", "@good.json", "--json", "@good.json"), "--baseline and --json name one file, good.json"),
    (("gate", "--baseline", "@good.json", "--results", "@good-copy.json", "--junit", "@good-copy.json"),
     "--results and --junit name one file"),
    (("sanitize", "--known", "@known-mapping.yaml", "--json", "@known-mapping.yaml"), "--known and --json name one"),
    # options that would not be applied, and a record would say they were
    (("select-bench", *SMALL, *CPU, "--warmup", "7"), "--warmup does not apply to --backend cpu: the CPU backend "
                                                     "times its models after one untimed run of each"),
    (("sweep", "@topk-only.yaml", *CPU, "--l2", "warm"), "--l2 does not apply to --backend cpu"),
    (("select-bench", *SMALL, *CPU, "--lock-clocks", "1500"), "--lock-clocks does not apply to --backend cpu"),
    (("topk-parity", *SMALL, *CPU, "--device", "1"), "--device does not apply to --backend cpu"),
    (("select-bench", *SMALL, *CPU, "--lock-clocks-optional"), "--lock-clocks-optional does not apply"),
    (("select-bench", "100", "2", "1", "100", "--lock-clocks-optional"), "--lock-clocks-optional goes with "
                                                                        "--lock-clocks SM_MHZ[,MEM_MHZ]"),
    (("select-bench", *SMALL, *CPU, "--iters", "5"), "--iters goes with --inputs FILE (the ITERS of its call)"),
    (("topk-parity", *SMALL, *CPU, "--count", "0"), "--count goes with --inputs FILE (the COUNT of its call)"),
    (("topk-parity", "--selftest", *CPU, "--iters", "5"), "--iters goes with --inputs FILE"),
    (("select-bench", "--config", "@topk-only.yaml", *CPU, "--iters", "3"), "--iters goes with --inputs FILE"),
    (("topk-parity", "--selftest", *CPU, "--dump", "%ids.npz"), "--selftest takes no CTX Q ITERS CAP, --inputs or "
                                                                "--dump"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--config", "nosuch"),
     "--config names the sweep of the run the gate makes; with --results it makes none"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--kernels", "@kernels-copy"),
     "--kernels compiles the kernels of the run the gate makes"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--device", "1"), "--device picks the device of"),
    # report --merge: each (case, variant) from one file, never twice
    (("report", "--merge", "@good.json", "@good.json"), "cannot merge: multi on scores ctx=32768 nq=1 "
                                                        "capacity=524288 kind=decode l2=clean twice (good.json is given twice)"),
    (("report", "--merge", "@good.json", "@good-copy.json"), "(good.json and good-copy.json both hold it)"),
    (("report", "--merge", "@parity-only.json", "@parity-only.json"), "(parity-only.json is given twice)"),
]


def _command(args: tuple[str, ...]) -> tuple[str, ...]:
    """A row's command line less the ``NAME=VALUE`` environment settings that lead it, as in a shell."""
    return args[next(i for i, arg in enumerate(args) if "=" not in arg or not arg[:1].isupper()):]


def _made(arg: str, folder: Path) -> str:
    """An ``@name`` argument (a FILES entry, possibly with a path under it) with its entry made in ``folder``,
    once: the path it names."""
    name = arg[1:].split("/")[0]
    if not (folder / name).exists():
        FILES[name](folder / name)
    return arg[1:]


def _environment(args: tuple[str, ...], folder: Path | None = None) -> dict[str, str]:
    """The ``NAME=VALUE`` settings leading a row; a VALUE ``@name`` is a FILES entry made in ``folder``."""
    settings = dict(arg.split("=", 1) for arg in args[:len(args) - len(_command(args))])
    return {name: _made(value, folder) if value.startswith("@") and folder is not None else value
            for name, value in settings.items()}


def _argv(args: tuple[str, ...], folder: Path) -> list[str]:
    """The command line with its files made: ``@name`` (a FILES entry), ``%text`` the text as it is."""
    return [_made(arg, folder) if arg.startswith("@") else arg[1:] if arg.startswith("%") else arg
            for arg in _command(args)]


def _snapshot(folder: Path) -> dict[str, tuple[int, bytes | None]]:
    """Every path under ``folder`` (hidden ones too) with its mode and, for a file, its bytes."""
    return {str(p.relative_to(folder)): (p.stat().st_mode, p.read_bytes() if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def test_the_table_is_long_enough() -> None:
    assert len(BAD) >= 120 and len({args for args, _ in BAD}) == len(BAD)
    assert {_command(args)[0] for args, _ in BAD} >= {"select-bench", "topk-parity", "selftest", "sweep", "window-bench",
                                                     "gate", "report", "plot", "info", "sanitize", "compare"}


@pytest.mark.parametrize(("args", "message"), BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, args, message) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in _environment(args).items():
        monkeypatch.setenv(name, value)
    argv = _argv(args, tmp_path)
    before = _snapshot(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    assert ended.value.code == 2, (out, err)
    assert err.startswith("qsa: error: ") and err.count("\n") == 1 and err.endswith("\n"), err
    assert message in err, err
    assert "allow_pickle" not in err  # numpy's advice, for a file qsa must never unpickle
    assert out == ""
    assert _snapshot(tmp_path) == before


# a command that needs a device, without one: its one line never advises --backend cpu, which it lacks or refuses
NEEDS_A_DEVICE = [("window-bench", *SMALL), ("gate", "--baseline", "@good.json"),
                  ("select-bench", *SMALL, "--engine", "@engine-good"), ("selftest", "--engine", "@engine-good"),
                  ("sweep", "@topk-only.yaml", "--engine", "@engine-good")]


@pytest.mark.skipif(probe().available, reason="a machine without a CUDA device")
@pytest.mark.parametrize("args", NEEDS_A_DEVICE, ids=[" ".join(a) for a in NEEDS_A_DEVICE])
def test_without_a_device_no_command_advises_an_option_it_lacks(capsys, tmp_path, monkeypatch, args) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(_argv(args, tmp_path))
    out, err = capsys.readouterr()
    assert ended.value.code == 2 and out == "" and err.startswith("qsa: error: ") and err.count("\n") == 1, err
    assert "--backend cpu" not in err


@pytest.mark.skipif(probe().available, reason="a machine without a CUDA device")
def test_without_a_device_a_good_checkout_is_refused_for_the_device_it_lacks(capsys, tmp_path, monkeypatch) -> None:
    """Its files and header pass, so what is said is the device: the selftest would run only the CPU models."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as ended:
        main(_argv(("selftest", "--engine", "@engine-good"), tmp_path))
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.startswith("qsa: error: --engine engine-good: no device here to "
                                                    "compile and run its kernels (CuPy is not installed"), err


@pytest.mark.skipif(probe().available, reason="a machine without a CUDA device")
def test_without_a_device_a_command_that_runs_on_the_cpu_backend_advises_it(capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        main(["sweep", "ci"])
    err = capsys.readouterr().err
    assert ended.value.code == 2 and err.endswith(" (use --backend cpu to run the CPU models)\n"), err


def test_the_good_record_passes_the_gate(capsys, tmp_path) -> None:
    """So each gate row above fails for the reason it names, not for its good record."""
    FILES["good.json"](tmp_path / "good.json")
    good = str(tmp_path / "good.json")
    with pytest.raises(SystemExit) as ended:
        main(["gate", "--baseline", good, "--results", good])
    assert ended.value.code == 0 and "GATE PASS" in capsys.readouterr().out


def test_no_command_is_one_line_naming_the_commands(capsys) -> None:
    with pytest.raises(SystemExit) as ended:
        main([])
    out, err = capsys.readouterr()
    assert (ended.value.code, out) == (2, "")
    assert err == f"qsa: error: no command given (qsa --help says what each does: {', '.join(sorted(COMMANDS))})\n"
    assert "select-bench, selftest, sweep" in err


# stdout as a shell leaves it (closed, a full device, read-only) and the line qsa ends with, before anything runs
CLOSED = "qsa: error: stdout is closed: qsa prints its results there (redirect it to a file or /dev/null)"
FULL_DEVICE = "qsa: error: stdout: cannot write (No space left on device)"
RUN = f"select-bench {' '.join(SMALL)} --backend cpu --json r.json"
STDOUTS = [
    (RUN, ">&-", CLOSED),
    (RUN, "> /dev/full", FULL_DEVICE),
    (RUN, "1< /dev/null", "qsa: error: stdout: cannot write (Bad file descriptor)"),
    ("info", ">&-", CLOSED),  # the issue's own
    ("info", "> /dev/full", FULL_DEVICE),
]


@pytest.mark.parametrize(("command", "redirect", "line"), STDOUTS, ids=[f"{c.split()[0]} {r}" for c, r, _ in STDOUTS])
def test_a_stdout_that_cannot_be_written_is_one_line_before_the_run(tmp_path, command, redirect, line) -> None:
    if redirect == "> /dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    res = subprocess.run(f"{shlex.quote(sys.executable)} -m qsa_cli {command} {redirect}", shell=True, cwd=tmp_path,
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert (res.returncode, res.stderr) == (2, line + "\n")
    assert list(tmp_path.iterdir()) == []


def test_sizes_take_k_and_m_on_the_command_line_as_in_a_sweep_file(capsys, tmp_path) -> None:
    """``CAP 32K`` is 32768 here as in a sweep (one rule for sizes; the table refuses 1K5, 1_00 and full-width
    digits)."""
    with pytest.raises(SystemExit) as ended:
        main(["select-bench", "4K", "2", "1", "8K", *CPU, "--quiet", "--json", str(tmp_path / "r.json")])
    assert ended.value.code == 0, capsys.readouterr().err
    case = json.loads((tmp_path / "r.json").read_text())["measurements"][0]["case"]
    assert (case["ctx"], case["capacity"]) == (4096, 8192)


def test_every_option_of_every_command_says_what_it_does() -> None:
    """``--device`` had no help text: each option's ``--help`` line says something."""
    silent = [f"{name} {param.opts[0]}" for name in COMMANDS for param in load_command(name).params
              if isinstance(param, click.Option) and not param.hidden and not (param.help or "").strip()]
    assert silent == []


def test_a_stream_that_cannot_carry_mu_gets_its_plain_spelling(tmp_path) -> None:
    res = subprocess.run([sys.executable, "-m", "qsa_cli", "select-bench", "4096", "2", "1", "8192", "--backend", "cpu"],
                         cwd=tmp_path, capture_output=True, env={**os.environ, "PYTHONPATH": str(ROOT),
                                                                 "PYTHONIOENCODING": "ascii", "COLUMNS": "80"})
    out = res.stdout.decode("ascii")  # every byte ASCII
    assert res.returncode == 0 and res.stderr == b"", res.stderr
    assert "Scorer: every variant, median us per call" in out and out.endswith("PASS\n")


# The disk fills while a command writes (ENOSPC), after the run: an output file (each goes through a temporary
# file beside it: the fake lets 16 bytes of it through, then refuses), the step summary appended to, or stdout
# as the results print. Each row: the command line, what fills (a part of the written file's path, or stdout),
# and a fragment of the one line. One line, exit 2, no traceback; no temporary or part-written file is left,
# and every file that was there keeps its bytes (the summary is cut back to its length before).
FULL: list[tuple[tuple[str, ...], str, str]] = [
    (("select-bench", *SMALL, *CPU, "--quiet", "--json", "%r.json"), "r.json", "r.json: cannot write (No space"),
    (("topk-parity", *SMALL, *CPU, "--quiet", "--dump", "%ids.npz"), "ids.npz", "ids.npz: cannot write (No space"),
    (("sweep", "@topk-only.yaml", *CPU, "--quiet", "--json", "%run.json"), "run.json", "run.json: cannot write"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--junit", "%gate.xml"), "gate.xml",
     "gate.xml: cannot write (No space left on device)"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json", "--comment", "%comment.md"), "comment.md",
     "comment.md: cannot write (No space left on device)"),
    (("GITHUB_STEP_SUMMARY=@summary.md", "gate", "--baseline", "@good.json", "--results", "@good.json"), "summary.md",
     "summary.md: cannot write (No space left on device)"),
    (("plot", "@good.json", "-o", "%plot.png"), "plot.png", "plot.png: cannot write (No space left on device)"),
    (("baseline", "promote", "@card.json", "--dir", "%baselines"), "/baselines/", "cannot write (No space left"),
    (("baseline", "promote", "@card.json", "--dir", "@store"), "current", "current: cannot write (No space left"),
    (("history", "@store", "--html", "%history.html"), "history.html", "history.html: cannot write (No space"),
    (("report", "@good.json"), "stdout", "stdout: cannot write (No space left on device): what was printed is cut"),
    (("report", "--format", "csv", "@good.json"), "stdout", "stdout: cannot write (No space left on device)"),
    (("report", "--format", "markdown", "@good.json"), "stdout", "stdout: cannot write (No space left on device)"),
    (("history", "@store", "--format", "json"), "stdout", "stdout: cannot write (No space left on device)"),
    (("select-bench", *SMALL, *CPU, "--quiet", "--json", "-"), "stdout", "stdout: cannot write (No space left on"),
    (("gate", "--baseline", "@good.json", "--results", "@good.json"), "stdout", "stdout: cannot write (No space"),
    (("baseline", "list", "@store"), "stdout", "stdout: cannot write (No space left on device)"),
]
ENOSPC = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
LET_THROUGH = 16  # bytes (characters on stdout) a filling file takes before it refuses the rest


class _Filling:
    """A file that takes LET_THROUGH bytes, then refuses every write as a full file system does."""

    def __init__(self, file: Any) -> None:
        self.file, self.left = file, LET_THROUGH

    def write(self, data: Any) -> int:
        if len(data) > self.left:
            if self.left:
                self.file.write(data[:self.left])
                self.file.flush()
            self.left = 0
            raise ENOSPC
        self.left -= len(data)
        return self.file.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)

    def __enter__(self) -> _Filling:
        return self

    def __exit__(self, *exc: object) -> None:
        self.file.close()


class _FullStdout(io.StringIO):
    """stdout on a file system that fills after LET_THROUGH characters."""

    def write(self, text: str) -> int:
        if self.tell() + len(text) > LET_THROUGH:
            raise ENOSPC
        return super().write(text)


def _fill(monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    """From now on the disk fills under ``what``: a file whose path holds it, or stdout."""
    if what == "stdout":
        monkeypatch.setattr(sys, "stdout", _FullStdout())
        return
    opened_fd, opened = os.fdopen, open

    def fdopen(fd: int, *args: Any, **kwargs: Any) -> Any:  # atomic_write's temporary file
        file = opened_fd(fd, *args, **kwargs)
        return _Filling(file) if what in os.readlink(f"/proc/self/fd/{fd}") else file

    def open_(path: Any, *args: Any, **kwargs: Any) -> Any:  # files.append_whole's
        file = opened(path, *args, **kwargs)
        return _Filling(file) if what in str(path) else file

    monkeypatch.setattr(os, "fdopen", fdopen)
    monkeypatch.setattr(files, "open", open_, raising=False)


@pytest.mark.parametrize(("args", "what", "message"), FULL, ids=[" ".join(a) for a, _, _ in FULL])
def test_a_disk_that_fills_mid_write_is_one_line_and_leaves_nothing(capsys, tmp_path, monkeypatch, args, what,
                                                                      message) -> None:
    monkeypatch.chdir(tmp_path)
    for name, value in _environment(args, tmp_path).items():
        monkeypatch.setenv(name, value)
    argv = _argv(args, tmp_path)
    before = _snapshot(tmp_path)
    # the history's page and plot as made in memory (drawing them is not what fills): only their writing is
    monkeypatch.setattr(history_command, "pictures",
                        lambda h, folder, png, page: (png and b"\x89PNG" * 8, page and "<p>a page</p>" * 4))
    _fill(monkeypatch, what)
    with pytest.raises(SystemExit) as ended:
        main(argv)
    err = capsys.readouterr().err
    assert ended.value.code == 2 and "Traceback" not in err, err
    lines = err.splitlines()
    if argv[:2] == ["baseline", "promote"]:  # first the line saying no device here checked the run's card
        assert len(lines) == 2 and lines[0].startswith("qsa: baseline: no device here"), err
    else:
        assert len(lines) == 1, err
    assert lines[-1].startswith("qsa: error: ") and message in lines[-1], err
    assert _snapshot(tmp_path) == before


def test_the_full_disk_table_fills_every_kind_of_output() -> None:
    """Every writer of a file a command leaves, and stdout through every format."""
    assert {what for _, what, _ in FULL if what != "stdout"} >= {"r.json", "ids.npz", "gate.xml", "comment.md",
                                                                 "summary.md", "plot.png", "current", "history.html"}
    printed = [a for a, what, _ in FULL if what == "stdout"]
    assert {"csv", "markdown"} <= {a[a.index("--format") + 1] for a in printed if "--format" in a}


def test_a_file_size_limit_mid_print_is_one_line(tmp_path) -> None:
    """A real refusal by the system: stdout to a file under a size limit (RLIMIT_FSIZE: past it a write fails
    with EFBIG, as one fails with ENOSPC on a full file system; Python ignores the signal that comes with it)."""
    FILES["good.json"](tmp_path / "good.json")
    limit = 1000
    with open(tmp_path / "out.txt", "w") as out:
        res = subprocess.run([sys.executable, "-m", "qsa_cli", "report", "good.json"], cwd=tmp_path, stdout=out,
                             stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    assert (res.returncode, res.stderr) == (2, "qsa: error: stdout: cannot write (File too large): what was printed "
                                               "is cut short\n")
    assert 0 < (tmp_path / "out.txt").stat().st_size <= limit


def test_a_reader_gone_before_a_line_outside_the_tables_ends_it_quietly(capsys, tmp_path, monkeypatch) -> None:
    """qsa baseline promote's line naming the stored run, after it is stored: a closed pipe there is no error."""
    monkeypatch.chdir(tmp_path)
    FILES["card.json"](tmp_path / "card.json")

    class Closed(io.StringIO):
        def write(self, text: str) -> int:
            raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))

    monkeypatch.setattr(sys, "stdout", Closed())
    with pytest.raises(SystemExit) as ended:
        main(["baseline", "promote", "card.json", "--dir", "kept"])
    err = capsys.readouterr().err
    assert ended.value.code == 0 and "Traceback" not in err and "error" not in err, err
    assert [p.name for p in (tmp_path / "kept").iterdir()] == ["nvidia-geforce-rtx-2080-ti-sm75-11gib"]
