"""A built checkout loaded with ctypes: the host functions its shim wraps, each call's result and the CUDA
error it left checked."""

from __future__ import annotations

import ctypes
from typing import Any

from ..core.errors import EngineError, EngineRefused
from ..core.geometry import BLOCK_CELLS, IDX_DIM, IDX_HEADS, TOP_K
from .adapter import SCORER, TABLE_SYMBOL, TOPK, AdapterEntry, read_table
from .build import EngineBuild

# The shim's results (engine_shim.cu), an adapter's too (qsa_adapter.h)
LAUNCHED, REFUSED, THREW = 1, 0, -1

_P, _I = ctypes.c_void_p, ctypes.c_int64
# The shim's wrapper of each host function: its arguments (engine_shim.cu).
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "qsa_block_scores": (_P, _P, _P, _P, _I, _I, _P, _P, _I),  # pooled dead q steps nq mb scores stream active
    "qsa_block_topk": (_P, _P, _I, _I, _I, _P, _P, _I),  # scores steps nq mb cap ids stream active
    "qsa_block_topk_cluster": (_P, _P, _I, _I, _I, _P, _P),  # scores steps nq mb cap ids stream
    "qsa_topk_split_bytes": (_I, ctypes.POINTER(ctypes.c_uint64)),  # nq, the bytes out
    "qsa_block_topk_split": (_P, _P, _I, _I, _I, _P, _P, _P),  # scores steps nq mb cap ids scratch stream
    "qsa_block_topk_ref": (_P, _P, _I, _I, _I, _P, _P),  # scores steps nq mb cap ids stream
    "qsa_block_scores_tc": (_P, _P, _P, _P, _I, _I, _P, _P, _I),  # pooled dead q steps nq mb scores stream active
    "qsa_topk_multi_scratch_ints": (_I, ctypes.POINTER(ctypes.c_int64)),  # nq, the ints out
    "qsa_block_scores.decode_dx": (_P, _P, _P, _P, _I, _I, _P, _P, _I),  # as qsa_block_scores (decode_dx = true)
    "qsa_block_topk.multi_scratch": (_P, _P, _I, _I, _I, _P, _P, _I, _P),  # as qsa_block_topk, then the scratch
}
# The shim's own functions: (arguments, result)
_SHIM_FUNCTIONS: dict[str, tuple[tuple[Any, ...], Any]] = {
    "qsa_shim_functions": ((), ctypes.c_char_p),
    "qsa_shim_index_shapes": ((ctypes.POINTER(ctypes.c_int64),), ctypes.c_int),
    "qsa_shim_exception": ((), ctypes.c_char_p),
    "qsa_shim_last_error": ((ctypes.c_int,), ctypes.c_int),
    "qsa_shim_error_name": ((ctypes.c_int,), ctypes.c_char_p),
    "qsa_shim_error_string": ((ctypes.c_int,), ctypes.c_char_p),
}
INDEX_SHAPES = (IDX_HEADS, IDX_DIM, BLOCK_CELLS, TOP_K)  # qsa_real_shapes()'s idx_n_head, idx_dim, idx_block, idx_top_k


def shim_symbol(path: str) -> str:
    """The shim's wrapper of a host path: qsa_block_scores -> qsa_shim_block_scores, qsa_block_scores.decode_dx
    -> qsa_shim_block_scores_decode_dx."""
    return "qsa_shim_" + path.removeprefix("qsa_").replace(".", "_")


class EngineLibrary:
    """A built checkout loaded with ctypes: its host functions through the shim, each call checked."""

    def __init__(self, build: EngineBuild) -> None:
        self.build = build
        self.name = build.name
        self.arch = build.arch
        self.provenance = build.provenance
        self.switches = tuple(build.provenance["switches"])  # the STRATA_* switches its sources read
        try:
            self._dll = ctypes.CDLL(str(build.library))
        except OSError as exc:
            raise EngineError(f"{self.name}: cannot load {build.library} ({exc})") from None
        for symbol, (args, result) in _SHIM_FUNCTIONS.items():
            getattr(self._dll, symbol).argtypes = args
            getattr(self._dll, symbol).restype = result
        self.functions = tuple(f for f in self._dll.qsa_shim_functions().decode().split(",") if f)
        self._wrappers = {}
        for function in self.functions:
            wrapper = getattr(self._dll, shim_symbol(function))
            wrapper.argtypes, wrapper.restype = _SIGNATURES[function], ctypes.c_int
            self._wrappers[function] = wrapper
        shapes = self.index_shapes()
        if shapes != INDEX_SHAPES:
            raise EngineError(f"{self.name}: qsa_real_shapes() has idx_n_head, idx_dim, idx_block, idx_top_k = "
                              f"{shapes}, not the spec's {INDEX_SHAPES}")
        adapter = build.provenance.get("adapter")
        self.adapter: dict[str, AdapterEntry] = {} if adapter is None else {
            e.name: e for e in read_table(self._table_address(adapter["path"]), adapter["path"])}
        # each entry's function by its variant's name (a '.' in it: never a host function's)
        self._adapter_functions = {f"{self.name}.{e.name}": (SCORER if e.stage == "scores" else TOPK)(e.function)
                                   for e in self.adapter.values()}

    def _table_address(self, adapter: str) -> int:
        try:
            return ctypes.addressof(ctypes.c_char.in_dll(self._dll, TABLE_SYMBOL))
        except ValueError:
            raise EngineError(f"adapter {adapter}: it defines no extern \"C\" {TABLE_SYMBOL}[] "
                              "(qsa_adapter.h)") from None

    def index_shapes(self) -> tuple[int, ...]:
        out = (ctypes.c_int64 * 4)()
        self._checked("qsa_real_shapes", self._dll.qsa_shim_index_shapes(out))
        return tuple(int(v) for v in out)

    def split_bytes(self, nq: int) -> int:
        out = ctypes.c_uint64()
        self._checked("qsa_topk_split_bytes", self._wrappers["qsa_topk_split_bytes"](nq, ctypes.byref(out)))
        return int(out.value)

    def multi_scratch_ints(self, nq: int) -> int:
        out = ctypes.c_int64()
        self._checked("qsa_topk_multi_scratch_ints",
                      self._wrappers["qsa_topk_multi_scratch_ints"](nq, ctypes.byref(out)))
        return int(out.value)

    def _checked(self, function: str, result: int) -> int:
        if result == THREW:
            message = self._dll.qsa_shim_exception().decode(errors="replace")
            raise EngineError(f"{self.name}: {function} threw: {' '.join(message.split())}")
        return result

    def launch(self, function: str, *args: Any) -> None:
        """Call ``function`` through the shim (or an adapter's entry, by its variant's name): EngineError on an
        exception or a CUDA error it left, EngineRefused when it returned false (it launched nothing)."""
        if function in self._adapter_functions:
            self._launch_adapter(function, *args)
            return
        result = self._checked(function, self._wrappers[function](*args))
        self._no_cuda_error(function)
        if result == REFUSED:
            raise EngineRefused(f"{self.name}: {function} returned false: it launched nothing for this call "
                                "(outside its domain, e.g. a capacity it cannot hold)")

    def _no_cuda_error(self, function: str) -> None:
        """An EngineError when the CUDA runtime of this library holds an error (cleared) after ``function``."""
        code = self._dll.qsa_shim_last_error(1)
        if code:
            name = self._dll.qsa_shim_error_name(code).decode()
            text = self._dll.qsa_shim_error_string(code).decode()
            raise EngineError(f"{self.name}: {function} left CUDA error {code} {name} ({text})")

    def _launch_adapter(self, variant: str, *args: Any) -> None:
        """Call the adapter's function of ``variant`` (qsa_adapter.h): EngineError when it failed or left a CUDA
        error, EngineRefused when it refused the call."""
        result = self._adapter_functions[variant](*args)
        self._no_cuda_error(variant)
        if result == REFUSED:
            raise EngineRefused(f"{variant} refused this call: it launched nothing (outside its domain)")
        if result != LAUNCHED:
            raise EngineError(f"{variant} failed: it returned {result}"
                              f"{'' if result == THREW else ', not one of 1, 0, -1 (qsa_adapter.h)'}")


def load_engine(build: EngineBuild) -> EngineLibrary:
    """The library of ``build``, loaded (a library already loaded in this process is the same handle)."""
    return EngineLibrary(build)
