#!/usr/bin/env bash
# Fuzzes every native Go fuzz target of the main module, one after the other, each for
# FUZZTIME (default 30s), with FUZZ_PARALLEL workers (default: go test's, one per core).
# FUZZ_PACKAGES narrows the packages (default ./...), FUZZ_MATCH the targets (a regexp,
# default every Fuzz function). A failure stops the run; the failing input is kept under the
# package's testdata/fuzz, where `go test` (and so make test) replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
GO="${GO:-go}"
FUZZTIME="${FUZZTIME:-30s}"
match="${FUZZ_MATCH:-^Fuzz}"
parallel=()
if [ -n "${FUZZ_PARALLEL:-}" ]; then
	parallel=(-parallel "$FUZZ_PARALLEL")
fi
# shellcheck disable=SC2086
for pkg in $("$GO" list ${FUZZ_PACKAGES:-./...}); do
	dir="$("$GO" list -f '{{.Dir}}' "$pkg")"
	grep -qs '^func Fuzz' "$dir"/*_test.go || continue
	for target in $("$GO" test "$pkg" -list "$match" | grep '^Fuzz' || true); do
		echo "fuzz: $pkg $target for $FUZZTIME"
		"$GO" test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$FUZZTIME" "${parallel[@]}"
	done
done
