package qmq

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// routeServer answers route requests for any subject. Each request waits
// until want requests are in flight at once (or, once one has waited a
// second in vain, none waits any more), and the most in flight is kept.
type routeServer struct {
	want int

	mu       sync.Mutex
	changed  *sync.Cond // of mu: inFlight grew, or gaveUp was set
	inFlight int
	most     int
	gaveUp   bool
	asked    map[string]int
}

func (s *routeServer) handle(_ context.Context, typ transport.Type, p []byte) ([]byte, error) {
	if typ != transport.TypeRoute {
		return nil, fmt.Errorf("unexpected request %v", typ)
	}
	var req transport.RouteRequest
	if err := json.Unmarshal(p, &req); err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.inFlight++
	s.most = max(s.most, s.inFlight)
	s.asked[req.Subject]++
	s.changed.Broadcast()
	giveUp := time.AfterFunc(time.Second, func() {
		s.mu.Lock()
		s.gaveUp = true
		s.changed.Broadcast()
		s.mu.Unlock()
	})
	for s.most < s.want && !s.gaveUp {
		s.changed.Wait()
	}
	giveUp.Stop()
	s.inFlight--
	s.mu.Unlock()
	return json.Marshal(transport.Route{Subject: req.Subject, BrokerGroups: []transport.BrokerGroupRoute{
		{Name: "g", Servers: []string{"127.0.0.1:1"}, Writable: true, Available: true}}})
}

// A batch over many new subjects asks for their routes maxParallelLookups
// at a time, never more, and each subject once.
func TestPrefetchLooksUpRoutesInParallel(t *testing.T) {
	rs := &routeServer{want: maxParallelLookups, asked: map[string]int{}}
	rs.changed = sync.NewCond(&rs.mu)
	srv := &transport.Server{Handler: rs.handle}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close(); <-served })
	r, err := newRouter(lis.Addr().String(), transport.Dialer{})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()

	var subjects []string
	for i := range 3 * maxParallelLookups {
		subjects = append(subjects, fmt.Sprintf("s.%d", i), fmt.Sprintf("s.%d", i)) // each twice
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r.prefetch(ctx, slices.Values(subjects))

	rs.mu.Lock()
	most, gaveUp, asked := rs.most, rs.gaveUp, len(rs.asked)
	for s, n := range rs.asked {
		if n != 1 {
			t.Errorf("route of %s asked %d times, want once", s, n)
		}
	}
	rs.mu.Unlock()
	if gaveUp || most != maxParallelLookups {
		t.Fatalf("at most %d route requests in flight, want %d", most, maxParallelLookups)
	}
	if asked != 3*maxParallelLookups {
		t.Fatalf("%d subjects asked for, want %d", asked, 3*maxParallelLookups)
	}
	r.mu.Lock()
	cached := len(r.routes)
	r.mu.Unlock()
	if cached != 3*maxParallelLookups {
		t.Fatalf("%d routes cached, want %d", cached, 3*maxParallelLookups)
	}
}
