package supervise

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/pgcat"
	"github.com/tidemark/cdc/pkg/pipeline"
	"github.com/tidemark/cdc/pkg/replication"
	"github.com/tidemark/cdc/pkg/sink"
)

// Run runs lives of p until ctx ends (the last one stops in order; then it returns nil) or an
// error ends the service (exitNow). Other errors start a new life after a capped exponential
// backoff.
func Run(ctx context.Context, p *pipeline.Pipeline, log *slog.Logger) error {
	defer p.Monitor(ctx)()
	backoff := time.Second
	for attempt := 1; ; attempt++ {
		started := time.Now()
		err := p.Life(ctx, attempt)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			err = errors.New("pipeline stopped unexpectedly")
		}
		// A life makes a fence by another instance fatal; one without is a transaction the
		// broker aborted at its timeout, and a new life recovers.
		fencedAlone := errors.Is(err, sink.ErrFenced) && !errors.Is(err, pipeline.ErrFatal)
		if fencedAlone {
			log.Warn("kafka transaction fenced, but no other instance holds the slot (a transaction aborted by its timeout); restarting", "err", err)
		}
		if exitNow(err, attempt, p.Ran(), time.Since(started), p.StartupWindow()) {
			if refusedByACL(err) {
				return fmt.Errorf("%w: the broker's authorizer refuses cdc's principal; grant the ACLs in docs/production.md#kafka-acls-least-privilege", err)
			}
			return err
		}
		if errors.Is(err, replication.ErrServerChanged) {
			// Not a failure: the next life checks the promoted server against the slot and
			// Kafka before it streams (docs/production.md#failover), so it starts at once.
			log.Warn("the PostgreSQL server is on a new timeline (a standby was promoted); a new life checks it and goes on", "err", err)
			continue
		}
		if time.Since(started) > 2*time.Minute {
			backoff = time.Second
		}
		log.Error("pipeline failed; restarting", "err", err, "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// exitNow reports whether the service ends on err from attempt, which ran for elapsed (ran: whether
// its stages started). Fatal errors end it, and so does a slot lost while running (changes
// may be gone: never continue silently). So does a failure within window of the start of the
// first attempt before its stages ran: an unreachable server at start-up (refused, or silent
// until the connect timeout) is a configuration problem to show at once. But not a connection
// that was open and then closed, reset or silent (a server restarting, a proxy cutting
// connections just as a new process started), and not a fence without another instance (a
// transaction the broker aborted at its timeout): a new life recovers from those, as it does
// when a running pipeline loses Kafka a second later.
func exitNow(err error, attempt int, ran bool, elapsed, window time.Duration) bool {
	if errors.Is(err, pipeline.ErrFatal) || errors.Is(err, replication.ErrSetup) || errors.Is(err, replication.ErrSlotLost) || refusedByACL(err) {
		return true
	}
	fencedAlone := errors.Is(err, sink.ErrFenced)
	return attempt == 1 && !ran && elapsed < window && !fencedAlone && !connectionLost(err)
}

// refusedByACL reports whether the broker's authorizer refused cdc's principal: a retry gets
// the same answer until someone grants the ACL, so the service stops and says so (at any
// moment, not only at start: an ACL removed later is the same misconfiguration).
func refusedByACL(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) || errors.Is(err, kerr.GroupAuthorizationFailed)
}

// connectionLost reports whether err is a connection that a server (or the network between)
// closed or reset after it was open (or that pgx closed after such a failure), or a PostgreSQL
// that is shutting down or starting up: a server was there, so the address and port are right,
// and trying again is what fixes it. A refused or timed-out dial, a name that does not resolve,
// a refused login and a broker that closes every connection before its first answer (franz-go's
// ErrFirstReadEOF, most often TLS or SASL the client lacks) are not: at start-up those are
// configuration to show at once.
func connectionLost(err error) bool {
	if _, ok := errors.AsType[*kgo.ErrFirstReadEOF](err); ok {
		return false
	}
	if code, ok := pgcat.SQLState(err); ok {
		return pgcat.TransientSQLState(code)
	}
	// pgcat.ErrConnClosed: a connection pgx closed after a read or write on it failed. pgx's
	// simple-protocol Exec drops a reset's own error and returns this one instead.
	// pgcat.ErrSilent: a connection that heard nothing for the receive timeout (a dead path).
	return errors.Is(err, pgcat.ErrConnClosed) || errors.Is(err, pgcat.ErrSilent) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
