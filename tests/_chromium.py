"""How the real-browser tests launch Debian's chromium through playwright (headless, no network
chatter of its own): shared by tests/test_browser.py and tests/test_book_build.py."""

ARGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
