#!/usr/bin/env bash
# Debian's chromium for the browser tests (tests/view/test_view_browser.py drives it with Playwright
# for Python through executable_path; Playwright's own browser download is never used).
# Installs it when it is missing (as root, with apt-get); otherwise says what to run. The tests
# themselves fail with the same message when it is still missing: they are never skipped.
set -euo pipefail
if [ -n "${GITSTATE_CHROMIUM:-}" ] && [ -x "${GITSTATE_CHROMIUM}" ]; then exit 0; fi
if command -v chromium >/dev/null 2>&1 || [ -x /usr/bin/chromium ]; then exit 0; fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser tests ..." >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q >/dev/null
    apt-get install -y -q --no-install-recommends chromium >/dev/null
    command -v chromium >/dev/null 2>&1 && exit 0
fi
echo "warning: chromium is missing and could not be installed here; run 'sudo apt-get install -y chromium'" \
     "(or set GITSTATE_CHROMIUM to a Chromium binary): the browser tests will fail until then" >&2
