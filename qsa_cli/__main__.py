"""``python -m qsa_cli`` and the ``qsa`` script. Ctrl-C and SIGTERM are held from the first line, before the
command line and its libraries load, so that one arriving then ends the command as any interruption does
(one line, exit status 130 or 143) rather than in a traceback of an import; main() releases them. Held with
the interpreter's own C module, loaded before any Python code runs: importing qsa_cli.interrupts first
(threading, the signal module's enums) left a Ctrl-C on a loaded machine the milliseconds that took to land
in, and end the command in a traceback."""

import _signal

_signal.pthread_sigmask(_signal.SIG_BLOCK, {_signal.SIGINT, _signal.SIGTERM})  # interrupts.SIGNALS

from .cli import main  # noqa: E402  (loaded with the signals held)

if __name__ == "__main__":
    main()
