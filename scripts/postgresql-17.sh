#!/usr/bin/env bash
# PostgreSQL 17 for the test matrix, from Debian 13's packages, in a private folder: nothing is
# installed, and neither /etc/apt nor dpkg's database changes. Prints the folder of the server
# binaries (initdb, pg_ctl, postgres, psql) on stdout; progress goes to stderr.
#
# Usage: scripts/postgresql-17.sh [--no-install]
#   --no-install  print the folder only when it is already set up; fail (exit 1) otherwise
#
# Once per cache folder it
#   1. downloads postgresql-17, postgresql-client-17 and the libraries they need in a newer
#      version than Debian 12 has (libc6, libpq5, libicu76, libssl3t64, ...), from trixie, and
#      patchelf, from bookworm, with `apt-get download` and an apt configuration of its own (its
#      own sources, lists, cache and an empty dpkg status);
#   2. unpacks them with `dpkg-deb -x` into one root, in Debian's layout (PostgreSQL finds its
#      share and lib folders relative to bin/);
#   3. points every ELF file of bin/ at the root's glibc: interpreter <root>/.../ld-linux-x86-64.so.2
#      and RPATH (not RUNPATH: RPATH also serves dlopen'ed and indirect libraries, such as
#      libpqwalreceiver's libpq) <root>/usr/lib/x86_64-linux-gnu. LD_LIBRARY_PATH is never used:
#      pg_ctl starts the server through the system's /bin/sh, which would load the new glibc;
#   4. appends `jit = off` to postgresql.conf.sample, so every cluster initdb makes has it
#      (llvmjit.so needs libllvm19, which is not fetched).
# The paths patched in are absolute: the root is built under its final name and moved into place
# complete (marked by .complete). Concurrent callers wait on a lock; the later ones find it done.
#
# Environment (defaults in brackets):
#   TIDEMARK_CACHE          cache folder [$HOME/.cache/tidemark]; the root is <cache>/postgresql-17.
#                           As root, when other users cannot reach that folder (a home of mode
#                           0700), the root goes to /var/cache/tidemark/postgresql-17 instead: the
#                           server runs as the user postgres.
#   TIDEMARK_PG17_ROOT      the root folder itself, overriding the above
#   TIDEMARK_DEBIAN_MIRROR  Debian mirror [http://deb.debian.org/debian]
set -euo pipefail

CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
MIRROR="${TIDEMARK_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ARCH_LIB=usr/lib/x86_64-linux-gnu
PG_BIN_REL=usr/lib/postgresql/17/bin
# What postgresql-17 needs beyond what Debian 12 already has in a recent enough version.
PACKAGES=(postgresql-17 postgresql-client-17 libpq5 libc6 libldap2 libsasl2-2 libicu76 libssl3t64
	libstdc++6 libgcc-s1 libxml2)

SCRIPT=postgresql-17
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# pg_root picks the root folder (see TIDEMARK_CACHE above).
pg_root() {
	if [ -n "${TIDEMARK_PG17_ROOT:-}" ]; then
		printf '%s' "$TIDEMARK_PG17_ROOT"
		return
	fi
	mkdir -p "$CACHE"
	# Whether postgres can reach it: judged as nobody, since postgres may not exist yet.
	if is_root && ! runuser -u nobody -- test -x "$CACHE"; then
		printf '%s' /var/cache/tidemark/postgresql-17
		return
	fi
	printf '%s' "$CACHE/postgresql-17"
}

# private_apt WORK ARGS... runs apt-get with a configuration of its own under WORK.
private_apt() {
	local work="$1"
	shift
	apt-get -q \
		-o Dir::Etc::SourceList="$work/sources.list" -o Dir::Etc::SourceParts=/dev/null \
		-o Dir::Etc::Preferences=/dev/null -o Dir::Etc::PreferencesParts=/dev/null \
		-o Dir::State::Lists="$work/lists" -o Dir::State::status="$work/status" \
		-o Dir::Cache="$work/cache" -o Dir::Cache::Archives="$work/archives" \
		-o APT::Sandbox::User="$(id -un)" -o Acquire::Languages=none \
		"$@"
}

# fetch ROOT downloads and unpacks the packages into ROOT, which is being built (not yet in place)
# but is patched for the final path FINAL.
fetch() {
	local root="$1" final="$2"
	local work="$root.apt"
	rm -rf "$work"
	mkdir -p "$work/lists/partial" "$work/cache" "$work/archives/partial" "$work/debs"
	: >"$work/status"
	cat >"$work/sources.list" <<EOF
deb $MIRROR trixie main
deb $MIRROR bookworm main
EOF
	log "apt-get update (private lists: trixie and bookworm)"
	private_apt "$work" update >"$work/update.log" 2>&1 || {
		tail -n 20 "$work/update.log" >&2
		die "apt-get update failed (mirror $MIRROR)"
	}
	local want=() p
	for p in "${PACKAGES[@]}"; do
		want+=("$p/trixie")
	done
	want+=(patchelf/bookworm)
	log "apt-get download ${PACKAGES[*]} (trixie) patchelf (bookworm)"
	(cd "$work/debs" && private_apt "$work" download "${want[@]}") >"$work/download.log" 2>&1 || {
		tail -n 20 "$work/download.log" >&2
		die "apt-get download failed"
	}
	local deb
	for deb in "$work"/debs/*.deb; do
		case "$(basename "$deb")" in
		patchelf_*) dpkg-deb -x "$deb" "$work/patchelf" ;;
		*) dpkg-deb -x "$deb" "$root" ;;
		esac
	done
	local patchelf="$work/patchelf/usr/bin/patchelf"
	[ -x "$patchelf" ] || die "patchelf not found in its package"
	[ -x "$root/$PG_BIN_REL/postgres" ] || die "no $PG_BIN_REL/postgres in the unpacked packages"
	local interp="$final/$ARCH_LIB/ld-linux-x86-64.so.2"
	[ -e "$root/$ARCH_LIB/ld-linux-x86-64.so.2" ] || die "no ld-linux-x86-64.so.2 in libc6"
	local f n=0
	for f in "$root/$PG_BIN_REL"/*; do
		# ELF files only (a few bin/ entries may be scripts).
		[ -f "$f" ] && [ "$(head -c 4 "$f" | od -An -c | tr -d ' ')" = '177ELF' ] || continue
		"$patchelf" --set-interpreter "$interp" --force-rpath --set-rpath "$final/$ARCH_LIB" "$f"
		n=$((n + 1))
	done
	log "patched $n programs in $PG_BIN_REL"
	local sample="$root/usr/share/postgresql/17/postgresql.conf.sample"
	[ -f "$sample" ] || die "no postgresql.conf.sample in postgresql-17"
	printf '\n# Added by scripts/postgresql-17.sh: llvmjit.so needs libllvm19, which is not fetched.\njit = off\n' >>"$sample"
	dpkg-deb -f "$(ls "$work"/debs/postgresql-17_*.deb)" Version >"$root/.version"
	rm -rf "$work"
}

main() {
	local install=1
	if [ "${1:-}" = --no-install ]; then
		install=0
		shift
	fi
	[ "$#" -eq 0 ] || {
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 2
	}
	[ "$(uname -m)" = x86_64 ] || die "only x86_64 is supported (this is $(uname -m))"
	local root
	root="$(pg_root)"
	if [ ! -f "$root/.complete" ]; then
		[ "$install" -eq 1 ] || exit 1
		command -v apt-get >/dev/null && command -v dpkg-deb >/dev/null ||
			die "apt-get and dpkg-deb are needed (a Debian or Ubuntu machine)"
		mkdir -p "$(dirname "$root")"
		exec 9>"$root.lock"
		flock 9
		if [ ! -f "$root/.complete" ]; then
			log "setting up PostgreSQL 17 in $root"
			local tmp="$root.tmp.$$" start=$SECONDS
			rm -rf "$tmp" "$tmp.apt"
			mkdir -p "$tmp"
			# shellcheck disable=SC2064
			trap "rm -rf '$tmp' '$tmp.apt'" EXIT
			fetch "$tmp" "$root"
			touch "$tmp/.complete"
			rm -rf "$root"
			mv "$tmp" "$root"
			trap - EXIT
			log "PostgreSQL $(cat "$root/.version") ready in $((SECONDS - start))s"
		fi
		exec 9>&-
	fi
	"$root/$PG_BIN_REL/postgres" --version >/dev/null 2>&1 ||
		die "$root/$PG_BIN_REL/postgres does not run (moved folder? remove $root to set it up again)"
	printf '%s\n' "$root/$PG_BIN_REL"
}

main "$@"
