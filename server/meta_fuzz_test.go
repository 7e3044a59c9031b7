package server

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// FuzzMetaRequests feeds arbitrary requests to a running metaserver node
// and to a broker that forwards to it: each is answered or refused, never
// a crash, and both keep serving.
func FuzzMetaRequests(f *testing.F) {
	seed := func(t transport.Type, v any) {
		b, _ := json.Marshal(v)
		f.Add(uint8(t), b)
	}
	seed(transport.TypeRoute, transport.RouteRequest{Subject: "s", ConsumerGroup: "c"})
	seed(transport.TypeRegister, transport.RegisterRequest{BrokerGroup: "g9", ID: "x", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	seed(transport.TypeRegister, transport.RegisterRequest{BrokerGroup: "meta", ID: "x", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	seed(transport.TypeBrokerHeartbeat, transport.BrokerHeartbeat{Status: transport.Status{ID: "x", Group: "g9", State: "Leader"}})
	seed(transport.TypeAssign, transport.AssignRequest{Subject: "s", Count: 1000})
	seed(transport.TypeAssign, transport.AssignRequest{Subject: "s", BrokerGroups: []string{"nope"}})
	seed(transport.TypeSetWritable, transport.SetWritableRequest{BrokerGroup: "nope"})
	seed(transport.TypeDeregister, transport.DeregisterRequest{BrokerGroup: "g/1", ID: ""})
	seed(transport.TypeJoin, transport.JoinRequest{ID: "x", RaftAddr: "bad", ClientAddr: "bad"})
	seed(transport.TypeAppPut, transport.AppRequest{Code: "a", Send: []string{"s*"}, Consume: []auth.Grant{{Subject: "*", Group: "c"}}, MaxSubjects: 1, Create: true})
	seed(transport.TypeAppPut, transport.AppRequest{Code: "a", Admin: true, MaxConsumerGroups: 1})
	seed(transport.TypeAppPut, transport.AppRequest{Code: "a", Send: []string{"**"}, MaxSubjects: -1})
	seed(transport.TypeAppRotate, transport.AppRotateRequest{Code: "a", GraceMillis: 1000})
	seed(transport.TypeAppRotate, transport.AppRotateRequest{Code: "a", GraceMillis: -1})
	seed(transport.TypeAppDelete, transport.AppDeleteRequest{Code: "a"})
	seed(transport.TypeRoute, transport.RouteRequest{Subject: "t", ConsumerGroup: "c", App: "a"})
	f.Add(uint8(transport.TypeApps), []byte(nil))
	f.Add(uint8(transport.TypeRoute), []byte("{"))
	f.Add(uint8(transport.TypeCluster), []byte(nil))
	f.Add(uint8(200), []byte("x"))

	// One cluster for every input: starting Raft per input would measure
	// start-up, not the handlers.
	quiet := quietTB{f}
	m := startMeta(quiet, "m1", true)
	b := startMetaBroker(quiet, "g1", m)
	waitFor(f, 10*time.Second, "the broker to register", func() bool { _, ok := m.fsm.BrokerGroup("g1"); return ok })
	f.Fuzz(func(t *testing.T, typ uint8, payload []byte) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m.srv.Handle(ctx, transport.Type(typ), payload)
		b.handle(ctx, transport.Type(typ), payload)
		if !m.isLeader() {
			t.Fatal("the metaserver lost leadership")
		}
		if _, err := m.srv.Handle(ctx, transport.TypeCluster, nil); err != nil {
			t.Fatalf("the metaserver stopped answering: %v", err)
		}
	})
}

// quietTB drops logs: a fuzz target may not log through its testing.F.
type quietTB struct{ testing.TB }

func (quietTB) Log(...any) {}
