"""The HTML report in a real browser: headless Chromium lays out a failing run's page (a CNN,
an attention block, a work-only regression) without the page overflowing its window.

Runs where Chromium is installed (Debian: ``apt install chromium``); skipped elsewhere.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

BROWSER = next(
    (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
)
FAST = ("-p", "no:cacheprovider", "--tprof-rounds=6", "--tprof-warmup=1")

SUITE = """
import os
import torch
from torch import nn

PLANT = os.environ.get("PLANT", "")


def test_cnn_inference(tprof):
    torch.manual_seed(0)
    width = 64 if PLANT else 32
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, width, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(width * 8 * 8, 10),
    ).eval()
    x = torch.randn(8, 3, 32, 32)
    with torch.no_grad():
        tprof(model, x)


def test_masked_attention_with_a_long_name_that_a_narrow_column_has_to_wrap(tprof):
    q, k, v = (torch.randn(4, 8, 64, 32) for _ in range(3))
    mask = torch.triu(torch.ones(64, 64, dtype=torch.bool), 1)

    def attention():
        scores = (q @ k.transpose(-2, -1)).masked_fill(mask, float("-inf"))
        if PLANT:
            return scores.double().softmax(-1).float() @ v
        return scores.softmax(-1) @ v

    tprof(attention)


def test_work_only(tprof):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    x = torch.randn(16, 128)

    def step():
        h = net[0](x)
        if PLANT:
            h = h.t().contiguous().t()
        return net[2](net[1](h))

    tprof(step)
"""

# Appended to a copy of the page: the title reports how wide the page lays out in its window.
PROBE = (
    "<script>window.addEventListener('load', () => {"
    "document.title = 'LAYOUT ' + document.documentElement.scrollWidth + ' '"
    " + window.innerWidth;});</script>"
)


def chromium(*args: str) -> str:
    assert BROWSER is not None
    done = subprocess.run(
        [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", *args],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return done.stdout


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A report page of three regressed tests, written by ``--tprof-html``."""
    if BROWSER is None:
        pytest.skip("no Chromium on this machine (Debian: apt install chromium)")
    pytest.importorskip("matplotlib")
    folder = tmp_path_factory.mktemp("browser")
    (folder / "test_suite.py").write_text(SUITE)
    (folder / "conftest.py").write_text("")
    run = [sys.executable, "-m", "pytest", "-q", "--tprof", *FAST]
    saved = subprocess.run([*run, "--tprof-save"], cwd=folder, capture_output=True, text=True)
    assert saved.returncode == 0, saved.stdout
    env = {**_environ(), "PLANT": "1"}
    failed = subprocess.run(
        [*run, "--tprof-html=report.html"], cwd=folder, capture_output=True, text=True, env=env
    )
    assert failed.returncode == 1 and "HTML report" in failed.stdout, failed.stdout
    return folder / "report.html"


def _environ() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}


@pytest.mark.parametrize("width", [1280, 1024, 800])
def test_the_page_fits_its_window_without_a_horizontal_scroll(page: Path, width: int) -> None:
    probe = page.with_name(f"probe-{width}.html")
    probe.write_text(page.read_text().replace("</head>", PROBE + "</head>", 1))
    dom = chromium(f"--window-size={width},900", "--dump-dom", probe.as_uri())
    found = re.search(r"<title>LAYOUT (\d+) (\d+)</title>", dom)
    assert found is not None, dom[:500]
    laid_out, window = map(int, found.groups())
    assert laid_out <= window, f"the page is {laid_out} px wide in a {window} px window"
    for name in ("test_cnn_inference", "test_work_only", "regressed"):
        assert name in dom


def test_a_screenshot_of_the_page_is_drawn(page: Path) -> None:
    shot = page.with_name("report.png")
    chromium("--window-size=1280,3000", f"--screenshot={shot}", page.as_uri())
    data = shot.read_bytes()
    width, height = struct.unpack(">II", data[16:24])  # the PNG's IHDR
    assert (width, height) == (1280, 3000)
    assert len(data) > 50_000  # text, tables and charts, not a blank page
