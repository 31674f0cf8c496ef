"""One plain kernel launch on the current CuPy stream, with the name a record gives its kernel."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class KernelLaunch:
    """``kernel`` (a CuPy RawKernel) by its name (a variant's ``kernels`` entry), its grid, CTA and arguments."""

    name: str
    kernel: Any
    grid: tuple[int, ...]
    block: tuple[int, ...]
    args: tuple[Any, ...]

    @classmethod
    def of(cls, module: Any, name: str, grid: tuple[int, ...], block: tuple[int, ...],
           args: tuple[Any, ...]) -> KernelLaunch:
        return cls(name, module.function(name), grid, block, args)

    def __call__(self) -> None:
        self.kernel(self.grid, self.block, self.args)
