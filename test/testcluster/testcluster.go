// Package testcluster is for tests: it starts brokers and metaservers
// inside the test's process, on loopback addresses, logging through the
// test, and stops them when the test ends. Every start waits (polling, by
// package poll) until the node leads its one-node Raft group.
//
// It is not a _test file because the tests of several packages share it.
// Nothing outside tests may import it: it links the broker.
package testcluster

import (
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/test/testport"
)

// Addr returns a loopback TCP address that was free a moment ago, for a
// node that must know its own address before it listens (testport.Addr).
func Addr(tb testing.TB) string { return testport.Addr(tb) }

// Logger returns a logger that writes warnings and errors through tb.Log,
// so that they show with the test that caused them.
func Logger(tb testing.TB) hclog.Logger {
	return hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: tbWriter{tb}})
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) { w.tb.Log(string(p)); return len(p), nil }
