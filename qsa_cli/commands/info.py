"""``qsa info``: the device, its kernels as compiled for it, and the engine's dispatch on it."""

from __future__ import annotations

from typing import Any

import click

from ..output.printed import of_info
from ..record.schema import InfoReport
from ..runs.info import device_report
from ..session import Settings
from .finish import chosen_format, finish
from .options import DEVICE_OPTION, FORMAT_OPTIONS
from .run_options import ENGINE_OPTION, KERNELS_OPTION


@click.command("info")
@KERNELS_OPTION
@ENGINE_OPTION
@DEVICE_OPTION
@FORMAT_OPTIONS
def command(device_id: int, engines: tuple[str, ...], **opts: Any) -> int:
    """The device, its clocks and limits, every kernel as compiled for it, and what the engine dispatches here."""
    fmt = chosen_format(opts)
    found = device_report(Settings(device_id=device_id, engines=engines, kernels=opts["kernels"]))
    info = InfoReport(found.device, found.clocks, [dict(name=k.name, registers=k.registers, shared_bytes=k.shared_bytes,
                                                        local_bytes=k.local_bytes, max_threads=k.max_threads)
                                                   for k in found.kernels], found.dispatch, found.notes)
    return finish(of_info(info), fmt)
