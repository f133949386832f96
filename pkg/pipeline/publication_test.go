package pipeline

import (
	"slices"
	"strings"
	"testing"

	"github.com/tidemark/cdc/pkg/change"
	"github.com/tidemark/cdc/pkg/snapshot"
	"github.com/tidemark/cdc/pkg/watermark"
)

// TestPublicationDefinitionChanged: a hydrated export whose column list or row filter differs
// from the one its copy read is copied again with the copy strategy (which reconciles); one
// being copied is looked at once hydrated; an export resumed without a known definition takes
// the first one polled.
func TestPublicationDefinitionChanged(t *testing.T) {
	eu := change.PublishedAs{Columns: []int16{1, 2}, Names: []string{"id", "v"}, RowFilter: "(r = 'eu')", FilterTree: "{eu}"}
	us := change.PublishedAs{Columns: []int16{1, 2}, Names: []string{"id", "v"}, RowFilter: "(r = 'us')", FilterTree: "{us}"}
	wider := change.PublishedAs{Columns: []int16{1, 2, 3}, Names: []string{"id", "v", "w"}, RowFilter: "(r = 'us')", FilterTree: "{us}"}
	renamed := us
	renamed.Names, renamed.RowFilter = []string{"id", "value"}, "(region = 'us')"

	lc, _ := newTestOwner(t, Config{SnapshotStrategy: snapshot.StrategyChunked}, nil, nil)
	lc.phases[exA] = phaseHydrated // resumed: copied with a definition not known
	// b's copy began under eu (copy strategy).
	lc.begun(0x100, []snapshot.TableInfo{{Table: &change.Table{Export: exB, Published: eu}}})

	lc.publicationDefinitions(map[change.ExportID]change.PublishedAs{exA: eu, exB: eu})
	if len(lc.pending) != 0 || digest(lc.definitions[exA]) != eu.Digest() {
		t.Fatalf("first poll: pending %v, a copied as %+v; want none pending and a taken as eu", lc.pending, lc.definitions[exA])
	}
	// b is being copied: looked at once hydrated.
	lc.publicationDefinitions(map[change.ExportID]change.PublishedAs{exA: us, exB: us})
	if !slices.Equal(lc.pending, []change.ExportID{exA}) || !lc.reconcileNext[exA] || lc.reconcileNext[exB] {
		t.Fatalf("filter changed: pending %v, reconcile %v; want a alone", lc.pending, lc.reconcileNext)
	}
	lc.pending = nil
	lc.phases[exB] = phaseHydrated
	// A rename changes names and the rendered filter, not what is published.
	lc.publicationDefinitions(map[change.ExportID]change.PublishedAs{exA: renamed, exB: us})
	if !slices.Equal(lc.pending, []change.ExportID{exB}) {
		t.Fatalf("b hydrated, a's columns renamed: pending %v, want b alone", lc.pending)
	}
	lc.pending = nil
	// A column added to the list; then the list and filter dropped (every column and row).
	lc.publicationDefinitions(map[change.ExportID]change.PublishedAs{exA: wider, exB: us})
	if !slices.Equal(lc.pending, []change.ExportID{exA}) {
		t.Fatalf("column added: pending %v, want a", lc.pending)
	}
	lc.pending = nil
	lc.publicationDefinitions(map[change.ExportID]change.PublishedAs{})
	if !slices.Equal(lc.pending, []change.ExportID{exA, exB}) && !slices.Equal(lc.pending, []change.ExportID{exB, exA}) {
		t.Fatalf("list and filter dropped: pending %v, want a and b", lc.pending)
	}
}

// TestPublicationDefinitionRestored: the definition a copy read is kept in its watermark
// records, so a change made while the service was stopped is noticed at the first poll. A
// record without one (written before it was kept) stands for a copy of every column and row.
func TestPublicationDefinitionRestored(t *testing.T) {
	ctx := t.Context()
	eu := change.PublishedAs{Columns: []int16{1, 2}, Names: []string{"id", "v"}, RowFilter: "(r = 'eu')", FilterTree: "{eu}"}
	us := change.PublishedAs{Columns: []int16{1, 2}, Names: []string{"id", "v"}, RowFilter: "(r = 'us')", FilterTree: "{us}"}
	lc, _ := startTestOwner(t, snapshot.StrategyCopy, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exB)); err != nil {
		t.Fatal(err)
	}
	lc.request()
	tables := []snapshot.TableInfo{{Table: &change.Table{Export: exA, Published: eu}}, {Table: &change.Table{Export: exB}}}
	if _, err := lc.Begin(ctx, 0x100, tables); err != nil {
		t.Fatal(err)
	}
	var h history
	h.durable(lc, &change.Unit{Kind: change.KindSnapshotDone, Export: exA}, &change.Unit{Kind: change.KindSnapshotDone, Export: exB})
	h.durable(lc, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x150},
		&change.Unit{Kind: change.KindHydrated, Export: exB, End: 0x150}, &change.Unit{Kind: change.KindProgress, End: 0x200})

	for _, tt := range []struct {
		name string
		defs map[change.ExportID]change.PublishedAs
		want []change.ExportID
	}{
		{"unchanged", map[change.ExportID]change.PublishedAs{exA: eu}, nil},
		{"a's filter changed while stopped", map[change.ExportID]change.PublishedAs{exA: us}, []change.ExportID{exA}},
		{"b got a filter while stopped", map[change.ExportID]change.PublishedAs{exA: eu, exB: us}, []change.ExportID{exB}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			lc2, _ := newTestOwner(t, Config{SnapshotStrategy: snapshot.StrategyCopy}, nil, h.values)
			if err := lc2.resume(ctx, fakeCatalog{}, set(exA, exB), 0x200); err != nil {
				t.Fatal(err)
			}
			lc2.publicationDefinitions(tt.defs)
			if !slices.Equal(lc2.pending, tt.want) {
				t.Fatalf("pending %v, want %v", lc2.pending, tt.want)
			}
		})
	}
}

// TestResumeRefusedTable: a table whose publication leaves out its key now (changed while the
// service was stopped) fails alone at start; the others resume.
func TestResumeRefusedTable(t *testing.T) {
	ctx := t.Context()
	exU := change.ExportID{Schema: "public", Table: "unlisted"}
	lc, _ := startTestOwner(t, snapshot.StrategyCopy, nil)
	if err := lc.published(ctx, fakeCatalog{}, set(exA, exU)); err != nil {
		t.Fatal(err)
	}
	lc.request()
	tables := []snapshot.TableInfo{{Table: &change.Table{Export: exA}}, {Table: &change.Table{Export: exU}}}
	if _, err := lc.Begin(ctx, 0x100, tables); err != nil {
		t.Fatal(err)
	}
	var h history
	h.durable(lc, &change.Unit{Kind: change.KindSnapshotDone, Export: exA}, &change.Unit{Kind: change.KindSnapshotDone, Export: exU})
	h.durable(lc, &change.Unit{Kind: change.KindHydrated, Export: exA, End: 0x150},
		&change.Unit{Kind: change.KindHydrated, Export: exU, End: 0x150}, &change.Unit{Kind: change.KindProgress, End: 0x200})

	lc2, rec2 := startTestOwner(t, snapshot.StrategyCopy, h.values)
	if err := lc2.resume(ctx, fakeCatalog{}, set(exA, exU), 0x200); err != nil {
		t.Fatalf("resume: %v; want the refused table to fail alone", err)
	}
	wantCalls(t, rec2, "topic p.public.a compact=true", "resume public.a 0/200")
	wantPhase(t, lc2, exA, phaseHydrated)
	wantPhase(t, lc2, exU, phaseFailed)
	var failed bool
	for _, s := range lc2.states() {
		if s.Export == exU {
			failed = s.State == watermark.StateFailed && strings.Contains(s.Error, "column list")
		}
	}
	if !failed {
		t.Errorf("%s's state: %+v; want failed with the reason", exU, lc2.states())
	}
}
