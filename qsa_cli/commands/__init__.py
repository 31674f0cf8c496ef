"""One module per ``qsa`` command, each defining its click command as ``command`` (cli.py's table names
them and imports one only when it runs), and what they share: the exit statuses (exit_status.py), the
options of what a command prints and writes (options.py) and of what it runs (run_options.py), the
positional CTX Q ITERS CAP (positional.py), the session a measuring command opens and its sweeps
(measuring.py), and the one way every command ends (finish.py)."""
