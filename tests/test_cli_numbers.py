"""Every numeric option of every command is read with a validating type (``int_in``,
``positive_int``, ``non_negative_int``, ``finite_float``): a value out of range, ``nan`` or
``inf`` is refused by argparse, naming the flag and the allowed values, before any work starts.
No model is loaded here."""

from __future__ import annotations

import argparse

import pytest


def _actions(parser: argparse.ArgumentParser, prefix: str = "nlptasks"):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _actions(sub, f"{prefix} {name}")
        else:
            yield prefix, action


def test_no_numeric_option_is_a_bare_int_or_float():
    from nlptasks.cli import build_parser

    bare = [f"{where} {a.option_strings[0]}" for where, a in _actions(build_parser()) if a.type in (int, float)]
    assert not bare, f"read these with a type of nlptasks.cli._common (positive_int, finite_float ...): {bare}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["export", "RUN", "--check-rows", "-1"], "argument --check-rows: must be at least 0 (got -1)"),
        (["export", "RUN", "--max-drop", "nan"], "argument --max-drop: must be a finite number at least 0 and at most 100"),
        (["export", "RUN", "--opset", "9"], "argument --opset: must be from 14 to 20 (got 9)"),
        (["infer", "--model", "RUN", "--top-p", "0", "x"], "argument --top-p: must be a finite number more than 0"),
        (["infer", "--model", "RUN", "--temperature", "inf", "x"], "argument --temperature: must be a finite number"),
        (["infer", "--model", "RUN", "--batch-size", "0", "x"], "argument --batch-size: must be at least 1 (got 0)"),
        (["infer", "--model", "RUN", "--threshold", "1.5", "x"], "argument --threshold: must be a number above 0 and below 1"),
        (["serve", "RUN", "--threshold", "nan"], "argument --threshold: must be a number above 0 and below 1 (got 'nan')"),
        (["infer", "--model", "RUN", "--chunk-rows", "1.5", "x"], "must be a whole number at least 1 (got '1.5')"),
        (["serve", "RUN", "--port", "70000"], "argument --port: must be from 0 to 65535 (got 70000)"),
        (["serve", "RUN", "--max-wait-ms", "-1"], "argument --max-wait-ms: must be a finite number at least 0"),
        (["serve", "RUN", "--body-timeout", "0"], "argument --body-timeout: must be a finite number more than 0"),
        (["tune", "r.toml", "--timeout", "nan"], "argument --timeout: must be a finite number more than 0"),
        (["run", "r.toml", "--node-rank", "-1"], "argument --node-rank: must be at least 0 (got -1)"),
    ],
)  # fmt: skip
def test_out_of_range_numbers_are_refused_naming_the_flag(capsys, argv, message):
    from nlptasks.cli import main

    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err, err
    assert f"usage: nlptasks {argv[0]}" in err


def test_the_types_accept_their_range():
    from nlptasks.cli._common import finite_float, int_in, non_negative_int, positive_int

    assert positive_int("3") == 3 and non_negative_int("0") == 0 and int_in(14, 20)("20") == 20
    assert finite_float(0, 100)("0") == 0.0 and finite_float(above=0)("1e-9") == 1e-9
    for parse, text in ((positive_int, "0"), (int_in(14, 20), "21"), (finite_float(0), "-inf"), (finite_float(), "x")):
        with pytest.raises(argparse.ArgumentTypeError):
            parse(text)
