#!/usr/bin/env bash
# Local real services for Tidemark: a throwaway PostgreSQL 15 (or 17) cluster and a single-node KRaft
# Kafka broker, both bound to 127.0.0.1, with all state under one folder, and on request an
# Apicurio schema registry beside them. No Docker needed.
#
# Usage: scripts/services.sh install|install-tools|install-connect|install-avro-reader|
#                            install-debezium|install-registry|up|down|clean|env|status|pg-crash|registry-up|registry-down|java21
#
#   install  PostgreSQL 15 server binaries (apt, when root; with TIDEMARK_PG_VERSION=17, Debian
#            13's in a private folder: scripts/postgresql-17.sh), Java and Maven (apt, when root),
#            Kafka jars (Maven Central, cached in $TIDEMARK_CACHE/kafka-<version>/lib), the
#            Kafka Connect jars (install-connect), the Avro reader's jars (install-avro-reader)
#            and Apicurio Registry (install-registry; without
#            a Java of 21 or later only a warning, but under CI=true a failure). Idempotent.
#   install-tools
#            buildah, podman, runc, chromium and prometheus (promtool) from Debian's packages when
#            missing (root only): the container, status page and Prometheus tests use them.
#   install-connect
#            only the jars of a Kafka Connect standalone worker with JsonConverter and
#            FileStreamSink (Maven Central, cached in $TIDEMARK_CACHE/connect-<version>/lib), for
#            the Kafka Connect integration test. Idempotent.
#   install-avro-reader
#            only the jars of the plain Java consumer scripts/avro-reader/TidemarkAvroReader.java
#            (Apicurio Registry's Avro deserializer and kafka-clients, Maven Central, cached in
#            $TIDEMARK_CACHE/avro-reader-<kafka version>/lib), for the test that a JVM reads
#            Tidemark's Avro. Idempotent.
#   install-debezium
#            install-connect, then Debezium's PostgreSQL connector as it ships for Kafka Connect
#            (its plugin archive from Maven Central, unpacked into
#            $TIDEMARK_CACHE/debezium-<version>/debezium-connector-postgres, the worker's
#            plugin.path being $TIDEMARK_CACHE/debezium-<version>), and Apicurio Registry's Avro
#            converter as a plugin of its own ($TIDEMARK_CACHE/apicurio-converter-<version>/
#            apicurio-converter, scripts/apicurio-converter/pom.xml), for `make bench-debezium`
#            only: `install` does not fetch them. Idempotent.
#   install-registry
#            Apicurio Registry's runnable archive (io.apicurio:apicurio-registry-app:<version>:
#            tar.gz:all from Maven Central, unpacked into $TIDEMARK_CACHE/apicurio-registry-<version>),
#            and a check that a Java of 21 or later is there to run it (java21). Idempotent.
#   java21   print the home folder of a Java of 21 or later (Apicurio Registry 3 needs one):
#            TIDEMARK_JAVA21_HOME when set, else JAVA_HOME, `java` on PATH, /usr/lib/jvm/*; fails,
#            saying what to install, when there is none.
#   up       install, then start both servers (idempotent) and print the connection settings as
#            shell exports on stdout:  eval "$(scripts/services.sh up)"
#   down     stop both servers.
#   clean    down, then remove the state folder.
#   env      print the exports only.
#   status   say what is running.
#   pg-crash restart PostgreSQL with `pg_ctl restart -m immediate`: a crash and WAL recovery, on
#            the same data folder and port (fault-injection tests).
#   registry-up
#            install-registry, then start Apicurio Registry (in-memory storage, its
#            Confluent-compatible API under /apis/ccompat/v7) on 127.0.0.1 (idempotent) and print
#            its URL as a shell export:  eval "$(scripts/services.sh registry-up)"
#   registry-down
#            stop the registry (down and clean stop it too). Its schemas are in memory: a
#            restarted registry starts empty.
#
# Environment (defaults in brackets):
#   TIDEMARK_STATE                    state folder [<repo>/.state]
#   TIDEMARK_CACHE                    jar cache [$HOME/.cache/tidemark]
#   TIDEMARK_PG_PORT                  PostgreSQL port [55432]
#   TIDEMARK_PG_VERSION               PostgreSQL major version, 15 or 17 [15]
#   TIDEMARK_KAFKA_PORT               Kafka PLAINTEXT port [59092]
#   TIDEMARK_KAFKA_CONTROLLER_PORT    Kafka CONTROLLER port [59093]
#   TIDEMARK_KAFKA_ADVERTISED_PORT    port the broker advertises to clients on 127.0.0.1 [the
#                                     PLAINTEXT port]; a test sets it to a proxy in front of the
#                                     broker so that every client connection goes through the proxy
#   TIDEMARK_KAFKA_VERSION            Kafka version [4.1.1]
#   TIDEMARK_LOG4J_VERSION            log4j version matching Kafka's [2.24.3]
#   TIDEMARK_DEBEZIUM_VERSION         Debezium version of install-debezium [3.6.1.Final]
#   TIDEMARK_KAFKA_HEAP               JVM flags [-Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1]
#   TIDEMARK_KAFKA_START_TIMEOUT      seconds to wait for "Kafka Server started" [90]
#   TIDEMARK_REGISTRY_PORT            Apicurio Registry's HTTP port [58081]
#   TIDEMARK_REGISTRY_VERSION         Apicurio Registry version [3.3.3]
#   TIDEMARK_REGISTRY_HEAP            its JVM flags [-Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1]
#   TIDEMARK_REGISTRY_START_TIMEOUT   seconds to wait for it to listen [90]
#   TIDEMARK_REGISTRY_TLS_CERT        with TIDEMARK_REGISTRY_TLS_KEY (PEM files): the registry serves
#                                     HTTPS only, with this certificate, on its port [plain HTTP]
#   TIDEMARK_REGISTRY_TLS_KEY         the certificate's private key
#                                     (Mutual TLS cannot be required: Apicurio 3.3.3 is built with
#                                     quarkus.http.ssl.client-auth=NONE, fixed at build time.)
#   TIDEMARK_REGISTRY_USER            with TIDEMARK_REGISTRY_PASSWORD: the registry's API
#                                     (/apis/*) requires HTTP basic auth as this user, a Quarkus
#                                     embedded user written to <state>/registry/config/
#                                     application.properties (mode 0600, not on the command line)
#                                     [no authentication]
#   TIDEMARK_REGISTRY_PASSWORD        that user's password
#   TIDEMARK_REGISTRY_PERSIST         1: the registry keeps its schemas in an H2 file of its state folder,
#                                     across registry-down and registry-up [in memory]
#   TIDEMARK_JAVA21_HOME              a Java of 21 or later for the registry [found as java21 says]
#   TIDEMARK_JVM_DIR                  folder of installed Java homes that java21 searches [/usr/lib/jvm]
#   TIDEMARK_WATCH_PID                with `up`: stop the servers and remove the state folder once
#                                     this process is gone (used by internal/testenv)
#
# Ports used by `up` are remembered in <state>/ports.env, so `env`, `down` and a later `up`
# agree with the first `up` unless overridden.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$REPO/scripts/services.sh"
STATE="${TIDEMARK_STATE:-$REPO/.state}"
CACHE="${TIDEMARK_CACHE:-$HOME/.cache/tidemark}"
KAFKA_VERSION="${TIDEMARK_KAFKA_VERSION:-4.1.1}"
LOG4J_VERSION="${TIDEMARK_LOG4J_VERSION:-2.24.3}"
KAFKA_LIB="$CACHE/kafka-$KAFKA_VERSION/lib"
CONNECT_LIB="$CACHE/connect-$KAFKA_VERSION/lib"
AVRO_READER_LIB="$CACHE/avro-reader-$KAFKA_VERSION/lib"
DEBEZIUM_VERSION="${TIDEMARK_DEBEZIUM_VERSION:-3.6.1.Final}"
DEBEZIUM_PLUGINS="$CACHE/debezium-$DEBEZIUM_VERSION"
APICURIO_CONVERTER_VERSION=2.6.13.Final
APICURIO_CONVERTER_PLUGINS="$CACHE/apicurio-converter-$APICURIO_CONVERTER_VERSION"
KAFKA_HEAP="${TIDEMARK_KAFKA_HEAP:--Xms256m -Xmx512m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
KAFKA_START_TIMEOUT="${TIDEMARK_KAFKA_START_TIMEOUT:-90}"
REGISTRY_VERSION="${TIDEMARK_REGISTRY_VERSION:-3.3.3}"
REGISTRY_HOME="$CACHE/apicurio-registry-$REGISTRY_VERSION"
REGISTRY_HEAP="${TIDEMARK_REGISTRY_HEAP:--Xms64m -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1}"
REGISTRY_START_TIMEOUT="${TIDEMARK_REGISTRY_START_TIMEOUT:-90}"
REGISTRY_TLS_CERT="${TIDEMARK_REGISTRY_TLS_CERT:-}"
REGISTRY_TLS_KEY="${TIDEMARK_REGISTRY_TLS_KEY:-}"
REGISTRY_PERSIST="${TIDEMARK_REGISTRY_PERSIST:-}"
REGISTRY_USER="${TIDEMARK_REGISTRY_USER:-}"
REGISTRY_PASSWORD="${TIDEMARK_REGISTRY_PASSWORD:-}"
REGISTRY_SCHEME=http
[ -z "$REGISTRY_TLS_CERT" ] || REGISTRY_SCHEME=https
JVM_DIR="${TIDEMARK_JVM_DIR:-/usr/lib/jvm}"
PG_VERSION="${TIDEMARK_PG_VERSION:-15}"

PG_DIR="$STATE/postgres"
PG_DATA="$PG_DIR/data"
PG_LOG="$PG_DIR/postgres.log"
KAFKA_DIR="$STATE/kafka"
KAFKA_PID="$KAFKA_DIR/kafka.pid"
KAFKA_LOG="$KAFKA_DIR/server.log"
KAFKA_OUT="$KAFKA_DIR/stdout.log"
REGISTRY_DIR="$STATE/registry"
REGISTRY_PID="$REGISTRY_DIR/registry.pid"
REGISTRY_LOG="$REGISTRY_DIR/registry.log"
WATCH_PID_FILE="$STATE/watchdog.pid"
PORTS_FILE="$STATE/ports.env"

SCRIPT=services
# shellcheck source=scripts/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# Ports: explicit environment first, then what the last `up` used, then the defaults.
load_ports() {
	local saved_pg="" saved_kafka="" saved_ctrl="" saved_registry=""
	if [ -f "$PORTS_FILE" ]; then
		saved_pg="$(sed -n 's/^PG_PORT=//p' "$PORTS_FILE")"
		saved_kafka="$(sed -n 's/^KAFKA_PORT=//p' "$PORTS_FILE")"
		saved_ctrl="$(sed -n 's/^KAFKA_CONTROLLER_PORT=//p' "$PORTS_FILE")"
		saved_registry="$(sed -n 's/^REGISTRY_PORT=//p' "$PORTS_FILE")"
	fi
	PG_PORT="${TIDEMARK_PG_PORT:-${saved_pg:-55432}}"
	KAFKA_PORT="${TIDEMARK_KAFKA_PORT:-${saved_kafka:-59092}}"
	KAFKA_CONTROLLER_PORT="${TIDEMARK_KAFKA_CONTROLLER_PORT:-${saved_ctrl:-59093}}"
	KAFKA_ADVERTISED_PORT="${TIDEMARK_KAFKA_ADVERTISED_PORT:-$KAFKA_PORT}"
	REGISTRY_PORT="${TIDEMARK_REGISTRY_PORT:-${saved_registry:-58081}}"
	local p
	for p in "$PG_PORT" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$KAFKA_ADVERTISED_PORT" "$REGISTRY_PORT"; do
		[[ "$p" =~ ^[0-9]+$ ]] || die "port '$p' is not a number"
	done
}

save_ports() {
	printf 'PG_PORT=%s\nKAFKA_PORT=%s\nKAFKA_CONTROLLER_PORT=%s\nREGISTRY_PORT=%s\n' \
		"$PG_PORT" "$KAFKA_PORT" "$KAFKA_CONTROLLER_PORT" "$REGISTRY_PORT" >"$PORTS_FILE"
}

print_env() {
	printf "export CDC_TEST_PG_URL='postgres://postgres@127.0.0.1:%s/tidemark?sslmode=disable'\n" "$PG_PORT"
	printf "export CDC_TEST_KAFKA_BROKERS='127.0.0.1:%s'\n" "$KAFKA_PORT"
}

# ---------------------------------------------------------------------------------------------
# install

pg_bindir() {
	[ "$PG_VERSION" != 17 ] || { "$REPO/scripts/postgresql-17.sh" --no-install; return; }
	local initdb=""
	if command -v dpkg >/dev/null 2>&1; then
		initdb="$(dpkg -L postgresql-15 2>/dev/null | grep '/bin/initdb$' | head -n1 || true)"
	fi
	if [ -z "$initdb" ] && [ -x /usr/lib/postgresql/15/bin/initdb ]; then
		initdb=/usr/lib/postgresql/15/bin/initdb
	fi
	[ -n "$initdb" ] && dirname "$initdb"
}

apt_updated=0
apt_install() {
	is_root || die "need root to apt-get install $*; install them by hand"
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	log "apt-get install $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >&2
}

install_postgres() {
	case "$PG_VERSION" in
	15) [ -n "$(pg_bindir || true)" ] || apt_install postgresql-15 ;;
	17) # The server runs as postgres (postgresql-common creates the user).
		! is_root || id postgres >/dev/null 2>&1 || apt_install postgresql-common
		"$REPO/scripts/postgresql-17.sh" >/dev/null ;;
	*) die "TIDEMARK_PG_VERSION '$PG_VERSION' is not supported: 15 or 17" ;;
	esac
	PG_BIN="$(pg_bindir || true)"
	[ -n "$PG_BIN" ] || die "PostgreSQL $PG_VERSION server binaries not found after install"
}

# install_tools installs what the operator tests use, from Debian's packages, when missing:
# buildah, podman and runc (integration/container_test.go builds and runs the image), chromium
# (the status page's browser test) and prometheus with promtool (deploy/ and
# integration/prometheus_test.go). With their recommended packages: podman needs some of them.
install_tools() {
	local pkgs=()
	local tool
	for tool in buildah podman runc chromium; do
		command -v "$tool" >/dev/null 2>&1 || pkgs+=("$tool")
	done
	command -v promtool >/dev/null 2>&1 || pkgs+=(prometheus)
	[ -r /etc/ssl/certs/ca-certificates.crt ] || pkgs+=(ca-certificates)
	[ "${#pkgs[@]}" -gt 0 ] || return 0
	if ! is_root; then
		log "not root: cannot install ${pkgs[*]}; the tests that need them fail in CI"
		return 0
	fi
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
		apt_updated=1
	fi
	log "apt-get install ${pkgs[*]}"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}" >&2
}

install_java() {
	local pkgs=()
	command -v java >/dev/null 2>&1 || pkgs+=(openjdk-17-jre-headless)
	command -v mvn >/dev/null 2>&1 || pkgs+=(maven)
	if [ "${#pkgs[@]}" -gt 0 ]; then
		apt_install "${pkgs[@]}"
	fi
}

# cached_install DIR LOCK WHAT FETCH runs `FETCH TMP` once per DIR, to fill the temporary folder
# TMP that then becomes DIR. Concurrent installs (parallel test binaries on a fresh machine) wait
# for one another on the lock $CACHE/LOCK.lock, and DIR exists only complete (with .complete).
cached_install() {
	local dir="$1" lock="$2" what="$3" fetch="$4"
	if [ -f "$dir/.complete" ]; then
		return 0
	fi
	mkdir -p "$CACHE"
	exec 9>"$CACHE/$lock.lock"
	flock 9
	if [ -f "$dir/.complete" ]; then
		exec 9>&-
		return 0
	fi
	log "fetching $what from Maven Central into $dir"
	local tmp="$dir.tmp.$$"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	"$fetch" "$tmp"
	touch "$tmp/.complete"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	log "$what: $(find "$dir" -name '*.jar' | wc -l) jars"
	exec 9>&-
}

# mvn_copy TMP OUT WHAT POM ARGS... copies the dependencies of scripts/POM/pom.xml into OUT (in
# the temporary folder TMP). On failure it shows mvn's log, removes TMP and stops.
mvn_copy() { mvn_goal dependency:copy-dependencies "$@"; }

# mvn_goal GOAL TMP OUT WHAT POM ARGS... is mvn_copy with another goal of the dependency plugin
# (dependency:copy: the artifacts the pom lists, without their dependencies).
mvn_goal() {
	local goal="$1" tmp="$2" out="$3" what="$4" pom="$5"
	shift 5
	if ! mvn -B -q -Dstyle.color=never -f "$REPO/scripts/$pom/pom.xml" "$@" \
		"$goal" -DoutputDirectory="$out" >"$tmp.log" 2>&1; then
		cat "$tmp.log" >&2
		rm -rf "$tmp" "$tmp.log"
		rmdir "$(dirname "$tmp")" 2>/dev/null || true
		die "mvn could not fetch $what"
	fi
	rm -f "$tmp.log"
}

fetch_kafka() {
	mvn_copy "$1" "$1" "kafka_2.13:$KAFKA_VERSION (set TIDEMARK_KAFKA_VERSION to another 4.x)" kafka \
		-Dkafka.version="$KAFKA_VERSION" -Dlog4j.version="$LOG4J_VERSION" -DincludeScope=runtime
	ls "$1"/kafka_2.13-*.jar >/dev/null 2>&1 || die "no kafka_2.13 jar in $1"
}

install_kafka() {
	cached_install "$KAFKA_LIB" "kafka-$KAFKA_VERSION" "Kafka $KAFKA_VERSION jars" fetch_kafka
}

# install_connect collects connect-runtime, connect-json and connect-file with their runtime
# dependencies.
fetch_connect() {
	mvn_copy "$1" "$1" "connect-runtime:$KAFKA_VERSION" connect \
		-Dkafka.version="$KAFKA_VERSION" -Dlog4j.version="$LOG4J_VERSION" -DincludeScope=runtime
	ls "$1"/connect-runtime-*.jar >/dev/null 2>&1 || die "no connect-runtime jar in $1"
}

install_connect() {
	cached_install "$CONNECT_LIB" "connect-$KAFKA_VERSION" "Kafka Connect $KAFKA_VERSION jars" fetch_connect
}

# fetch_avro_reader collects the jars of the plain Java consumer of scripts/avro-reader (Apicurio
# Registry's Avro deserializer, kafka-clients) with their runtime dependencies.
fetch_avro_reader() {
	mvn_copy "$1" "$1" "apicurio-registry-serdes-avro-serde and kafka-clients:$KAFKA_VERSION" avro-reader \
		-Dkafka.version="$KAFKA_VERSION" -DincludeScope=runtime
	ls "$1"/apicurio-registry-serdes-avro-serde-*.jar >/dev/null 2>&1 || die "no apicurio-registry-serdes-avro-serde jar in $1"
}

install_avro_reader() {
	cached_install "$AVRO_READER_LIB" "avro-reader-$KAFKA_VERSION" "Avro reader jars" fetch_avro_reader
}

# install_debezium unpacks Debezium's PostgreSQL connector plugin archive into $DEBEZIUM_PLUGINS.
fetch_debezium() {
	mkdir -p "$1/archive"
	mvn_copy "$1" "$1/archive" "io.debezium:debezium-connector-postgres:$DEBEZIUM_VERSION:tar.gz:plugin" debezium \
		-Ddebezium.version="$DEBEZIUM_VERSION" -DexcludeTransitive=true
	tar -xzf "$1/archive/debezium-connector-postgres-$DEBEZIUM_VERSION-plugin.tar.gz" -C "$1" ||
		die "could not unpack the Debezium plugin archive in $1/archive"
	rm -rf "$1/archive"
	ls "$1"/debezium-connector-postgres/debezium-connector-postgres-*.jar >/dev/null 2>&1 ||
		die "no debezium-connector-postgres jar in $1/debezium-connector-postgres"
}

install_debezium() {
	cached_install "$DEBEZIUM_PLUGINS" "debezium-$DEBEZIUM_VERSION" "Debezium $DEBEZIUM_VERSION PostgreSQL connector" fetch_debezium
}

# fetch_apicurio_converter collects Apicurio Registry's Avro converter for Kafka Connect into the
# plugin folder apicurio-converter, without Kafka's jars (the worker has its own). Its jar lists
# no ServiceLoader manifest, so the folder gets one of its own (a jar holding only
# META-INF/services/...Converter): a worker with plugin.discovery=service_load, as the bench's
# matched producer profile runs, finds only plugins that have one.
fetch_apicurio_converter() {
	local plugin="$1/apicurio-converter"
	mkdir -p "$plugin"
	mvn_copy "$1" "$plugin" "io.apicurio:apicurio-registry-utils-converter:$APICURIO_CONVERTER_VERSION" apicurio-converter \
		-Dapicurio.converter.version="$APICURIO_CONVERTER_VERSION" -DincludeScope=runtime -DexcludeGroupIds=org.apache.kafka
	ls "$plugin"/apicurio-registry-utils-converter-*.jar >/dev/null 2>&1 || die "no apicurio-registry-utils-converter jar in $plugin"
	mkdir -p "$1/manifest/META-INF/services"
	echo io.apicurio.registry.utils.converter.AvroConverter >"$1/manifest/META-INF/services/org.apache.kafka.connect.storage.Converter"
	(cd "$1/manifest" && python3 -m zipfile -c "$plugin/tidemark-apicurio-converter-services.jar" META-INF) ||
		die "could not write the converter's ServiceLoader manifest jar"
	rm -rf "$1/manifest"
}

install_apicurio_converter() {
	cached_install "$APICURIO_CONVERTER_PLUGINS" "apicurio-converter-$APICURIO_CONVERTER_VERSION" \
		"Apicurio Registry's Avro converter $APICURIO_CONVERTER_VERSION" fetch_apicurio_converter
}

# fetch_registry unpacks Apicurio Registry's runnable archive (quarkus-run.jar, lib/, app/).
fetch_registry() {
	mkdir -p "$1/archive"
	mvn_goal dependency:copy "$1" "$1/archive" \
		"io.apicurio:apicurio-registry-app:$REGISTRY_VERSION:tar.gz:all (set TIDEMARK_REGISTRY_VERSION to another 3.x)" \
		registry -Dregistry.version="$REGISTRY_VERSION"
	tar -xzf "$1/archive/apicurio-registry-app-$REGISTRY_VERSION-all.tar.gz" -C "$1" ||
		die "could not unpack the Apicurio Registry archive in $1/archive"
	rm -rf "$1/archive"
	[ -f "$1/quarkus-run.jar" ] || die "no quarkus-run.jar in the Apicurio Registry archive ($1)"
}

install_registry() {
	cached_install "$REGISTRY_HOME" "apicurio-registry-$REGISTRY_VERSION" \
		"Apicurio Registry $REGISTRY_VERSION" fetch_registry
}

# java_major JAVA prints the major version of the java binary JAVA (8 for 1.8.0_x, 25 for 25.0.3),
# nothing when it does not run.
java_major() {
	local v
	v="$("$1" -version 2>&1 | sed -n 's/^[^ ]* version "\([^"]*\)".*/\1/p' | head -n1)" || return 0
	case "$v" in
	1.*) v="${v#1.}" ;;
	esac
	v="${v%%[.+-]*}"
	[[ "$v" =~ ^[0-9]+$ ]] && printf '%s' "$v"
}

# java21_home prints the home folder of a Java of 21 or later: TIDEMARK_JAVA21_HOME (which must
# be one), else the first of JAVA_HOME and `java` on PATH that is, else the newest under
# $JVM_DIR (/usr/lib/jvm). It fails, saying what to install, when there is none.
java21_home() {
	local major
	if [ -n "${TIDEMARK_JAVA21_HOME:-}" ]; then
		major="$(java_major "$TIDEMARK_JAVA21_HOME/bin/java")"
		[ -n "$major" ] || die "TIDEMARK_JAVA21_HOME=$TIDEMARK_JAVA21_HOME: $TIDEMARK_JAVA21_HOME/bin/java does not run"
		[ "$major" -ge 21 ] || die "TIDEMARK_JAVA21_HOME=$TIDEMARK_JAVA21_HOME is Java $major: Apicurio Registry needs 21 or later"
		printf '%s\n' "$TIDEMARK_JAVA21_HOME"
		return
	fi
	local home java seen=()
	local candidates=()
	[ -z "${JAVA_HOME:-}" ] || candidates+=("$JAVA_HOME")
	if java="$(command -v java 2>/dev/null)"; then
		java="$(readlink -f "$java")"
		candidates+=("$(dirname "$(dirname "$java")")")
	fi
	for home in "${candidates[@]}"; do
		major="$(java_major "$home/bin/java")"
		if [ -n "$major" ] && [ "$major" -ge 21 ]; then
			printf '%s\n' "$home"
			return
		fi
		seen+=("$home (${major:-does not run})")
	done
	local best="" best_major=0
	for home in "$JVM_DIR"/*/; do
		home="${home%/}"
		[ -x "$home/bin/java" ] || continue
		major="$(java_major "$home/bin/java")"
		seen+=("$home (${major:-does not run})")
		if [ -n "$major" ] && [ "$major" -gt "$best_major" ]; then
			best="$home" best_major="$major"
		fi
	done
	if [ "$best_major" -ge 21 ]; then
		printf '%s\n' "$best"
		return
	fi
	die "no Java of 21 or later found, and Apicurio Registry $REGISTRY_VERSION needs one (it refuses Java 17). Looked at: ${seen[*]:-nothing}. Install a JDK or JRE of 21 or later: on Debian 13 \`apt-get install openjdk-21-jre-headless\`; on Debian 12, which has none, Eclipse Temurin's temurin-21-jdk or temurin-25-jdk package (packages.adoptium.net) or its archive unpacked anywhere. Then set TIDEMARK_JAVA21_HOME to its folder unless it is under $JVM_DIR."
}

# check_registry_java says whether the registry can run here. Without a Java of 21 or later it
# warns (the registry's tests then skip), or under CI=true fails: CI skips nothing.
check_registry_java() {
	local ci="${CI:-}"
	if [ "$ci" = true ] || [ "$ci" = 1 ]; then
		java21_home >/dev/null
		return
	fi
	if ! (java21_home >/dev/null); then
		log "warning: the schema registry's tests will skip (under CI=true they fail)"
	fi
}

cmd_install() {
	install_postgres
	install_java
	install_kafka
}

# ---------------------------------------------------------------------------------------------
# PostgreSQL

# as_pg runs a command as the owner of the data folder (postgres when we are root).
as_pg() {
	if is_root; then
		runuser -u postgres -- "$@"
	else
		"$@"
	fi
}

# The unix socket path has a length limit (~107 bytes); fall back to /tmp for deep state folders.
pg_socket_dir() {
	local dir="$PG_DIR/run"
	if [ "${#dir}" -gt 80 ]; then
		dir="/tmp/tidemark-pg-$PG_PORT"
	fi
	printf '%s' "$dir"
}

pg_running() {
	[ -n "${PG_BIN:-}" ] || PG_BIN="$(pg_bindir || true)"
	[ -n "$PG_BIN" ] && [ -f "$PG_DATA/PG_VERSION" ] &&
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" status >/dev/null 2>&1
}

psql_pg() {
	"$PG_BIN/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$PG_PORT" -U postgres "$@"
}

pg_up() {
	if pg_running; then
		log "PostgreSQL already running (port $PG_PORT)"
		return 0
	fi
	local sock
	sock="$(pg_socket_dir)"
	mkdir -p "$PG_DIR" "$sock"
	if is_root; then
		chown postgres: "$PG_DIR" "$sock"
		runuser -u postgres -- test -w "$PG_DIR" ||
			die "user postgres cannot write $PG_DIR (a parent folder is not searchable by others?)"
	fi
	if [ -f "$PG_DATA/PG_VERSION" ] && [ "$(cat "$PG_DATA/PG_VERSION")" != "$PG_VERSION" ]; then
		die "$PG_DATA holds a PostgreSQL $(cat "$PG_DATA/PG_VERSION") cluster, not $PG_VERSION (TIDEMARK_PG_VERSION): clean it first"
	fi
	if [ ! -f "$PG_DATA/PG_VERSION" ]; then
		log "initdb $PG_DATA"
		rm -rf "$PG_DATA"
		as_pg "$PG_BIN/initdb" -D "$PG_DATA" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 \
			>"$PG_DIR/initdb.log" 2>&1 || {
			tail -n 30 "$PG_DIR/initdb.log" >&2
			die "initdb failed"
		}
	fi
	log "starting PostgreSQL on 127.0.0.1:$PG_PORT"
	if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -w -t 60 -o "$(pg_opts "$sock")" start >/dev/null; then
		tail -n 30 "$PG_LOG" >&2 || true
		die "PostgreSQL did not start (log: $PG_LOG)"
	fi
	if [ "$(psql_pg -d postgres -tAc "SELECT 1 FROM pg_database WHERE datname = 'tidemark'")" != 1 ]; then
		psql_pg -d postgres -c 'CREATE DATABASE tidemark' >/dev/null
	fi
}

pg_opts() {
	local opts="-c listen_addresses=127.0.0.1 -c port=$PG_PORT -c unix_socket_directories=$1"
	opts+=" -c wal_level=logical -c max_replication_slots=40 -c max_wal_senders=40"
	opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
	printf '%s' "$opts"
}

# pg_crash restarts a running server without a shutdown checkpoint: like a crash, the restarted
# server recovers from the WAL. Every connection ends at once.
pg_crash() {
	pg_running || die "PostgreSQL is not running"
	log "restarting PostgreSQL immediately (crash recovery)"
	if ! as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -l "$PG_LOG" -m immediate -w -t 60 \
		-o "$(pg_opts "$(pg_socket_dir)")" restart >/dev/null; then
		tail -n 30 "$PG_LOG" >&2 || true
		die "PostgreSQL did not restart (log: $PG_LOG)"
	fi
}

pg_down() {
	if pg_running; then
		log "stopping PostgreSQL"
		as_pg "$PG_BIN/pg_ctl" -D "$PG_DATA" -m fast -w -t 60 stop >/dev/null
	fi
}

# ---------------------------------------------------------------------------------------------
# Kafka

kafka_pid() {
	local pid
	[ -f "$KAFKA_PID" ] || return 1
	pid="$(cat "$KAFKA_PID")"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"
}

new_cluster_id() {
	local id
	while :; do
		id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
		if [ "${#id}" -eq 22 ] && [ "${id:0:1}" != "-" ]; then
			printf '%s' "$id"
			return
		fi
	done
}

write_kafka_config() {
	mkdir -p "$KAFKA_DIR/data"
	cat >"$KAFKA_DIR/server.properties" <<EOF
# Written by scripts/services.sh; rewritten on every start.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_ADVERTISED_PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$KAFKA_DIR/data
EOF
	grep -v '^#' "$REPO/scripts/kafka/single-node.properties" >>"$KAFKA_DIR/server.properties"
	cat >"$KAFKA_DIR/log4j2.properties" <<EOF
# Written by scripts/services.sh: the broker logs to $KAFKA_LOG (emptied before each start).
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = $KAFKA_LOG
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = file
logger.request.name = kafka.request.logger
logger.request.level = WARN
logger.statechange.name = state.change.logger
logger.statechange.level = WARN
EOF
}

kafka_up() {
	if kafka_pid >/dev/null; then
		log "Kafka already running (pid $(kafka_pid), port $KAFKA_PORT)"
		return 0
	fi
	write_kafka_config
	if [ ! -s "$KAFKA_DIR/cluster.id" ]; then
		new_cluster_id >"$KAFKA_DIR/cluster.id"
	fi
	local cp="$KAFKA_LIB/*"
	log "formatting Kafka storage"
	# shellcheck disable=SC2086
	java $KAFKA_HEAP -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" -cp "$cp" \
		kafka.tools.StorageTool format -t "$(cat "$KAFKA_DIR/cluster.id")" \
		-c "$KAFKA_DIR/server.properties" --ignore-formatted >"$KAFKA_DIR/format.log" 2>&1 || {
		cat "$KAFKA_DIR/format.log" >&2
		die "kafka storage format failed"
	}
	log "starting Kafka on 127.0.0.1:$KAFKA_PORT (controller $KAFKA_CONTROLLER_PORT)"
	: >"$KAFKA_LOG"
	# setsid: the broker gets its own session, so the caller's Ctrl-C or exit does not reach it.
	# shellcheck disable=SC2086
	setsid nohup java $KAFKA_HEAP -Dlog4j2.configurationFile="$KAFKA_DIR/log4j2.properties" \
		-cp "$cp" kafka.Kafka "$KAFKA_DIR/server.properties" \
		>"$KAFKA_OUT" 2>&1 </dev/null &
	local pid=$!
	echo "$pid" >"$KAFKA_PID"
	local waited=0
	while ! grep -q 'Kafka Server started' "$KAFKA_LOG" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			kafka_fail "Kafka exited during start-up"
		fi
		if [ "$waited" -ge $((KAFKA_START_TIMEOUT * 5)) ]; then
			kafka_stop_pid "$pid"
			kafka_fail "Kafka did not start within ${KAFKA_START_TIMEOUT}s"
		fi
		sleep 0.2
		waited=$((waited + 1))
	done
	log "Kafka started (pid $pid) in $((waited / 5))s"
}

kafka_fail() {
	{
		echo "--- $KAFKA_LOG (errors)"
		grep -E '^\[[^]]*\] (ERROR|FATAL) ' "$KAFKA_LOG" 2>/dev/null | head -n 5 || true
		echo "--- $KAFKA_LOG (tail)"
		tail -n 40 "$KAFKA_LOG" 2>/dev/null || true
		echo "--- $KAFKA_OUT (tail)"
		tail -n 20 "$KAFKA_OUT" 2>/dev/null || true
	} >&2
	rm -f "$KAFKA_PID"
	die "$1"
}

kafka_stop_pid() { stop_pid Kafka "$1"; }

# stop_pid WHAT PID ends a server with SIGTERM, or SIGKILL when it ignores that for 30s.
stop_pid() {
	local what=$1 pid=$2 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for i in $(seq 1 150); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
	log "$what (pid $pid) ignored SIGTERM for 30s: killing it"
	kill -KILL "$pid" 2>/dev/null || true
	for i in $(seq 1 25); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.2
	done
}

kafka_down() {
	local pid
	if pid="$(kafka_pid)"; then
		log "stopping Kafka (pid $pid)"
		kafka_stop_pid "$pid"
	fi
	rm -f "$KAFKA_PID"
}

# ---------------------------------------------------------------------------------------------
# Apicurio Registry

print_registry_env() {
	printf "export CDC_TEST_SCHEMA_REGISTRY_URL='%s://127.0.0.1:%s/apis/ccompat/v7'\n" "$REGISTRY_SCHEME" "$REGISTRY_PORT"
}

registry_pid() {
	local pid
	[ -f "$REGISTRY_PID" ] || return 1
	pid="$(cat "$REGISTRY_PID")"
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null && printf '%s' "$pid"
}

# registry_up starts the registry: Quarkus's HTTP server on 127.0.0.1 only, its management
# interface (health, metrics) on a free port of 127.0.0.1 (by default 0.0.0.0:9000, where two
# registries would collide; it cannot be turned off at run time), storage in an in-memory H2
# database, Vert.x's file cache in the state folder (not the shared /tmp/vertx-cache). Ready when Quarkus logs that it listens: it opens the port once
# the storage is initialised.
registry_up() {
	if registry_pid >/dev/null; then
		log "Apicurio Registry already running (pid $(registry_pid), port $REGISTRY_PORT)"
		return 0
	fi
	local home
	home="$(java21_home)" || exit 1
	# HTTP on the port, or with a certificate HTTPS only (the plain port is then not opened).
	local listen=(-Dquarkus.http.port="$REGISTRY_PORT")
	if [ -n "$REGISTRY_TLS_CERT$REGISTRY_TLS_KEY" ]; then
		[ -r "$REGISTRY_TLS_CERT" ] && [ -r "$REGISTRY_TLS_KEY" ] ||
			die "TIDEMARK_REGISTRY_TLS_CERT and TIDEMARK_REGISTRY_TLS_KEY must both name readable PEM files"
		listen=(-Dquarkus.http.port=0 -Dquarkus.http.ssl-port="$REGISTRY_PORT"
			-Dquarkus.http.ssl.certificate.files="$REGISTRY_TLS_CERT"
			-Dquarkus.http.ssl.certificate.key-files="$REGISTRY_TLS_KEY"
			-Dquarkus.http.insecure-requests=disabled)
	fi
	# In memory (a restart starts empty), or with TIDEMARK_REGISTRY_PERSIST=1 in an H2 file of the
	# state folder, kept across registry-down and registry-up as a production registry keeps its
	# storage.
	local storage=()
	if [ -n "$REGISTRY_PERSIST" ] && [ "$REGISTRY_PERSIST" != 0 ]; then
		storage=(-Dapicurio.datasource.url="jdbc:h2:file:$REGISTRY_DIR/h2/registry")
	fi
	mkdir -p "$REGISTRY_DIR"
	registry_users
	: >"$REGISTRY_LOG"
	log "starting Apicurio Registry $REGISTRY_VERSION on $REGISTRY_SCHEME://127.0.0.1:$REGISTRY_PORT (Java $(java_major "$home/bin/java") in $home)"
	# setsid: its own session, as Kafka's; the subshell's cd keeps anything it writes in its folder.
	# shellcheck disable=SC2086
	(cd "$REGISTRY_DIR" && exec setsid nohup "$home/bin/java" $REGISTRY_HEAP \
		-Dquarkus.http.host=127.0.0.1 "${listen[@]}" \
		-Dquarkus.management.host=127.0.0.1 -Dquarkus.management.port=0 \
		-Dapicurio.storage.kind=sql -Dapicurio.storage.sql.kind=h2 ${storage[@]+"${storage[@]}"} \
		-Dvertx.cacheDirBase="$REGISTRY_DIR/vertx-cache" \
		-jar "$REGISTRY_HOME/quarkus-run.jar" >"$REGISTRY_LOG" 2>&1 </dev/null) &
	local pid=$!
	echo "$pid" >"$REGISTRY_PID"
	local waited=0
	while ! grep -q "Listening on: $REGISTRY_SCHEME://127.0.0.1:$REGISTRY_PORT" "$REGISTRY_LOG" 2>/dev/null; do
		if ! kill -0 "$pid" 2>/dev/null; then
			registry_fail "Apicurio Registry exited during start-up"
		fi
		if [ "$waited" -ge $((REGISTRY_START_TIMEOUT * 5)) ]; then
			stop_pid "Apicurio Registry" "$pid"
			registry_fail "Apicurio Registry did not start within ${REGISTRY_START_TIMEOUT}s"
		fi
		sleep 0.2
		waited=$((waited + 1))
	done
	log "Apicurio Registry started (pid $pid) in $((waited / 5))s"
}

# registry_users writes Quarkus's configuration of the registry's users into the folder Quarkus
# reads at start-up (config/application.properties of its working folder), or removes it: with
# TIDEMARK_REGISTRY_USER, every request under /apis/ needs HTTP basic auth as that user (an
# embedded user of quarkus-elytron-security-properties-file, which Apicurio ships; no OIDC
# server). The password goes in a file of mode 0600, never on the command line.
registry_users() {
	local conf="$REGISTRY_DIR/config/application.properties"
	rm -f "$conf"
	[ -n "$REGISTRY_USER$REGISTRY_PASSWORD" ] || return 0
	[[ "$REGISTRY_USER" =~ ^[A-Za-z0-9_.-]+$ ]] ||
		die "TIDEMARK_REGISTRY_USER must be a non-empty name of letters, digits, '_', '.' and '-'"
	[[ -n "$REGISTRY_PASSWORD" && "$REGISTRY_PASSWORD" =~ ^[A-Za-z0-9_.~+=@%!-]+$ ]] ||
		die "TIDEMARK_REGISTRY_PASSWORD must be non-empty, of letters, digits and _.~+=@%!- (it is written to a properties file)"
	mkdir -p "$REGISTRY_DIR/config"
	(
		umask 077
		cat >"$conf" <<-EOF
			quarkus.http.auth.basic=true
			quarkus.security.users.embedded.enabled=true
			quarkus.security.users.embedded.plain-text=true
			quarkus.security.users.embedded.users.$REGISTRY_USER=$REGISTRY_PASSWORD
			quarkus.http.auth.permission.registry-api.paths=/apis/*
			quarkus.http.auth.permission.registry-api.policy=authenticated
		EOF
	)
}

registry_fail() {
	{
		echo "--- $REGISTRY_LOG (tail)"
		tail -n 40 "$REGISTRY_LOG" 2>/dev/null || true
	} >&2
	rm -f "$REGISTRY_PID"
	die "$1"
}

registry_down() {
	local pid
	if pid="$(registry_pid)"; then
		log "stopping Apicurio Registry (pid $pid)"
		stop_pid "Apicurio Registry" "$pid"
	fi
	rm -f "$REGISTRY_PID"
}

# ---------------------------------------------------------------------------------------------
# watchdog: tears everything down once a given process is gone

start_watchdog() {
	local watched=$1
	[[ "$watched" =~ ^[0-9]+$ ]] || die "TIDEMARK_WATCH_PID '$watched' is not a pid"
	stop_watchdog
	TIDEMARK_STATE="$STATE" setsid nohup bash -c '
		while kill -0 "$1" 2>/dev/null; do sleep 1; done
		rm -f "$3"
		"$2" clean
	' tidemark-watchdog "$watched" "$SELF" "$WATCH_PID_FILE" >"$STATE/watchdog.log" 2>&1 </dev/null &
	echo $! >"$WATCH_PID_FILE"
}

stop_watchdog() {
	local pid
	[ -f "$WATCH_PID_FILE" ] || return 0
	pid="$(cat "$WATCH_PID_FILE")"
	rm -f "$WATCH_PID_FILE"
	# The watchdog itself calls `clean`: do not kill the caller.
	if [ -n "$pid" ] && [ "$pid" != "$$" ] && [ "$pid" != "$PPID" ]; then
		kill "$pid" 2>/dev/null || true
	fi
}

# ---------------------------------------------------------------------------------------------

cmd_up() {
	cmd_install
	load_ports
	mkdir -p "$STATE"
	chmod 755 "$STATE"
	save_ports
	pg_up
	kafka_up
	if [ -n "${TIDEMARK_WATCH_PID:-}" ]; then
		start_watchdog "$TIDEMARK_WATCH_PID"
	fi
	print_env
}

cmd_registry_up() {
	install_java
	install_registry
	load_ports
	mkdir -p "$STATE"
	chmod 755 "$STATE"
	save_ports
	registry_up
	if [ -n "${TIDEMARK_WATCH_PID:-}" ]; then
		start_watchdog "$TIDEMARK_WATCH_PID"
	fi
	print_registry_env
}

cmd_down() {
	load_ports
	stop_watchdog
	registry_down
	kafka_down
	pg_down
}

cmd_clean() {
	cmd_down
	if [ -d "$STATE" ]; then
		log "removing $STATE"
		rm -rf "$STATE"
	fi
	rm -rf "/tmp/tidemark-pg-$PG_PORT"
}

cmd_status() {
	load_ports
	if pg_running; then
		echo "postgres: running on 127.0.0.1:$PG_PORT"
	else
		echo "postgres: stopped"
	fi
	if kafka_pid >/dev/null; then
		echo "kafka: running on 127.0.0.1:$KAFKA_PORT (pid $(kafka_pid))"
	else
		echo "kafka: stopped"
	fi
	if registry_pid >/dev/null; then
		echo "registry: running on 127.0.0.1:$REGISTRY_PORT (pid $(registry_pid))"
	else
		echo "registry: stopped"
	fi
}

main() {
	local cmd="${1:-}"
	case "$cmd" in
	install)
		cmd_install
		install_connect
		install_avro_reader
		install_registry
		check_registry_java
		;;
	install-tools)
		install_tools
		;;
	install-connect)
		install_java
		install_connect
		;;
	install-avro-reader)
		install_java
		install_avro_reader
		;;
	install-debezium)
		install_java
		install_connect
		install_debezium
		install_apicurio_converter
		;;
	up) cmd_up ;;
	down) cmd_down ;;
	clean) cmd_clean ;;
	env)
		load_ports
		print_env
		if registry_pid >/dev/null; then
			print_registry_env
		fi
		;;
	status) cmd_status ;;
	pg-crash)
		load_ports
		pg_crash
		;;
	install-registry)
		install_java
		install_registry
		java21_home >/dev/null
		;;
	java21) java21_home ;;
	registry-up) cmd_registry_up ;;
	registry-down)
		load_ports
		registry_down
		;;
	*)
		sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
		exit 2
		;;
	esac
}

main "$@"
