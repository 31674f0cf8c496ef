"""qsa info's run: the device and its clocks, every kernel's resources as compiled for it, what the engine
dispatches here and why, and each engine checkout's variants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..catalog import STAGES
from ..dispatch import ENV_PDL, programmatic_launches
from ..launch import topk_cluster
from ..session import Settings, session


@dataclass
class DeviceReport:
    device: dict[str, Any]
    clocks: dict[str, Any] | None
    kernels: list[Any]  # kernels.KernelInfo, as compiled for this device
    dispatch: dict[str, Any]  # kind -> summary
    notes: list[str]


def device_report(settings: Settings) -> DeviceReport:
    """What ``qsa info`` shows for ``settings``' device, kernels folder and engine checkouts."""
    with session(settings, "info", []) as s:
        cc = s.compute_capability or 0
        kernels, notes = [], []
        for stage in STAGES:
            for name in s.catalog.runs_on(stage, cc):
                v = s.catalog.get(stage, name)
                if v.engine is None:
                    kernels += [s.catalog.compiled(v).info(k) for k in v.kernels]
        for checkout in s.record.settings.get("engines", []):
            notes.append(f"engine checkout {checkout['name']} ({checkout['path']}, commit {checkout['commit']}): "
                         f"{', '.join(checkout['variants']) or 'no variant runs here'}")
        if any(s.catalog.get("topk", v).launch.name == "cluster" for v in s.catalog.runs_on("topk", cc)):
            optin = int(s.record.device.get("shared_optin_bytes", 0))
            notes.append(f"cluster top-k: capacities up to {topk_cluster.cluster_max_capacity(optin)} cells fit "
                         f"{optin} B of shared memory per CTA")
        else:
            notes.append(f"cluster top-k: needs sm_90 or newer (this device is sm_{cc})")
        if programmatic_launches(cc, s.switches):
            notes.append(f"split top-k: launches 2-6 are programmatic dependent launches ({ENV_PDL}=0 "
                         "runs them one after another)")
        else:
            notes.append("split top-k: launches one after another (programmatic launches need sm_90 or newer, "
                         f"or {ENV_PDL} is 0)")
        clocks = s.clocks.read().to_dict() if s.clocks is not None else None
        choices = {kind: s.dispatch_summary(kind) for kind in ("decode", "prompt")}
        return DeviceReport(s.record.device, clocks, kernels, choices, notes)
