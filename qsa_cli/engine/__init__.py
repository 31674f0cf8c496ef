"""An engine checkout as variants (docs/spec.md section 8, docs/engine.md).

A checkout's ``src/kernels/cuda/qsa_select.cu`` is built by nvcc together with qsa's own ``extern "C"``
shim (``engine_shim.cu``) into a shared library, cached on disk and loaded with ctypes. Its host
functions then run as variants beside qsa's kernels: the launchers return closures that only enqueue the
engine's work on the current CuPy stream, as qsa's launchers do, so they can be captured into a CUDA graph.

One module a job, in the order a run meets them: ``checkout`` (naming a checkout ``[NAME=]PATH[@REV]``,
its files, its commit, a revision's worktree), ``build`` (nvcc and the verified cache), ``library`` (the
built library through ctypes), ``kinds`` (the variants every checkout may have), ``domains`` (where each
kind runs), ``attach`` (a run's checkouts loaded, and the variants they give the run's catalog), ``switches`` (variants under the
engine's ``STRATA_*`` switches), ``launch`` (the host functions' launchers).
"""
