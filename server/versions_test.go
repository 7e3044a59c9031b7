package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// asOldBuild makes a node play one of the release before version gates:
// it advertises versions 1-1 and its state machine stops at any entry
// that needs more, as that release's does.
func asOldBuild(c *Config) { c.FSM.MaxVersion = version.V1 }

// commandVersions returns, by command type, the payload versions of the
// command entries n's Raft log holds after index from.
func commandVersions(t *testing.T, n *Node, from uint64) map[fsm.CommandType][]byte {
	t.Helper()
	first, err := n.store.Logs().FirstIndex()
	if err != nil {
		t.Fatal(err)
	}
	last, err := n.store.Logs().LastIndex()
	if err != nil {
		t.Fatal(err)
	}
	out := map[fsm.CommandType][]byte{}
	for i := max(first, from+1); i <= last; i++ {
		var l raft.Log
		if err := n.store.Logs().GetLog(i, &l); err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if l.Type == raft.LogCommand && len(l.Data) >= 2 {
			out[fsm.CommandType(l.Data[0])] = append(out[fsm.CommandType(l.Data[0])], l.Data[1])
		}
	}
	return out
}

// sendMessages sends n messages of subject through c, each its own request.
func sendMessages(t *testing.T, c *transport.LeaderClient, subject, prefix string, n int) {
	t.Helper()
	for i := range n {
		req := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprint(prefix, i), Subject: subject, Body: []byte("x")}}}
		body, err := c.Call(ctxFor(t, 10*time.Second), transport.TypeSend, req.Encode())
		if err != nil {
			t.Fatalf("send %s%d: %v", prefix, i, err)
		}
		resp, err := transport.DecodeSendResponse(body)
		if err != nil || resp.Results[0].Status != transport.SendAppended {
			t.Fatalf("send %s%d: %+v, %v", prefix, i, resp, err)
		}
	}
}

// resendDeadLetters asks leader, as an application would, to resend the
// dead letters of group g of subject.
func resendDeadLetters(t *testing.T, leader *Node) {
	t.Helper()
	ctx := context.WithValue(ctxFor(t, 10*time.Second), accessKey{}, &access{who: "app:ops"})
	req, _ := json.Marshal(transport.DeadLetterOpRequest{Subject: "s", ConsumerGroup: "g", Op: transport.DeadLetterResend, All: true})
	if _, err := leader.handleDeadLetterOp(ctx, req); err != nil {
		t.Fatalf("resend dead letters: %v", err)
	}
}

// setVersion asks the group's leader, through c, to raise the group's
// active Number to v.
func setVersion(t *testing.T, c *transport.LeaderClient, v version.Number) (transport.SetVersionResponse, error) {
	t.Helper()
	req, _ := json.Marshal(transport.SetVersionRequest{Group: "g1", Version: v})
	body, err := c.Call(ctxFor(t, 20*time.Second), transport.TypeSetVersion, req)
	var resp transport.SetVersionResponse
	if err == nil {
		err = json.Unmarshal(body, &resp)
	}
	return resp, err
}

// A group at V1 (formed by a node of the release before version gates)
// with a member of that release: a leader of this build proposes only
// what that member applies (no client address in an Append, no one who
// asked in a dead-letter operation), so the member never stops; a raise
// to V2 is refused naming it. Once it is upgraded (restarted on this
// build) the raise goes through, sends name their clients' addresses
// (Append version 3) and the timeline starts.
func TestMixedGroupStaysAtV1UntilFinalized(t *testing.T) {
	nodes := startGroup(t, func(id string, c *Config) {
		if id == "n1" {
			asOldBuild(c)
		}
	})
	old := nodes[0]
	for _, n := range nodes {
		if v := n.fsm.ActiveVersion(); v != version.V1 {
			t.Fatalf("%s is at %d", n.cfg.ID, v)
		}
	}
	if st := old.Status(); st.Versions == nil || *st.Versions != (version.Range{Min: 1, Max: 1}) || st.ActiveVersion != version.V1 {
		t.Fatalf("the old build's status says versions %v, active %d", st.Versions, st.ActiveVersion)
	}
	// A leader of this build.
	if err := old.raft.LeadershipTransferToServer(raft.ServerID("n2"), raft.ServerAddress(nodes[1].cfg.RaftAddr)).Error(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "n2 to lead", func() bool { return nodes[1].isLeader() })
	leader := nodes[1]
	c := clientOf(t, clientAddrs(nodes)...)
	mark := leader.raft.LastIndex()
	sendMessages(t, c, "s", "a", 5)
	resendDeadLetters(t, leader)
	got := commandVersions(t, leader, mark)
	if len(got[fsm.CmdAppend]) == 0 || len(got[fsm.CmdDeadLetters]) != 1 {
		t.Fatalf("the log holds appends %v and dead-letter operations %v", got[fsm.CmdAppend], got[fsm.CmdDeadLetters])
	}
	for _, v := range got[fsm.CmdAppend] {
		if v > 2 {
			t.Fatalf("an Append of version %d at V1", v)
		}
	}
	if v := got[fsm.CmdDeadLetters][0]; v != 1 {
		t.Fatalf("dead letters of version %d at V1", v)
	}
	waitFor(t, 10*time.Second, "every member to apply the sends", func() bool {
		return old.fsm.Applied() >= leader.fsm.Applied()
	})
	if err := old.fsm.Stopped(); err != nil {
		t.Fatalf("the old build stopped: %v", err)
	}
	// The net: a proposal past the gate never reaches the log.
	last := leader.raft.LastIndex()
	v3 := (&fsm.Append{Messages: []*message.Message{{ID: "z", Subject: "s"}}, Apps: []fsm.Sender{{Addr: "10.0.0.1:1"}}, Senders: []int{1}}).Encode()
	if _, err := leader.result(leader.applyAsync(v3)); transport.CodeOf(err) != transport.Internal || !strings.Contains(err.Error(), "past the group's active version") {
		t.Fatalf("an Append of version 3 proposed at V1: %v", err)
	}
	if leader.raft.LastIndex() != last {
		t.Fatal("the refused proposal reached the log")
	}

	// The raise is refused, naming the old build.
	if _, err := setVersion(t, c, version.V2); err == nil || !strings.Contains(err.Error(), "node n1 supports versions 1-1") {
		t.Fatalf("SetVersion(2) with n1 at 1-1: %v", err)
	}
	if leader.fsm.ActiveVersion() != version.V1 {
		t.Fatal("the refused raise raised the version")
	}

	// n1 upgraded: restarted on this build.
	old.Close()
	cfg := old.cfg
	cfg.FSM.MaxVersion = 0
	cfg.ClientAddr = "127.0.0.1:0"
	upgraded, err := New(cfg)
	if err != nil {
		t.Fatalf("restart n1 upgraded: %v", err)
	}
	t.Cleanup(func() { upgraded.Close() })
	waitFor(t, 10*time.Second, "n1 to record its new client address", func() bool {
		return leader.fsm.MemberAddr("n1") == upgraded.ClientAddr()
	})
	resp, err := setVersion(t, c, version.V2)
	if err != nil || resp.Previous != version.V1 || resp.Active != version.V2 {
		t.Fatalf("SetVersion(2) with every member upgraded: %+v, %v", resp, err)
	}
	nodes = []*Node{upgraded, nodes[1], nodes[2]}
	waitFor(t, 10*time.Second, "every member at V2", func() bool {
		for _, n := range nodes {
			if n.fsm.ActiveVersion() != version.V2 || n.Status().ActiveVersion != version.V2 {
				return false
			}
		}
		return true
	})
	leader = leaderOf(nodes)
	mark = leader.raft.LastIndex()
	c2 := clientOf(t, clientAddrs(nodes)...)
	sendMessages(t, c2, "s", "b", 3)
	resendDeadLetters(t, leader)
	got = commandVersions(t, leader, mark)
	for _, v := range got[fsm.CmdAppend] {
		if v != 3 {
			t.Fatalf("an Append of version %d at V2, want 3 (client addresses)", v)
		}
	}
	if len(got[fsm.CmdAppend]) == 0 || len(got[fsm.CmdDeadLetters]) != 1 || got[fsm.CmdDeadLetters][0] != 2 {
		t.Fatalf("at V2 the log holds appends %v and dead-letter operations %v", got[fsm.CmdAppend], got[fsm.CmdDeadLetters])
	}
	found, err := leader.fsm.FindMessage("b0", 0, 0)
	if err != nil || len(found) != 1 {
		t.Fatalf("b0: %v, %v", found, err)
	}
	events, _, err := leader.fsm.Timeline(found[0], 0)
	if err != nil || len(events) == 0 || events[0].Addr == "" {
		t.Fatalf("b0's timeline %+v, %v: want its sender's address", events, err)
	}
	if _, err := setVersion(t, c2, version.V2); err != nil {
		t.Fatalf("SetVersion(2) again: %v", err)
	}
}

// A group a node of this build bootstraps starts at its newest version;
// a node whose build stops short of it may not join; a node restarted on
// a build that stops short of its data's version refuses to start, naming
// the versions.
func TestNewGroupStartsAtTheNewestVersion(t *testing.T) {
	n1 := startNode(t, "n1", true, nil)
	waitLeader(t, n1)
	if v := n1.fsm.ActiveVersion(); v != version.Max {
		t.Fatalf("a new group is at %d, want %d", v, version.Max)
	}
	if st := n1.Status(); st.ActiveVersion != version.Max || st.Versions == nil || *st.Versions != version.Build() {
		t.Fatalf("status: active %d, versions %v", st.ActiveVersion, st.Versions)
	}
	adm, err := admin.New(n1.ClientAddr(), connOf(n1.cfg.TLS))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	n2 := startNode(t, "n2", false, asOldBuild)
	err = adm.Join(ctxFor(t, 10*time.Second), "g1", "n2", cmp.Or(n2.cfg.RaftAdvertiseAddr, n2.cfg.RaftAddr), n2.ClientAddr())
	if err == nil || !strings.Contains(err.Error(), "node n2 supports versions 1-1; group g1 is at version 2") {
		t.Fatalf("join of a node of versions 1-1: %v", err)
	}
	if f := n1.raft.GetConfiguration(); f.Error() != nil || len(f.Configuration().Servers) != 1 {
		t.Fatal("the refused node is in the configuration")
	}

	// Restarted on an earlier build, the node refuses to start.
	n1.Close()
	cfg := n1.cfg
	asOldBuild(&cfg)
	n, err := New(cfg)
	if err == nil {
		n.Close()
		t.Fatal("a node of versions 1-1 started on a group at version 2")
	}
	if !errors.Is(err, fsm.ErrNewerData) || !strings.Contains(err.Error(), "broker group g1's active version is 2") ||
		!strings.Contains(err.Error(), "applies versions 1-1") || strings.Contains(err.Error(), "malformed") {
		t.Fatalf("start refused with %v", err)
	}
	// Restarted on this build, it starts, still at version 2, and does not
	// raise again (it did not bootstrap at this start).
	again := restart(t, n1)
	waitLeader(t, again)
	if again.fsm.ActiveVersion() != version.Max || again.bootstrapped.Load() {
		t.Fatalf("restarted at %d", again.fsm.ActiveVersion())
	}
	// And so from a checkpoint recording the version (a snapshot's).
	if err := again.raft.Snapshot().Error(); err != nil {
		t.Fatal(err)
	}
	again.Close()
	if n, err := New(cfg); err == nil {
		n.Close()
		t.Fatal("a node of versions 1-1 started on a checkpoint at version 2")
	} else if !errors.Is(err, fsm.ErrNewerData) || !strings.Contains(err.Error(), "broker group g1's active version is 2") || !strings.Contains(err.Error(), "checkpoint") {
		t.Fatalf("start on a checkpoint at version 2 refused with %v", err)
	}
}

// A group bootstrapped with InitialVersion V1 (qmqd --initial-version 1)
// stays at V1, recording no Number as a group of the release before
// gates: it takes sends once its first leader ran seedVersion, a node of
// that release may join it, and a raise is the operator's. A Number this
// build does not support is refused before anything starts.
func TestNewGroupAtAnInitialVersion(t *testing.T) {
	n1 := startNode(t, "n1", true, func(c *Config) { c.InitialVersion = version.V1 })
	waitLeader(t, n1)
	c := clientOf(t, n1.ClientAddr())
	sendMessages(t, c, "s", "m", 3)
	if v := n1.fsm.ActiveVersion(); v != version.V1 {
		t.Fatalf("a new group with InitialVersion 1 is at %d", v)
	}
	if n1.bootstrapped.Load() {
		t.Fatal("seedVersion did not run")
	}
	adm, err := admin.New(n1.ClientAddr(), connOf(n1.cfg.TLS))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	n2 := startNode(t, "n2", false, asOldBuild)
	if err := adm.Join(ctxFor(t, 10*time.Second), "g1", "n2", cmp.Or(n2.cfg.RaftAdvertiseAddr, n2.cfg.RaftAddr), n2.ClientAddr()); err != nil {
		t.Fatalf("join of a node of versions 1-1 to a group at version 1: %v", err)
	}
	cfg := DefaultConfig()
	cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n3", "g1", t.TempDir()
	cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.InitialVersion = version.Max + 1
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "InitialVersion") {
		t.Fatalf("InitialVersion %d: %v", cfg.InitialVersion, err)
	}
}

// Below V2 a batch names its senders' applications and not their
// addresses: an Append of version 2 with applications, 1 without, each
// application once however many addresses it sent from; at V2 an
// application at each address (version 3).
func TestSendersLeaveAddressesOutBelowV2(t *testing.T) {
	msg := func(id string) []*message.Message {
		return []*message.Message{{ID: id, Subject: "s", Body: []byte("x")}}
	}
	calls := []*sendCall{
		{msgs: msg("a"), from: &fsm.Sender{App: "orders", MaxDelayed: 5, Addr: "10.0.0.1:1"}},
		{msgs: msg("b"), from: &fsm.Sender{Addr: "10.0.0.2:2"}},
		{msgs: msg("c"), from: &fsm.Sender{App: "orders", MaxDelayed: 5, Addr: "10.0.0.3:3"}},
		{msgs: msg("d")},
	}
	for _, tc := range []struct {
		addrs   bool
		version byte
		apps    []fsm.Sender
		senders []int
	}{
		{false, 2, []fsm.Sender{{App: "orders", MaxDelayed: 5}}, []int{1, 0, 1, 0}},
		{true, 3, []fsm.Sender{{App: "orders", MaxDelayed: 5, Addr: "10.0.0.1:1"}, {Addr: "10.0.0.2:2"}, {App: "orders", MaxDelayed: 5, Addr: "10.0.0.3:3"}}, []int{1, 2, 3, 0}},
	} {
		cmd := &fsm.Append{}
		for _, c := range calls {
			cmd.Messages = append(cmd.Messages, c.msgs...)
		}
		senders(cmd, calls, tc.addrs)
		if b := cmd.Encode(); b[1] != tc.version || fmt.Sprint(cmd.Apps) != fmt.Sprint(tc.apps) || fmt.Sprint(cmd.Senders) != fmt.Sprint(tc.senders) {
			t.Fatalf("addresses %v: version %d, apps %v, senders %v", tc.addrs, b[1], cmd.Apps, cmd.Senders)
		}
	}
	// No application and no address named: version 1.
	cmd := &fsm.Append{Messages: msg("e")}
	senders(cmd, []*sendCall{{msgs: msg("e"), from: &fsm.Sender{Addr: "10.0.0.2:2"}}}, false)
	if b := cmd.Encode(); b[1] != 1 || cmd.Senders != nil {
		t.Fatalf("a batch of addresses alone below V2: version %d, senders %v", b[1], cmd.Senders)
	}
}

// A set-version request at and past each of its limits: a Number of 0 or
// past this build's newest, a group that is not the node's and a payload
// that is not JSON are refused, naming what is wrong; the active Number,
// or one below it, changes nothing.
func TestSetVersionRequestLimits(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	c := clientOf(t, n.ClientAddr())
	for _, tc := range []struct {
		req  string
		want string
	}{
		{`{"group":"g1","version":0}`, "version 0: this build supports 1-2"},
		{fmt.Sprintf(`{"group":"g1","version":%d}`, version.Max+1), fmt.Sprintf("version %d: this build supports", version.Max+1)},
		{`{"group":"g2","version":2}`, "node n1 is of group g1, not g2"},
		{`{"group":"g1","version":"2"}`, "INVALID"},
		{`not json`, "INVALID"},
	} {
		_, err := c.Call(ctxFor(t, 10*time.Second), transport.TypeSetVersion, []byte(tc.req))
		if err == nil || transport.CodeOf(err) != transport.Invalid || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("set-version %s: %v; want INVALID saying %q", tc.req, err, tc.want)
		}
	}
	for _, v := range []version.Number{version.V1, version.Max} {
		resp, err := setVersion(t, c, v)
		if err != nil || resp.Previous != version.Max || resp.Active != version.Max {
			t.Errorf("set-version %d on a group at %d: %+v, %v; want it unchanged", v, version.Max, resp, err)
		}
	}
}
