package replication

import (
	"bufio"
	"encoding/gob"
	"fmt"
	"io"
	"os"

	"github.com/tidemark/cdc/pkg/change"
)

// holdBuffer is the FIFO of complete transactions of one hydrating export. It keeps up to limit
// bytes in memory; beyond that, units are appended to a spill file and read back in order on
// release. Order is always: spilled units first (they are older), then the in-memory tail —
// once anything spilled, every later unit spills too, so the file stays a prefix.
type holdBuffer struct {
	limit int64
	dir   string

	mem      []*change.Unit
	memBytes int64

	file    *os.File
	w       *bufio.Writer
	enc     *gob.Encoder
	spilled int
	// lastEnd is the end LSN of the newest buffered transaction.
	lastEnd change.LSN
}

func newHoldBuffer(limit int64, dir string) *holdBuffer {
	return &holdBuffer{limit: limit, dir: dir}
}

// Len is the number of buffered transactions.
func (h *holdBuffer) Len() int { return len(h.mem) + h.spilled }

// Add appends one complete transaction.
func (h *holdBuffer) Add(u *change.Unit) error {
	h.lastEnd = max(h.lastEnd, u.End)
	if h.file == nil && h.memBytes+int64(u.Bytes()) <= h.limit {
		h.mem = append(h.mem, u)
		h.memBytes += int64(u.Bytes())
		return nil
	}
	if h.file == nil {
		if err := os.MkdirAll(h.dir, 0o700); err != nil {
			return fmt.Errorf("hold buffer spill dir: %w", err)
		}
		f, err := os.CreateTemp(h.dir, "hold-*.gob")
		if err != nil {
			return fmt.Errorf("hold buffer spill file: %w", err)
		}
		h.file = f
		h.w = bufio.NewWriterSize(f, 1<<20)
		h.enc = gob.NewEncoder(h.w)
		// Move what is in memory to the file first so the file stays in order.
		for _, m := range h.mem {
			if err := h.enc.Encode(m); err != nil {
				return fmt.Errorf("hold buffer spill: %w", err)
			}
			h.spilled++
		}
		h.mem, h.memBytes = nil, 0
	}
	if err := h.enc.Encode(u); err != nil {
		return fmt.Errorf("hold buffer spill: %w", err)
	}
	h.spilled++
	return nil
}

// DropBelow removes buffered transactions whose commit LSN is below c (the snapshot has them).
// Transactions are appended in commit order, so those are a prefix.
func (h *holdBuffer) DropBelow(c change.LSN) error {
	if h.file != nil {
		// Rare: rewrite the spill file without the prefix.
		var keep []*change.Unit
		err := h.Drain(func(u *change.Unit) error {
			if u.Commit >= c {
				keep = append(keep, u)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, u := range keep {
			if err := h.Add(u); err != nil {
				return err
			}
		}
		return nil
	}
	i := 0
	for i < len(h.mem) && h.mem[i].Commit < c {
		h.memBytes -= int64(h.mem[i].Bytes())
		i++
	}
	h.mem = h.mem[i:]
	return nil
}

// Drain calls fn for every buffered transaction in order and empties the buffer.
func (h *holdBuffer) Drain(fn func(*change.Unit) error) error {
	if h.file != nil {
		if err := h.w.Flush(); err != nil {
			return fmt.Errorf("hold buffer spill: %w", err)
		}
		if _, err := h.file.Seek(0, io.SeekStart); err != nil {
			return fmt.Errorf("hold buffer spill: %w", err)
		}
		f, n := h.file, h.spilled
		h.file, h.w, h.enc, h.spilled = nil, nil, nil, 0
		defer func() {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}()
		dec := gob.NewDecoder(bufio.NewReaderSize(f, 1<<20))
		for range n {
			u := new(change.Unit)
			if err := dec.Decode(u); err != nil {
				return fmt.Errorf("hold buffer read back: %w", err)
			}
			if err := fn(u); err != nil {
				return err
			}
		}
	}
	mem := h.mem
	h.mem, h.memBytes = nil, 0
	for _, u := range mem {
		if err := fn(u); err != nil {
			return err
		}
	}
	return nil
}

// Close removes the spill file, if any.
func (h *holdBuffer) Close() {
	h.closeFile()
	h.mem, h.memBytes = nil, 0
}

func (h *holdBuffer) closeFile() {
	if h.file == nil {
		return
	}
	name := h.file.Name()
	_ = h.file.Close()
	_ = os.Remove(name)
	h.file, h.w, h.enc, h.spilled = nil, nil, nil, 0
}
