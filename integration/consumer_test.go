package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/consumer"
	"github.com/tidemark/cdc/pkg/wait"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestConsumerCuts runs the built cdc on two tables, accounts and ledger, that writers change
// only in transactions moving money between two accounts and inserting the matching ledger row.
// A pkg/consumer reader of the two tables applies its cuts to an in-memory replica. After every
// cut the replica's balances sum to the constant total and agree with its ledger, and every
// source transaction in a cut is whole (two account updates and one ledger row). Meanwhile a
// third table, not chosen, is added and copied: the cuts keep coming during its copy. At the
// end the replica equals the source.
func TestConsumerCuts(t *testing.T) {
	const accounts, initial = 200, 1000
	e := newEnv(t)
	e.exec(
		`CREATE TABLE accounts (id int PRIMARY KEY, balance bigint NOT NULL)`,
		fmt.Sprintf(`INSERT INTO accounts SELECT g, %d FROM generate_series(1, %d) g`, initial, accounts),
		`CREATE TABLE ledger (id bigserial PRIMARY KEY, src int NOT NULL, dst int NOT NULL, amount bigint NOT NULL)`,
		`CREATE TABLE big (id int PRIMARY KEY, pad text)`,
		`INSERT INTO big SELECT g, repeat('x', 40) FROM generate_series(1, 1000000) g`,
	)
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.accounts,public.ledger"
	p := e.startCDC(vars)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()

	acc, led := change.ExportID{Schema: "public", Table: "accounts"}, change.ExportID{Schema: "public", Table: "ledger"}
	rd, err := consumer.New(consumer.Config{Brokers: e.brokers, WatermarkTopic: e.watermarkTopic(),
		Tables: []change.ExportID{acc, led}, WaitAll: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()

	// Writers: transfers in single transactions.
	wctx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var werr error
	var mu sync.Mutex
	for w := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := pgx.Connect(wctx, e.pgURL)
			if err != nil {
				mu.Lock()
				werr = err
				mu.Unlock()
				return
			}
			defer c.Close(context.Background())
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for wctx.Err() == nil {
				a, b := 1+rng.IntN(accounts), 1+rng.IntN(accounts)
				if a == b {
					continue
				}
				lo, hi := min(a, b), max(a, b)
				amt := 1 + rng.IntN(50)
				err := pgx.BeginFunc(wctx, c, func(tx pgx.Tx) error {
					// Lock in id order: no deadlocks between writers.
					for _, id := range []int{lo, hi} {
						d := amt
						if id == a {
							d = -amt
						}
						if _, err := tx.Exec(wctx, `UPDATE accounts SET balance = balance + $1 WHERE id = $2`, d, id); err != nil {
							return err
						}
					}
					_, err := tx.Exec(wctx, `INSERT INTO ledger (src, dst, amount) VALUES ($1, $2, $3)`, a, b, amt)
					return err
				})
				if err != nil && wctx.Err() == nil {
					mu.Lock()
					werr = err
					mu.Unlock()
					return
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}

	// The replica and its checks.
	type entry struct{ src, dst, amount int64 }
	balances := map[int64]int64{}
	ledger := map[int64]entry{}
	check := func(cut *consumer.Cut) {
		t.Helper()
		for _, ev := range cut.Events {
			if ev.Kind == consumer.EventJoined || ev.Kind == consumer.EventReset {
				if ev.Export == acc {
					clear(balances)
				} else {
					clear(ledger)
				}
			} else {
				t.Fatalf("unexpected event %s of %s", ev.Kind, ev.Export)
			}
		}
		for _, tx := range cut.Txns {
			nAcc, nLed := 0, 0
			for _, ch := range tx.Changes {
				if ch.Source.LSN >= cut.LSN {
					t.Fatalf("change at %s in cut %s", ch.Source.LSN, cut.LSN)
				}
				var row map[string]int64
				if err := json.Unmarshal(ch.After, &row); err != nil {
					t.Fatalf("after %s: %v", ch.After, err)
				}
				switch ch.Export {
				case acc:
					balances[row["id"]] = row["balance"]
					nAcc++
				case led:
					ledger[row["id"]] = entry{row["src"], row["dst"], row["amount"]}
					nLed++
				}
			}
			if !tx.Snapshot && (nAcc != 2 || nLed != 1) {
				t.Fatalf("cut %s: transaction %s/%d has %d account and %d ledger changes, want 2 and 1: a torn transaction",
					cut.LSN, tx.CommitLSN, tx.TxID, nAcc, nLed)
			}
		}
		if len(balances) == 0 && len(ledger) == 0 {
			return
		}
		var sum int64
		want := map[int64]int64{}
		for id, b := range balances {
			sum += b
			want[id] = initial
		}
		for _, l := range ledger {
			want[l.src] -= l.amount
			want[l.dst] += l.amount
		}
		if sum != accounts*initial {
			t.Fatalf("cut %s: balances sum to %d, want %d", cut.LSN, sum, accounts*initial)
		}
		for id, b := range balances {
			if want[id] != b {
				t.Logf("failing cut: events %v prev %s tables %v txns %d", cut.Events, cut.Prev, cut.Tables, len(cut.Txns))
				for _, tx := range cut.Txns {
					if len(tx.Changes) > 0 && !tx.Snapshot {
						t.Logf("failing cut: tx %s/%d %d changes", tx.CommitLSN, tx.TxID, len(tx.Changes))
					}
				}
				t.Fatalf("cut %s: account %d has %d, its ledger says %d", cut.LSN, id, b, want[id])
			}
		}
	}
	nextCut := func() *consumer.Cut {
		t.Helper()
		c, err := rd.Next(ctx)
		if err != nil {
			if done, perr := p.exited(); done {
				t.Fatalf("cdc exited: %v", perr)
			}
			t.Fatalf("next cut: %v", err)
		}
		check(c)
		return c
	}
	first := nextCut()
	if len(first.Events) != 2 || len(balances) != accounts {
		t.Fatalf("first cut %s: events %v, %d accounts", first.LSN, first.Events, len(balances))
	}
	for range 5 {
		nextCut()
	}

	// Add big, not chosen: the cuts keep coming while it is copied.
	bigID := change.ExportID{Schema: "public", Table: "big"}
	e.exec(`ALTER PUBLICATION ` + e.pub + ` ADD TABLE big`)
	w, err := wait.New(e.brokers, e.watermarkTopic())
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	state := func() watermark.State {
		pctx, pcancel := context.WithTimeout(ctx, 50*time.Millisecond)
		defer pcancel()
		_ = w.Poll(pctx)
		return w.Latest()[bigID].State
	}
	for state() != watermark.StateHydrating {
		if ctx.Err() != nil {
			t.Fatal("big never started its copy")
		}
	}
	during := 0
	for state() == watermark.StateHydrating {
		c := nextCut()
		if len(c.Txns) > 0 && state() == watermark.StateHydrating {
			during++
		}
	}
	t.Logf("%d cuts with transactions during big's copy", during)
	if during < 3 {
		t.Fatalf("%d cuts with transactions during the copy of an unchosen table, want at least 3", during)
	}

	// Stop writing; read up to the end; the replica equals the source.
	time.Sleep(500 * time.Millisecond)
	stopWriters()
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	end := e.currentLSN(ctx)
	var c *consumer.Cut
	for c == nil || c.LSN < end {
		c = nextCut()
	}
	conn := e.conn()
	rows, err := conn.Query(ctx, `SELECT id, balance FROM accounts`)
	if err != nil {
		t.Fatal(err)
	}
	src := map[int64]int64{}
	for rows.Next() {
		var id, b int64
		if err := rows.Scan(&id, &b); err != nil {
			t.Fatal(err)
		}
		src[id] = b
	}
	var nLedger int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM ledger`).Scan(&nLedger); err != nil {
		t.Fatal(err)
	}
	if len(src) != len(balances) || nLedger != len(ledger) {
		t.Fatalf("replica: %d accounts, %d ledger rows; source: %d, %d", len(balances), len(ledger), len(src), nLedger)
	}
	for id, b := range src {
		if balances[id] != b {
			t.Fatalf("account %d: replica %d, source %d", id, balances[id], b)
		}
	}
	t.Logf("%d transfers replicated; last cut %s", nLedger, c.LSN)
}
