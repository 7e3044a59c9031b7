package meta

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/version"
)

// A SetVersion raises the active Number, never lowers it, and the
// snapshot carries it; a state from before version gates (no Number in
// its snapshot) is at V1 and encodes as it did.
func TestSetVersionRaisesAndSnapshotCarriesIt(t *testing.T) {
	f := New()
	if v := f.ActiveVersion(); v != version.V1 {
		t.Fatalf("a new state is at %d", v)
	}
	old := snapshotBytes(t, f)
	if bytes.Contains(old, []byte(`"version"`)) {
		t.Fatalf("a state at no Number encodes one: %s", old)
	}
	mustApply(t, f, &SetVersion{Version: version.V2})
	mustApply(t, f, &SetVersion{Version: version.V1}) // not lowered
	if v := f.ActiveVersion(); v != version.V2 {
		t.Fatalf("active %d after raising to 2 and asking for 1", v)
	}
	b := snapshotBytes(t, f)
	if !bytes.Contains(b, []byte(`"version":2`)) {
		t.Fatalf("the snapshot lacks the Number: %s", b)
	}
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(b))); err != nil {
		t.Fatal(err)
	}
	if g.ActiveVersion() != version.V2 || !bytes.Equal(snapshotBytes(t, g), b) {
		t.Fatalf("restored at %d", g.ActiveVersion())
	}
	h := New()
	if err := h.Restore(io.NopCloser(bytes.NewReader(old))); err != nil || h.ActiveVersion() != version.V1 {
		t.Fatalf("a snapshot without a Number restored at %d: %v", h.ActiveVersion(), err)
	}
	if _, err := Decode(Encode(&SetVersion{})); !errors.Is(err, ErrInvalid) {
		t.Fatalf("version 0 decoded: %v", err)
	}
}

// A replica that does not apply an entry (a SetVersion past its build,
// a command it does not know) stops before the entry changes anything:
// OnFatal once, every later entry refused, no snapshot. A snapshot past
// its build does not restore, and a node's start check refuses such
// entries.
func TestReplicaStopsAtAVersionItDoesNotApply(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		data       []byte
	}{
		{"set version past the build", "active version is 2; this build (qmq " + version.String() + ") applies versions 1-1: run a release that supports version 2",
			Encode(&SetVersion{Version: version.V2})},
		{"unknown command", "unknown command 200: a leader of a newer release proposed it", []byte{200, '{', '}'}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var fatal []error
			f := NewWith(Config{MaxVersion: version.V1, OnFatal: func(err error) { fatal = append(fatal, err) }})
			mustApply(t, f, &Member{ID: "m1", ClientAddr: "127.0.0.1:1"})
			before := stateBytes(t, f)
			res := f.Apply(&raft.Log{Index: 2, Type: raft.LogCommand, Data: tc.data})
			err, _ := res.(error)
			if !errors.Is(err, ErrNeedsUpgrade) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "entry 2") {
				t.Fatalf("applied: %v", res)
			}
			if len(fatal) != 1 || fatal[0] != err {
				t.Fatalf("OnFatal got %v", fatal)
			}
			res = f.Apply(&raft.Log{Index: 3, Type: raft.LogCommand, Data: Encode(&Member{ID: "m2", ClientAddr: "127.0.0.1:2"})})
			if res != err || len(fatal) != 1 || !bytes.Equal(before, stateBytes(t, f)) || f.Applied() != 1 {
				t.Fatalf("after the stop: %v, %d calls, applied %d", res, len(fatal), f.Applied())
			}
			if _, err := f.Snapshot(); err == nil {
				t.Fatal("a stopped replica took a snapshot")
			}
			if err := f.CheckEntry(tc.data); !errors.Is(err, ErrNewerData) {
				t.Fatalf("start check: %v", err)
			}
			if err := New().CheckEntry(Encode(&Member{ID: "m2", ClientAddr: "bad"})); err != nil {
				t.Fatalf("start check of an entry the state refuses: %v", err)
			}
		})
	}
	f := New()
	mustApply(t, f, &SetVersion{Version: version.V2})
	b := snapshotBytes(t, f)
	old := NewWith(Config{MaxVersion: version.V1})
	err := old.Restore(io.NopCloser(bytes.NewReader(b)))
	if !errors.Is(err, ErrNewerData) || !strings.Contains(err.Error(), "the metaserver group's active version is 2") {
		t.Fatalf("restore of a snapshot at 2 on a build of 1-1: %v", err)
	}
	if err := old.Check(&SetVersion{Version: version.V2}); !errors.Is(err, ErrNewerData) {
		t.Fatalf("check of a raise past the build: %v", err)
	}
}
