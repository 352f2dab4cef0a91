#!/usr/bin/env bash
# Install everything the tests need, from scratch, then run every test: Python and browser.
# Usage: bash scripts/test.sh        (CI runs exactly this through .ci/run)
#
# What waits on the network goes on beside what works the CPU: Debian's packages and the npm
# test servers install while pip does; the toolchain's checks, and Galata's packages then the
# browser tests, run beside the Python tests (pytest-xdist, GPUWS_TEST_WORKERS processes,
# default 3), which need neither. docs/testing.md has the figures behind these choices.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
VENV=${GPUWS_VENV:-$ROOT/.venv}
REPORTS=$ROOT/.test-reports
WORKERS=${GPUWS_TEST_WORKERS:-3}
START=$SECONDS
clock() {
  local s=$((SECONDS - START))
  printf '%d:%02d' $((s / 60)) $((s % 60))
}
step() { printf '\n==> [%s] %s\n' "$(clock)" "$*"; }
# `finish NAME PID LOG`: waits for a background part, shows its output, says how it ended.
finish() {
  local code=0
  wait "$2" || code=$?
  cat "$3"
  printf '==> [%s] %s: %s\n' "$(clock)" "$1" "$([ $code = 0 ] && echo done || echo "FAILED ($code)")"
  return $code
}

rm -rf "$REPORTS" && mkdir -p "$REPORTS"

step "In the background: Debian's packages (Chromium for the browser tests, libfaketime for clocks that disagree, fuse3 for a mounted drive); configurable-http-proxy and Azurite (npm) for the JupyterHub and store tests"
(
  set -e
  missing=""
  command -v chromium >/dev/null || missing="$missing chromium"
  command -v faketime >/dev/null || missing="$missing faketime"
  command -v fusermount3 >/dev/null || missing="$missing fuse3"
  if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" = 0 ] || SUDO=sudo
    $SUDO apt-get update -q
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q $missing
  fi
  (cd tests/hub && npm ci --no-audit --no-fund --loglevel=error)
  (cd tests/stores && npm ci --no-audit --no-fund --loglevel=error)
) >"$REPORTS/setup-system.log" 2>&1 &
system_setup=$!

step "Python environment in $VENV"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# torch is pinned in the test extra (the CPU wheel); the frontend is built by the build hook.
"$VENV/bin/python" -m pip install -q -e ".[test]"
# Left out of the tests' environment: jsonschema's optional IRI format checker, which
# jupyter_events pulls in and jsonschema imports at once, building a Lark grammar that costs
# every process importing jupyter_server or nbformat 1.7 s of CPU (python-jsonschema/jsonschema
# issue 1428): about 60% of a server's start. No schema here uses the iri formats it checks;
# docs/testing.md has the figures.
"$VENV/bin/python" -m pip uninstall -q -y rfc3987-syntax
export PATH="$VENV/bin:$PATH"

status=0
step "In the background: the toolchain (ruff, mypy, the generated API types up to date; eslint, stylelint, prettier; Jest), its output after the Python tests"
(
  code=0
  ruff check . && ruff format --check . || code=1
  mypy || code=1
  jlpm run api:check || code=1
  jlpm run lint:check || code=1
  jlpm test || code=1
  exit $code
) >"$REPORTS/toolchain.log" 2>&1 &
toolchain=$!

step "The frontend linked and built"
jupyter-builder develop . --overwrite >/dev/null
jlpm build
# Both halves installed and enabled (grep reads all the output: no SIGPIPE under pipefail).
jupyter labextension list 2>&1 | grep "jupyter_gpu_ws.*enabled.*OK" >/dev/null
jupyter server extension list 2>&1 | grep "jupyter_gpu_ws.*enabled" >/dev/null

step "Waiting for Debian's packages and the npm test servers"
finish "Debian's packages and the npm test servers" $system_setup "$REPORTS/setup-system.log"
export CHROMIUM_PATH=${CHROMIUM_PATH:-$(command -v chromium)}

step "In the background: the browser tests' packages, then the browser tests (Galata in Chromium), their output at the end"
(
  cd ui-tests
  if ! jlpm install >"$REPORTS/setup-galata.log" 2>&1; then
    echo "The browser tests' packages did not install:"
    cat "$REPORTS/setup-galata.log"
    exit 1
  fi
  CI=1 PLAYWRIGHT_JSON_OUTPUT_NAME="$REPORTS/playwright.json" jlpm playwright test --reporter=list,json
) >"$REPORTS/galata.log" 2>&1 &
galata=$!

step "Python tests (pytest, $WORKERS processes: real Jupyter Servers, real kernels)"
GPUWS_TEST_TIMINGS="$REPORTS/timings.jsonl" python -m pytest -v -n "$WORKERS" --dist worksteal \
  --junitxml="$REPORTS/pytest.xml" tests || status=1
step "Python tests: done"

step "The toolchain's results"
finish "Toolchain" $toolchain "$REPORTS/toolchain.log" || status=1

step "Browser tests' results (the servers' own lines are in $REPORTS/galata.log)"
galata_code=0
wait $galata || galata_code=$?
grep -v '^\[WebServer\]' "$REPORTS/galata.log" || true
if [ $galata_code != 0 ]; then
  status=1
  echo "--- the last 150 lines the browser tests' servers wrote:"
  grep '^\[WebServer\]' "$REPORTS/galata.log" | tail -n 150 || true
fi

step "Summary"
python scripts/test_summary.py "$REPORTS" || status=1
printf '==> [%s] the whole run\n' "$(clock)"
exit $status
