"""``python -m qsa_cli`` and the ``qsa`` script. Ctrl-C and SIGTERM are held from the first line, before the
command line and its libraries load, so that one arriving then ends the command as any interruption does
(one line, exit status 130 or 143) rather than in a traceback of an import; main() releases them."""

from .interrupts import hold_signals

hold_signals()

from .cli import main  # noqa: E402  (loaded with the signals held)

if __name__ == "__main__":
    main()
