"""core/errors.py: every error a user can cause is a QsaError, and the CLI's main() turns one into a
single line on stderr and exit status 2 (a KernelError's compiler log printed whole); any other exception
is a programming error and is not turned into exit status 2."""

from __future__ import annotations

import inspect

import pytest

from qsa_cli import cli
from qsa_cli.core import errors


def _error_types() -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if c.__module__ == errors.__name__]


def test_every_error_type_is_a_qsa_error() -> None:
    types = _error_types()
    assert len(types) > 10
    assert all(issubclass(c, errors.QsaError) for c in types), [c for c in types if not issubclass(c, errors.QsaError)]


def _raise_in_main(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> None:
    """The command line raises ``exc`` once parsed, as a command's library call would."""
    def raising(**kwargs: object) -> None:
        raise exc

    monkeypatch.setattr(cli.cli, "main", raising)


def _exit_status(monkeypatch: pytest.MonkeyPatch, exc: BaseException) -> int:
    _raise_in_main(monkeypatch, exc)
    with pytest.raises(SystemExit) as info:
        cli.main(["info"])
    return int(info.value.code)


@pytest.mark.parametrize("kind", [c for c in _error_types() if not issubclass(c, errors.KernelError)])
def test_main_maps_a_qsa_error_to_one_line_and_exit_2(capsys: pytest.CaptureFixture[str],
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      kind: type[errors.QsaError]) -> None:
    assert _exit_status(monkeypatch, kind("bad.yaml:3: unknown key\n  'contxts'")) == 2
    out, err = capsys.readouterr()
    assert out == "" and err == "qsa: error: bad.yaml:3: unknown key 'contxts'\n"


def test_a_kernel_error_keeps_its_log(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    log = "scores.cu failed to compile:\nscores.cu(12): error: expected a ';'\n1 error detected"
    for kind in (errors.KernelError, errors.EngineBuildError, errors.SwitchedRunError):
        assert _exit_status(monkeypatch, kind(log)) == 2
        assert capsys.readouterr().err == f"qsa: error: {log}\n"


@pytest.mark.parametrize("exc", [ValueError("a programming error"), RuntimeError("a bug"), KeyError("x")])
def test_main_lets_a_programming_error_through(monkeypatch: pytest.MonkeyPatch, exc: Exception) -> None:
    _raise_in_main(monkeypatch, exc)
    with pytest.raises(type(exc)):
        cli.main(["info"])
