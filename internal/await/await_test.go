package await

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

func TestTrue(t *testing.T) {
	n := 0
	True(t, time.Second, "three polls", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times", n)
	}
	r := &recorder{TB: t}
	func() {
		defer func() { recover() }()
		True(r, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if !r.failed {
		t.Fatal("a condition that never holds did not fail the test")
	}
}
