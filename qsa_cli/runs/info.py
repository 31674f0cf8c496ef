"""qsa info's run: what needs no device (the catalog, the engine's dispatch on each card, each engine checkout's
header and the variants it gives there, the switches set), then, where a device is found, the device and its
clocks, every kernel's resources as compiled for it, what the engine dispatches there and why, and each engine
checkout as built for it. Without a device the report says why there is none."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, NamedTuple

from ..catalog import STAGES, Catalog, qsa_catalog
from ..core.errors import EngineError
from ..core.geometry import CLUSTER_CTAS, CLUSTER_WIDE_CTAS, capacity_of, max_blocks
from ..device import probe
from ..dispatch import ENV_CLUSTER_WIDE, ENV_PDL, dispatch, programmatic_launches, read_switches
from ..engine.adapter import adapter_source
from ..engine.attach import engine_specs, require_checkout_for
from ..engine.build import build_engine, find_nvcc, nvcc_release, nvcc_version
from ..engine.checkout import HOST_PATHS, open_engine
from ..engine.domains import ENGINE_SWITCHES, engine_variants, implied_switches
from ..engine.library import load_engine
from ..launch import topk_cluster
from ..record.schema import AdapterDeclared, CatalogEntry, EngineDeclared, InfoReport, KernelResources
from ..session import Session, Settings, session

# the cards the engine's dispatch is shown for without one: Turing to Blackwell
ARCHITECTURES = (75, 80, 86, 89, 90, 100, 120)


class _Declared(NamedTuple):
    """An unbuilt checkout as engine/domains.py reads it: its name and the host functions its header declares."""

    name: str
    functions: tuple[str, ...]


def catalog_entries(catalog: Catalog) -> list[CatalogEntry]:
    return [CatalogEntry(stage=v.stage, name=v.name, role=v.role, source=v.source, kernels=list(v.kernels),
                         launch=v.launch.name, min_cc=v.min_cc, model=v.model, exact=v.exact)
            for v in catalog.variants]


def architectures(catalog: Catalog, switches: dict[str, str]) -> dict[str, dict[str, Any]]:
    """Per card of ARCHITECTURES, the engine's choice for each kind of call (dispatch.py: a pure function of the
    card), under the environment's switches."""
    return {f"sm_{cc}": {kind: dispatch(catalog, cc, kind, switches).summary(kind) for kind in ("decode", "prompt")}
            for cc in ARCHITECTURES}


def _nvcc() -> str | None:
    try:
        return nvcc_release(nvcc_version(find_nvcc()))
    except (EngineError, OSError, subprocess.SubprocessError):  # none, or one that does not answer
        return None


def declared_engines(specs: tuple[str, ...]) -> list[EngineDeclared]:
    """Each checkout of ``specs`` read, not built (its files and header checked, engine/checkout.py): what its
    header declares and its sources' switches, and the variants that gives on each card under this process's
    switches, with the switches each runs under there by its kind."""
    out = []
    nvcc = _nvcc() if specs else None
    for spec in engine_specs(specs):
        with open_engine(spec) as checkout:
            declared = _Declared(checkout.name, checkout.declared_functions())
            kinds = {f"sm_{cc}": (cc, engine_variants(declared, cc, os.environ)) for cc in ARCHITECTURES}
            out.append(EngineDeclared(
                name=checkout.name, path=str(checkout.origin), revision=checkout.revision,
                functions=list(declared.functions), lacks=[f for f in HOST_PATHS if f not in declared.functions],
                variants={card: [f"{checkout.name}.{kind}" for kind in here] for card, (_, here) in kinds.items()},
                nvcc=nvcc, switches=list(checkout.switches()),
                implies={card: {f"{checkout.name}.{kind}": [f"{k}={v}" for k, v in implied.items()] for kind in here
                                if (implied := implied_switches(kind, cc, os.environ))}
                         for card, (cc, here) in kinds.items()}))
    return out


def declared_adapters(specs: tuple[str, ...], adapter: Path | None, compute_capability: int) -> list[AdapterDeclared]:
    """The adapter of each checkout of ``specs`` (``adapter``, else the checkout's own) and its entries: the
    checkout built with it for sm_``compute_capability`` and loaded to read its table (no device needed)."""
    require_checkout_for(adapter, specs)
    out = []
    for spec in engine_specs(specs):
        with open_engine(spec) as checkout:
            source = adapter_source(checkout, adapter)
            if source is None:
                continue
            lib = load_engine(build_engine(checkout, compute_capability, adapter=source))
            built = lib.provenance["adapter"]
            out.append(AdapterDeclared(checkout=checkout.name, path=built["path"], origin=built["origin"],
                                       sha256=built["sha256"], arch=f"sm_{compute_capability}",
                                       entries=[e.record() for e in lib.adapter.values()]))
    return out


def _device_notes(s: Session, cc: int) -> list[str]:
    """The built checkouts' variants here, the cluster top-k's reach and size, the split's launches."""
    notes = [f"engine checkout {c['name']} ({c['path']}, commit {c['commit']}), as built for sm_{cc}: "
             f"{', '.join(c['variants']) or 'no variant runs here'}" for c in s.record.settings.get("engines", [])]
    clusters = [v for v in (s.catalog.get("topk", name) for name in s.catalog.runs_on("topk", cc))
                if v.launch.name == "cluster"]
    if clusters:
        optin = int(s.record.device.get("shared_optin_bytes", 0))
        largest = topk_cluster.cluster_max_capacity(optin)
        notes.append(f"cluster top-k: capacities up to {largest} cells fit {optin} B of shared memory per CTA")
        ours = next((v for v in clusters if v.engine is None), None)
        if ours is not None and largest:
            notes.append(wide_cluster_note(s.catalog.compiled(ours), ours, largest))
    else:
        notes.append(f"cluster top-k: needs sm_90 or newer (this device is sm_{cc})")
    if programmatic_launches(cc, s.switches):
        notes.append(f"split top-k: launches 2-5 are programmatic dependent launches ({ENV_PDL}=0 "
                     "runs them one after another)")
    else:
        notes.append("split top-k: launches one after another (programmatic launches need sm_90 or newer, "
                     f"or {ENV_PDL} is 0)")
    return notes


def wide_cluster_note(module: Any, variant: Any, largest_capacity: int) -> str:
    """When a cluster call goes to CLUSTER_WIDE_CTAS a query (topk_cluster.cluster_ctas), and how many such
    clusters this device runs at once at the first capacity that may and at the largest the cluster holds."""
    first = topk_cluster.CLUSTER_WIDE_MIN_BLOCKS
    rule = (f"cluster top-k: {CLUSTER_WIDE_CTAS} CTAs a query (else {CLUSTER_CTAS}) from {first} blocks a query "
            f"when every query's cluster of {CLUSTER_WIDE_CTAS} runs at once ({ENV_CLUSTER_WIDE}=0: never, =1: "
            "always)")
    if max_blocks(largest_capacity) < first:
        return f"{rule}; no capacity the cluster holds here reaches that many blocks"
    ends = dict.fromkeys((capacity_of(first), largest_capacity))
    return f"{rule}; this device runs at once " + ", ".join(
        f"{topk_cluster.wide_clusters_at_once(module, variant, max_blocks(capacity))} at capacity {capacity} cells"
        for capacity in ends)


def info_report(settings: Settings) -> InfoReport:
    """What ``qsa info`` shows for ``settings``' device, kernels folder and engine checkouts."""
    switches = read_switches()
    engines = declared_engines(settings.engines)
    catalog = qsa_catalog(settings.kernels)
    report = InfoReport(device={}, clocks=None, kernels=[], dispatch={}, notes=[], catalog=catalog_entries(catalog),
                        architectures=architectures(catalog, switches), engines=engines,
                        switches={**switches, **{k: os.environ[k] for k in ENGINE_SWITCHES if k in os.environ}})
    for e in engines:
        if e["nvcc"] is None:
            report.notes.append(f"engine checkout {e['name']}: no nvcc found on PATH or in $CUDA_HOME/bin to build it")
    found = probe(settings.device_id)
    if all(e["nvcc"] for e in engines):  # an adapter's table is read from the checkout's library built with it
        cc = found.compute_capability if found.available else ARCHITECTURES[0]
        report.adapters = declared_adapters(settings.engines, settings.adapter, cc)
    if not found.available:
        report.no_device = found.reason
        return report
    with session(settings, "info", []) as s:
        cc = s.compute_capability or 0
        for stage in STAGES:
            for name in s.catalog.runs_on(stage, cc):
                v = s.catalog.get(stage, name)
                if v.engine is None:
                    report.kernels += [_resources(s.catalog.compiled(v).info(k)) for k in v.kernels]
        report.device = s.record.device
        report.clocks = s.clocks.read().to_dict() if s.clocks is not None else None
        report.dispatch = {kind: s.dispatch_summary(kind) for kind in ("decode", "prompt")}
        report.catalog = catalog_entries(s.catalog)  # the built checkouts' variants too
        report.notes += _device_notes(s, cc)
    return report


def _resources(k: Any) -> KernelResources:
    """A kernels.KernelInfo as the report holds it."""
    return KernelResources(name=k.name, registers=k.registers, shared_bytes=k.shared_bytes, local_bytes=k.local_bytes,
                           max_threads=k.max_threads)
