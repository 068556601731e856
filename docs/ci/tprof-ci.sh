#!/usr/bin/env bash
# pytest-tprof in any CI: baselines travel between runs as artifacts, never as commits.
#
#   tprof-ci.sh main  [PYTEST ARGS...]   restore the newest main artifact, record a session of
#                                         every passing test (--tprof-save), upload the folder
#   tprof-ci.sh pr    [PYTEST ARGS...]   restore the newest main artifact, judge against it,
#                                         upload the reports and the traces of failed tests
#   tprof-ci.sh merge RUN_ID...          merge the artifacts of several main runs (tprof merge)
#                                         into a new main artifact, the one main runs restore
#
# The artifact store is a folder every run can reach (a mounted volume, or one that your CI
# syncs with object storage before and after this script):
#   $TPROF_STORE/main/<run id>/baselines/   one artifact per main run, never changed after upload
#   $TPROF_STORE/main/LATEST                the run id main and pull-request runs restore
#   $TPROF_STORE/pr/<run id>/               reports of a pull-request run, traces of its failures
#
# Environment:
#   TPROF_STORE      the artifact store (required)
#   TPROF_RUN_ID     this run's id (default: UTC time and process id); CI's own run id is best
#   TPROF_WORK       where this run keeps its baselines, traces and reports (default: .tprof-ci)
#   PYTEST           the pytest command (default: python -m pytest)
#   TPROF            the tprof command (default: tprof)
#   PYTHON           the Python with pytest-tprof installed, to read the JSON report
#                    (default: python)
# Exit status: pytest's for main and pr (1 when a test failed), tprof merge's for merge, 2 for
# a usage error.
set -euo pipefail

die() { echo "tprof-ci: $*" >&2; exit 2; }

[ $# -ge 1 ] || die "usage: tprof-ci.sh main|pr [PYTEST ARGS...] | merge RUN_ID..."
mode=$1
shift
[ -n "${TPROF_STORE:-}" ] || die "set TPROF_STORE to the folder that holds the CI artifacts"
run_id=${TPROF_RUN_ID:-$(date -u +%Y%m%dT%H%M%SZ)-$$}
# Absolute: pytest resolves relative option paths against its rootdir, not this folder.
mkdir -p "${TPROF_WORK:-.tprof-ci}"
work=$(cd "${TPROF_WORK:-.tprof-ci}" && pwd)
read -r -a pytest_cmd <<< "${PYTEST:-python -m pytest}"
read -r -a tprof_cmd <<< "${TPROF:-tprof}"
python=${PYTHON:-python}
baselines=$work/baselines
traces=$work/traces
reports=$work/reports

# Copy the newest main artifact into $baselines (empty when main has uploaded none yet).
restore() {
    rm -rf "$baselines"
    mkdir -p "$baselines"
    if [ -f "$TPROF_STORE/main/LATEST" ]; then
        local latest
        latest=$(cat "$TPROF_STORE/main/LATEST")
        cp -R "$TPROF_STORE/main/$latest/baselines/." "$baselines/"
        echo "tprof-ci: restored the baselines of main run $latest"
    else
        echo "tprof-ci: no main artifact yet; every test reads no-baseline"
    fi
}

# Upload folder $1 as the main artifact of run $2 and make it the one runs restore.
# The copy lands under a temporary name and is renamed, so no run restores half of it.
upload_main() {
    local from=$1 id=$2 dest=$TPROF_STORE/main/$2
    [ ! -e "$dest" ] || die "$dest exists: main run $id has uploaded already; give TPROF_RUN_ID"
    mkdir -p "$TPROF_STORE/main"
    rm -rf "$dest.partial"
    mkdir -p "$dest.partial/baselines"
    cp -R "$from/." "$dest.partial/baselines/"
    mv "$dest.partial" "$dest"
    echo "$id" > "$TPROF_STORE/main/LATEST.partial"
    mv "$TPROF_STORE/main/LATEST.partial" "$TPROF_STORE/main/LATEST"
    echo "tprof-ci: uploaded the baselines of main run $id"
}

# The traces (and side-by-side traces) of the tests that failed, from the JSON report.
failed_traces() {
    "$python" - "$1" <<'EOF'
import json, sys
from tprof_engine.model.verdicts import FAILING
with open(sys.argv[1], encoding="utf-8") as f:
    report = json.load(f)
for test in report["tests"]:
    if test["verdict"] in FAILING or test["outcome"] == "failed":
        for path in (test.get("trace"), test.get("side_by_side")):
            if path:
                print(path)
EOF
}

run_main() {
    # Before the tests run, not after: a run id that has uploaded already would waste the run.
    [ ! -e "$TPROF_STORE/main/$run_id" ] \
        || die "$TPROF_STORE/main/$run_id exists: main run $run_id has uploaded already; give TPROF_RUN_ID"
    restore
    local status=0
    "${pytest_cmd[@]}" --tprof --tprof-save --tprof-baseline-dir="$baselines" \
        --tprof-trace-dir="$traces" "$@" || status=$?
    # Tests that failed were not recorded; the others' new sessions are worth keeping.
    upload_main "$baselines" "$run_id"
    return "$status"
}

run_pr() {
    restore
    rm -rf "$reports"
    mkdir -p "$reports"
    local status=0
    "${pytest_cmd[@]}" --tprof --tprof-baseline-dir="$baselines" --tprof-trace-dir="$traces" \
        --tprof-json="$reports/tprof.json" --tprof-markdown="$reports/tprof.md" "$@" || status=$?
    local dest=$TPROF_STORE/pr/$run_id
    mkdir -p "$dest/traces"
    cp "$reports"/* "$dest/" 2>/dev/null || true
    if [ "$status" -ne 0 ] && [ -f "$reports/tprof.json" ]; then
        local trace
        while IFS= read -r trace; do
            if [ -f "$trace" ]; then cp "$trace" "$dest/traces/"; fi
        done < <(failed_traces "$reports/tprof.json")
        echo "tprof-ci: uploaded the traces of the failed tests to $dest/traces"
    fi
    return "$status"
}

run_merge() {
    [ $# -ge 1 ] || die "usage: tprof-ci.sh merge RUN_ID... (main runs to merge)"
    local folders=() id
    for id in "$@"; do
        [ -d "$TPROF_STORE/main/$id/baselines" ] || die "no main artifact of run $id in $TPROF_STORE"
        folders+=("$TPROF_STORE/main/$id/baselines")
    done
    rm -rf "$work/merged"
    "${tprof_cmd[@]}" merge "${folders[@]}" --into "$work/merged"
    upload_main "$work/merged" "$run_id"
}

case $mode in
    main) run_main "$@" ;;
    pr) run_pr "$@" ;;
    merge) run_merge "$@" ;;
    *) die "unknown mode '$mode'; use main, pr or merge" ;;
esac
