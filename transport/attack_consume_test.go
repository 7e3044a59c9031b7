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

// TestReserveUpToBounds: ReserveUpTo takes what is free of what it asks,
// never more than the budget holds, so that concurrent takers cannot
// overdraw it; nothing after the response was written; everything asked
// outside a Server's handler.
func TestReserveUpToBounds(t *testing.T) {
	b := newBudget(100)
	r := &reservation{b: b}
	ctx := context.WithValue(context.Background(), reservationKey{}, r)
	inUse := func() int64 { n, _ := b.usage(); return n }
	if got := ReserveUpTo(ctx, 60); got != 60 || inUse() != 60 { // under what is free
		t.Fatalf("ReserveUpTo(60) of 100 free took %d (%d in use)", got, inUse())
	}
	if got := ReserveUpTo(ctx, 40); got != 40 || inUse() != 100 { // at
		t.Fatalf("ReserveUpTo(40) of 40 free took %d (%d in use)", got, inUse())
	}
	if got := ReserveUpTo(ctx, 1); got != 0 || inUse() != 100 { // over: nothing free
		t.Fatalf("ReserveUpTo(1) of none free took %d (%d in use)", got, inUse())
	}
	Release(ctx, 30)
	if got := ReserveUpTo(ctx, 1<<40); got != 30 || inUse() != 100 || r.holding() != 100 {
		t.Fatalf("ReserveUpTo of more than the 30 free took %d (%d in use, %d held)", got, inUse(), r.holding())
	}
	if got := ReserveUpTo(ctx, 0) + ReserveUpTo(ctx, -1); got != 0 {
		t.Fatalf("ReserveUpTo of nothing took %d", got)
	}
	r.release()
	if got := ReserveUpTo(ctx, 10); got != 0 || inUse() != 0 {
		t.Fatalf("ReserveUpTo after the response was written took %d (%d in use)", got, inUse())
	}
	if got := ReserveUpTo(context.Background(), 1<<40); got != 1<<40 {
		t.Fatalf("outside a Server's handler ReserveUpTo(2^40) = %d", got)
	}
}
