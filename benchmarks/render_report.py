"""Render a bench results.json as the one-file HTML report and screenshot it in headless Chromium.

For checking the report by eye (and that a real browser renders it): writes the HTML (default: beside the
results, as report.html) and a PNG of the page as Chromium draws it.

    .venv/bin/python benchmarks/render_report.py --results benchmarks/results/emotion-minilm/results.json \\
        --png /tmp/report.png

Needs a Chromium on PATH (Debian: apt-get install chromium) for the PNG; --no-png writes only the HTML.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from headswap.reports.html_report import dump_dom, find_browser, screenshot, write_html


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--results", required=True, type=Path, help="a bench (or auto) results.json")
    p.add_argument("--html", type=Path, help="where to write the page (default: report.html beside --results)")
    p.add_argument("--png", type=Path, help="screenshot (default: report.png beside the HTML)")
    p.add_argument("--no-png", action="store_true", help="only write the HTML")
    p.add_argument("--title", help="page title (default: headswap bench, or headswap auto)")
    p.add_argument("--width", type=int, default=1200, help="browser window width in pixels (default: %(default)s)")
    p.add_argument("--height", type=int, default=2400, help="window height, the screenshot's (default: %(default)s)")
    p.add_argument("--timeout", type=float, default=90, help="seconds to wait for the browser (default: %(default)s)")
    args = p.parse_args()

    results = json.loads(args.results.read_text(encoding="utf-8"))
    html_path = args.html or args.results.with_name("report.html")
    t0 = time.perf_counter()
    write_html(results, html_path, args.title)
    print(f"wrote {html_path} ({html_path.stat().st_size / 1024:.0f} KiB) in {time.perf_counter() - t0:.1f} s")
    if args.no_png:
        return 0
    browser = find_browser()
    if browser is None:
        print("no Chromium on PATH (chromium, chromium-browser or google-chrome); install one "
              "(Debian: apt-get install chromium) or pass --no-png", file=sys.stderr)
        return 2
    png = args.png or html_path.with_suffix(".png")
    t0 = time.perf_counter()
    screenshot(html_path, png, args.width, args.height, args.timeout, browser)
    dom = dump_dom(html_path, args.timeout, browser)
    sections = [sid for sid in ("summary", "auto", "results", "quality-vs-speed", "learning-curves", "confusion",
                                "calibration", "skipped") if f'id="{sid}"' in dom]
    print(f"wrote {png} ({png.stat().st_size / 1024:.0f} KiB, {args.width}x{args.height}) with {browser} in "
          f"{time.perf_counter() - t0:.1f} s; sections in the DOM: {', '.join(sections)}; "
          f"{dom.count('<img')} images")
    return 0


if __name__ == "__main__":
    sys.exit(main())
