// Package liveness bounds how long a PostgreSQL connection may wait for the server: to connect,
// and, once connected, for the next bytes of an answer.
//
// A path that is dead but not closed (a proxy or NAT that stopped forwarding a connection's bytes
// without resetting it) is invisible to TCP: keepalives are answered by the middlebox, and a read
// blocks for ever. Timeouts.Apply gives a pgconn configuration a connect timeout (when the
// connection string has none) and wraps its dialer so that a read that hears nothing for
// Timeouts.Receive fails with an error that matches ErrSilent. pgconn then closes the connection
// and its caller reconnects, as after any lost connection.
//
// Only reads that wait count: a connection that is idle (no query sent) never reads, so it is never
// dropped for being idle. Deadlines that pgconn sets itself (to interrupt a read when a context
// ends) are kept: the earlier of the two applies.
package liveness
