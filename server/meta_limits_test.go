package server

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/transport"
)

// fillMeta applies commands to a metaserver node's state machine directly,
// as its Raft node would but without log entries: the quick way to bring
// the state to a limit.
func fillMeta(t *testing.T, m *MetaNode, cmds ...meta.Command) {
	t.Helper()
	for _, cmd := range cmds {
		if res := m.fsm.Apply(&raft.Log{Index: m.fsm.Applied(), Type: raft.LogCommand, Data: meta.Encode(cmd)}); res != nil {
			t.Fatalf("%T %+v: %v", cmd, cmd, res)
		}
	}
}

// metaCall sends one request to a metaserver through the client protocol.
func metaCall(t *testing.T, addr string, typ transport.Type, req any) ([]byte, error) {
	t.Helper()
	c := clientOf(t, addr)
	b, _ := json.Marshal(req)
	return c.Call(ctxFor(t, 10*time.Second), typ, b)
}

// TestMetaLimitsCostNoRaftEntry: at a limit of the metaserver's state, a
// request that would pass it is answered INVALID naming the limit, or
// served without recording, and proposes nothing.
func TestMetaLimitsCostNoRaftEntry(t *testing.T) {
	m := startMeta(t, "m1", true)
	startMetaBroker(t, "g1", m)
	a := newAdmin(t, m.ClientAddr())
	waitFor(t, 10*time.Second, "g1 to be available and m1 recorded", func() bool {
		ok, _ := groupAvailable(t, a, "g1")
		return ok && m.fsm.MemberAddr("m1") != ""
	})

	// One subject short of MaxRoutedSubjects, every consumer group, broker group
	// and member the limits allow.
	var cmds []meta.Command
	for i := range meta.MaxRoutedSubjects - 1 {
		cmds = append(cmds, &meta.Assign{Subject: fmt.Sprintf("s%d", i), BrokerGroups: []string{"g1"}})
	}
	const perSubject = 4000
	for i := range meta.MaxTotalConsumerGroups / perSubject {
		for j := range perSubject {
			cmds = append(cmds, &meta.Consumer{Subject: fmt.Sprintf("s%d", i), ConsumerGroup: fmt.Sprintf("c%d", j)})
		}
	}
	for i := range meta.MaxBrokerGroups - 1 {
		cmds = append(cmds, &meta.Register{BrokerGroup: fmt.Sprintf("filler%d", i), ID: "n", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	}
	for i := range meta.MaxMembers - 1 {
		cmds = append(cmds, &meta.Member{ID: fmt.Sprintf("filler%d", i), ClientAddr: "127.0.0.1:3"})
	}
	fillMeta(t, m, cmds...)

	// The last subject the limit allows is assigned as ever.
	if _, err := useSubject(t, m.ClientAddr(), "last"); err != nil {
		t.Fatalf("first use of the subject that reaches MaxSubjects: %v", err)
	}
	last := m.raft.LastIndex()
	unchanged := func(what string) {
		t.Helper()
		if got := m.raft.LastIndex(); got != last {
			t.Fatalf("%s: raft log grew from %d to %d", what, last, got)
		}
	}
	refused := func(what string, err error, limit string, figure int) {
		t.Helper()
		want := fmt.Sprintf("%s is %d", limit, figure)
		if transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), want) {
			t.Fatalf("%s: %v, want INVALID naming %q", what, err, want)
		}
		unchanged(what)
	}

	_, err := useSubject(t, m.ClientAddr(), "over")
	refused("first use of a subject past MaxRoutedSubjects", err, "MaxSubjects", meta.MaxRoutedSubjects)
	if _, ok := m.fsm.Route("over"); ok {
		t.Fatal("a subject past MaxRoutedSubjects has a route")
	}

	// A consumer group past MaxTotalConsumerGroups is served its route,
	// unrecorded.
	body, err := metaCall(t, m.ClientAddr(), transport.TypeRoute, transport.RouteRequest{Subject: "s0", ConsumerGroup: "late"})
	var r admin.Route
	if err != nil || json.Unmarshal(body, &r) != nil || len(r.BrokerGroups) != 1 {
		t.Fatalf("route for a consumer group past MaxTotalConsumerGroups: %v %s", err, body)
	}
	unchanged("a consumer group past MaxTotalConsumerGroups")
	if got, _ := m.fsm.Route("s0"); slices.Contains(got.Consumers, "late") {
		t.Fatal("a consumer group past MaxTotalConsumerGroups was recorded")
	}

	_, err = metaCall(t, m.ClientAddr(), transport.TypeRegister,
		transport.RegisterRequest{BrokerGroup: "over", ID: "n", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	refused("registering a broker group past MaxBrokerGroups", err, "MaxBrokerGroups", meta.MaxBrokerGroups)

	err = a.Join(ctxFor(t, 10*time.Second), admin.MetaGroup, "over", freeAddr(t), freeAddr(t))
	refused("joining a metaserver node past MaxMembers", err, "MaxMembers", meta.MaxMembers)
	if n := len(m.Status().Members); n != 1 {
		t.Fatalf("the metaserver group has %d members after a refused join", n)
	}
}
