package replication

import (
	"os"
	"path/filepath"
	"testing"
)

// TestStaleSpillRemoved: spill files of a process that died (in the slot's own folder) are
// removed when the stage starts; other slots' folders are left alone.
func TestStaleSpillRemoved(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"s1/hold-1.gob", "s1/hold-2.gob", "s1/keep.txt", "s2/hold-3.gob"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Config{Slot: "s1", SpillDir: dir}, fakeHooks{})
	s.removeStaleSpill()
	for name, want := range map[string]bool{"s1/hold-1.gob": false, "s1/hold-2.gob": false, "s1/keep.txt": true, "s2/hold-3.gob": true} {
		_, err := os.Stat(filepath.Join(dir, name))
		if got := err == nil; got != want {
			t.Errorf("%s exists = %v, want %v", name, got, want)
		}
	}
}
