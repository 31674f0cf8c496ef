"""Every bad argument gets one line on stderr and exit status 2, never a traceback."""


import numpy as np
import pytest

from qsa_cli.cli import main


def run(capsys, *argv: str) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as info:
        main(list(argv))
    out, err = capsys.readouterr()
    return info.value.code, out, err


BAD = [
    (("select-bench", "100", "0", "5", "100"), "queries must be > 0"),
    (("select-bench", "3", "4", "5", "100"), "context must be >= queries"),
    (("select-bench", "100", "2", "0", "100"), "ITERS must be > 0"),
    (("select-bench", "100", "2", "-3", "100"), "ITERS must be > 0"),
    (("select-bench", "100", "2", "5", "99"), "capacity must be >= context"),
    (("select-bench", "1000", "9", "5", "1000"), "a decode call has at most 8 queries"),
    (("select-bench", "100", "2", "5"), "takes CTX Q ITERS CAP (got 3"),
    (("select-bench", "1e5", "2", "5", "100000"), "CTX must be a number of cells"),
    (("select-bench", "100", "2", "5", "100", "--l2", "tepid"), "Invalid value for '--l2'"),
    (("select-bench", "100", "2", "5", "100", "--backend", "tpu"), "Invalid value for '--backend'"),
    (("select-bench", "100", "2", "5", "100", "--inputs", "x.npz"), "not both"),
    (("select-bench", "--inputs", "/nonexistent/x.npz"), "no such file"),
    (("topk-parity", "100", "2", "5", "100", "2"), "COUNT must be 0"),
    (("topk-parity", "1000", "9", "5", "1000", "0"), "a decode call has at most 8 queries"),
    (("topk-parity", "100", "2", "5"), "takes CTX Q ITERS CAP [COUNT]"),
    (("topk-parity", "--selftest", "100"), "--selftest takes no"),
    (("topk-parity", "100", "2", "5", "100", "--lock-clocks", "fast"), "lock"),
    (("select-bench", "100", "2", "5", "20000000"), "capacity must be <="),
    (("nonsense",), "No such command"),
    (("select-bench", "100", "2", "5", "100", "--bogus"), "no such option: --bogus"),
    (("select-bench", "100", "2", "5", "100", "7"), "takes CTX Q ITERS CAP (got 5"),
    (("window-bench", "100", "9", "5", "100"), "a decode call has at most 8 queries"),
    (("window-bench", "100", "2", "5", "100", "--backend", "cpu"), "needs --backend gpu"),
    (("sweep", "no-such-config"), "no such config file"),
    (("select-bench", "--config", "ci", "100", "2", "5", "100"), "--config takes no"),
]


@pytest.mark.parametrize("argv,message", BAD, ids=[" ".join(a) for a, _ in BAD])
def test_bad_arguments(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("qsa: error: ") and message in lines[0]
    assert "Traceback" not in err


def test_bad_input_file_leaves_nothing_behind(capsys, tmp_path):
    bad = tmp_path / "in.npz"
    np.savez(bad, scores=np.ones((2, 10), np.float32))
    dump, js = tmp_path / "dump.npz", tmp_path / "r.json"
    code, _, err = run(capsys, "topk-parity", "--inputs", str(bad), "--backend", "cpu",
                       "--dump", str(dump), "--json", str(js))
    assert code == 2 and "missing array(s) steps" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.npz"]


@pytest.mark.parametrize("option", ["--json", "--dump"])
def test_an_unwritable_output_is_refused_before_anything_runs(capsys, tmp_path, monkeypatch, option):
    def no_session(*args, **kwargs):
        raise AssertionError("a session was opened")

    monkeypatch.setattr("qsa_cli.session.session", no_session)
    target = tmp_path / "missing" / "out"
    code, _, err = run(capsys, "select-bench", "100", "2", "5", "100", "--backend", "cpu", option, str(target))
    assert code == 2 and err == f"qsa: error: {option} {target}: no such folder {target.parent}\n"
    assert list(tmp_path.iterdir()) == []
