"""`/docs` and `/redoc` render in a real headless Chromium with no network but the app itself, and
show every operation of the OpenAPI document. Chromium comes from scripts/test-browser.sh (Debian's
package, installed when missing and running as root); when it cannot be had, the test fails."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from serving import serve

ROOT = Path(__file__).resolve().parents[2]
BROWSERS = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")


def _find_browser() -> str | None:
    for name in (os.environ.get("KEEL_CHROMIUM"), *BROWSERS):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def chromium() -> str:
    path = _find_browser()
    if path is None:
        proc = subprocess.run(["bash", str(ROOT / "scripts/test-browser.sh")], check=False, capture_output=True,
                              text=True, timeout=900)
        path = _find_browser()
        if path is None:
            pytest.fail("headless Chromium is required for the docs test and could not be installed "
                        f"(scripts/test-browser.sh exited {proc.returncode}):\n{proc.stdout}{proc.stderr}\n"
                        "install it with `apt-get install chromium` or set KEEL_CHROMIUM to a Chrome binary")
    return path


@pytest.fixture(scope="module")
def served_app():
    from api.main import create_app

    app = create_app()  # the docs pages need no database
    with serve(app, lifespan="off") as url:
        yield app, url


def _dump_dom(chromium: str, url: str) -> str:
    with tempfile.TemporaryDirectory(prefix="keel-chromium-") as profile:
        proc = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage",
             f"--user-data-dir={profile}", "--virtual-time-budget=10000", "--dump-dom", url],
            check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _operations(app) -> list[tuple[str, str]]:
    """(first tag, operationId) of every operation in the schema."""
    ops = []
    for item in app.openapi()["paths"].values():
        for op in item.values():
            ops.append(((op.get("tags") or ["default"])[0], op["operationId"]))
    return ops


def test_swagger_ui_renders_every_operation(chromium, served_app):
    app, url = served_app
    dom = _dump_dom(chromium, f"{url}/docs")
    missing = [op for tag, op in _operations(app) if f'id="operations-{tag}-{op}"' not in dom]
    assert "swagger-ui" in dom and missing == [], f"operations not rendered by Swagger UI: {missing}"


def test_redoc_renders_every_operation(chromium, served_app):
    app, url = served_app
    dom = _dump_dom(chromium, f"{url}/redoc")
    missing = [op for _, op in _operations(app) if f'data-section-id="operation/{op}"' not in dom]
    assert missing == [], f"operations not rendered by ReDoc: {missing}"


@pytest.mark.parametrize("page", ["/redoc", "/docs"])
def test_docs_pages_request_nothing_outside_the_app(chromium, served_app, page):
    """Every request the rendered page makes (scripts, styles, fonts, images such as ReDoc's logo, which
    its bundle fetches from cdn.redoc.ly) goes to the app itself."""
    from playwright.sync_api import sync_playwright

    _, url = served_app
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True,
                                    args=["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"])
        try:
            context = browser.new_context()
            context.route("**/*", lambda route: (requests.append(route.request.url),
                                                 route.continue_() if route.request.url.startswith(url + "/")
                                                 else route.abort()))
            tab = context.new_page()
            tab.goto(url + page)
            tab.wait_for_selector("[data-section-id^='operation/']" if page == "/redoc" else ".opblock")
            tab.wait_for_load_state("networkidle")
            images = tab.eval_on_selector_all("img", "els => els.map(e => e.src)")
        finally:
            browser.close()
    assert requests and all(r.startswith(url + "/") for r in requests), \
        f"requests outside the app: {[r for r in requests if not r.startswith(url + '/')]}"
    if page == "/redoc":  # the side menu's logo is drawn, from the app
        assert images and not [src for src in images if src.startswith("http") and not src.startswith(url)]
