"""`luapipe report` on a results file of the wrong shape: one line and exit 1, never a
traceback, whatever field holds whatever value (issue 11)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from luapipe.cli import main

from .test_report import record, result

BAD_VALUES: list[Any] = [None, "x", [], {}, True, -1.5, [1], ["x"]]


def _report(tmp_path: Path, data: Any) -> Any:
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    args = [
        "report",
        str(path),
        "--html",
        str(tmp_path / "r.html"),
        "--csv",
        str(tmp_path / "r.csv"),
    ]
    return CliRunner().invoke(main, args)


def _one_line_or_fine(res: Any) -> None:
    assert res.exit_code in (0, 1), res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    if res.exit_code == 1:
        lines = [line for line in res.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("error: "), res.stderr


@pytest.mark.parametrize("records", [[1], ["x"], [None], [[1]]], ids=repr)
def test_records_that_are_not_objects_are_one_line(tmp_path: Path, records: list[Any]) -> None:
    data = result(record())
    data["records"] = records
    res = _report(tmp_path, data)
    assert res.exit_code == 1
    assert "record 0 is not an object" in res.stderr


def test_every_field_of_the_wrong_type_is_one_line(tmp_path: Path) -> None:
    """Every field of a record and every section, each replaced by every kind of wrong
    value: the report renders (the value is allowed) or says what is wrong in one line."""
    base = result(record(), record(form="script"))
    for field in base["records"][0]:
        for value in BAD_VALUES:
            data = copy.deepcopy(base)
            data["records"][0][field] = value
            _one_line_or_fine(_report(tmp_path, data))
    for section in ("manifest", "calibration", "crossovers", "notes", "skipped", "errors"):
        for value in BAD_VALUES:
            data = copy.deepcopy(base)
            data[section] = value
            _one_line_or_fine(_report(tmp_path, data))
    data = copy.deepcopy(base)
    data["calibration"] = [{"rtt_ms_nominal": "x"}]  # inside a section: the safety net
    _one_line_or_fine(_report(tmp_path, data))


def test_a_minimal_file_renders(tmp_path: Path) -> None:
    """The schema's minimum (records with their required fields, no manifest)."""
    res = _report(tmp_path, {"records": [record()]})
    assert res.exit_code == 0, res.output
