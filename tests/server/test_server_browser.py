"""A real browser on the listing: Debian's chromium, driven by chromedriver through selenium,
opens the page a real ``axon serve --browse`` serves, ticks files (three by hand, or 400 by
select-all), presses a download button, and what the browser saved is compared with the files,
byte for byte; pressed with nothing ticked, the page says so (with script) or the server answers
a page a person reads (without).

Installed by ``scripts/setup.sh --all`` (chromium, chromium-driver; selenium from the test extra).
Where they are missing the tests skip, except under CI, where that is a failure. A screenshot of
the page is kept in the test's ``tmp_path`` (``listing.png``).
"""

from __future__ import annotations

import email.parser
import email.policy
import os
import shutil
import tarfile
import time
import zipfile
from pathlib import Path
from urllib.parse import quote

import pytest
from conftest import get

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]  # a real browser (chromium) driving axon serve

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

#: The served root: a quote, an ampersand, a hash, a percent sign and non-ASCII in one name
#: (the form must send it as it is), a file large enough to leave by sendfile, one in a subdirectory.
FILES = {
    "a.txt": b"hello, axon\n",
    'quo"te & \u00fcn\u00ef #1%.bin': bytes(range(256)) * 3,
    "mid.bin": os.urandom(200 * 1024),
    "not-ticked.txt": b"left alone\n",
    "sub/c.json": b'{"c": 3}\n',
}
TICKED = ["a.txt", "mid.bin", 'quo"te & \u00fcn\u00ef #1%.bin']
#: A directory of 400 files: ticked all at once, they made a 25 KB GET (a 414) before the form posted.
MANY_DIR = "summer trip \u00e9"
MANY = {f"{MANY_DIR}/photo {i:03d} & co.bin": i.to_bytes(2, "big") * (50 + i) for i in range(400)}


def _tools_or_skip() -> None:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        message = f"the browser test needs {', '.join(missing)} (scripts/setup.sh --all installs them)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture
def root(tmp_path: Path) -> Path:  # the root ``spawn`` serves, for these tests only
    base = tmp_path / "root"
    for name, data in {**FILES, **MANY}.items():
        (base / name).parent.mkdir(parents=True, exist_ok=True)
        (base / name).write_bytes(data)
    return base


@pytest.fixture
def browser(tmp_path: Path):
    """Headless chromium saving downloads to ``tmp_path/downloads``, with a fresh profile."""
    _tools_or_skip()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    downloads = tmp_path / "downloads"
    downloads.mkdir()
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--no-first-run", "--window-size=1000,700", f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(arg)
    options.add_experimental_option("prefs", {
        "download.default_directory": str(downloads),
        "download.prompt_for_download": False,
        "safebrowsing.enabled": False,
    })
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager: use the given driver, fetch nothing
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER,
                                                               log_output=str(tmp_path / "chromedriver.log")))
    driver.set_page_load_timeout(30)
    try:
        # Headless chromium saves downloads only where it is told to, over the DevTools protocol.
        driver.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(downloads)})
        driver.downloads = downloads
        yield driver
    finally:
        driver.quit()


def _saved(directory: Path, timeout: float = 30.0) -> Path:
    """The one file the browser finished saving in ``directory``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = [p for p in directory.iterdir() if not p.name.endswith(".crdownload")]
        partial = [p for p in directory.iterdir() if p.name.endswith(".crdownload")]
        if done and not partial:
            assert len(done) == 1, done
            return done[0]
        time.sleep(0.1)
    raise AssertionError(f"nothing saved in {timeout:.0f} s: {list(directory.iterdir())}")


def _tick_and_press(driver, port: int, formaction: str, screenshot: Path) -> None:
    from selenium.webdriver.common.by import By

    driver.get(f"http://127.0.0.1:{port}/browse/")
    assert driver.title == "Index of /"
    boxes = driver.find_elements(By.CSS_SELECTOR, 'input[type="checkbox"][name="f"]')
    values = [b.get_attribute("value") for b in boxes]
    assert values == sorted(n for n in FILES if "/" not in n)  # what the browser's DOM holds
    for box in boxes:
        if box.get_attribute("value") in TICKED:
            box.click()
    assert sum(b.is_selected() for b in boxes) == 3
    driver.save_screenshot(str(screenshot))
    driver.find_element(By.CSS_SELECTOR, f'button[formaction="{formaction}"]').click()


def test_browser_downloads_a_multipart_batch(spawn, browser, tmp_path):
    server = spawn("--workers", "1", "--browse")
    _tick_and_press(browser, server.port, "/api/stream-files", tmp_path / "listing.png")
    saved = _saved(browser.downloads)
    assert saved.name == "batch.multipart"  # Content-Disposition names it
    body = saved.read_bytes()
    boundary = body[2 : body.index(b"\r\n")].decode("ascii")
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: multipart/mixed; boundary={boundary}\r\n\r\n".encode() + body
    )
    parts = list(message.iter_parts())
    assert [p.get_payload(decode=True) for p in parts] == [FILES[n] for n in sorted(TICKED)]
    # The browser asked for exactly the ticked files, in the page's order: the same batch
    # asked for by hand is the same bytes (a batch's boundary is derived from what it holds).
    query = "&".join("f=" + quote(n) for n in sorted(TICKED))
    assert get(server.port, "/api/stream-files?" + query).body == body
    assert (tmp_path / "listing.png").stat().st_size > 0


def test_browser_downloads_a_zip(spawn, browser, tmp_path):
    server = spawn("--workers", "1", "--browse")
    _tick_and_press(browser, server.port, "/api/stream-files.zip", tmp_path / "listing-zip.png")
    saved = _saved(browser.downloads)
    assert saved.suffix == ".zip", saved.name
    with zipfile.ZipFile(saved) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == sorted(TICKED)
        for name in TICKED:
            assert archive.read(name) == FILES[name], name


def _ticked(driver) -> int:
    return driver.execute_script("""return document.querySelectorAll('input[name="f"]:checked').length""")


def test_browser_selects_all_400_files_and_saves_a_zip_named_after_the_directory(spawn, browser, tmp_path):
    from selenium.webdriver.common.by import By

    server = spawn("--workers", "1", "--browse")
    browser.get(f"http://127.0.0.1:{server.port}/browse/{quote(MANY_DIR)}/")
    assert browser.title == f"Index of /{MANY_DIR}/"
    boxes = browser.find_elements(By.CSS_SELECTOR, 'input[type="checkbox"][name="f"]')
    assert len(boxes) == 400 and _ticked(browser) == 0
    select_all = browser.find_element(By.ID, "all")
    assert select_all.is_displayed()  # the script ran: the page's policy allows it by its hash
    assert browser.execute_script("return getComputedStyle(document.body).marginTop") == "24px"  # and the style
    select_all.click()
    assert _ticked(browser) == 400
    boxes[7].click()  # one unticked: select-all is neither ticked nor unticked
    assert _ticked(browser) == 399 and not select_all.is_selected()
    assert browser.execute_script("return document.getElementById('all').indeterminate") is True
    select_all.click()
    assert _ticked(browser) == 400 and select_all.is_selected()
    browser.save_screenshot(str(tmp_path / "listing-400.png"))
    browser.find_element(By.CSS_SELECTOR, 'button[formaction="/api/stream-files.zip"]').click()
    saved = _saved(browser.downloads, timeout=60)
    assert saved.name == f"{MANY_DIR}.zip"  # Content-Disposition's filename*, not batch.zip
    with zipfile.ZipFile(saved) as archive:
        assert archive.testzip() is None
        assert archive.namelist() == sorted(MANY)
        for name, data in MANY.items():
            assert archive.read(name) == data, name
    assert browser.title == f"Index of /{MANY_DIR}/"  # the download left the page where it was


def test_browser_says_so_when_nothing_is_ticked(spawn, browser):
    from selenium.webdriver.common.by import By

    server = spawn("--workers", "1", "--browse")
    browser.get(f"http://127.0.0.1:{server.port}/browse/")
    note = browser.find_element(By.ID, "note")
    assert note.text == ""
    browser.find_element(By.CSS_SELECTOR, 'button[formaction="/api/stream-files.zip"]').click()
    assert note.text.startswith("Nothing is ticked")  # on the page, not a JSON error
    assert browser.title == "Index of /"
    browser.find_element(By.CSS_SELECTOR, 'input[name="f"][value="a.txt"]').click()
    assert note.text == ""  # ticking clears it
    time.sleep(0.5)
    assert list(browser.downloads.iterdir()) == []


def test_browser_without_script_gets_a_page_it_can_read(spawn, browser, tmp_path):
    """With script off the form still posts (no select-all), and a refusal is a page."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    server = spawn("--workers", "1", "--browse")
    browser.execute_cdp_cmd("Emulation.setScriptExecutionDisabled", {"value": True})
    browser.get(f"http://127.0.0.1:{server.port}/browse/{quote(MANY_DIR)}/")
    assert not browser.find_element(By.ID, "all").is_displayed()
    browser.find_element(By.CSS_SELECTOR, 'button[formaction="/api/stream-files.tar"]').click()
    # The click starts a navigation; on a busy machine the old page is still there a moment.
    WebDriverWait(browser, 20).until(lambda b: b.title == "Nothing was downloaded")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "Nothing is ticked" in text and "400 Bad Request" in text and '"error"' not in text
    browser.save_screenshot(str(tmp_path / "refused.png"))
    browser.find_element(By.LINK_TEXT, "Back to the listing").click()
    WebDriverWait(browser, 20).until(lambda b: b.title == f"Index of /{MANY_DIR}/")
    first, second = sorted(MANY)[:2]
    for name in (first, second):
        browser.find_element(By.CSS_SELECTOR, f'input[name="f"][value="{name}"]').click()
    browser.find_element(By.CSS_SELECTOR, 'button[formaction="/api/stream-files.tar"]').click()
    saved = _saved(browser.downloads)
    assert saved.name == f"{MANY_DIR}.tar"
    with tarfile.open(saved) as archive:
        assert [(m.name, archive.extractfile(m).read()) for m in archive.getmembers()] == [
            (first, MANY[first]), (second, MANY[second])]
