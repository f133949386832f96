package integration

import (
	"context"
	"testing"
	"time"
)

// TestCompression runs cdc with each CDC_KAFKA_COMPRESSION codec against the real broker: a
// snapshot and streamed changes arrive and the topic ends with the table's rows.
func TestCompression(t *testing.T) {
	for _, codec := range []string{"none", "gzip", "snappy", "lz4", "zstd"} {
		t.Run(codec, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.exec(`CREATE TABLE items (id int PRIMARY KEY, name text, qty int)`,
				`INSERT INTO items SELECT g, repeat('name ' || g, 5), g FROM generate_series(1, 3000) g`)
			vars := e.baseVars()
			vars["CDC_TABLES"] = "public.items"
			vars["CDC_KAFKA_COMPRESSION"] = codec
			p := e.startCDC(vars)
			ctx := context.Background()
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.items")
			e.exec(`UPDATE items SET qty = qty + 1 WHERE id % 3 = 0`,
				`DELETE FROM items WHERE id % 7 = 0`,
				`INSERT INTO items SELECT g, 'late', g FROM generate_series(3001, 3500) g`)
			e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.items")
			recs := e.readTopic(e.topic("public.items"))
			assertSameState(t, codec, materialize(t, recs), e.tableState("items", "id"))
		})
	}
}
