#!/usr/bin/env bash
# Make sure a headless Chromium is available for the docs-page test (tests/api/test_docs_browser.py).
# Installs Debian's `chromium` package when missing and running as root; otherwise says what to do.
set -u

find_chromium() {
  for c in "${KEEL_CHROMIUM:-}" chromium chromium-browser google-chrome-stable google-chrome; do
    [ -n "$c" ] && command -v "$c" >/dev/null 2>&1 && { command -v "$c"; return 0; }
  done
  return 1
}

if path=$(find_chromium); then
  echo "chromium: $path"
  exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "keel: chromium is not installed; install it (e.g. apt-get install chromium) or run as root" >&2
  exit 1
fi
apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
  chromium fonts-dejavu-core >/dev/null
if path=$(find_chromium); then
  echo "chromium: $path (installed)"
else
  echo "chromium: install failed" >&2
  exit 1
fi
