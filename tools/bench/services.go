package main

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/tidemark/cdc/internal/testsvc"
)

// defaultKafkaHeap are the broker's JVM flags for benchmarks: full JIT (no TieredStopAtLevel).
// They are what kafka-server-start.sh uses when KAFKA_HEAP_OPTS is not set: a 1 GiB heap and G1
// with a 20 ms pause target, as users run the broker.
const defaultKafkaHeap = "-Xms1g -Xmx1g -XX:+UseG1GC -XX:MaxGCPauseMillis=20"

// services are the PostgreSQL server and Kafka cluster the bench uses.
type services struct {
	pgURL   string // URL of a database on the server; scenarios create their own databases
	brokers []string
	source  string
	// broker is the broker's settings, for the report.
	broker string
	// cpu reads the servers' CPU time; nil for services the bench did not start.
	cpu  *serverCPU
	stop func(ctx context.Context) error
}

// acquireServices uses CDC_TEST_PG_URL / CDC_TEST_KAFKA_BROKERS when both are set, or starts
// private servers with scripts/services.sh on free ports in stateDir.
func acquireServices(ctx context.Context, stateDir string, o options, getenv func(string) string, logf func(string, ...any)) (*services, error) {
	pg, brokers, err := testsvc.FromEnv(getenv)
	if err != nil {
		return nil, err
	}
	if pg != "" {
		return &services{pgURL: pg, brokers: brokers, source: "CDC_TEST_PG_URL / CDC_TEST_KAFKA_BROKERS", broker: "external broker (settings unknown)",
			stop: func(context.Context) error { return nil }}, nil
	}
	heap := cmp.Or(o.kafkaHeap, getenv("TIDEMARK_KAFKA_HEAP"), defaultKafkaHeap)
	logf("starting PostgreSQL and Kafka (scripts/services.sh up, state %s, Kafka JVM %q)", stateDir, heap)
	start := time.Now()
	l, err := testsvc.Start(ctx, testsvc.Options{State: stateDir, KafkaHeap: heap})
	if err != nil {
		return nil, err
	}
	logf("services ready in %s", time.Since(start).Round(100*time.Millisecond))
	return &services{
		pgURL:   l.PGURL(),
		brokers: l.Brokers(),
		source:  fmt.Sprintf("scripts/services.sh (PostgreSQL %s, Kafka %s, JVM %q)", l.PGAddr(), l.KafkaAddr(), heap),
		broker:  brokerSettings(stateDir, heap),
		cpu:     &serverCPU{stateDir: stateDir},
		stop:    func(ctx context.Context) error { return l.Stop(ctx, o.keep) },
	}, nil
}

// database is a scenario's own database on the shared server.
type database struct {
	name string
	url  string
	base string // the server's original URL, to drop it
}

// newDatabase creates database bench_<tag>_<random>.
func newDatabase(ctx context.Context, base, tag string) (*database, error) {
	name := "bench_" + tag + "_" + testsvc.RandomHex(4)
	u, err := testsvc.CreateDB(ctx, base, name)
	if err != nil {
		return nil, err
	}
	return &database{name: name, url: u, base: base}, nil
}

// drop ends the database's replication connections, drops its slots and the database.
func (d *database) drop(ctx context.Context) error { return testsvc.DropDB(ctx, d.base, d.name) }

// exec runs statements on the database, each in its own implicit transaction.
func (d *database) exec(ctx context.Context, stmts ...string) error {
	conn, err := pgx.Connect(ctx, d.url)
	if err != nil {
		return fmt.Errorf("connect %s: %w", d.name, err)
	}
	defer conn.Close(context.Background())
	for _, s := range stmts {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("exec %q: %w", testsvc.Abbreviate(s, 120), err)
		}
	}
	return nil
}
