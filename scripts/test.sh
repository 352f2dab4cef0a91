#!/usr/bin/env bash
# Install everything the tests need, from scratch, then run every test: Python and browser.
# Usage: bash scripts/test.sh        (CI runs exactly this through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${GPUWS_VENV:-$ROOT/.venv}
REPORTS=$ROOT/.test-reports
step() { printf '\n==> %s\n' "$*"; }

step "Python environment in $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch is pinned in the test extra (the CPU wheel); the frontend is built by the build hook.
"$VENV/bin/python" -m pip install -q -e ".[test]"
export PATH="$VENV/bin:$PATH"
jupyter-builder develop . --overwrite >/dev/null
jlpm build
# Both halves installed and enabled (grep reads all the output: no SIGPIPE under pipefail).
jupyter labextension list 2>&1 | grep "jupyter_gpu_ws.*enabled.*OK" >/dev/null
jupyter server extension list 2>&1 | grep "jupyter_gpu_ws.*enabled" >/dev/null

step "configurable-http-proxy (npm) for the JupyterHub tests"
(cd tests/hub && npm ci --no-audit --no-fund --loglevel=error)

step "Azurite (npm), the Azure Blob emulator for the store tests"
(cd tests/stores && npm ci --no-audit --no-fund --loglevel=error)

step "Debian's packages: Chromium for the browser tests, libfaketime for clocks that disagree, fuse3 for a mounted drive"
missing=""
command -v chromium >/dev/null || missing="$missing chromium"
command -v faketime >/dev/null || missing="$missing faketime"
command -v fusermount3 >/dev/null || missing="$missing fuse3"
if [ -n "$missing" ]; then
  SUDO=""; [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
fi
export CHROMIUM_PATH=${CHROMIUM_PATH:-$(command -v chromium)}

step "Browser test dependencies (Galata)"
(cd ui-tests && jlpm install)

rm -rf "$REPORTS" && mkdir -p "$REPORTS"
status=0
step "Toolchain: ruff (lint and format), mypy (the cores' types), the generated API types up to date; eslint, stylelint, prettier; Jest"
ruff check . && ruff format --check . || status=1
mypy || status=1
jlpm run api:check || status=1
jlpm run lint:check || status=1
jlpm test || status=1

step "Python tests (pytest: real Jupyter Server, real kernels)"
python -m pytest -v --junitxml="$REPORTS/pytest.xml" tests || status=1

step "Browser tests (Galata in Chromium)"
(cd ui-tests && CI=1 PLAYWRIGHT_JSON_OUTPUT_NAME="$REPORTS/playwright.json" \
  jlpm playwright test --reporter=list,json) || status=1

step "Summary"
python scripts/test_summary.py "$REPORTS" || status=1
exit $status
