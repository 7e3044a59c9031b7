// Package testcluster is for tests: it starts brokers and metaservers
// inside the test's process, on loopback addresses, logging through the
// test, and stops them when the test ends. Every start waits (polling, by
// package await) until the node leads its one-node Raft group.
//
// It is not a _test file because the tests of several packages share it.
// Nothing outside tests may import it: it links the broker.
package testcluster

import (
	"net"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// Addr returns a loopback TCP address that was free a moment ago: for a
// node that must know its own address before it listens (a Raft address,
// or a client address kept across a restart).
func Addr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Logger returns a logger that writes warnings and errors through tb.Log,
// so that they show with the test that caused them.
func Logger(tb testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: tbWriter{tb}})
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) { w.tb.Log(string(p)); return len(p), nil }
