# shellcheck shell=bash
# Helpers shared by the scripts that source this file (services.sh, postgresql-17.sh). The
# sourcing script sets SCRIPT to the name its messages start with.

log() { printf '%s: %s\n' "$SCRIPT" "$*" >&2; }
die() {
	printf '%s: error: %s\n' "$SCRIPT" "$*" >&2
	exit 1
}
is_root() { [ "$(id -u)" -eq 0 ]; }
