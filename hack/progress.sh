# Progress lines for the hack/ scripts that build things (sourced by hack/controlplane.sh and
# hack/demo/run.sh; not run on its own).
#
# step LABEL LOG CMD... runs CMD with its output (stdout and stderr) going to LOG and prints
# "LABEL ... 2m31s" on stderr: on a terminal the time counts up while CMD runs, elsewhere the
# line is finished when CMD ends. With VERBOSE=1 CMD's output also goes to stderr as it runs.
# When CMD fails, the last 40 lines of LOG follow on stderr and step returns CMD's status, so
# the go tool's errors are never hidden.

# elapsed SECONDS prints SECONDS as 2m31s (or 7s under a minute).
elapsed() {
  if [ "$1" -ge 60 ]; then printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); else printf '%ds' "$1"; fi
}

step() {
  local label=$1 log=$2 start=$SECONDS status=0 ticker=
  shift 2
  mkdir -p "$(dirname "$log")"
  if [ "${VERBOSE:-0}" = 1 ]; then
    printf '%s ...\n' "$label" >&2
    { "$@" 2>&1 | tee "$log" >&2; status=${PIPESTATUS[0]}; } || true
    if [ "$status" -eq 0 ]; then
      printf '%s: done in %s\n' "$label" "$(elapsed $((SECONDS - start)))" >&2
    else
      printf '%s: FAILED after %s (output above, also in %s)\n' "$label" "$(elapsed $((SECONDS - start)))" "$log" >&2
    fi
  else
    if [ -t 2 ]; then
      (while kill -0 $$ 2>/dev/null; do printf '\r%s ... %s' "$label" "$(elapsed $((SECONDS - start)))" >&2; sleep 1; done) &
      ticker=$!
    else
      printf '%s ...' "$label" >&2
    fi
    "$@" >"$log" 2>&1 || status=$?
    if [ -n "$ticker" ]; then
      kill "$ticker" 2>/dev/null || true
      wait "$ticker" 2>/dev/null || true
      printf '\r%s ...' "$label" >&2
    fi
    if [ "$status" -eq 0 ]; then
      printf ' %s\n' "$(elapsed $((SECONDS - start)))" >&2
    else
      printf ' FAILED after %s; the last 40 lines of %s:\n' "$(elapsed $((SECONDS - start)))" "$log" >&2
      tail -n 40 "$log" >&2
    fi
  fi
  return "$status"
}
