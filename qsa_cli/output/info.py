"""Rendering ``qsa info`` from its report (record.schema.InfoReport): the device with NVML's view and its
clocks now, the kernels as compiled for it, and what the engine dispatches here. Reads the report only."""

from __future__ import annotations

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


def info_blocks(info: InfoReport) -> list[Block]:
    device = Sheet("Device", (Column("what", bare=True), Column("value here", bare=True)))
    for name, value in _device_items(info):
        device.add(name, value)
    kernels = Sheet("Kernels as compiled for this device", (
        Column("kernel", bare=True), Column("registers", numeric=True), Column("shared bytes", numeric=True),
        Column("local bytes", numeric=True), Column("max threads", numeric=True)))
    for k in info.kernels:
        kernels.add(k["name"], str(k["registers"]), str(k["shared_bytes"]), str(k["local_bytes"]), str(k["max_threads"]))
    dispatch = Sheet("What the engine dispatches here", (Column("kind", bare=True), Column("scorer"), Column("top-k"),
                                                         Column("why")))
    for kind, d in info.dispatch.items():
        dispatch.add(kind, d["scores"], d["topk"], "; ".join(d["reasons"].values()))
    return [device, kernels, *(Prose(f"{note}.") for note in info.notes if note), dispatch]


def info_csv(info: InfoReport) -> str:
    """Every fact as a (section, item, field, value) line."""
    lines = [("device", "", name, value) for name, value in _device_items(info)]
    lines += [("kernel", k["name"], f, k[f]) for k in info.kernels for f in ("registers", "shared_bytes", "local_bytes",
                                                                             "max_threads")]
    lines += [("dispatch", kind, f, d[f]) for kind, d in info.dispatch.items() for f in ("scores", "topk")]
    lines += [("dispatch", kind, f"why {stage}", why) for kind, d in info.dispatch.items() for stage, why in d["reasons"].items()]
    lines += [("note", "", "", note) for note in info.notes]
    return csv_text(("section", "item", "field", "value"), lines)
