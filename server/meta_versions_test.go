package server

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/version"
)

// metaAsOldBuild makes a metaserver node play one of a release that
// applies versions 1-1.
func metaAsOldBuild(c *MetaConfig) { c.MaxVersion = version.V1 }

// A metaserver group a node of this build forms starts at its newest
// version and says so in its status; a node whose build stops short of
// it may not join; restarted on such a build, the node refuses to start,
// from its log and from its snapshot alike, naming the versions.
func TestMetaGroupStartsAtTheNewestVersion(t *testing.T) {
	m1 := startMeta(t, "m1", true)
	waitFor(t, 10*time.Second, "m1 to lead at the newest version", func() bool {
		return m1.isLeader() && m1.fsm.ActiveVersion() == version.Max
	})
	if st := m1.Status(); st.ActiveVersion != version.Max || st.Versions == nil || *st.Versions != version.Build() {
		t.Fatalf("status: active %d, versions %v", st.ActiveVersion, st.Versions)
	}
	a := newAdmin(t, m1.ClientAddr())
	old := startMeta(t, "m2", false, metaAsOldBuild)
	err := a.Join(ctxFor(t, 10*time.Second), admin.MetaGroup, "m2", old.cfg.RaftAddr, old.ClientAddr())
	if err == nil || !strings.Contains(err.Error(), "node m2 supports versions 1-1; group meta is at version 2") {
		t.Fatalf("join of a node of versions 1-1: %v", err)
	}

	m1.Close()
	cfg := m1.cfg
	metaAsOldBuild(&cfg)
	refused := func(where string) {
		t.Helper()
		m, err := NewMeta(cfg)
		if err == nil {
			m.Close()
			t.Fatalf("a node of versions 1-1 started on a metaserver group at version 2 (%s)", where)
		}
		if !errors.Is(err, meta.ErrNewerData) || !strings.Contains(err.Error(), "the metaserver group's active version is 2") ||
			!strings.Contains(err.Error(), "applies versions 1-1") {
			t.Fatalf("start refused (%s) with %v", where, err)
		}
	}
	refused("log")
	again, err := NewMeta(m1.cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A snapshot once the restarted node applied its log again (before,
	// Raft has nothing new to snapshot).
	waitFor(t, 10*time.Second, "m1 to lead again and snapshot", func() bool {
		return again.isLeader() && again.fsm.ActiveVersion() == version.Max && again.raft.Snapshot().Error() == nil
	})
	again.Close()
	refused("snapshot")
}

// A metaserver group formed by a node of a release that applies versions
// 1-1 stays at 1; a raise is refused while a member stops short of 2,
// naming it, and goes through once it runs this build. A replica that
// meets the raise without applying it stops.
func TestMetaGroupRaisedWhenEveryMemberSupportsIt(t *testing.T) {
	m1 := startMeta(t, "m1", true, metaAsOldBuild)
	waitFor(t, 10*time.Second, "m1 to lead", func() bool { return m1.isLeader() && m1.fsm.MemberAddr("m1") != "" })
	a := newAdmin(t, m1.ClientAddr())
	m2 := startMeta(t, "m2", false)
	if err := a.Join(ctxFor(t, 10*time.Second), admin.MetaGroup, "m2", m2.cfg.RaftAddr, m2.ClientAddr()); err != nil {
		t.Fatal(err)
	}
	if v := m1.fsm.ActiveVersion(); v != version.V1 {
		t.Fatalf("a group formed by a build of 1-1 is at %d", v)
	}
	_, err := a.SetVersion(ctxFor(t, 20*time.Second), admin.MetaGroup, 2)
	if err == nil || !strings.Contains(err.Error(), "group meta stays at version 1: node m1 supports versions 1-1") {
		t.Fatalf("raise with m1 at 1-1: %v", err)
	}
	// m1 upgraded: restarted on this build.
	m1.Close()
	cfg := m1.cfg
	cfg.MaxVersion = 0
	up, err := NewMeta(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { up.Close() })
	waitFor(t, 20*time.Second, "a leader", func() bool { return up.isLeader() || m2.isLeader() })
	change, err := newAdmin(t, m2.ClientAddr()).SetVersion(ctxFor(t, 20*time.Second), admin.MetaGroup, 2)
	if err != nil || change.Previous != 1 || change.Active != 2 {
		t.Fatalf("raise: %+v, %v", change, err)
	}
	waitFor(t, 10*time.Second, "both nodes at 2", func() bool {
		return up.fsm.ActiveVersion() == 2 && m2.fsm.ActiveVersion() == 2
	})
}

// A metaserver replica that meets an entry it cannot apply (a raise past
// its build, proposed as a leader of a newer release would) stops the
// node, saying what to run; started again on that build it refuses.
func TestMetaNodeStopsAtAVersionItDoesNotApply(t *testing.T) {
	old := startMeta(t, "m1", true, metaAsOldBuild)
	waitFor(t, 10*time.Second, "m1 to lead", old.isLeader)
	// Straight into the log: a leader of this build would not propose it.
	old.raft.Apply(meta.Encode(&meta.SetVersion{Version: 2}), 10*time.Second)
	select {
	case <-old.Failed():
	case <-time.After(20 * time.Second):
		t.Fatal("the node did not stop")
	}
	if err := old.FailedErr(); !errors.Is(err, meta.ErrNeedsUpgrade) || !strings.Contains(err.Error(), "run a release that supports version 2") {
		t.Fatalf("stopped with %v", err)
	}
	if v := old.fsm.ActiveVersion(); v != version.V1 {
		t.Fatalf("the stopped replica is at %d", v)
	}
	old.Close() // returns once the node closed, whoever began it
	m, err := NewMeta(old.cfg)
	if err == nil {
		m.Close()
		t.Fatal("restarted on the same build")
	}
	if !errors.Is(err, meta.ErrNewerData) {
		t.Fatalf("restart refused with %v", err)
	}
}
