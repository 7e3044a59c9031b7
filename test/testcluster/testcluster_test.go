package testcluster

import (
	"net"
	"strings"
	"sync"
	"testing"
)

// logRecorder is a testing.TB that keeps what is logged through it.
type logRecorder struct {
	testing.TB
	mu   sync.Mutex
	logs []string
}

func (r *logRecorder) Log(args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range args {
		r.logs = append(r.logs, a.(string))
	}
}

func TestAddrIsFree(t *testing.T) {
	addr := Addr(t)
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	l.Close()
	if host, _, _ := net.SplitHostPort(addr); host != "127.0.0.1" {
		t.Errorf("address %s is not on loopback", addr)
	}
}

func TestLoggerWritesWarningsThroughTheTest(t *testing.T) {
	r := &logRecorder{TB: t}
	l := Logger(r)
	l.Info("not shown")
	l.Warn("disk almost full", "free-bytes", 10)
	if len(r.logs) != 1 || !strings.Contains(r.logs[0], "disk almost full") || !strings.Contains(r.logs[0], "free-bytes=10") {
		t.Fatalf("logged %q, want the one warning", r.logs)
	}
}

func TestBrokerRegisteredWithMeta(t *testing.T) {
	m := Meta(t, nil)
	if s := m.Status(); s.State != "Leader" {
		t.Fatalf("metaserver returned as %s", s.State)
	}
	n := Broker(t, Registered("g7", m.ClientAddr()))
	s := n.Status()
	if s.State != "Leader" || s.LeaderAddr == "" {
		t.Fatalf("broker returned as %s, leader at %q", s.State, s.LeaderAddr)
	}
	if s.Group != "g7" || s.ID != "g7-n1" {
		t.Errorf("broker is %s/%s, want g7/g7-n1", s.Group, s.ID)
	}
}
