"""The HTML report laid out by a real browser (Debian's chromium, installed by `make deps`,
driven by playwright; never a browser playwright downloads): no horizontal page scroll at
1280 px or on a 390 px phone, every chart text inside its SVG box, the verdict above the
fold, text a phone can read. Screenshots of the first screen land in the test's tmp dir."""

from __future__ import annotations

import copy
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, sync_playwright

from luapipe.report import write_html

from .sample import LONG_OP, sample_result

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP: dict[str, Any] = {"viewport": {"width": 1280, "height": 800}}
PHONE: dict[str, Any] = {
    "viewport": {"width": 390, "height": 844},
    "is_mobile": True,
    "has_touch": True,
    "device_scale_factor": 2,
}
#: measured in the page: widths, chart texts outside their SVG box, elements wider than the
#: viewport outside a scrolling box, the smallest chart text, what is above the fold
MEASURE = """() => {
  const doc = document.documentElement, fold = window.innerHeight;
  const outside = (r, box) => r.left < box.left - 0.5 || r.right > box.right + 0.5
    || r.top < box.top - 0.5 || r.bottom > box.bottom + 0.5;
  const clipped = [], wide = [];
  let texts = 0, smallest = 1e9;
  for (const svg of document.querySelectorAll('figure.chart svg')) {
    const box = svg.getBoundingClientRect();
    smallest = Math.min(smallest, 13 * box.width / svg.viewBox.baseVal.width);
    for (const t of svg.querySelectorAll('text')) {
      texts++;
      if (outside(t.getBoundingClientRect(), box)) clipped.push(t.textContent);
    }
  }
  for (const el of document.body.querySelectorAll('*')) {
    if (el.closest('.scroll, svg')) continue;  // a scrolling box may hold wider content
    const spills = el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1;  // its text
    if (el.getBoundingClientRect().right > doc.clientWidth + 0.5 || spills)
      wide.push(el.tagName.toLowerCase() + '.' + el.className);
  }
  const cards = [...document.querySelectorAll('.card')].map(c => ({
    op: c.querySelector('h3').textContent,
    head: c.querySelector('h3').getBoundingClientRect().bottom <= fold,
    first: (c.querySelector('.points li') || c).getBoundingClientRect().bottom <= fold,
  }));
  const reason = document.querySelector('.points .reason');
  return {
    scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, innerWidth: window.innerWidth,
    clipped, wide, texts, smallest, cards,
    reasonPx: reason ? parseFloat(getComputedStyle(reason).fontSize) : 0,
    scrolling: [...document.querySelectorAll('.scroll')].filter(
      s => s.scrollWidth > s.clientWidth).length,
  };
}"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    chromium = shutil.which("chromium")
    assert chromium, "chromium is not installed: run `make deps`"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield b
        finally:
            b.close()


def _v1(result: dict[str, Any]) -> dict[str, Any]:
    """The same run as a results file written before intervals, ties and framing existed."""
    old = copy.deepcopy(result)
    for r in old["records"]:
        for k in [k for k in r if "interval" in k or k.startswith(("write_share", "lost_"))]:
            del r[k]
    old["recommendations"] = [
        {k: v for k, v in rec.items() if k in ("operation", "rtt_ms", "clients", "form", "text")}
        | {"reasons": rec["reasons"]}
        for rec in old["recommendations"]
    ]
    return old


def _layout(browser: Browser, page_path: Path, device: dict[str, Any], shot: Path) -> Any:
    context = browser.new_context(**device)
    try:
        page = context.new_page()
        page.goto(page_path.as_uri())
        page.screenshot(path=str(shot))  # the first screen: what a reviewer sees at once
        page.screenshot(path=str(shot.with_suffix(".full.png")), full_page=True)
        return page.evaluate(MEASURE)
    finally:
        context.close()


@pytest.mark.parametrize("schema", ["v2", "v1"])
@pytest.mark.parametrize("device", ["desktop", "phone"])
def test_report_fits_desktop_and_phone(
    browser: Browser, tmp_path: Path, device: str, schema: str
) -> None:
    result = sample_result() if schema == "v2" else _v1(sample_result())
    page_path = tmp_path / "report.html"
    write_html(result, page_path)
    width, setup = (1280, DESKTOP) if device == "desktop" else (390, PHONE)
    got = _layout(browser, page_path, setup, tmp_path / "top.png")
    assert got["innerWidth"] == width  # on the phone: the viewport meta is honoured
    assert got["scrollWidth"] <= got["clientWidth"] <= width, got["wide"]
    assert got["wide"] == []  # nothing but a scrolling box is wider than the page
    assert got["texts"] > 100 and got["clipped"] == []  # legends and axes inside their box
    assert got["scrolling"] >= 1  # the wide tables scroll inside their own box
    assert [c["op"] for c in got["cards"]] == ["update_token", LONG_OP, "rate_limit"]
    if device == "desktop":  # every operation's verdict and its first point on the first screen
        assert all(c["head"] and c["first"] for c in got["cards"]), got["cards"]
        assert got["smallest"] >= 12
    else:  # the first operation's verdict on the first screen; chart and body text readable
        assert got["cards"][0]["head"] and got["cards"][0]["first"], got["cards"]
        assert got["smallest"] >= 9 and got["reasonPx"] >= 13
