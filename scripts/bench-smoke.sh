#!/usr/bin/env bash
# Runs every Go benchmark of the module a few times, each package's within a time limit, so that a
# benchmark that hangs fails `make test` instead of going unnoticed. `go test -timeout` does not
# do it: the testing package stops its alarm before the benchmarks run.
#
# Usage: scripts/bench-smoke.sh [limit per package, seconds; default 180]
# A package whose benchmarks run past the limit gets SIGQUIT (its goroutines' stacks show where
# it hangs) and the script exits 1 after the others ran. Figures of so short a run mean nothing:
# `make bench` measures.
set -euo pipefail
cd "$(dirname "$0")/.."
limit="${1:-180}"
GO="${GO:-go}"
bindir="$(mktemp -d)"
trap 'rm -rf "$bindir"' EXIT

failed=()
# Packages with at least one benchmark function in their test files.
mapfile -t pkgs < <(grep -rl --include='*_test.go' -E '^func Benchmark' . | xargs -n1 dirname | sort -u)
for dir in "${pkgs[@]}"; do
	bin="$bindir/$(echo "$dir" | tr '/.' '__').test"
	"$GO" test -c -o "$bin" "$dir"
	echo "bench-smoke: $dir (limit ${limit}s)"
	start=$(date +%s)
	if (cd "$dir" && timeout --signal=QUIT --kill-after=10 "$limit" "$bin" \
		-test.run '^$' -test.bench . -test.benchtime 2x -test.benchmem); then
		echo "bench-smoke: $dir ok in $(($(date +%s) - start))s"
	else
		rc=$?
		if [ "$rc" -eq 124 ] || [ "$rc" -eq 131 ] || [ "$rc" -eq 137 ] || [ "$rc" -eq 2 ] && [ $(($(date +%s) - start)) -ge "$limit" ]; then
			echo "bench-smoke: FAIL $dir: still running after ${limit}s (hung?); stacks above" >&2
		else
			echo "bench-smoke: FAIL $dir: exit $rc" >&2
		fi
		failed+=("$dir")
	fi
done
if [ "${#failed[@]}" -gt 0 ]; then
	echo "bench-smoke: failed: ${failed[*]}" >&2
	exit 1
fi
echo "bench-smoke: ${#pkgs[@]} packages ok"
