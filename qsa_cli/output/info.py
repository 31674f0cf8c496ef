"""Rendering ``qsa info`` from its report (record.schema.InfoReport): the device with NVML's view and its
clocks now, the kernels as compiled for it, and what the engine dispatches here. Reads the report only."""

from __future__ import annotations

import re
from typing import Any

from ..record.schema import Clocks, InfoReport
from .layout import MISSING, Block, Column, Prose, Sheet, csv_text


def _value(name: str, value: Any) -> str:
    if name.endswith("_bytes") and isinstance(value, int):
        return f"{value / 2**20:,.0f} MiB" if value >= 2**20 else f"{value / 2**10:,.0f} KiB"
    return MISSING if value is None else str(value)


def reading(clocks: Clocks) -> str:
    """A clock reading in words: ``SM 1980 MHz, memory 3201 MHz, 35 °C, 80 W, reasons: gpu_idle``."""
    forms = (("sm_mhz", "SM {} MHz"), ("mem_mhz", "memory {} MHz"), ("temperature_c", "{} °C"), ("power_w", "{:.0f} W"))
    parts = [form.format(clocks[name]) for name, form in forms if clocks.get(name) is not None]
    return ", ".join([*parts, "reasons: " + (", ".join(clocks["event_reasons"]) or "none")])


def _device_items(info: InfoReport) -> list[tuple[str, str]]:
    items = []
    for name, value in info.device.items():
        if name == "nvml":
            items += [(f"nvml {k}", _value(k, v)) for k, v in value.items()]
        else:
            items.append((name, _value(name, value)))
    return items + [("clocks now", reading(info.clocks) if info.clocks else "unavailable")]


def kernel_names(names: list[str]) -> str:
    """A variant's kernels, a template's instances of consecutive integers as one: ``k<1..4>``."""
    runs: list[tuple[str, int, int] | str] = []  # (template, first, last) or a plain name
    for name in names:
        m = re.fullmatch(r"(.+)<(\d+)>", name)
        last = runs[-1] if runs else None
        if m and isinstance(last, tuple) and last[0] == m[1] and last[2] + 1 == int(m[2]):
            runs[-1] = (last[0], last[1], int(m[2]))
        else:
            runs.append((m[1], int(m[2]), int(m[2])) if m else name)
    return ", ".join(r if isinstance(r, str) else f"{r[0]}<{r[1]}>" if r[1] == r[2] else f"{r[0]}<{r[1]}..{r[2]}>"
                     for r in runs)


def _oldest(min_cc: int) -> str:
    return f"sm_{min_cc}" if min_cc else "any"


_CHOICE = (Column("scorer"), Column("top-k"), Column("why"))


def _choice(d: dict[str, Any]) -> tuple[str, str, str]:
    """The engine's choice for a call: its scorer, its top-k, and why (once where both stages say the same)."""
    return d["scores"], d["topk"], "; ".join(dict.fromkeys(d["reasons"].values()))


def info_blocks(info: InfoReport) -> list[Block]:
    blocks: list[Block] = []
    if info.no_device is not None:
        blocks.append(Prose(f"Device: none here: {info.no_device}. What follows needs none."))
    else:
        device = Sheet("Device", (Column("what", bare=True), Column("value here", bare=True)))
        for name, value in _device_items(info):
            device.add(name, value)
        kernels = Sheet("Kernels as compiled for this device", (
            Column("kernel", bare=True), Column("registers", numeric=True), Column("shared bytes", numeric=True),
            Column("local bytes", numeric=True), Column("max threads", numeric=True)))
        for k in info.kernels:
            kernels.add(k["name"], str(k["registers"]), str(k["shared_bytes"]), str(k["local_bytes"]),
                        str(k["max_threads"]))
        blocks += [device, kernels]
    blocks += [Prose(f"{note}.") for note in info.notes if note]
    if info.dispatch:
        here = Sheet("What the engine dispatches here", (Column("kind", bare=True), *_CHOICE))
        for kind, d in info.dispatch.items():
            here.add(kind, *_choice(d))
        blocks.append(here)
    if info.catalog:
        catalog = Sheet("The catalog: every variant", (
            Column("stage", bare=True), Column("variant", bare=True), Column("role"), Column("kernels"),
            Column("launch"), Column("oldest card"), Column("model")))
        for v in info.catalog:
            catalog.add(v["stage"], v["name"], v["role"], kernel_names(v["kernels"]) or MISSING, v["launch"],
                        _oldest(v["min_cc"]), v["model"] if v["exact"] else f"{v['model']} (inexact: measured)")
        blocks.append(catalog)
    if info.architectures:
        cards = Sheet("What the engine dispatches on each card", (Column("card", bare=True), Column("kind", bare=True),
                                                                  *_CHOICE))
        for card, kinds in info.architectures.items():
            for kind, d in kinds.items():
                cards.add(card, kind, *_choice(d))
        blocks.append(cards)
    for e in info.engines:
        where = e["path"] + (f" at {e['revision']}" if e["revision"] else "")
        lacks = f"; it lacks {', '.join(e['lacks'])} (no variant of theirs)" if e["lacks"] else ""
        blocks.append(Prose(f"Engine checkout {e['name']} ({where}): its qsa_select.hpp declares "
                            f"{', '.join(e['functions'])}{lacks}; its sources read the switches "
                            f"{', '.join(e['switches']) or 'none'}; nvcc to build it: {e['nvcc'] or 'none found'}."))
        variants = Sheet(f"Engine checkout {e['name']}: its variants on each card (a child process runs one under "
                         "the switches after it)", (Column("card", bare=True), Column("variants")))
        for card, names in e["variants"].items():
            implied = e["implies"].get(card, {})
            variants.add(card, ", ".join(f"{n} ({', '.join(implied[n])})" if n in implied else n for n in names)
                         or "none")
        blocks.append(variants)
    for a in info.adapters:
        entries = Sheet(f"Adapter {a['path']} of engine checkout {a['checkout']} ({a['origin']}), as built for "
                        f"{a['arch']}: its variants", (
            Column("variant", bare=True), Column("kind"), Column("exact"), Column("scratch"), Column("window scorer")))
        for e in a["entries"]:
            entries.add(f"{a['checkout']}.{e['name']}", e["kind"], "yes" if e["exact"] else "no",
                        "yes" if e["scratch"] else "no",
                        f"{a['checkout']}.{e['window_scorer']}" if e["window_scorer"] else MISSING)
        blocks.append(entries)
    switches = ", ".join(f"{k}={v}" for k, v in info.switches.items())
    blocks.append(Prose(f"Switches set: {switches or 'none'}."))
    return blocks


def info_csv(info: InfoReport) -> str:
    """Every fact as a (section, item, field, value) line."""
    lines: list[tuple[str, str, str, Any]] = [("device", "", "none", info.no_device)] if info.no_device else []
    lines += [("device", "", name, value) for name, value in _device_items(info)] if info.no_device is None else []
    lines += [("kernel", k["name"], f, k[f]) for k in info.kernels for f in ("registers", "shared_bytes", "local_bytes",
                                                                             "max_threads")]
    lines += [("dispatch", kind, f, d[f]) for kind, d in info.dispatch.items() for f in ("scores", "topk")]
    lines += [("dispatch", kind, f"why {stage}", why) for kind, d in info.dispatch.items() for stage, why in d["reasons"].items()]
    lines += [("variant", f"{v['stage']} {v['name']}", f, " ".join(v[f]) if f == "kernels" else v[f])
              for v in info.catalog for f in ("role", "source", "kernels", "launch", "min_cc", "model", "exact")]
    lines += [(f"dispatch {card}", kind, f, d[f]) for card, kinds in info.architectures.items()
              for kind, d in kinds.items() for f in ("scores", "topk")]
    lines += [(f"dispatch {card}", kind, f"why {stage}", why) for card, kinds in info.architectures.items()
              for kind, d in kinds.items() for stage, why in d["reasons"].items()]
    for e in info.engines:
        lines += [("engine", e["name"], f, e[f]) for f in ("path", "revision", "nvcc")]
        lines += [("engine", e["name"], f, " ".join(e[f])) for f in ("functions", "lacks", "switches")]
        lines += [("engine", e["name"], f"variants {card}", " ".join(names)) for card, names in e["variants"].items()]
        lines += [("engine", e["name"], f"implies {card} {name}", " ".join(kv)) for card, implied in e["implies"].items()
                  for name, kv in implied.items()]
    for a in info.adapters:
        lines += [("adapter", a["checkout"], f, a[f]) for f in ("path", "origin", "sha256", "arch")]
        lines += [("adapter", f"{a['checkout']}.{e['name']}", f, e[f]) for e in a["entries"]
                  for f in ("kind", "exact", "scratch", "window_scorer")]
    lines += [("switch", name, "value", value) for name, value in info.switches.items()]
    lines += [("note", "", "", note) for note in info.notes]
    return csv_text(("section", "item", "field", "value"), lines)
