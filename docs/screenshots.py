"""Screenshots of the web page (``attnrec serve``'s ``/ui``) for the docs.

Starts ``attnrec serve`` on a SASRec model of the built-in demo data (trained here with
``attnrec train --data demo --model sasrec --preset demo``, about a minute, unless ``--model``
names a model directory), drives the page in headless Chromium (selenium, Debian's ``chromium`` and
``chromedriver``) and writes:

* ``ui-recommend.png``: a known user's stored history and the top 10 with scores;
* ``ui-explain.png``: the recommendations with the "why" of the first ones opened;
* ``ui-build.png``: a history built by searching items by title, and similar items.

Usage (from the repository root)::

    PYTHONPATH=src .venv/bin/python docs/screenshots.py [--model runs/demo] [--out docs/img]
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ec
from selenium.webdriver.support.ui import WebDriverWait

ROOT = Path(__file__).resolve().parents[1]
WIDTH = 1280


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train_demo(out: Path) -> Path:
    print(f"training SASRec on the demo data into {out} (about a minute)")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "attnrec",
            "train",
            "--data",
            "demo",
            "--model",
            "sasrec",
            "--preset",
            "demo",
            "--out",
            str(out),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return out


@contextmanager
def server(model: Path) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnrec",
            "serve",
            "--model",
            f"sasrec-demo={model}",
            "--port",
            str(port),
            "--threads",
            "1",
            "--log-level",
            "warning",
        ],
        env=dict(os.environ, OMP_NUM_THREADS="1"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the server did not start")
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def browser() -> webdriver.Chrome:
    opts = webdriver.ChromeOptions()
    opts.binary_location = "/usr/bin/chromium"
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--hide-scrollbars",
        "--force-device-scale-factor=1",
        f"--window-size={WIDTH},900",
    ):
        opts.add_argument(arg)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=opts)


def full_page(driver: webdriver.Chrome, path: Path) -> None:
    """A screenshot of the whole page (the window grown to the document's height)."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, int(height) + 140)  # plus the browser's own frame
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, 900)
    print(f"wrote {path}")


def search_for(driver: webdriver.Chrome, wait: WebDriverWait[webdriver.Chrome], query: str) -> None:
    """Type ``query`` in the item search and wait until only matching titles are listed."""
    search = driver.find_element(By.ID, "search")
    search.clear()
    search.send_keys(query)
    wait.until(
        lambda d: (
            d.find_elements(By.CSS_SELECTOR, "#search-results li")
            and all(
                query in e.text.lower() for e in d.find_elements(By.CSS_SELECTOR, "#search-results .title")
            )
        )
    )


def shoot(url: str, out: Path) -> None:
    driver = browser()
    wait = WebDriverWait(driver, 30)
    try:
        driver.get(f"{url}/ui")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#model option"))
        # a known user: stored history, top 10
        driver.find_element(By.ID, "user").send_keys("1")
        driver.find_element(By.ID, "recommend").click()
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "#recs > li")) == 10)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#recs details.why"))
        full_page(driver, out / "ui-recommend.png")
        # the why of the first two recommendations
        for summary in driver.find_elements(By.CSS_SELECTOR, "#recs details.why summary")[:2]:
            summary.click()
        panel = driver.find_element(By.ID, "results-panel")
        driver.set_window_size(WIDTH, int(panel.size["height"]) + 400)  # the whole panel in view
        driver.execute_script("arguments[0].scrollIntoView()", panel)
        panel.screenshot(str(out / "ui-explain.png"))
        driver.set_window_size(WIDTH, 900)
        print(f"wrote {out / 'ui-explain.png'}")
        # a history built from searches, then similar items of the first recommendation
        driver.find_element(By.ID, "mode-build").click()
        search_for(driver, wait, "western #1,")
        rows = driver.find_elements(By.CSS_SELECTOR, "#search-results li")
        by_title = sorted(rows, key=lambda r: r.find_element(By.CLASS_NAME, "title").text)
        for row in by_title[:3]:  # part 1 first
            row.find_element(By.TAG_NAME, "button").click()
        driver.find_element(By.ID, "recommend").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#recs details.why"))
        driver.find_element(By.CSS_SELECTOR, "#recs > li button.similar").click()
        wait.until(ec.visibility_of_element_located((By.CSS_SELECTOR, "#similar li")))
        search_for(driver, wait, "family")
        driver.execute_script("window.scrollTo(0, 0)")
        full_page(driver, out / "ui-build.png")
    finally:
        driver.quit()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", type=Path, help="A model directory with titles [default: train the demo model]."
    )
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "img")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or train_demo(Path(tmp) / "sasrec-demo")
        with server(model) as url:
            shoot(url, args.out)


if __name__ == "__main__":
    main()
