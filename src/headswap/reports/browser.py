"""A headless Chromium, for checking a report page as a browser renders it: a screenshot, or the parsed DOM."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import tempfile
from pathlib import Path

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_browser() -> str | None:
    """The first headless-capable Chromium on PATH, or None."""
    return next((found for name in BROWSERS if (found := shutil.which(name))), None)


def _run_browser(args: list[str], timeout: float, browser: str | None) -> subprocess.CompletedProcess:
    browser = browser or find_browser()
    if browser is None:
        raise FileNotFoundError(f"no Chromium found on PATH (looked for {', '.join(BROWSERS)}); on Debian: "
                                "apt-get install chromium")
    with tempfile.TemporaryDirectory(prefix="headswap-chromium-") as profile:
        cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}", *args]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as e:
            raise RuntimeError(f"{browser} did not finish within {timeout:g} s: {shlex.join(cmd)}") from e
    if done.returncode != 0:
        tail = "\n".join((done.stderr or "").strip().splitlines()[-8:])
        raise RuntimeError(f"{browser} exited with {done.returncode}: {shlex.join(cmd)}\n{tail}")
    return done


def screenshot(html_path, png_path, width: int = 1200, height: int = 2400, timeout: float = 90,
               browser: str | None = None) -> Path:
    """Render the page in headless Chromium to a width x height PNG."""
    html_path, png_path = Path(html_path).resolve(), Path(png_path).resolve()
    png_path.parent.mkdir(parents=True, exist_ok=True)
    if png_path.exists():
        png_path.unlink()
    _run_browser([f"--screenshot={png_path}", f"--window-size={width},{height}", html_path.as_uri()],
                 timeout, browser)
    if not png_path.is_file():
        raise RuntimeError(f"the browser exited without writing {png_path}")
    return png_path


def dump_dom(html_path, timeout: float = 90, browser: str | None = None) -> str:
    """The DOM as headless Chromium parsed it (serialised HTML)."""
    return _run_browser(["--dump-dom", Path(html_path).resolve().as_uri()], timeout, browser).stdout
