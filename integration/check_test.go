package integration

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/internal/testenv"
)

// TestCheck runs `cdc check` against real servers: a healthy setup passes every check, exits 0
// and creates nothing; each missing prerequisite, produced on the server, shows its ✗ line with
// its fix and a non-zero exit.
func TestCheck(t *testing.T) {
	t.Run("healthy", func(t *testing.T) {
		e := newEnv(t)
		e.exec(`CREATE TABLE orders (id int PRIMARY KEY, note text)`, `CREATE TABLE items (id int PRIMARY KEY)`)
		vars := e.baseVars()
		vars["CDC_TABLES"] = "public.orders,public.items"
		res := runCDC(t, vars, time.Minute, "check")
		if res.code != 0 || strings.Contains(res.out, "✗") {
			t.Errorf("cdc check on a healthy setup: exit %d", res.code)
		}
		assertContains(t, res.out, "✓ wal_level = logical", "✓ table public.orders: SELECT granted",
			"Tidemark will create it", "topic creation allowed", "transactions available", "All ")
		e.assertClean()
	})

	t.Run("missing prerequisites", func(t *testing.T) {
		e := newEnv(t)
		role := "it_check_" + strconv.FormatInt(time.Now().UnixNano()%1_000_000, 10)
		admin := testenv.PGURL(t)
		testenv.Exec(t, admin, fmt.Sprintf(`CREATE ROLE %s LOGIN NOREPLICATION NOSUPERUSER`, role))
		t.Cleanup(func() {
			testenv.Exec(t, e.pgURL, "DROP OWNED BY "+role)
			testenv.Exec(t, admin, "DROP ROLE IF EXISTS "+role)
		})
		e.exec(
			`CREATE TABLE readable (id int PRIMARY KEY)`,
			`CREATE TABLE secret (id int PRIMARY KEY)`,
			`CREATE TABLE keyless (v text)`,
			`CREATE PUBLICATION it_pub FOR TABLE readable, secret`,
			fmt.Sprintf(`GRANT SELECT ON readable, keyless TO %s`, role),
		)
		vars := e.baseVars()
		vars["CDC_PG_URL"] = withUser(t, e.pgURL, role)
		vars["CDC_KAFKA_BROKERS"] = "127.0.0.1:1" // nothing listens there
		res := runCDC(t, vars, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("exit 0 with missing prerequisites")
		}
		assertContains(t, res.out,
			"✗ role "+role+" lacks the REPLICATION attribute", "ALTER ROLE "+role+" REPLICATION",
			"✗ table public.secret: no SELECT privilege", "GRANT SELECT ON",
			"✓ table public.readable: SELECT granted",
			"✗ Kafka brokers 127.0.0.1:1: not reachable", "check CDC_KAFKA_BROKERS")

		// A keyless table named in CDC_TABLES, and a publication that does not exist.
		vars["CDC_TABLES"] = "public.keyless"
		vars["CDC_PUBLICATION"] = "it_other_pub"
		res = runCDC(t, vars, time.Minute, "check")
		assertContains(t, res.out, "✗ table public.keyless has no primary key or replica identity", "REPLICA IDENTITY FULL",
			"✗ publication it_other_pub does not exist and the role may not create it")
		delete(vars, "CDC_TABLES")
		res = runCDC(t, vars, time.Minute, "check")
		assertContains(t, res.out, "✗ publication it_other_pub does not exist", "CREATE PUBLICATION")
		if res.code == 0 {
			t.Errorf("exit 0 without the publication")
		}
	})

	t.Run("no headroom and a lost slot", func(t *testing.T) {
		brokers := testenv.Brokers(t)
		pgURL := startThrowawayPG(t, "-c", "wal_level=logical", "-c", "max_replication_slots=1", "-c", "max_wal_senders=1",
			"-c", "max_slot_wal_keep_size=1MB", "-c", "min_wal_size=32MB", "-c", "max_wal_size=64MB")
		testenv.Exec(t, pgURL, `CREATE TABLE t (id int PRIMARY KEY, v text)`,
			`SELECT pg_create_logical_replication_slot('tidemark', 'pgoutput')`)
		vars := map[string]string{"CDC_PG_URL": pgURL, "CDC_KAFKA_BROKERS": strings.Join(brokers, ","), "CDC_TABLES": "public.t"}
		res := runCDC(t, vars, time.Minute, "check")
		assertContains(t, res.out, "✗ max_replication_slots = 1, 1 in use: 0 free, 1 needed", "raise max_replication_slots",
			"✗ max_wal_senders = 1, 0 in use: 1 free, 2 needed", "✓ replication slot tidemark: inactive")
		// Write past max_slot_wal_keep_size: the next checkpoint invalidates the slot.
		for i := 0; i < 4; i++ {
			testenv.Exec(t, pgURL, `INSERT INTO t SELECT g, repeat('x', 1000) FROM generate_series(1, 20000) g ON CONFLICT (id) DO UPDATE SET v = excluded.v || 'y'`,
				`SELECT pg_switch_wal()`)
		}
		testenv.Exec(t, pgURL, `CHECKPOINT`)
		res = runCDC(t, vars, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("exit 0 with a lost slot and no headroom")
		}
		assertContains(t, res.out, "✗ replication slot tidemark was invalidated (wal_status = lost)", "pg_drop_replication_slot('tidemark')")
	})

	t.Run("wal_level replica", func(t *testing.T) {
		brokers := testenv.Brokers(t)
		pgURL := startThrowawayPG(t, "-c", "wal_level=replica")
		vars := map[string]string{"CDC_PG_URL": pgURL, "CDC_KAFKA_BROKERS": strings.Join(brokers, ","), "CDC_TABLES": "public.t"}
		testenv.Exec(t, pgURL, `CREATE TABLE t (id int PRIMARY KEY)`)
		res := runCDC(t, vars, time.Minute, "check")
		if res.code == 0 {
			t.Errorf("exit 0 with wal_level=replica")
		}
		assertContains(t, res.out, "✗ wal_level = replica", "ALTER SYSTEM SET wal_level = logical")
	})
}
