"""What a command prints, in each of its formats, and the verdict it ends with: built from a record (or a
gate's, a compare's or ``qsa info``'s result) and nothing else, so the CLI's one finish path can print
any command's results the same way."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from ..record.baselines import Kept
from ..record.schema import InfoReport, RunRecord
from . import EXPORTS, judged
from .baselines import baseline_blocks, baseline_csv, baseline_data
from .compare import CompareResult, compare_blocks, compare_csv, compare_verdict
from .export import Metric, export_text, metrics
from .gate import GateResult, gate_blocks, gate_csv, gate_verdict
from .history import CardHistory, full_blocks, history_csv, history_data, summary_blocks
from .info import info_blocks, info_csv
from .layout import Block, PipeConsole, Prose, markdown, print_blocks
from .report import blocks, checks_csv, result_csv, sanitizer_csv, verdict_lines


@dataclass(frozen=True)
class Printed:
    blocks: Callable[[], list[Block]]  # the tables and prose (``table`` and ``markdown``)
    csv: Callable[[], str]
    data: Callable[[], Any]  # the JSON form, made when asked: the record itself (``qsa report`` of several: a list)
    verdict: tuple[str, ...] = ()  # the last lines: PASS, or FAIL and one line per failure
    passed: bool = True
    judgement: Callable[[], judged.Judgement] | None = None  # a verdict's rows, for CI (output/ci.py)
    metrics: Callable[[], list[Metric]] | None = None  # the timings a dashboard takes (--format gab, bmf)

    def write(self, fmt: str, stream: TextIO) -> None:
        """The results in ``fmt`` on ``stream``; a text table at the stream's width (a log's: 80 columns,
        or COLUMNS)."""
        if fmt == "table":
            print_blocks(PipeConsole(file=stream), self.blocks())
            return
        if fmt in EXPORTS:
            assert self.metrics is not None, "only a command with timings to export offers --format " + fmt
            stream.write(export_text(fmt, self.metrics()))
            stream.flush()
            return
        stream.write({"markdown": lambda: markdown(self.blocks()), "csv": self.csv,
                      "json": lambda: json.dumps(self.data(), indent=1) + "\n"}[fmt]())
        stream.flush()


def of_record(record: RunRecord, csv: Callable[[RunRecord], str] | None = None) -> Printed:
    """A measuring command's record: its rows, and PASS or FAIL by every check it holds. ``csv``: a
    selftest's checks or a sanitize run's rows instead of the result rows."""
    to_csv = csv or (lambda r: result_csv([(None, r)]))
    return Printed(lambda: blocks(record), lambda: to_csv(record), record.to_dict, tuple(verdict_lines(record)),
                   record.passed, lambda: judged.of_record(record))


def of_selftest(record: RunRecord) -> Printed:
    return of_record(record, checks_csv)


def of_sanitize(record: RunRecord) -> Printed:
    return of_record(record, sanitizer_csv)


def of_gate(result: GateResult, record: RunRecord, baseline: RunRecord) -> Printed:
    return Printed(lambda: gate_blocks(result, record, baseline), lambda: gate_csv(result), record.to_dict,
                   tuple(gate_verdict(result)), result.passed, lambda: judged.of_gate(result, record, baseline))


def _compared(result: CompareResult, record: RunRecord) -> list[Block]:
    """A compare run: its judgement of the pairs, then every row of the record (qsa's reference among them)."""
    return [*compare_blocks(result, record), *blocks(record, with_header=False)]


def of_compare(result: CompareResult, record: RunRecord) -> Printed:
    return Printed(lambda: _compared(result, record), lambda: compare_csv(result), record.to_dict,
                   tuple(compare_verdict(result)), result.passed, lambda: judged.of_compare(result, record))


def of_info(info: InfoReport) -> Printed:
    return Printed(lambda: info_blocks(info), lambda: info_csv(info), info.to_dict)


def of_baselines(kept: Sequence[Kept], folder: str) -> Printed:
    return Printed(lambda: baseline_blocks(kept, folder), lambda: baseline_csv(kept), lambda: baseline_data(kept))


def of_history(histories: Sequence[CardHistory], folder: str, full: bool) -> Printed:
    """``qsa history``: every series (``full``: at a terminal, -v, markdown) or a CI log's summary and steps;
    exported, the newest run's timings (of one card: the command asks for --card where there are several)."""
    return Printed(lambda: (full_blocks if full else summary_blocks)(histories, folder),
                   lambda: history_csv(histories), lambda: history_data(histories),
                   metrics=lambda: histories[0].latest_metrics())


def of_saved(named: Sequence[tuple[str, RunRecord, CompareResult | None]]) -> Printed:
    """``qsa report``: each record under its name (a compare run's judgement first); re-rendering decides
    nothing, so no verdict. Its JSON is the record, or a list of them."""

    def all_blocks() -> list[Block]:
        out: list[Block] = []
        for name, record, result in named:
            out.append(Prose(f"{name}: {record.command}, {record.created}", f"## {name}: `{record.command}`, {record.created}"))
            out += _compared(result, record) if result is not None else blocks(record)
        return out

    def data() -> Any:
        every = [r.to_dict() for _, r, _ in named]
        return every[0] if len(every) == 1 else every

    exported = [(name if len(named) > 1 else None, r) for name, r, _ in named]
    return Printed(all_blocks, lambda: result_csv([(name, r) for name, r, _ in named]),
                   data, metrics=lambda: metrics(exported))
