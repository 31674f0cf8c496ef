"""Launchers: one place per kernel for its grid, block and argument choices; each returns a closure
that only launches on the current CuPy stream (capturable into a CUDA graph)."""
