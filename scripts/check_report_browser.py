#!/usr/bin/env python3
"""Open a ddltune report in a real browser (headless Chromium) and check it.

Usage:
    python scripts/check_report_browser.py [REPORT_DIR] [--screenshot FILE] [--width PX]

What it does:
1. installs Chromium from Debian's packages if it is missing
   (``apt-get install -y chromium``; needs root, as on the project's machines);
2. copies ``REPORT_DIR/index.html`` to a hidden sibling with a small script
   appended that, once the page has loaded, records for every ``<img>`` whether
   it loaded (``complete`` and ``naturalWidth > 0``) and where the
   recommendation (``#recommended-config``) is on the page — the copy sits in
   the same folder, so relative image paths resolve exactly as for the real page;
3. runs Chromium headless with networking off (``--headless --no-sandbox
   --disable-gpu --disable-quic --no-first-run --disable-background-networking
   --disable-component-update --disable-sync --user-data-dir=<temp>``) twice:
   ``--dump-dom`` to read those results, ``--screenshot`` of the real
   ``index.html`` at a laptop's width (1280 px by default) for a person to look at;
4. fails (exit 1) unless every image loaded, there is at least one image, the
   recommendation is visible (non-empty text, non-zero size, within the first
   screen), and the page does not scroll sideways at that width.

Exit status: 0 all checks passed, 1 a check failed, 2 bad usage or no browser.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

PROBE = """
<script>
window.addEventListener("load", function () {
  var imgs = Array.prototype.slice.call(document.images).map(function (i) {
    return {src: i.getAttribute("src"), loaded: i.complete && i.naturalWidth > 0,
            width: i.naturalWidth, shown: i.getBoundingClientRect().width};
  });
  var rec = document.getElementById("recommended-config");
  var r = rec ? rec.getBoundingClientRect() : null;
  var out = {images: imgs,
             recommendation: rec ? {text: rec.textContent.trim(), top: r.top,
                                    width: r.width, height: r.height,
                                    visible: getComputedStyle(rec).visibility} : null,
             viewport: {width: window.innerWidth, height: window.innerHeight},
             scroll_width: document.documentElement.scrollWidth};
  var pre = document.createElement("pre");
  pre.id = "ddltune-probe";
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
});
</script>
"""


def find_browser() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def install_browser() -> str:
    print(
        "installing chromium from Debian's packages (apt-get install -y chromium) ...",
        file=sys.stderr,
    )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    subprocess.run(["apt-get", "update", "-qq"], check=False, env=env)
    subprocess.run(["apt-get", "install", "-y", "-qq", "chromium"], check=True, env=env)
    path = find_browser()
    if path is None:
        raise RuntimeError("chromium was installed but is not on PATH")
    return path


def run_browser(browser: str, args: list[str], timeout: float = 120.0) -> str:
    with tempfile.TemporaryDirectory(prefix="ddltune-chromium-") as profile:
        cmd = [browser, *FLAGS, f"--user-data-dir={profile}", *args]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr[-2000:]}")
    return res.stdout


def check(report_dir: Path, screenshot: Path, width: int, height: int) -> list[str]:
    """Run the checks; return the list of failures (empty: all passed)."""
    index = report_dir / "index.html"
    if not index.is_file():
        return [f"{index} does not exist"]
    browser = find_browser() or install_browser()
    probe_page = report_dir / ".browser-check.html"
    html = index.read_text(encoding="utf-8")
    probe_page.write_text(html.replace("</body>", PROBE + "</body>"), encoding="utf-8")
    try:
        dom = run_browser(
            browser,
            [
                f"--window-size={width},{height}",
                "--virtual-time-budget=10000",
                "--dump-dom",
                probe_page.resolve().as_uri(),
            ],
        )
    finally:
        probe_page.unlink(missing_ok=True)
    m = re.search(r'<pre id="ddltune-probe">(.*?)</pre>', dom, re.S)
    if not m:
        return ["the probe did not run: the page did not finish loading"]
    import html as _html

    result = json.loads(_html.unescape(m.group(1)))
    screenshot.parent.mkdir(parents=True, exist_ok=True)
    run_browser(
        browser,
        [
            f"--window-size={width},{height}",
            "--virtual-time-budget=10000",
            "--hide-scrollbars",
            f"--screenshot={screenshot.resolve()}",
            index.resolve().as_uri(),
        ],
    )
    failures = []
    imgs = result["images"]
    if not imgs:
        failures.append("the page has no image")
    for img in imgs:
        if not img["loaded"]:
            failures.append(f"image did not load: {img['src']}")
        elif img["shown"] > result["viewport"]["width"]:
            failures.append(f"image wider than the window: {img['src']}")
    rec = result["recommendation"]
    if rec is None:
        failures.append("no #recommended-config element: the recommendation is missing")
    else:
        if not rec["text"]:
            failures.append("the recommendation is empty")
        if rec["width"] <= 0 or rec["height"] <= 0 or rec["visible"] != "visible":
            failures.append("the recommendation is not visible")
        if rec["top"] > result["viewport"]["height"]:
            failures.append(f"the recommendation is below the first screen (top {rec['top']} px)")
    if result["scroll_width"] > result["viewport"]["width"] + 1:
        failures.append(
            f"the page scrolls sideways at {width} px (content {result['scroll_width']} px)"
        )
    if not screenshot.is_file() or screenshot.read_bytes()[:8] != b"\x89PNG\r\n\x1a\n":
        failures.append(f"no screenshot at {screenshot}")
    print(
        json.dumps(
            {
                "images": len(imgs),
                "loaded": sum(i["loaded"] for i in imgs),
                "recommendation": rec["text"] if rec else None,
                "screenshot": str(screenshot),
            },
            indent=1,
        )
    )
    return failures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("report_dir", nargs="?", default="ddltune-report", help="the report folder")
    ap.add_argument("--screenshot", default=None, help="PNG to write (default: a temp file)")
    ap.add_argument("--width", type=int, default=1280, help="window width, px (default 1280)")
    ap.add_argument(
        "--height",
        type=int,
        default=5000,
        help="window height, px: the screenshot's length (default 5000)",
    )
    args = ap.parse_args(argv)
    shot = Path(args.screenshot or Path(tempfile.gettempdir()) / "ddltune-report-screenshot.png")
    try:
        failures = check(Path(args.report_dir), shot, args.width, args.height)
    except (RuntimeError, subprocess.SubprocessError, OSError) as e:
        print(f"check_report_browser: error: {e}", file=sys.stderr)
        return 2
    for f in failures:
        print(f"FAIL: {f}", file=sys.stderr)
    print(
        "OK: every image loaded and the recommendation is visible"
        if not failures
        else f"{len(failures)} check(s) failed"
    )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
