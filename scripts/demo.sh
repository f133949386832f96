#!/usr/bin/env bash
# Tidemark demo: real PostgreSQL and Kafka (scripts/services.sh, own state in .demo/), two demo
# tables, the cdc service running against them, a few changes, every record of the demo topics
# printed by cmd/tidemark-tail, and tidemark-apply keeping a replica database in step (counts and
# sums of source and replica printed side by side). cdc and the applier keep running until Ctrl-C.
#
# Ports (override with the same variables as services.sh): PostgreSQL 55442, Kafka 59102/59103,
# so the demo never touches the servers of `make up`.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$REPO"
DEMO="$REPO/.demo"
export TIDEMARK_STATE="$DEMO/state"
export TIDEMARK_PG_PORT="${TIDEMARK_PG_PORT:-55442}"
export TIDEMARK_KAFKA_PORT="${TIDEMARK_KAFKA_PORT:-59102}"
export TIDEMARK_KAFKA_CONTROLLER_PORT="${TIDEMARK_KAFKA_CONTROLLER_PORT:-59103}"
PREFIX=demo

say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

CDC_PID=""
APPLY_PID=""
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	if [ -n "$APPLY_PID" ] && kill -0 "$APPLY_PID" 2>/dev/null; then
		say "stopping tidemark-apply"
		kill -TERM "$APPLY_PID" 2>/dev/null || true
		wait "$APPLY_PID" 2>/dev/null || true
	fi
	if [ -n "$CDC_PID" ] && kill -0 "$CDC_PID" 2>/dev/null; then
		say "stopping cdc"
		kill -TERM "$CDC_PID" 2>/dev/null || true
		wait "$CDC_PID" 2>/dev/null || true
	fi
	say "stopping PostgreSQL and Kafka (logs stay in $TIDEMARK_STATE)"
	scripts/services.sh down || true
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

psql_bin() {
	if [ -x /usr/lib/postgresql/15/bin/psql ]; then
		echo /usr/lib/postgresql/15/bin/psql
	else
		command -v psql || {
			echo "demo: psql not found" >&2
			exit 1
		}
	fi
}
PSQL="$(psql_bin)"

say "starting PostgreSQL and Kafka (fresh state in $TIDEMARK_STATE)"
scripts/services.sh clean >/dev/null 2>&1 || true
eval "$(scripts/services.sh up)"
PG_URL="$CDC_TEST_PG_URL"
BROKERS="$CDC_TEST_KAFKA_BROKERS"
# cdc rejects CDC_* variables it does not know.
unset CDC_TEST_PG_URL CDC_TEST_KAFKA_BROKERS
sql() { "$PSQL" -X -q -v ON_ERROR_STOP=1 "$PG_URL" "$@"; }

say "creating demo tables in database tidemark"
sql -f scripts/demo-schema.sql
sql -c 'SELECT * FROM demo_customers ORDER BY id' -c 'SELECT * FROM demo_orders ORDER BY id'

say "building bin/cdc, bin/tidemark-tail and bin/tidemark-apply"
go build -o bin/cdc ./cmd/cdc
go build -o bin/tidemark-tail ./cmd/tidemark-tail
go build -o bin/tidemark-apply ./cmd/tidemark-apply

tail_records() { bin/tidemark-tail -brokers "$BROKERS" -prefix "$PREFIX" -timeout 20s "$@"; }
count_records() {
	local n
	n="$(tail_records 2>/dev/null | grep -c "^$PREFIX\.public\.$1	" || true)"
	echo "${n:-0}"
}

cdc_died() {
	echo "demo: cdc exited; last lines of $DEMO/cdc.log:" >&2
	tail -n 30 "$DEMO/cdc.log" >&2 || true
	CDC_PID=""
	exit 1
}

# wait_records TABLE N: wait until the topic of TABLE holds at least N records.
wait_records() {
	local i
	for i in $(seq 1 60); do
		[ "$(count_records "$1")" -ge "$2" ] && return 0
		kill -0 "$CDC_PID" 2>/dev/null || cdc_died
		sleep 1
	done
	echo "demo: topic $PREFIX.public.$1 has fewer than $2 records after 60s" >&2
	exit 1
}

say "starting cdc (log: $DEMO/cdc.log)"
mkdir -p "$DEMO"
CDC_PG_URL="$PG_URL" \
	CDC_KAFKA_BROKERS="$BROKERS" \
	CDC_PUBLICATION=tidemark_demo \
	CDC_TABLES=public.demo_customers,public.demo_orders \
	CDC_SLOT=tidemark_demo \
	CDC_TOPIC_PREFIX="$PREFIX" \
	CDC_LOG_FORMAT=text \
	CDC_HTTP_ADDR="127.0.0.1:${TIDEMARK_DEMO_HTTP_PORT:-9187}" \
	bin/cdc >"$DEMO/cdc.log" 2>&1 &
CDC_PID=$!

say "waiting for the snapshot of both tables"
wait_records demo_customers 3
wait_records demo_orders 4

say "changing rows: insert, update, delete"
sql <<'EOF'
INSERT INTO demo_customers (name, email) VALUES ('Barbara Liskov', 'barbara@example.com');
INSERT INTO demo_orders (customer_id, amount) VALUES (4, 42.00), (2, 13.37);
BEGIN;
UPDATE demo_customers SET email = 'ada@analytical.engine' WHERE id = 1;
UPDATE demo_orders SET amount = amount + 1 WHERE customer_id = 1;
COMMIT;
DELETE FROM demo_orders WHERE id = 3;
EOF
# 3 snapshot rows + 1 insert + 1 update; 4 snapshot rows + 2 inserts + 2 updates + 1 delete.
wait_records demo_customers 5
wait_records demo_orders 9
sleep 2 # one more watermark interval

say "every record of the $PREFIX.* topics (topic, partition, offset, key, value)"
tail_records

say "watermarks: how far each table's topic is complete (cdc watermarks)"
CDC_PG_URL="$PG_URL" CDC_KAFKA_BROKERS="$BROKERS" CDC_PUBLICATION=tidemark_demo CDC_SLOT=tidemark_demo \
	CDC_TOPIC_PREFIX="$PREFIX" CDC_LOG_FORMAT=text bin/cdc watermarks

say "tidemark-apply: a replica in database tidemark_replica (log: $DEMO/apply.log)"
REPLICA_URL="${PG_URL/\/tidemark\?//tidemark_replica?}"
sql -c 'CREATE DATABASE tidemark_replica'
# The replica's tables: the demo schema without its rows.
"$PSQL" -X -q -v ON_ERROR_STOP=1 "$REPLICA_URL" -f scripts/demo-schema.sql \
	-c 'TRUNCATE demo_customers, demo_orders'
APPLY_TARGET_URL="$REPLICA_URL" \
	APPLY_TABLES=public.demo_customers,public.demo_orders \
	CDC_KAFKA_BROKERS="$BROKERS" \
	CDC_TOPIC_PREFIX="$PREFIX" \
	APPLY_LOG_FORMAT=text \
	bin/tidemark-apply >"$DEMO/apply.log" 2>&1 &
APPLY_PID=$!

# summary URL: one line of counts and sums of the demo tables.
summary() {
	"$PSQL" -X -q -At "$1" -c "SELECT (SELECT count(*) FROM demo_customers) || ' customers, ' ||
		(SELECT count(*) FROM demo_orders) || ' orders, amounts ' || (SELECT coalesce(sum(amount), 0) FROM demo_orders) ||
		', emails ' || (SELECT md5(string_agg(email, ',' ORDER BY id)) FROM demo_customers)"
}
# in_step waits until the replica's summary equals the source's.
in_step() {
	local i
	for i in $(seq 1 60); do
		[ "$(summary "$PG_URL")" = "$(summary "$REPLICA_URL")" ] && return 0
		kill -0 "$APPLY_PID" 2>/dev/null || {
			echo "demo: tidemark-apply exited; last lines of $DEMO/apply.log:" >&2
			tail -n 30 "$DEMO/apply.log" >&2 || true
			APPLY_PID=""
			exit 1
		}
		sleep 1
	done
	echo "demo: the replica is not in step after 60s; last lines of $DEMO/apply.log:" >&2
	tail -n 30 "$DEMO/apply.log" >&2 || true
	exit 1
}
in_step
echo "source:  $(summary "$PG_URL")"
echo "replica: $(summary "$REPLICA_URL")"

say "one more transaction, in both tables: the replica shows it whole or not at all"
sql <<'EOF'
BEGIN;
INSERT INTO demo_customers (name, email) VALUES ('Alan Turing', 'alan@example.com');
INSERT INTO demo_orders (customer_id, amount) VALUES (5, 100.00);
UPDATE demo_orders SET amount = amount - 10 WHERE id = 1;
COMMIT;
EOF
in_step
echo "source:  $(summary "$PG_URL")"
echo "replica: $(summary "$REPLICA_URL")"
"$PSQL" -X -q "$REPLICA_URL" -c 'SELECT name, lsn, txns AS transactions_applied, applied_at FROM tidemark_apply_progress'

say "cdc and tidemark-apply keep running: change rows with"
echo "  $PSQL '$PG_URL'"
echo "print the topics again with"
echo "  bin/tidemark-tail -brokers $BROKERS -prefix $PREFIX"
echo "and look at the replica with"
echo "  $PSQL '$REPLICA_URL'"
echo "The status page is at http://127.0.0.1:${TIDEMARK_DEMO_HTTP_PORT:-9187}/ (tables, watermarks, lag; metrics on /metrics)."
echo "Ctrl-C stops cdc, tidemark-apply, PostgreSQL and Kafka."
set +e
wait "$CDC_PID"
rc=$?
set -e
[ "$rc" -ge 128 ] || cdc_died
