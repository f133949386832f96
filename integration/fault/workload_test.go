package fault

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tidemark/cdc/internal/testenv"
)

// Tables of the scenario. a is big (its initial snapshot takes seconds), b and c are small and
// take key-changing updates, d is added to the publication while cdc runs.
var (
	initialTables = []string{"public.a", "public.b", "public.c"}
	addedTable    = "public.d"
	allTables     = append(append([]string(nil), initialTables...), addedTable)
)

// tableSQL renders each table as its topic should carry it: the record key, and the row as the
// codec encodes it (numeric as a string, jsonb embedded).
var tableSQL = map[string]string{
	"public.a": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, k, v, n::text AS n FROM a) t`,
	"public.b": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, name, qty FROM b) t`,
	"public.c": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, doc FROM c) t`,
	"public.d": `SELECT '{"id":' || id || '}', row_to_json(t)::text FROM (SELECT id, grp, note FROM d) t`,
}

func createTables(t testing.TB, dbURL, pub string, bigRows, addedRows int) {
	t.Helper()
	testenv.Exec(t, dbURL,
		`CREATE TABLE a (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2))`,
		fmt.Sprintf(`INSERT INTO a SELECT g, g %% 1000, md5(g::text) || repeat('x', 40), g / 7.0 FROM generate_series(1, %d) g`, bigRows),
		`CREATE SEQUENCE a_ids START 100000000`,
		`CREATE TABLE b (id bigint PRIMARY KEY, name text, qty int)`,
		`INSERT INTO b SELECT g, 'name ' || g, g FROM generate_series(1, 1000) g`,
		`CREATE SEQUENCE b_ids START 100000000`,
		`CREATE TABLE c (id bigint PRIMARY KEY, doc jsonb)`,
		`INSERT INTO c SELECT g, jsonb_build_object('g', g, 'tags', jsonb_build_array('a', g)) FROM generate_series(1, 500) g`,
		`CREATE SEQUENCE c_ids START 100000000`,
		`CREATE TABLE d (id bigint PRIMARY KEY, grp int, note text)`,
		fmt.Sprintf(`INSERT INTO d SELECT g, g %% 97, 'note ' || md5(g::text) FROM generate_series(1, %d) g`, addedRows),
		`CREATE SEQUENCE d_ids START 100000000`,
		`CREATE PUBLICATION `+pub+` FOR TABLE a, b, c`,
		`ANALYZE`,
	)
}

// workload runs random transactions on every table from several goroutines until stopped. It
// connects to PostgreSQL directly (not through the proxy) and rides out server restarts.
type workload struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	commits   atomic.Int64
	rollbacks atomic.Int64 // deliberate
	aborted   atomic.Int64 // by an error (deadlock, server restart)
	reconnect atomic.Int64
	mu        sync.Mutex
	lastErr   error
}

func startWorkload(t testing.TB, dbURL string, seed uint64, workers, bigRows, addedRows int) *workload {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &workload{cancel: cancel}
	for i := range workers {
		rng := rand.New(rand.NewPCG(seed, uint64(i)+1))
		w.wg.Add(1)
		go w.run(ctx, dbURL, rng, int64(bigRows), int64(addedRows))
	}
	t.Cleanup(w.stop)
	return w
}

func (w *workload) stop() {
	w.cancel()
	w.wg.Wait()
}

func (w *workload) summary() string {
	return fmt.Sprintf("%d commits, %d rollbacks, %d aborted by errors, %d reconnects",
		w.commits.Load(), w.rollbacks.Load(), w.aborted.Load(), w.reconnect.Load())
}

func (w *workload) run(ctx context.Context, dbURL string, rng *rand.Rand, bigRows, addedRows int64) {
	defer w.wg.Done()
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		// A few hundred transactions per second over all workers.
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(5+rng.IntN(25)) * time.Millisecond):
		}
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, dbURL)
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			if conn != nil {
				w.reconnect.Add(1)
			}
			conn = c
		}
		err := w.txn(ctx, conn, rng, bigRows, addedRows)
		if err != nil && ctx.Err() == nil {
			w.aborted.Add(1)
			w.mu.Lock()
			w.lastErr = err
			w.mu.Unlock()
			var pgErr *pgconn.PgError
			if !errors.As(err, &pgErr) || pgErr.Code[:2] != "40" {
				// Not a deadlock or serialization failure: start over with a new connection.
				conn.Close(context.Background())
			}
		}
	}
}

// txn runs one random transaction: one to four statements over one or several tables, sometimes
// a batch update, sometimes rolled back on purpose.
func (w *workload) txn(ctx context.Context, conn *pgx.Conn, rng *rand.Rand, bigRows, addedRows int64) error {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := conn.Begin(tctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	for range 1 + rng.IntN(4) {
		var sql string
		var args []any
		switch rng.IntN(16) {
		case 0:
			sql = `INSERT INTO a (id, k, v, n) VALUES (nextval('a_ids'), $1, md5(random()::text), $2)`
			args = []any{rng.IntN(1000), fmt.Sprintf("%d.%02d", rng.IntN(10000), rng.IntN(100))}
		case 1, 2:
			sql = `UPDATE a SET k = k + 1, v = md5(random()::text) WHERE id = $1`
			args = []any{1 + rng.Int64N(bigRows)}
		case 3:
			sql = `DELETE FROM a WHERE id = $1`
			args = []any{1 + rng.Int64N(bigRows)}
		case 4:
			// Many changes in one transaction, ordered by sequence.
			sql = `UPDATE a SET n = n + 1 WHERE id BETWEEN $1 AND $1 + 30`
			args = []any{1 + rng.Int64N(bigRows)}
		case 5:
			sql = `INSERT INTO b (id, name, qty) VALUES (nextval('b_ids'), $1, $2)`
			args = []any{fmt.Sprintf("n%d", rng.IntN(1000)), rng.IntN(100)}
		case 6:
			sql = `UPDATE b SET qty = qty + 1 WHERE id = (SELECT id FROM b WHERE id >= $1 ORDER BY id LIMIT 1)`
			args = []any{1 + rng.IntN(1000)}
		case 7:
			// Key-changing update: published as a delete of the old key and a create of the new.
			sql = `UPDATE b SET id = nextval('b_ids'), name = name || '+' WHERE id = (SELECT id FROM b WHERE id >= $1 ORDER BY id LIMIT 1)`
			args = []any{1 + rng.IntN(1000)}
		case 8:
			sql = `DELETE FROM b WHERE id = (SELECT id FROM b WHERE id >= $1 ORDER BY id LIMIT 1)`
			args = []any{1 + rng.IntN(1000)}
		case 9:
			sql = `INSERT INTO c (id, doc) VALUES (nextval('c_ids'), jsonb_build_object('r', $1::int, 'tags', jsonb_build_array('x')))`
			args = []any{rng.IntN(1 << 20)}
		case 10:
			sql = `UPDATE c SET doc = jsonb_set(doc, '{n}', to_jsonb($2::int)) WHERE id = (SELECT id FROM c WHERE id >= $1 ORDER BY id LIMIT 1)`
			args = []any{1 + rng.IntN(500), rng.IntN(1 << 20)}
		case 11:
			sql = `UPDATE c SET id = nextval('c_ids') WHERE id = (SELECT min(id) FROM c)`
		case 12:
			sql = `DELETE FROM c WHERE id = (SELECT id FROM c WHERE id >= $1 ORDER BY id LIMIT 1)`
			args = []any{1 + rng.IntN(500)}
		case 13:
			sql = `INSERT INTO d (id, grp, note) VALUES (nextval('d_ids'), $1, md5(random()::text))`
			args = []any{rng.IntN(97)}
		case 14:
			sql = `UPDATE d SET grp = grp + 1, note = md5(random()::text) WHERE id = $1`
			args = []any{1 + rng.Int64N(addedRows)}
		case 15:
			sql = `DELETE FROM d WHERE id = $1`
			args = []any{1 + rng.Int64N(addedRows)}
		}
		if _, err := tx.Exec(tctx, sql, args...); err != nil {
			return err
		}
	}
	if rng.IntN(10) == 0 {
		w.rollbacks.Add(1)
		return tx.Rollback(tctx)
	}
	if err := tx.Commit(tctx); err != nil {
		return err
	}
	w.commits.Add(1)
	return nil
}
