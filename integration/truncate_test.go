package integration

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestTruncateKeyedTable truncates a table with a primary key, whose topic (3 partitions) is
// compacted, while streaming, in both value formats: the truncate record reaches every partition
// with a key Kafka accepts, the pipeline goes on, and a consumer that clears the table at the
// truncate ends with the table's rows.
func TestTruncateKeyedTable(t *testing.T) {
	for _, format := range []string{"json", "json-with-schema"} {
		t.Run(format, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.exec(`CREATE TABLE items (id int PRIMARY KEY, name text)`,
				`INSERT INTO items SELECT g, 'before ' || g FROM generate_series(1, 300) g`)
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.items"
			vars["CDC_TOPIC_PARTITIONS"] = "3"
			vars["CDC_VALUE_FORMAT"] = format
			p := e.startCDC(vars)
			ctx := context.Background()
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.items")
			e.exec(`TRUNCATE items`,
				`INSERT INTO items SELECT g, 'after ' || g FROM generate_series(250, 400) g`)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.items")
			if done, err := p.exited(); done {
				t.Fatalf("cdc exited: %v", err)
			}
			recs := e.readTopic(e.topic("public.items"))
			truncs := map[int32]string{}
			rows := map[int32]map[string]bool{}
			for _, r := range recs {
				if rows[r.Partition] == nil {
					rows[r.Partition] = map[string]bool{}
				}
				switch recordHeader(r, "tidemark.op") {
				case "t":
					truncs[r.Partition] = string(r.Key)
					clear(rows[r.Partition])
				case "d":
					delete(rows[r.Partition], string(r.Key))
				default:
					rows[r.Partition][string(r.Key)] = true
				}
			}
			if len(truncs) != 3 {
				t.Fatalf("truncate records on partitions %v, want all 3", truncs)
			}
			for part, k := range truncs {
				if k == "" {
					t.Errorf("partition %d: truncate record without a key", part)
				}
			}
			n := 0
			for _, keys := range rows {
				n += len(keys)
			}
			if n != 151 {
				t.Errorf("%d keys after the truncate, want the 151 rows inserted after it", n)
			}
			if s := p.log.String(); containsAny(s, "INVALID_RECORD", "restarting") {
				t.Errorf("cdc restarted:\n%s", tail(s, 3000))
			}
		})
	}
}

// containsAny reports whether s contains one of subs.
func containsAny(s string, subs ...string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}
