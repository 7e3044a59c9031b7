// Package testport hands tests loopback addresses for servers that must
// know their address before they listen (a Raft address, a client address
// kept across a restart).
package testport

import (
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
)

// Addr returns a loopback address with a port free at the time of the
// call and not returned before by this process (until all have been). Its
// ports lie below Linux's ephemeral range (32768 up), which a port the
// kernel picks comes from (a connection's own end, a listener on port 0):
// a server started on it later cannot find it taken by a connection made
// meanwhile, as one on a port the kernel picked could.
func Addr(tb testing.TB) string {
	tb.Helper()
	ports.Lock()
	defer ports.Unlock()
	for range 1000 {
		ports.next++
		port := first + (ports.offset+ports.next)%(end-first)
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken by something else
		}
		defer l.Close()
		return l.Addr().String()
	}
	tb.Fatal("testport: no free port left")
	return ""
}

// first and end bound Addr's ports.
const first, end = 12000, 32768

// ports walks the ports from a random point, so that two test processes
// at once (packages tested in parallel) seldom meet.
var ports = struct {
	sync.Mutex
	offset, next int
}{offset: rand.IntN(end - first)}
