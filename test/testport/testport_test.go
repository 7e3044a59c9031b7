package testport

import (
	"net"
	"strconv"
	"testing"
)

// Addr's ports are free, below the ephemeral range, and never the same
// twice.
func TestAddrIsFreeAndNew(t *testing.T) {
	seen := map[string]bool{}
	for range 200 {
		a := Addr(t)
		if seen[a] {
			t.Fatalf("%s handed out twice", a)
		}
		seen[a] = true
		_, port, _ := net.SplitHostPort(a)
		if p, _ := strconv.Atoi(port); p < first || p >= end {
			t.Fatalf("port %d outside [%d, %d)", p, first, end)
		}
		l, err := net.Listen("tcp", a)
		if err != nil {
			t.Fatalf("%s is not free: %v", a, err)
		}
		l.Close()
	}
}
