package server

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// probe GETs path of n's HTTP port: its status code and body.
func probe(t *testing.T, addr, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + addr + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// /healthz answers while the process serves; /readyz only while the
// node is a voter of a group with a leader and has applied what it knows
// committed, and otherwise says why (503).
func TestHealthAndReadiness(t *testing.T) {
	lone := startNode(t, "n9", false, nil) // never joined
	if code, body := probe(t, lone.HTTPAddr(), "/healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz of a node not joined: %d %q", code, body)
	}
	if code, body := probe(t, lone.HTTPAddr(), "/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not a voter of its group g1") {
		t.Errorf("/readyz of a node not joined: %d %q, want 503 saying it is not a voter", code, body)
	}

	nodes := startGroup(t)
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.cfg.ID+" ready", func() bool {
			code, _ := probe(t, n.HTTPAddr(), "/readyz")
			return code == 200
		})
	}
	// A group that lost its quorum has no leader: its remaining node is
	// not ready (it would take no send).
	leader := leaderOf(nodes)
	var rest []*Node
	for _, n := range nodes {
		if n != leader {
			rest = append(rest, n)
		}
	}
	leader.Close()
	rest[0].Close()
	waitFor(t, 20*time.Second, "the last node to be not ready", func() bool {
		code, body := probe(t, rest[1].HTTPAddr(), "/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "has no leader")
	})
	if code, _ := probe(t, rest[1].HTTPAddr(), "/healthz"); code != 200 {
		t.Errorf("/healthz of a node without a leader: %d, want 200 (it serves)", code)
	}
}
