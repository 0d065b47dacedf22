#!/usr/bin/env bash
# Reproduces static/vendor/: the browser libraries the dashboard serves itself (no CDN, clusters are often
# offline). Each package is fetched with `npm pack` at a pinned version, and only the files the pages load
# are copied, with their licence, into static/vendor/<name>-<version>/. Source maps a copied file points to
# are copied too: collectstatic's manifest storage refuses a sourceMappingURL that leads nowhere.
# Record changes in static/vendor/README.md.
set -euo pipefail

CHARTJS_VERSION=4.6.1
SWAGGER_UI_VERSION=5.35.0

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
vendor_dir="$repo_root/static/vendor"
work_dir="$(mktemp -d)"
trap 'rm -rf "$work_dir"' EXIT

unpack() {  # unpack <package> <version>: leaves the package contents in $work_dir/<package>/package
  local package="$1" version="$2"
  (cd "$work_dir" && npm pack --silent "$package@$version" >/dev/null)
  mkdir -p "$work_dir/$package"
  tar xzf "$work_dir/$package-$version.tgz" -C "$work_dir/$package"
}

unpack chart.js "$CHARTJS_VERSION"
chartjs_target="$vendor_dir/chart.js-$CHARTJS_VERSION"
rm -rf "$chartjs_target" && mkdir -p "$chartjs_target"
cp "$work_dir/chart.js/package/dist/chart.umd.min.js" "$work_dir/chart.js/package/dist/chart.umd.min.js.map" \
   "$work_dir/chart.js/package/LICENSE.md" "$chartjs_target/"

unpack swagger-ui-dist "$SWAGGER_UI_VERSION"
swagger_target="$vendor_dir/swagger-ui-dist-$SWAGGER_UI_VERSION"
rm -rf "$swagger_target" && mkdir -p "$swagger_target"
for file in swagger-ui-bundle.js swagger-ui-standalone-preset.js swagger-ui.css swagger-ui.css.map favicon-32x32.png \
            LICENSE NOTICE; do
  cp "$work_dir/swagger-ui-dist/package/$file" "$swagger_target/"
done

echo "vendored chart.js $CHARTJS_VERSION and swagger-ui-dist $SWAGGER_UI_VERSION into $vendor_dir"
