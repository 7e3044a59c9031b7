package transport

import (
	"context"
	"sync"
)

// requestOverhead is charged to the budget for every request on top of its
// payload: the goroutine and bookkeeping of its handler. It makes
// MaxInFlightBytes bound the number of running handlers too (65,536 at the
// default), whatever their payloads.
const requestOverhead = 4 << 10

// budget is a pool of bytes shared by every connection of a Server: the
// payloads of requests being read or handled, and the replies their
// handlers reserved.
type budget struct {
	mu      sync.Mutex
	cond    *sync.Cond
	free    int64
	total   int64
	waiting int // callers of take waiting for bytes
}

func newBudget(total int64) *budget {
	b := &budget{free: total, total: total}
	b.cond = sync.NewCond(&b.mu)
	return b
}

// take waits until n bytes are free (a request larger than the whole budget
// waits for all of it) and takes them; false if ctx ended first.
func (b *budget) take(ctx context.Context, n int64) bool {
	n = min(n, b.total)
	stop := context.AfterFunc(ctx, func() {
		b.mu.Lock()
		b.cond.Broadcast()
		b.mu.Unlock()
	})
	defer stop()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free < n {
		b.waiting++
		defer func() { b.waiting-- }()
	}
	for b.free < n {
		if ctx.Err() != nil {
			return false
		}
		b.cond.Wait()
	}
	b.free -= n
	return true
}

// tryTake takes n bytes if they are free now (all of the budget, for more
// than the whole budget).
func (b *budget) tryTake(n int64) bool {
	n = min(n, b.total)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.free < n {
		return false
	}
	b.free -= n
	return true
}

// takeUpTo takes what is free now of n bytes (at most the whole budget)
// and returns how many it took: none while callers of take wait, so that
// small takes cannot starve a large one for ever.
func (b *budget) takeUpTo(n int64) int64 {
	n = min(n, b.total)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.waiting > 0 {
		return 0 // those waiting for their bytes go first
	}
	n = max(min(n, b.free), 0)
	b.free -= n
	return n
}

// give returns n bytes taken with take, tryTake or takeUpTo.
func (b *budget) give(n int64) {
	n = min(n, b.total)
	if n <= 0 {
		return
	}
	b.mu.Lock()
	b.free += n
	b.cond.Broadcast()
	b.mu.Unlock()
}

// usage reports the bytes taken and the callers waiting for more.
func (b *budget) usage() (inUse int64, waiting int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total - b.free, b.waiting
}

// reservation is what one request holds of the budget: its payload's
// charge, then the reply bytes its handler reserves. The server gives it
// all back once the response is written or the connection failed.
type reservation struct {
	b      *budget
	charge int64 // the payload's, which Release never gives back
	mu     sync.Mutex
	held   int64
	done   bool
}

type reservationKey struct{}

// add records n bytes taken for the reply; false once the reservation was
// released (the caller gives them back).
func (r *reservation) add(n int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	r.held += min(n, r.b.total)
	return true
}

// drop removes up to n bytes from what the request holds, never its
// payload's charge, and returns how many it removed (the caller gives them
// back).
func (r *reservation) drop(n int64) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return 0
	}
	n = min(n, r.b.total, r.held-r.charge)
	if n <= 0 {
		return 0
	}
	r.held -= n
	return n
}

// holding returns the bytes the request holds now.
func (r *reservation) holding() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held
}

// release gives back everything the request held; later reservations fail.
func (r *reservation) release() {
	r.mu.Lock()
	held := r.held
	r.held, r.done = 0, true
	r.mu.Unlock()
	r.b.give(held)
}

// Reserve takes n bytes of the server's memory budget for the response body
// the handler is building, waiting until they are free (n larger than the
// whole budget waits for all of it). The server gives them back once the
// response is written. It fails with a retriable Unavailable *Error if ctx
// ends first (the connection failed, the server is closing, or ctx's own
// deadline passed), or if the handler has already returned. With a ctx that
// did not come from a Server's Handler it takes nothing and returns nil.
func Reserve(ctx context.Context, n int64) error {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	if r == nil || n <= 0 {
		return nil
	}
	if !r.b.take(ctx, n) {
		return Errorf(Unavailable, "waiting for %d bytes of reply memory: %v", n, context.Cause(ctx))
	}
	if !r.add(n) {
		r.b.give(n)
		return Errorf(Unavailable, "reply memory reserved after the response was written")
	}
	return nil
}

// Release gives back n bytes the handler reserved with Reserve and no
// longer needs for its reply (it read a message to describe it, and keeps
// only the description). It gives back no more than the handler reserved.
// With a ctx that did not come from a Server's Handler it does nothing.
func Release(ctx context.Context, n int64) {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	if r == nil || n <= 0 {
		return
	}
	r.b.give(r.drop(n))
}

// TryReserve is Reserve without the wait: it takes n bytes if they are free
// now and reports whether it did. With a ctx that did not come from a
// Server's Handler it takes nothing and returns true.
func TryReserve(ctx context.Context, n int64) bool {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	if r == nil || n <= 0 {
		return true
	}
	if !r.b.tryTake(n) {
		return false
	}
	if !r.add(n) {
		r.b.give(n)
		return false
	}
	return true
}

// ReserveUpTo is TryReserve of as much of n bytes as is free now: it takes
// them without waiting and returns how many it took, from 0 to n (no more
// than the whole budget; none while others wait in Reserve). A pull takes what its reply may need before it
// proposes, so that it hands out only what the memory can carry. With a
// ctx that did not come from a Server's Handler it takes nothing and
// returns n.
func ReserveUpTo(ctx context.Context, n int64) int64 {
	r, _ := ctx.Value(reservationKey{}).(*reservation)
	if r == nil || n <= 0 {
		return max(n, 0)
	}
	took := r.b.takeUpTo(n)
	if took > 0 && !r.add(took) {
		r.b.give(took)
		return 0
	}
	return took
}
