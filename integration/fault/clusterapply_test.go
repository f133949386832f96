package fault

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/internal/testenv"
)

// The replica side of the cluster suite: tidemark-apply keeps a second database in step with
// the published tables while the faults happen, and a bank table proves it is never torn.
// accounts holds bankAccounts rows of bankBalance each; every transfer moves an amount between
// two of them in one transaction, so any state of the replica that a consumer can see must hold
// bankAccounts rows summing to bankAccounts*bankBalance. An applier that applied one side of a
// transfer without the other (the two rows land on different partitions) breaks it.
const (
	bankAccounts = 500
	bankBalance  = 1000
)

// replicaSchema is the published tables without their rows, for the replica.
const replicaSchema = `
CREATE TABLE a (id bigint PRIMARY KEY, k int NOT NULL, v text, n numeric(12,2));
CREATE TABLE b (id bigint PRIMARY KEY, name text, qty int);
CREATE TABLE c (id bigint PRIMARY KEY, doc jsonb);
CREATE TABLE d (id bigint PRIMARY KEY, grp int, note text);
CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL);`

// createBank creates accounts on the source and adds it to pub (before cdc starts).
func createBank(t testing.TB, db, pub string) {
	t.Helper()
	testenv.Exec(t, db,
		`CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)`,
		fmt.Sprintf(`INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g`, bankBalance, bankAccounts),
		`ALTER PUBLICATION `+pub+` ADD TABLE accounts`)
}

// transfers moves money between accounts from two goroutines until stopped, riding out server
// trouble as the workload does.
type transfers struct {
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	committed atomic.Int64
}

func startTransfers(t testing.TB, db string, seed uint64) *transfers {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	tr := &transfers{cancel: cancel}
	for w := range 2 {
		rng := rand.New(rand.NewPCG(seed, uint64(100+w)))
		tr.wg.Go(func() { tr.run(ctx, db, rng) })
	}
	t.Cleanup(tr.stop)
	return tr
}

func (tr *transfers) stop() {
	tr.cancel()
	tr.wg.Wait()
}

func (tr *transfers) run(ctx context.Context, db string, rng *rand.Rand) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(10+rng.IntN(30)) * time.Millisecond):
		}
		if conn == nil || conn.IsClosed() {
			c, err := pgx.Connect(ctx, db)
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			conn = c
		}
		a := 1 + rng.IntN(bankAccounts)
		b := 1 + rng.IntN(bankAccounts-1)
		if b >= a {
			b++
		}
		if err := moveMoney(ctx, conn, a, b, int64(1+rng.IntN(100))); err == nil {
			tr.committed.Add(1)
		} else if ctx.Err() == nil {
			conn.Close(context.Background())
			conn = nil
		}
	}
}

// moveMoney moves amount from account a to b in one transaction (rows locked in id order).
func moveMoney(ctx context.Context, conn *pgx.Conn, a, b int, amount int64) error {
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tx, err := conn.Begin(tctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	first, second, d1, d2 := a, b, -amount, amount
	if b < a {
		first, second, d1, d2 = b, a, amount, -amount
	}
	if _, err := tx.Exec(tctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, first, d1); err != nil {
		return err
	}
	if _, err := tx.Exec(tctx, `UPDATE accounts SET balance = balance + $2 WHERE id = $1`, second, d2); err != nil {
		return err
	}
	return tx.Commit(tctx)
}

// replicaWatch samples the replica's accounts every 100ms until stopped: once the copy is
// applied (any row there), every sample must hold every account and the initial total.
type replicaWatch struct {
	cancel context.CancelFunc
	done   chan struct{}

	mu         sync.Mutex
	samples    int
	violations int
	examples   []string
}

func watchReplica(t testing.TB, replica string) *replicaWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w := &replicaWatch{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(w.done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
			if conn == nil || conn.IsClosed() {
				c, err := pgx.Connect(ctx, replica)
				if err != nil {
					continue
				}
				conn = c
			}
			var n, sum int64
			qctx, qcancel := context.WithTimeout(ctx, 5*time.Second)
			err := conn.QueryRow(qctx, `SELECT count(*), coalesce(sum(balance), 0) FROM accounts`).Scan(&n, &sum)
			qcancel()
			if err != nil || n == 0 {
				continue
			}
			w.mu.Lock()
			w.samples++
			if n != bankAccounts || sum != bankAccounts*bankBalance {
				w.violations++
				if len(w.examples) < 3 {
					w.examples = append(w.examples, fmt.Sprintf("%s: %d accounts summing to %d (want %d, %d)",
						time.Now().Format(time.StampMilli), n, sum, bankAccounts, bankAccounts*bankBalance))
				}
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.stop)
	return w
}

func (w *replicaWatch) stop() {
	w.cancel()
	<-w.done
}

// counts returns the samples taken and the violations so far.
func (w *replicaWatch) counts() (samples, violations int, examples []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.samples, w.violations, append([]string(nil), w.examples...)
}

// tableDigest is a table's rows, in key order, as one md5.
func tableDigest(ctx context.Context, conn *pgx.Conn, table string) (string, error) {
	var d string
	err := conn.QueryRow(ctx, `SELECT md5(coalesce(string_agg(t::text, '|' ORDER BY t.id), '')) || ':' || count(*) FROM `+table+` t`).Scan(&d)
	return d, err
}

// replicaDiffers waits up to timeout for the replica to equal the source in every table and
// returns the tables that still differ (with their digests).
func replicaDiffers(t testing.TB, source, replica string, tables []string, timeout time.Duration) []string {
	t.Helper()
	src, rep := testenv.Conn(t, source), testenv.Conn(t, replica)
	deadline := time.Now().Add(timeout)
	for {
		var differ []string
		for _, tbl := range tables {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			a, errA := tableDigest(ctx, src, tbl)
			b, errB := tableDigest(ctx, rep, tbl)
			cancel()
			if errA != nil || errB != nil || a != b {
				differ = append(differ, fmt.Sprintf("%s (source %s, replica %s; %v %v)", tbl, a, b, errA, errB))
			}
		}
		if len(differ) == 0 || time.Now().After(deadline) {
			return differ
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// startApplier runs tidemark-apply (APPLY_ALL_TABLES: every table cdc publishes, including
// those added later) into replica, which must hold replicaSchema, against brokers, and starts
// the transfers and the watch of the replica. settle then also checks the replica.
func (r *clusterRun) startApplier(replica string, brokers []string) {
	r.t.Helper()
	r.replica = replica
	r.applier = newBinarySupervisor(r.t, applyBinary, "tidemark-apply", map[string]string{
		"APPLY_TARGET_URL":  replica,
		"APPLY_ALL_TABLES":  "true",
		"CDC_KAFKA_BROKERS": strings.Join(brokers, ","),
		"CDC_TOPIC_PREFIX":  r.prefix,
		"APPLY_LOG_FORMAT":  "text",
	})
	r.applier.start()
	r.transfers = startTransfers(r.t, r.db, r.seed)
	r.watch = watchReplica(r.t, replica)
}
