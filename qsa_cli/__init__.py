"""qsa: benchmark and bitwise parity harness for the QSA decode selection kernels."""

__version__ = "0.1.0"
