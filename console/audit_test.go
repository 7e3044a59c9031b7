package console_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/console"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// syncBuffer is a log's output, read while the server writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// An action through the API is audited with the HTTP caller's address
// (the nodes see only the console's), its path and its outcome, before it
// is answered, whether refused or done; a read is not.
func TestActionAudited(t *testing.T) {
	m := testcluster.Meta(t, nil)
	b := testcluster.Broker(t, testcluster.Registered("g1", m.ClientAddr()))
	a, err := admin.New(m.ClientAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	poll.Until(t, 30*time.Second, "g1 registered with a leader", func() bool {
		c, err := a.Cluster(context.Background())
		return err == nil && len(c.BrokerGroups) == 1 && c.BrokerGroups[0].Leader != ""
	})
	var out syncBuffer
	h, err := console.New(console.Config{Servers: []string{b.ClientAddr(), m.ClientAddr()}, Logger: hclog.New(&hclog.LoggerOptions{Output: &out})})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	var caller string
	trace := &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { caller = i.Conn.LocalAddr().String() }}
	post := func(path, body string) int {
		t.Helper()
		req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), "POST", srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set(console.CSRFHeader, "1")
		resp, err := srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	path := "/api/v1/subjects/orders/consumer-groups/billing/reset"
	if st := post(path, `{"to":"nowhere"}`); st != http.StatusBadRequest {
		t.Fatalf("a reset to nowhere: %d, want 400", st)
	}
	line := out.String()
	for _, want := range []string{"audit: http action:", "who=none", "remote=" + caller, "path=" + path, "outcome=invalid", "error="} {
		if caller == "" || !strings.Contains(line, want) {
			t.Errorf("the audit line of a refused reset from %s lacks %q:\n%s", caller, want, line)
		}
	}
	if resp, err := srv.Client().Get(srv.URL + "/api/v1/subjects/bad%20name"); err != nil {
		t.Fatal(err)
	} else {
		resp.Body.Close()
	}
	if n := strings.Count(out.String(), "http action"); n != 1 {
		t.Errorf("%d action lines after a read, want the reset's alone:\n%s", n, out.String())
	}
	// One that is done: its line says ok.
	set := "/api/v1/subjects/orders/consumer-groups/billing/set"
	if st := post(set, `{"max_deliveries":3}`); st != http.StatusOK {
		t.Fatalf("a set: %d, want 200", st)
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "http action") {
			lines = append(lines, l)
		}
	}
	if line := lines[len(lines)-1]; len(lines) != 2 || !strings.Contains(line, "audit: http action:") || !strings.Contains(line, "who=none") ||
		!strings.Contains(line, "remote="+caller) || !strings.Contains(line, "path="+set) || !strings.Contains(line, "outcome=ok") {
		t.Errorf("the audit line of a set done from %s:\n%s", caller, out.String())
	}
}
