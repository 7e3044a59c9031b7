package poll

import (
	"testing"
	"time"
)

type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Fatalf(string, ...any) { r.failed = true; panic(r) }

func TestUntil(t *testing.T) {
	n := 0
	Until(t, time.Second, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times", n)
	}
	r := &recorder{TB: t}
	func() {
		defer func() { recover() }()
		Until(r, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if !r.failed {
		t.Fatal("a condition that never holds did not fail the test")
	}
}
