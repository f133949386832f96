package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/replication"
)

type streamRead struct {
	changes, commits, bytes int64
	lastEnd                 change.LSN
	elapsed                 time.Duration
}

// readStream reads slot with pgoutput (the options cdc uses) from start until wantCommits
// transactions have arrived, counting Insert, Update and Delete messages and discarding them.
func readStream(ctx context.Context, dbURL, slot, pub string, start change.LSN, wantCommits int64) (streamRead, error) {
	cfg, err := pgcat.ReplicationConfig(dbURL, "tidemark-bench-read", pgcat.Timeouts{})
	if err != nil {
		return streamRead{}, err
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return streamRead{}, fmt.Errorf("replication connect: %w", err)
	}
	defer conn.Close(context.Background())
	args := []string{"proto_version '1'", "publication_names " + replication.PublicationNamesOption(pub), "streaming 'off'"}
	var r streamRead
	began := time.Now()
	if err := pglogrepl.StartReplication(ctx, conn, slot, pglogrepl.LSN(start), pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return r, fmt.Errorf("start replication: %w", err)
	}
	status := func() error {
		p := pglogrepl.LSN(r.lastEnd)
		return pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
			WALWritePosition: p, WALFlushPosition: p, WALApplyPosition: p})
	}
	lastStatus := time.Now()
	for r.commits < wantCommits {
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			return r, fmt.Errorf("receive after %d of %d transactions: %w", r.commits, wantCommits, err)
		}
		switch m := raw.(type) {
		case *pgproto3.CopyData:
			switch m.Data[0] {
			case pglogrepl.PrimaryKeepaliveMessageByteID:
				ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(m.Data[1:])
				if err != nil {
					return r, fmt.Errorf("parse keepalive: %w", err)
				}
				if ka.ReplyRequested {
					if err := status(); err != nil {
						return r, fmt.Errorf("status update: %w", err)
					}
				}
			case pglogrepl.XLogDataByteID:
				x, err := pglogrepl.ParseXLogData(m.Data[1:])
				if err != nil {
					return r, fmt.Errorf("parse XLogData: %w", err)
				}
				r.bytes += int64(len(x.WALData))
				msg, err := pglogrepl.Parse(x.WALData)
				if err != nil {
					return r, fmt.Errorf("parse pgoutput message: %w", err)
				}
				switch msg := msg.(type) {
				case *pglogrepl.InsertMessage, *pglogrepl.UpdateMessage, *pglogrepl.DeleteMessage:
					r.changes++
				case *pglogrepl.CommitMessage:
					r.commits++
					r.lastEnd = change.LSN(msg.TransactionEndLSN)
				}
			}
		case *pgproto3.ErrorResponse:
			return r, fmt.Errorf("replication stream: %w", pgconn.ErrorResponseToPgError(m))
		}
		if time.Since(lastStatus) > 10*time.Second {
			if err := status(); err != nil {
				return r, fmt.Errorf("status update: %w", err)
			}
			lastStatus = time.Now()
		}
	}
	r.elapsed = time.Since(began)
	return r, nil
}

// dropSlot drops slot, waiting up to 30 s for the WAL sender of a reader that just closed its
// connection to let go of it.
func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			if err != nil {
				return fmt.Errorf("drop slot %s: %w", slot, err)
			}
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// findPgbench looks for pgbench on PATH and beside the PostgreSQL server binaries.
func findPgbench() (string, error) { return findPGTool("pgbench") }

// findPGTool looks for one of PostgreSQL's client programs on PATH and beside the server binaries.
func findPGTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	for i := len(matches) - 1; i >= 0; i-- {
		if st, err := os.Stat(matches[i]); err == nil && st.Mode()&0o111 != 0 {
			return matches[i], nil
		}
	}
	return "", fmt.Errorf("%s not found on PATH nor in /usr/lib/postgresql/*/bin (apt-get install postgresql-15)", name)
}

// readRecvlogical streams slot with pg_recvlogical (pgoutput, the publication, protocol 1) from
// the slot's start to end, writing the output to /dev/null, and returns the time it took.
//
// pg_recvlogical is slower than the Go reader here, and the gap is its own output: it makes
// two write calls per message (the message, then a newline), 240,000 for 20,000 pgbench
// transactions (strace -c), and on this VM a system call costs over a microsecond. Catching up
// 400,000 changes took it 0.2 s of user and 2.0 s of system CPU, on the two cores the walsender
// also needs. Writing to /dev/null rather than through a pipe to a byte counter changed nothing
// measurable (72,755 to 95,274 changes/s against 91,525 to 140,309 over the day's runs); the
// bytes are the Go reader's count, since they are the same messages.
func readRecvlogical(ctx context.Context, dbURL, slot, pub string, end change.LSN) (time.Duration, error) {
	bin, err := findPGTool("pg_recvlogical")
	if err != nil {
		return 0, err
	}
	cmd := exec.CommandContext(ctx, bin, "-d", dbURL, "-S", slot, "--start", "--no-loop",
		"-o", "proto_version=1", "-o", "publication_names="+change.QuoteIdent(pub),
		"-E", end.String(), "-F", "0", "-s", "10", "-f", "/dev/null")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	began := time.Now()
	if err := cmd.Run(); err != nil {
		return 0, fmt.Errorf("%s: %w: %s", bin, err, testsvc.Tail(stderr.String(), 5))
	}
	return time.Since(began), nil
}

// pgbenchBacklog writes about txns tpcb-like transactions (3 updates and 1 insert each) with
// -clients clients while cdc is stopped, and returns how many pgbench committed.
func (s *scenario) pgbenchBacklog(ctx context.Context, pgbench string, txns int) (int64, error) {
	b := s.b
	perClient := max(1, (txns+b.o.clients-1)/b.o.clients)
	b.logf("%s: backlog of %s tpcb-like transactions (%d clients x %d)",
		s.name, thousands(int64(perClient*b.o.clients)), b.o.clients, perClient)
	out, err := runPgbench(ctx, pgbench, s.db.url, "-n", "-b", "tpcb-like", "-M", "prepared",
		"-c", strconv.Itoa(b.o.clients), "-j", strconv.Itoa(min(b.o.clients, 2)), "-t", strconv.Itoa(perClient))
	if err != nil {
		return 0, err
	}
	return pgbenchProcessed(out)
}

// runPgbench runs pgbench against dbURL (given as its conninfo argument) and returns its output.
func runPgbench(ctx context.Context, bin, dbURL string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append(args, dbURL)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("pgbench %s: %w\n%s", strings.Join(args, " "), err, testsvc.Tail(string(out), 20))
	}
	return string(out), nil
}

var processedRE = regexp.MustCompile(`number of transactions actually processed: (\d+)`)

// pgbenchProcessed reads the number of committed transactions from pgbench's report.
func pgbenchProcessed(out string) (int64, error) {
	m := processedRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench output has no transaction count:\n%s", testsvc.Tail(out, 20))
	}
	return strconv.ParseInt(m[1], 10, 64)
}

// createReadSlots creates the READ limits' two slots (the Go reader's, then pg_recvlogical's)
// and returns the first one's start position.
func createReadSlots(ctx context.Context, conn *pgx.Conn, readSlot, recvSlot string) (change.LSN, error) {
	var slotLSN string
	if err := conn.QueryRow(ctx, "SELECT lsn::text FROM pg_create_logical_replication_slot($1, 'pgoutput')", readSlot).Scan(&slotLSN); err != nil {
		return 0, fmt.Errorf("create slot %s: %w", readSlot, err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", recvSlot); err != nil {
		return 0, fmt.Errorf("create slot %s: %w", recvSlot, err)
	}
	return change.ParseLSN(slotLSN)
}
