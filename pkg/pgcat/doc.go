// Package pgcat owns Tidemark's side of the PostgreSQL catalog: how a connection is made, what
// is read from pg_catalog, and how names and values are quoted in the SQL Tidemark runs. The
// stages take what they need from it; nothing else dials PostgreSQL or reads the catalog.
//
// Connections. ParseConfig turns a connection string into a configuration with the session
// settings of SessionParams pinned (so text renderings of values never depend on database
// defaults) and the bounds of Timeouts applied: a connect timeout unless the string sets
// connect_timeout, and, with Timeouts.Receive, a dialer whose reads fail with an error matching
// ErrSilent after that long without a byte (a dead path that TCP does not notice: a proxy or NAT
// that stopped forwarding). Only reads that wait count; an idle connection is never dropped.
// Dial connects and turns failures into errors that say what to fix: a TLS certificate the
// string's settings refuse (an unknown authority, a name it is not valid for) matches ErrConfig,
// as does a string that does not parse. Every error is scrubbed of the string's passwords.
// Connect does both for an ordinary connection and returns a *Conn, which shows nothing of pgx
// but the Querier methods, so packages that only read the catalog (the pipeline's poller, the
// lifecycle's key reads, cmd/cdc) need no driver of their own. ReplicationConfig is the
// configuration of a logical replication connection (replication=database) for the packages
// that speak that protocol on a *pgconn.PgConn: replication and snapshot.
//
// Catalog reads. Each takes a Querier (*pgx.Conn or *Conn) and runs under whatever snapshot the
// connection's transaction has, so the snapshot stage reads as of its consistent point:
//   - LoadTable: a table's published columns, types and key (chosen by the replica identity),
//     with the publication's column list and row filter (change.Table.Published);
//     ErrTableNotFound and ErrUnsupportedTable say why a table cannot be exported;
//   - PublishedTables, PublishedAs (every table's column list and row filter, PostgreSQL 15),
//     PartitionLeaves (the leaves of partitioned tables published under their root),
//     OutOfLineColumns (columns whose unchanged TOASTed values an update does not send);
//   - EnsurePublication creates the publication or adds configured tables, and refuses with an
//     ErrSetup error that says what to do when a table could not be published safely;
//   - QueryTypes reads pg_type for codec.Types; CurrentWAL is the WAL insert position (the
//     replayed position on a standby); Database and ServerMajor name the database and the
//     server's major version;
//   - a hot standby as the source (standby.go): InRecovery, SystemIdentifier, WaitReplayed (a
//     standby has replayed up to an LSN), LogStandbySnapshots (running-transactions records on
//     the primary, which slot creation on a standby waits for).
//
// Quoting. Ident, Table and Literal quote names and values in SQL (Literal as quote_literal does,
// so a value reads the same whatever standard_conforming_strings says); CommandLiteral quotes
// for the replication protocol's commands. Names shown to people use change's display form
// (change.ExportID.String), which leaves plain lower-case names unquoted.
//
// Errors. SQLState and TransientSQLState classify a server's error code; ErrConnClosed matches a
// connection pgx closed after a failed read or write.
package pgcat
