#!/usr/bin/env bash
# Refresh static/vendor/ from the npm registry (see static/vendor/README.md).
set -euo pipefail
HTMX_VERSION=2.0.11
CHARTJS_VERSION=4.6.1
root="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"
npm pack --silent "htmx.org@${HTMX_VERSION}" "chart.js@${CHARTJS_VERSION}" >/dev/null
mkdir htmx chartjs
tar xzf "htmx.org-${HTMX_VERSION}.tgz" -C htmx
tar xzf "chart.js-${CHARTJS_VERSION}.tgz" -C chartjs
cp htmx/package/dist/htmx.min.js htmx/package/LICENSE "$root/static/vendor/htmx/"
cp chartjs/package/dist/chart.umd.min.js chartjs/package/LICENSE.md "$root/static/vendor/chartjs/"
# The source map is not vendored: without this line, collectstatic's manifest storage would fail
# looking for it (a production `collectstatic` and the container image's build).
sed -i '/^\/\/# sourceMappingURL=/d' "$root/static/vendor/chartjs/chart.umd.min.js"
echo "static/vendor/ now holds htmx ${HTMX_VERSION} and Chart.js ${CHARTJS_VERSION}"
