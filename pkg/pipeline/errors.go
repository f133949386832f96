package pipeline

import (
	"errors"
	"io"
	"syscall"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/pgcat"
)

// ErrFatal marks errors that retrying cannot fix; Run returns them. Check with errors.Is.
var ErrFatal = errors.New("fatal")

type fatalError struct{ err error }

func (e *fatalError) Error() string   { return e.err.Error() }
func (e *fatalError) Unwrap() []error { return []error{ErrFatal, e.err} }

// fatal marks err as one that retrying cannot fix.
func fatal(err error) error {
	if err == nil || errors.Is(err, ErrFatal) {
		return err
	}
	return &fatalError{err: err}
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
