package testenv

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/tidemark/cdc/internal/testsvc"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { os.Exit(Main(m)) }

func TestServicesReachable(t *testing.T) {
	ctx := t.Context()

	t.Run("postgres", func(t *testing.T) {
		conn := Conn(t, PGURL(t))
		var walLevel, db string
		if err := conn.QueryRow(ctx, "SHOW wal_level").Scan(&walLevel); err != nil {
			t.Fatalf("show wal_level: %v", err)
		}
		if walLevel != "logical" {
			t.Errorf("wal_level = %q, want logical", walLevel)
		}
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if db != "tidemark" {
			t.Errorf("current_database() = %q, want tidemark", db)
		}
	})

	t.Run("kafka", func(t *testing.T) {
		adm := Admin(t)
		brokers, err := adm.ListBrokers(ctx)
		if err != nil {
			t.Fatalf("list brokers: %v", err)
		}
		if len(brokers) == 0 {
			t.Fatal("list brokers: none")
		}
		prefix := NewTopicPrefix(t)
		topic := prefix + ".reachable"
		created, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
		if err != nil || created.Err != nil {
			t.Fatalf("create topic %s: %v %v", topic, err, created.Err)
		}

		// A record goes in and comes back: the broker really serves the topic.
		cl, err := kgo.NewClient(kgo.SeedBrokers(Brokers(t)...), kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
		if err != nil {
			t.Fatalf("kafka client: %v", err)
		}
		defer cl.Close()
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte("k"), Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		fetches := cl.PollRecords(ctx, 1)
		if err := fetches.Err(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		recs := fetches.Records()
		if len(recs) != 1 || string(recs[0].Key) != "k" || string(recs[0].Value) != "v" {
			t.Fatalf("consumed %v, want one record k=v", recs)
		}

		if err := testsvc.DeleteTopics(ctx, adm, prefix+"."); err != nil {
			t.Fatal(err)
		}
		topics, err := adm.ListTopics(ctx)
		if err != nil {
			t.Fatalf("list topics: %v", err)
		}
		if topics.Has(topic) {
			t.Errorf("topic %s still listed after delete", topic)
		}
	})
}

func TestNewDBIsolatedAndDropped(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL; skipped in -short mode")
	}
	ctx := t.Context()
	var name string
	t.Run("use", func(t *testing.T) {
		db := NewDB(t)
		Exec(t, db,
			"CREATE TABLE items (id int PRIMARY KEY)",
			"INSERT INTO items VALUES (1), (2)",
			"CREATE PUBLICATION testenv_pub FOR ALL TABLES")
		conn := Conn(t, db)
		if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil {
			t.Fatalf("current_database: %v", err)
		}
		if !strings.HasPrefix(name, "tidemark_") {
			t.Errorf("database %q, want prefix tidemark_", name)
		}
		// A logical slot, held open by a replication connection, must not block the cleanup.
		var slot string
		if err := conn.QueryRow(ctx,
			"SELECT slot_name FROM pg_create_logical_replication_slot('testenv_slot_'||substr(md5(random()::text),1,8), 'pgoutput')",
		).Scan(&slot); err != nil {
			t.Fatalf("create slot: %v", err)
		}
		repl, err := pgconn.Connect(ctx, db+"&replication=database")
		if err != nil {
			t.Fatalf("replication connection: %v", err)
		}
		t.Cleanup(func() { repl.Close(context.Background()) })
		err = pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
			PluginArgs: []string{"proto_version '1'", "publication_names 'testenv_pub'"},
		})
		if err != nil {
			t.Fatalf("start replication: %v", err)
		}
		var active bool
		if err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active); err != nil || !active {
			t.Fatalf("slot %s active = %v (%v), want true", slot, active, err)
		}
	})
	if name == "" {
		t.Fatal("subtest did not report a database")
	}

	conn := Conn(t, PGURL(t))
	var dbs, slots int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&dbs); err != nil {
		t.Fatalf("count databases: %v", err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE database = $1", name).Scan(&slots); err != nil {
		t.Fatalf("count slots: %v", err)
	}
	if dbs != 0 || slots != 0 {
		t.Errorf("after cleanup: %d database(s) and %d slot(s) named %s remain, want none", dbs, slots, name)
	}
}

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name        string
		env         map[string]string
		wantNil     bool
		wantErr     bool
		wantBrokers []string
	}{
		{name: "unset", env: nil, wantNil: true},
		{name: "both", env: map[string]string{EnvPGURL: "postgres://u@h:1/db", EnvBrokers: " a:1, b:2 ,"},
			wantBrokers: []string{"a:1", "b:2"}},
		{name: "only url", env: map[string]string{EnvPGURL: "postgres://u@h:1/db"}, wantErr: true},
		{name: "only brokers", env: map[string]string{EnvBrokers: "a:1"}, wantErr: true},
		{name: "blank brokers", env: map[string]string{EnvPGURL: "postgres://u@h:1/db", EnvBrokers: " , "}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			svc, err := fromEnv(func(k string) string { return tc.env[k] })
			switch {
			case tc.wantErr:
				if err == nil {
					t.Fatalf("fromEnv() = %+v, want error", svc)
				}
			case err != nil:
				t.Fatalf("fromEnv(): %v", err)
			case tc.wantNil:
				if svc != nil {
					t.Fatalf("fromEnv() = %+v, want nil", svc)
				}
			default:
				if !slices.Equal(svc.brokers, tc.wantBrokers) {
					t.Errorf("brokers = %q, want %q", svc.brokers, tc.wantBrokers)
				}
			}
		})
	}
}

func TestRequired(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{name: "nothing", want: false},
		{name: "ci true", env: map[string]string{"CI": "true"}, want: true},
		{name: "ci 1", env: map[string]string{"CI": "1"}, want: true},
		{name: "ci false", env: map[string]string{"CI": "false"}, want: false},
		{name: "require", env: map[string]string{EnvRequire: "1"}, want: true},
		{name: "garbage", env: map[string]string{"CI": "yes please"}, want: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := required(func(k string) string { return tc.env[k] }); got != tc.want {
				t.Errorf("required() = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRepoRoot(t *testing.T) {
	root := RepoRoot(t)
	if _, err := os.Stat(filepath.Join(root, "scripts", "services.sh")); err != nil {
		t.Errorf("RepoRoot() = %s, which has no scripts/services.sh: %v", root, err)
	}
}

func TestWantPGVersion(t *testing.T) {
	tests := []struct {
		name, value string
		want        int
		wantErr     bool
	}{
		{name: "unset", value: "", want: 0},
		{name: "17", value: "17", want: 17},
		{name: "spaces", value: " 15 ", want: 15},
		{name: "minor version", value: "17.2", wantErr: true},
		{name: "word", value: "latest", wantErr: true},
		{name: "too old", value: "9", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := wantPGVersion(func(string) string { return tt.value })
			if (err != nil) != tt.wantErr || got != tt.want {
				t.Errorf("wantPGVersion(%q) = %d, %v; want %d, error %v", tt.value, got, err, tt.want, tt.wantErr)
			}
		})
	}
}
