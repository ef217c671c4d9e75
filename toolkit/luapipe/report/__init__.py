"""Render benchmark results: terminal table, JSON, CSV and an offline HTML report."""

from __future__ import annotations

from luapipe.report.csvio import write_csv
from luapipe.report.html import render_html, write_html
from luapipe.report.jsonio import load_results, mask_tree, write_json
from luapipe.report.table import render_table

__all__ = [
    "load_results",
    "mask_tree",
    "render_html",
    "render_table",
    "write_csv",
    "write_html",
    "write_json",
]
