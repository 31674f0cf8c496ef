"""Renderers and verdicts: they read a record (record/) and nothing that measures."""

FORMATS = ("table", "markdown", "csv", "json")  # what every command that prints results can print (printed.py)
EXPORTS = ("gab", "bmf")  # the timings in dashboards' formats (export.py): report and history print them too
