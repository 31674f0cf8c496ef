"""The runs the commands make, a module a job: ``stages`` (select-bench, topk-parity, window-bench, and the
cases every other run is made of), ``sweep`` (a YAML sweep and its thresholds), ``selftest`` (qsa selftest),
``topk_selftest`` (topk-parity --selftest), ``sanitizer`` (qsa sanitize), ``info`` (qsa info) and ``compare`` (qsa
compare's two sides); ``pool`` spreads a run's CPU work over every core (``made``: what its workers make for
the kernels). Each takes an open session (qsa_cli/session.py) and fills its record; the CLI parses and
renders, everything between happens here and in the stage runners.

A run that takes long takes a ``progress`` callback (core/progress.py), told of each of its units (a case,
a variant, a score set, a check) before it starts, and of the end.
"""
