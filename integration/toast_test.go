package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestUnchangedToast updates another column of rows holding a 1 MiB out-of-line text value, on a
// table with REPLICA IDENTITY DEFAULT and one with FULL, for rows read by the snapshot and rows
// inserted while streaming. No record may carry a made-up value as data: with DEFAULT the update
// leaves the value out of "after" and names it in the tidemark.unchanged header (or writes the
// configured placeholder on request); with FULL it carries the value. A consumer that merges
// updates into the rows it has ends with the table's rows.
func TestUnchangedToast(t *testing.T) {
	for _, mode := range []string{"omit", "placeholder"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testUnchangedToast(t, mode)
		})
	}
}

func testUnchangedToast(t *testing.T, mode string) {
	e := newEnv(t)
	// md5 hex text hardly compresses, so 1 MiB of it is stored out of line.
	const big = `(SELECT string_agg(md5(g::text || $$-%s$$), '') FROM generate_series(1, 32768) g)`
	e.exec(
		`CREATE TABLE docs_default (id int PRIMARY KEY, n int NOT NULL, body text, note text)`,
		`CREATE TABLE docs_full (id int PRIMARY KEY, n int NOT NULL, body text, note text)`,
		`ALTER TABLE docs_full REPLICA IDENTITY FULL`,
		`CREATE TABLE plain (id int PRIMARY KEY, n int NOT NULL)`,
	)
	for _, tbl := range []string{"docs_default", "docs_full"} {
		e.exec(`INSERT INTO ` + tbl + ` VALUES (1, 0, ` + strings.ReplaceAll(big, "%s", tbl+"1") + `, 'short')`)
	}
	vars := e.baseVars()
	vars["CDC_TABLES"] = "public.docs_default,public.docs_full,public.plain"
	vars["CDC_UNCHANGED_TOAST"] = mode
	const placeholder = "<<unchanged>>"
	if mode == "placeholder" {
		vars["CDC_UNCHANGED_TOAST_PLACEHOLDER"] = placeholder
	}
	p := e.startCDC(vars)
	ctx := context.Background()
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.docs_default", "public.docs_full", "public.plain")

	for _, tbl := range []string{"docs_default", "docs_full"} {
		e.exec(
			`INSERT INTO `+tbl+` VALUES (2, 0, `+strings.ReplaceAll(big, "%s", tbl+"2")+`, 'short')`,
			// Updates of other columns: the snapshot row, the streamed row, twice each.
			`UPDATE `+tbl+` SET n = n + 1`,
			`UPDATE `+tbl+` SET n = n + 1, note = 'changed'`,
			// A key change: under DEFAULT the old tuple has the key only, so the new key's
			// record names body unchanged, relative to the row at tidemark.old_key.
			`UPDATE `+tbl+` SET id = 3, n = n + 1 WHERE id = 2`,
		)
	}
	e.waitFor(p, 2*time.Minute, e.currentLSN(ctx), "public.docs_default", "public.docs_full")

	for _, tbl := range []string{"docs_default", "docs_full"} {
		recs := e.readTopic(e.topic("public." + tbl))
		var updates int
		merged := map[string]map[string]json.RawMessage{}
		gone := map[string]map[string]json.RawMessage{} // deleted rows, for key changes
		for _, r := range recs {
			if bytes.Contains(r.Value, []byte("unavailable_value")) {
				t.Errorf("%s: record at offset %d carries a made-up value: %.200s", tbl, r.Offset, r.Value)
			}
			env := decode(t, r)
			key := string(r.Key)
			if env == nil || env.Op == "d" {
				if old, ok := merged[key]; ok {
					gone[key] = old
				}
				delete(merged, key)
				continue
			}
			unchanged := recordHeader(r, "tidemark.unchanged")
			if env.Op == "u" {
				updates++
				body, hasBody := env.After["body"]
				switch {
				case tbl == "docs_full":
					if unchanged != "" || !hasBody || len(body) < 1<<20 {
						t.Errorf("%s: update at offset %d: header %q, body of %d bytes; want the full value and no header", tbl, r.Offset, unchanged, len(body))
					}
				case mode == "omit":
					if unchanged != `["body"]` || hasBody {
						t.Errorf("%s: update at offset %d: header %q, body present %v; want it left out and named", tbl, r.Offset, unchanged, hasBody)
					}
				default:
					if unchanged != `["body"]` || string(body) != `"`+placeholder+`"` {
						t.Errorf("%s: update at offset %d: header %q, body %.40s; want the placeholder and the header", tbl, r.Offset, unchanged, body)
					}
				}
			}
			// Merge as a consumer following the header does: unchanged columns keep the value of
			// the row the record replaces (at tidemark.old_key when the key changed).
			row := map[string]json.RawMessage{}
			old, ok := merged[key]
			if oldKey := recordHeader(r, "tidemark.old_key"); oldKey != "" {
				old, ok = gone[oldKey]
			}
			if ok && unchanged != "" {
				var names []string
				if err := json.Unmarshal([]byte(unchanged), &names); err != nil {
					t.Fatalf("%s: header %q: %v", tbl, unchanged, err)
				}
				for _, n := range names {
					row[n] = old[n]
				}
			}
			for k, v := range env.After {
				if _, keep := row[k]; !keep || unchanged == "" {
					row[k] = v
				}
			}
			merged[key] = row
		}
		if updates != 4 {
			t.Errorf("%s: %d update records, want 4 (2 rows × 2 updates)", tbl, updates)
		}
		if len(merged) != 2 {
			t.Errorf("%s: %d keys in the topic, want 2", tbl, len(merged))
		}
		assertSameState(t, tbl, merged, e.tableState(tbl, "id"))
	}

	// One line for the tables that share the advice, naming them; none for the others.
	line := ""
	for l := range strings.SplitSeq(p.log.String(), "\n") {
		if strings.Contains(l, "published table(s) have columns PostgreSQL may store out of line") {
			line = l
		}
	}
	if !strings.Contains(line, "1 published table(s)") || !strings.Contains(line, "public.docs_default") ||
		!strings.Contains(line, `ALTER TABLE \"public\".\"docs_default\" REPLICA IDENTITY FULL`) {
		t.Errorf("start-up warning %q: want one naming docs_default", line)
	}
	for _, quiet := range []string{"docs_full", "public.plain"} {
		if strings.Contains(line, quiet) {
			t.Errorf("the warning names %q, which needs none", quiet)
		}
	}
}

// recordHeader returns the value of r's header key, or "".
func recordHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
