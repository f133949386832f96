package change

import (
	"context"
	"sync"
	"testing"
	"time"
)

func TestBudget(t *testing.T) {
	b := NewBudget(10)
	c1 := b.Take(6)
	if c1 == nil || b.Take(5) != nil {
		t.Fatalf("take 6 then 5 of 10: %v; want the second refused", c1)
	}
	c2 := b.Take(4)
	if c2 == nil || b.InUse() != 10 {
		t.Fatalf("take 4 more: %v, in use %d", c2, b.InUse())
	}
	c1.Return()
	c1.Return() // once only
	if b.InUse() != 4 {
		t.Fatalf("in use %d after returning 6 twice, want 4", b.InUse())
	}
	select {
	case <-b.Freed():
	default:
		t.Fatal("no signal after a return")
	}
	// A claim larger than the whole budget goes alone.
	c2.Return()
	big := b.Take(100)
	if big == nil || b.Take(1) != nil {
		t.Fatal("a claim larger than the budget is refused, or shares it")
	}
	// Move: the share stays taken under the new claim.
	moved := big.Move()
	big.Return()
	if b.InUse() != 100 {
		t.Fatalf("in use %d after returning a moved claim, want 100", b.InUse())
	}
	moved.Return()
	if b.InUse() != 0 {
		t.Fatalf("in use %d, want 0", b.InUse())
	}
	var nilClaim *Claim
	nilClaim.Return()
}

// TestBudgetAcquireWaits: Acquire waits for a return from another goroutine, and the budget
// stays exact under concurrent takes and returns.
func TestBudgetAcquireWaits(t *testing.T) {
	b := NewBudget(4)
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 200 {
				c, err := b.Acquire(context.Background(), 1)
				if err != nil {
					t.Error(err)
					return
				}
				if u := b.InUse(); u > 4 {
					t.Errorf("in use %d, limit 4", u)
				}
				c.Return()
			}
		}()
	}
	wg.Wait()
	if b.InUse() != 0 {
		t.Fatalf("in use %d, want 0", b.InUse())
	}
	hold := b.Take(4)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := b.Acquire(ctx, 1); err == nil {
		t.Fatal("Acquire of a full budget returned before ctx ended")
	}
	hold.Return()
}

func TestClaimShrink(t *testing.T) {
	b := NewBudget(64)
	c := b.Take(64)
	if b.Take(1) != nil {
		t.Fatal("budget full, yet a take of 1 fits")
	}
	c.Shrink(1)
	if b.InUse() != 1 {
		t.Fatalf("in use %d after shrinking 64 to 1, want 1", b.InUse())
	}
	select {
	case <-b.Freed():
	default:
		t.Fatal("no signal after a shrink")
	}
	c.Shrink(5) // never grows
	if b.InUse() != 1 {
		t.Fatalf("in use %d after shrinking 1 to 5, want 1", b.InUse())
	}
	m := c.Move()
	c.Return()
	if b.InUse() != 1 {
		t.Fatalf("in use %d after returning a moved claim, want 1", b.InUse())
	}
	m.Return()
	m.Shrink(0) // returned: nothing
	if b.InUse() != 0 {
		t.Fatalf("in use %d after returning the moved claim, want 0", b.InUse())
	}
}
