package consumer

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/codec"
	"github.com/tidemark/cdc/pkg/watermark"
)

const (
	hydrated  = watermark.StateHydrated
	hydrating = watermark.StateHydrating
)

// want checks a cut's description.
func want(t *testing.T, c *Cut, w string) {
	t.Helper()
	if got := describe(c); got != w {
		t.Fatalf("cut\n got %s\nwant %s", got, w)
	}
}

// TestCutsAcrossTablesAndPartitions: two tables over three partitions, each transaction
// touching both; a watermark of one table lags; cuts hold whole transactions, in commit order,
// up to the lower watermark; what lies past it comes in the next cut.
func TestCutsAcrossTablesAndPartitions(t *testing.T) {
	for _, format := range []codec.Format{codec.FormatJSON, codec.FormatJSONWithSchema} {
		t.Run(string(format), func(t *testing.T) {
			f := newFake(t, 3, format)
			a, l := f.table("accounts"), f.table("ledger")
			f.copyRows(a, 100, 1, 1, 2)
			f.step(func() {
				f.mark(a, hydrated, 100, 1, nil)
				f.mark(l, hydrated, 100, 1, nil)
			})
			rd := f.reader([]change.ExportID{a, l}, true)
			c := next(t, rd)
			want(t, c, "100 joined:accounts joined:ledger 99/0:accounts.r1,accounts.r2")
			for i := range 4 {
				lsn := change.LSN(200 + 10*i)
				f.update(a, lsn, uint32(10+i), 0, 1, "x")
				f.update(a, lsn, uint32(10+i), 1, 2, "y")
				f.insert(l, lsn, uint32(10+i), 2, 100+i, "t")
				f.flushTracked()
			}
			// accounts has its watermark past all four, ledger only past two.
			f.step(func() {
				f.mark(a, hydrated, 300, 1, nil)
				f.mark(l, hydrated, 215, 1, nil)
			})
			c = next(t, rd)
			want(t, c, "215 200/10:accounts.u1,accounts.u2,ledger.c100 210/11:accounts.u1,accounts.u2,ledger.c101")
			if c.Prev != 100 || len(c.Tables) != 2 {
				t.Fatalf("prev %s tables %v", c.Prev, c.Tables)
			}
			f.step(func() { f.mark(l, hydrated, 300, 1, nil) })
			c = next(t, rd)
			want(t, c, "300 220/12:accounts.u1,accounts.u2,ledger.c102 230/13:accounts.u1,accounts.u2,ledger.c103")
			ch := c.Txns[0].Changes[2]
			if ch.Source.Sequence != 2 || ch.Source.TxID != 12 || ch.Source.Table != "ledger" || ch.Source.DB != "db" ||
				!strings.Contains(string(ch.After), `"v":"t"`) || ch.Before != nil || strings.Contains(string(ch.Key), "schema") {
				t.Fatalf("change %+v after %s key %s", ch, ch.After, ch.Key)
			}
			var keyObj map[string]int
			if err := json.Unmarshal(ch.Key, &keyObj); err != nil || keyObj["id"] != 102 {
				t.Fatalf("key %s: %v", ch.Key, err)
			}
		})
	}
}

// TestBadInput: a data record that is not an envelope, and a watermark value this build cannot
// read, stop Next with an error naming where; New lists every missing setting.
func TestBadInput(t *testing.T) {
	if _, err := New(Config{}); err == nil || !strings.Contains(err.Error(), "brokers") || !strings.Contains(err.Error(), "watermark topic") {
		t.Fatalf("New(Config{}): %v, want both problems", err)
	}
	f := newFake(t, 1, codec.FormatJSON)
	a := f.table("a")
	f.batch = append(f.batch, &kgo.Record{Topic: f.topic(a), Partition: 0, Key: []byte(`{"id":1}`), Value: []byte(`{"hello":"world"}`)})
	f.step(func() { f.mark(a, hydrated, 100, 1, nil) })
	rd := f.reader(nil, false)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := rd.Next(ctx); !errors.Is(err, errEnvelope) || !strings.Contains(err.Error(), f.topic(a)+"[0] offset 0") {
		t.Fatalf("Next over a record that is not an envelope: %v", err)
	}

	g := newFake(t, 1, codec.FormatJSON)
	g.batch = append(g.batch, &kgo.Record{Topic: g.wmTopic, Key: []byte("public.x"), Value: []byte(`{"version":99,"export":"public.x","state":"hydrated"}`)})
	g.flushTracked()
	rd2 := g.reader(nil, false)
	if _, err := rd2.Next(ctx); !errors.Is(err, watermark.ErrUnsupportedVersion) {
		t.Fatalf("Next over a watermark record of version 99: %v", err)
	}
}
