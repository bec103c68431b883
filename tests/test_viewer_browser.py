"""The audit viewer in a real headless Chromium (Debian's chromium and chromium-driver,
driven by Selenium; nothing downloads a browser). Skipped when chromium is absent unless
``EVENTSTORE_REQUIRE_BROWSER=1``."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from click.testing import CliRunner

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
REQUIRE = os.environ.get("EVENTSTORE_REQUIRE_BROWSER") == "1"


def _require_browser() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.path.exists(p)]
    try:
        import selenium  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        missing.append(str(exc))
    if missing:
        reason = f"headless browser tests need {', '.join(missing)}"
        if REQUIRE:
            pytest.fail(reason + " (EVENTSTORE_REQUIRE_BROWSER=1)")
        pytest.skip(reason)


@contextmanager
def serving(store: Any) -> Iterator[str]:
    """The viewer over ``store`` on a free loopback port; yields its base URL."""
    import uvicorn

    from eventstore.cli.viewer import create_app

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    srv = uvicorn.Server(
        uvicorn.Config(create_app(store), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not srv.started:
        assert time.monotonic() < deadline, "the viewer did not start"
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        srv.should_exit = True
        thread.join(10)


@pytest.fixture
def server(db_url: str) -> Iterator[tuple[str, Any]]:
    """The viewer on a free loopback port, over a freshly built audit database."""
    _require_browser()
    from viewer_data import build

    from eventstore import EventStore

    audit = build(db_url, f"t-{uuid.uuid4().hex}")
    store = EventStore(db_url, tenant=audit.tenant, upgrade=False)
    try:
        with serving(store) as base:
            yield base, audit
    finally:
        store.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    _require_browser()
    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must never fetch anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="viewer-chromium-")
    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in (
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--disable-dev-shm-usage",
        "--window-size=1280,900",
        f"--user-data-dir={profile}",
    ):
        opts.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=opts)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def wait_for(driver: Any, css: str, timeout: float = 15) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(
        ec.presence_of_element_located((By.CSS_SELECTOR, css))
    )


def test_every_page_renders_in_chromium_with_its_htmx_fragments(
    server: tuple[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, audit = server
    browser.get(base + "/")
    # Each row's counts arrive by htmx.
    wait_for(browser, f'tr[data-session="{audit.synthetic}"] td.raw-tokens')
    assert audit.fork in browser.page_source
    for sid in filter(None, (audit.synthetic, audit.real)):
        browser.get(f"{base}/sessions/{sid}")
        wait_for(browser, "#token-chart svg.chart")
        wait_for(browser, "#events tr.event")
        markers = browser.find_elements(By.CSS_SELECTOR, "a.condensation-marker")
        assert [int(m.get_attribute("data-seq")) for m in markers] == audit.condensations[sid]
        # Expanding a row loads the full event into the DOM.
        browser.find_element(By.CSS_SELECTOR, "#events tr.event button.expand").click()
        wait_for(browser, "#full-1 .event-body")
    browser.get(f"{base}/sessions/{audit.synthetic}/events?kind=prune")
    browser.get(f"{base}/sessions/{audit.synthetic}/view?at=12")
    fp = wait_for(browser, "#fingerprint").text
    from eventstore.cli import cli

    out = CliRunner().invoke(
        cli,
        [
            "--db",
            audit.url,
            "--tenant",
            audit.tenant,
            "view",
            audit.synthetic,
            "--at",
            "12",
            "--json",
        ],
    )
    assert fp == json.loads(out.stdout)["fingerprint"]
    assert "SUMMARY-TEXT" in browser.find_element(By.CSS_SELECTOR, "pre.summary").text
    browser.get(f"{base}/sessions/{audit.synthetic}/verify")
    assert "OK" in wait_for(browser, "#verdict").text
    browser.get(f"{base}/sessions/no-such-session")
    assert "404" in wait_for(browser, "#error h1").text


def test_clicking_a_condensation_marker_opens_that_event(
    server: tuple[str, Any], browser: Any
) -> None:
    from selenium.webdriver.common.by import By

    base, audit = server
    sid = audit.real or audit.synthetic
    browser.get(f"{base}/sessions/{sid}")
    wait_for(browser, "#token-chart a.condensation-marker")
    marker = browser.find_elements(By.CSS_SELECTOR, "a.condensation-marker")[0]
    seq = int(marker.get_attribute("data-seq"))
    # SVG anchors take a synthetic click most reliably.
    browser.execute_script(
        "arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}))", marker
    )
    heading = wait_for(browser, ".condensation-detail h3")
    assert heading.text == "Condensation"
    assert browser.current_url.endswith(f"/sessions/{sid}/events/{seq}")
    assert browser.find_elements(By.CSS_SELECTOR, "ul.forgotten li a")
    assert browser.find_element(By.CSS_SELECTOR, "td.condenser").text


def test_the_view_reads_as_messages_with_links_folds_and_json_in_chromium(
    store: Any, browser: Any
) -> None:
    """An imported Claude Code session: thinking shown, a call's link lands on its result,
    the JSON unfolds to the exact message, the fold buttons work under the policy, and
    hostile text stays text."""
    _require_browser()
    from pathlib import Path

    from selenium.common.exceptions import NoAlertPresentException
    from selenium.webdriver.common.by import By
    from viewer_data import CLAUDE, HOSTILE, hostile_session

    from eventstore.importers import import_transcript

    [imported] = import_transcript(store, Path(CLAUDE))
    sent = store.view(imported.session_id).to_messages()
    hostile = hostile_session(store)
    with serving(store) as base:
        browser.get(f"{base}/sessions/{imported.session_id}/view")
        wait_for(browser, "#messages li.msg")
        thinking = next(b["thinking"] for m in sent for b in m.get("thinking_blocks") or [])
        first = browser.find_element(By.CSS_SELECTOR, "#messages details.reasoning pre")
        assert first.is_displayed() and first.text == thinking.strip()

        link = browser.find_element(By.CSS_SELECTOR, "#messages details.tool_call a.pair")
        target = link.get_attribute("href").split("#", 1)[1]
        link.click()
        assert browser.current_url.endswith("#" + target)
        landed = browser.execute_script("return document.querySelector(':target')")
        assert landed.get_attribute("id") == target and "tool_result" in landed.get_attribute(
            "class"
        )

        item = browser.find_element(By.CSS_SELECTOR, "#m1")
        exact = item.find_element(By.CSS_SELECTOR, "details.json pre")
        assert not exact.is_displayed()
        item.find_element(By.CSS_SELECTOR, "details.json summary").click()
        assert exact.is_displayed() and json.loads(exact.text) == sent[0]

        blocks = "#messages details.block"
        browser.find_element(By.CSS_SELECTOR, 'button.fold[data-fold="close"]').click()
        assert (
            browser.execute_script(f"return document.querySelectorAll('{blocks}[open]').length")
            == 0
        )
        browser.find_element(By.CSS_SELECTOR, 'button.fold[data-fold="open"]').click()
        assert (
            browser.execute_script(
                f"return document.querySelectorAll('{blocks}:not([open])').length"
            )
            == 0
        )

        browser.get(f"{base}/sessions/{hostile}/view")
        wait_for(browser, "#messages li.msg")
        with pytest.raises(NoAlertPresentException):  # no script in the content ran
            _ = browser.switch_to.alert
        outputs = browser.find_elements(By.CSS_SELECTOR, "#messages details.tool_result pre")
        assert HOSTILE in outputs[0].text
        refused = [
            e for e in browser.get_log("browser") if "Content Security Policy" in e["message"]
        ]
        assert refused == []
