package transport

import (
	"context"
	"testing"
)

// TestReleaseBounds: Release gives back what a handler reserved, under,
// at and over it, never the request's payload charge, and nothing after
// the response was written or outside a Server's handler.
func TestReleaseBounds(t *testing.T) {
	b := newBudget(100)
	r := &reservation{b: b, charge: 10}
	r.add(10) // the payload's charge, as the server takes it
	b.take(context.Background(), 10)
	ctx := context.WithValue(context.Background(), reservationKey{}, r)
	inUse := func() int64 { n, _ := b.usage(); return n }
	if err := Reserve(ctx, 50); err != nil {
		t.Fatal(err)
	}
	Release(ctx, 49) // under
	if inUse() != 11 || r.holding() != 11 {
		t.Fatalf("after releasing 49 of 50: %d in use, %d held", inUse(), r.holding())
	}
	Release(ctx, 1) // at
	if inUse() != 10 || r.holding() != 10 {
		t.Fatalf("after releasing all 50: %d in use, %d held", inUse(), r.holding())
	}
	if err := Reserve(ctx, 5); err != nil {
		t.Fatal(err)
	}
	Release(ctx, 6) // over: the charge stays
	if inUse() != 10 || r.holding() != 10 {
		t.Fatalf("after releasing 6 of 5: %d in use, %d held", inUse(), r.holding())
	}
	Release(ctx, 0)
	Release(ctx, -1)
	Release(context.Background(), 1<<40)
	if inUse() != 10 {
		t.Fatalf("releases of nothing changed the budget: %d in use", inUse())
	}
	r.release()
	Release(ctx, 10)
	if inUse() != 0 || b.free != b.total {
		t.Fatalf("a release after the response was written: %d in use, %d free of %d", inUse(), b.free, b.total)
	}
}
