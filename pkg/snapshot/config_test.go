package snapshot

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/pgcat"
)

type nopHooks struct{}

func (nopHooks) Begin(ctx context.Context, c change.LSN, tables []TableInfo) (map[change.ExportID]int, error) {
	return nil, nil
}
func (nopHooks) Restart(change.ExportID, string) {}
func (nopHooks) Failed(change.ExportID, error)   {}

func TestNewConfig(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr string // substring; empty means valid
	}{
		{name: "defaults", cfg: Config{ConnString: "postgres://u@localhost/db"}},
		{name: "no connection string", cfg: Config{}, wantErr: "connection string is empty"},
		{name: "bad slot prefix", cfg: Config{ConnString: "postgres://u@localhost/db", SlotPrefix: "Bad-Prefix"}, wantErr: "slot prefix"},
		{name: "long slot prefix", cfg: Config{ConnString: "postgres://u@localhost/db", SlotPrefix: strings.Repeat("a", 60)}, wantErr: "longer than"},
		{name: "unparsable url hides password", cfg: Config{ConnString: "postgres://u:hunter2secret@localhost:notaport/db"}, wantErr: "parse connection string"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New(tt.cfg, nopHooks{})
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("New: %v", err)
				}
				c := s.cfg
				if c.Workers != DefaultWorkers || c.BatchRows != DefaultBatchRows || c.BatchBytes != DefaultBatchBytes ||
					c.RangeBlocks != DefaultRangeBlocks || c.ProgressInterval != DefaultProgressInterval ||
					c.SlotWaitTimeout != DefaultSlotWaitTimeout || c.SlotPrefix != DefaultSlotPrefix || c.Logger == nil {
					t.Fatalf("defaults not applied: %+v", c)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("New error = %v, want one containing %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2secret") {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestSessionParamsPinnedOnEveryConnection(t *testing.T) {
	base, err := parseConnConfig("postgres://u@localhost/db?application_name=x", pgcat.Timeouts{})
	if err != nil {
		t.Fatal(err)
	}
	for name, params := range map[string]map[string]string{
		"worker":      workerConfig(base, pgcat.Timeouts{}).RuntimeParams,
		"replication": replicationConfig(base).RuntimeParams,
	} {
		for k, v := range pgcat.SessionParams() {
			if params[k] != v {
				t.Errorf("%s connection: %s = %q, want %q", name, k, params[k], v)
			}
		}
		if params["application_name"] != "x" {
			t.Errorf("%s connection lost the user's application_name", name)
		}
	}
	if got := replicationConfig(base).RuntimeParams["replication"]; got != "database" {
		t.Errorf("replication connection: replication = %q", got)
	}
	if _, ok := workerConfig(base, pgcat.Timeouts{}).RuntimeParams["replication"]; ok {
		t.Errorf("worker connection asks for replication")
	}
	if _, ok := base.RuntimeParams["replication"]; ok {
		t.Errorf("base config was modified")
	}
}

func TestEstimateRows(t *testing.T) {
	tests := []struct {
		name                               string
		reltuples                          float64
		relpages, blocks, width, blockSize int64
		want                               int64
	}{
		{name: "empty", reltuples: -1, blocks: 0, want: 0},
		{name: "analyzed, same size", reltuples: 1000, relpages: 10, blocks: 10, want: 1000},
		{name: "analyzed, grown", reltuples: 1000, relpages: 10, blocks: 20, want: 2000},
		{name: "never analyzed: from width", reltuples: -1, blocks: 10, width: 36, blockSize: 8192, want: 10 * ((8192 - 24) / (36 + 28))},
		{name: "analyzed empty, grown since", reltuples: 0, relpages: 0, blocks: 1, width: 8, blockSize: 8192, want: (8192 - 24) / 36},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := estimateRows(tt.reltuples, tt.relpages, tt.blocks, tt.width, tt.blockSize); got != tt.want {
				t.Fatalf("estimateRows = %d, want %d", got, tt.want)
			}
		})
	}
}

func TestProgressMath(t *testing.T) {
	tests := []struct {
		name            string
		rows, estimated int64
		finished        bool
		rate            float64
		wantRatio       float64
		wantETA         time.Duration
	}{
		{name: "half way", rows: 50, estimated: 100, rate: 10, wantRatio: 0.5, wantETA: 5 * time.Second},
		{name: "over estimate, not finished", rows: 150, estimated: 100, rate: 10, wantRatio: 0.99, wantETA: 0},
		{name: "finished", rows: 150, estimated: 100, finished: true, rate: 10, wantRatio: 1, wantETA: 0},
		{name: "unknown estimate", rows: 5, estimated: 0, rate: 10, wantRatio: 0, wantETA: 0},
		{name: "no rate yet", rows: 0, estimated: 100, rate: 0, wantRatio: 0, wantETA: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := progressRatio(tt.rows, tt.estimated, tt.finished); got != tt.wantRatio {
				t.Errorf("ratio = %v, want %v", got, tt.wantRatio)
			}
			if got := estimateETA(tt.rows, tt.estimated, tt.rate); got != tt.wantETA {
				t.Errorf("eta = %v, want %v", got, tt.wantETA)
			}
		})
	}
}
