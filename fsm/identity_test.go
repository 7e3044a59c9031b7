package fsm

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

const (
	testIdentity  = "g1/0123456789abcdef0123456789abcdef"
	otherIdentity = "g1/fedcba9876543210fedcba9876543210"
)

// identityEntry is a leader's SetMember of its own address carrying
// identity id in its Extensions.
func identityEntry(index uint64, ext []byte) *raft.Log {
	e := unitEntry(index, &SetMember{ID: "n1", ClientAddr: "127.0.0.1:1"})
	e.Extensions = ext
	return e
}

func TestIdentityRecordedOnceAndKept(t *testing.T) {
	var told []string
	cfg := unitConfig(t.TempDir())
	cfg.OnIdentity = func(id string) { told = append(told, id) }
	f := unitOpen(t, cfg)
	if f.Identity() != "" {
		t.Fatalf("a new state machine has identity %q", f.Identity())
	}
	f.Apply(identityEntry(1, []byte("qmq.identity/1:g1/short"))) // malformed: ignored
	f.Apply(identityEntry(2, []byte("something else entirely"))) // not an identity
	if f.Identity() != "" || len(told) != 0 {
		t.Fatalf("malformed extensions recorded %q, told %v", f.Identity(), told)
	}
	f.Apply(identityEntry(3, IdentityExtension(testIdentity)))
	f.Apply(identityEntry(4, IdentityExtension(testIdentity))) // the same again changes nothing
	if f.Identity() != testIdentity || len(told) != 1 || told[0] != testIdentity {
		t.Fatalf("identity %q, told %v; want %s once", f.Identity(), told, testIdentity)
	}
	// The checkpoint keeps it, and so does a snapshot restored elsewhere.
	stream := snapshotStream(t, f)
	f.Close()
	if g := unitOpen(t, cfg); g.Identity() != testIdentity {
		t.Fatalf("reopened with identity %q", g.Identity())
	}
	dst := unitFSM(t)
	if err := dst.Restore(io.NopCloser(bytes.NewReader(stream))); err != nil {
		t.Fatal(err)
	}
	if dst.Identity() != testIdentity {
		t.Fatalf("restored with identity %q", dst.Identity())
	}
}

// Within one history no entry carries another identity than the one the
// state recorded: a leader records one only after applying every entry
// before its term, and only if its state has none. An entry that does
// means this replica's data is of another history (a stale directory of
// an earlier life of the group, copied in): the replica stops before it
// applies the entry, as every replica holding that identity would,
// rather than apply another history's entries on its own.
func TestEntryOfAnotherHistoryStopsTheReplica(t *testing.T) {
	var fatal []error
	f := unitFSM(t, func(c *Config) { c.OnFatal = func(err error) { fatal = append(fatal, err) } })
	f.Apply(identityEntry(1, IdentityExtension(testIdentity)))
	foreign := unitEntry(2, &SetMember{ID: "n9", ClientAddr: "127.0.0.1:9"})
	foreign.Extensions = IdentityExtension(otherIdentity)
	r := f.Apply(foreign)
	if err := f.Stopped(); !errors.Is(err, ErrOtherHistory) || len(fatal) != 1 || !errors.Is(fatal[0], ErrOtherHistory) {
		t.Fatalf("an entry of history %s applied to a replica of %s: answered %s, stopped %v, OnFatal heard %v",
			otherIdentity, f.Identity(), describe(r), err, fatal)
	}
	if !errors.Is(asError(r), ErrOtherHistory) {
		t.Errorf("the entry answered %s, want ErrOtherHistory", describe(r))
	}
	if f.Identity() != testIdentity || f.MemberAddr("n9") != "" || f.Applied() != 1 {
		t.Errorf("the entry changed the state: identity %s, n9 at %q, applied %d", f.Identity(), f.MemberAddr("n9"), f.Applied())
	}
}

func TestCheckIdentity(t *testing.T) {
	id, err := NewIdentity("orders-1")
	if err != nil || !strings.HasPrefix(id, "orders-1/") || IdentityBrokerGroup(id) != "orders-1" {
		t.Fatalf("NewIdentity = %q, %v", id, err)
	}
	if again, _ := NewIdentity("orders-1"); again == id {
		t.Fatal("two identities alike")
	}
	for _, bad := range []string{"", "g1", "g1/", "/0123456789abcdef0123456789abcdef", "g1/0123456789ABCDEF0123456789abcdef",
		"g1/0123456789abcdef0123456789abcde", "g1/0123456789abcdef0123456789abcdef0", "g 1/0123456789abcdef0123456789abcdef",
		"g1/0123456789abcdef/123456789abcdef"} {
		if CheckIdentity(bad) == nil {
			t.Errorf("CheckIdentity(%q) accepted it", bad)
		}
	}
}

func FuzzIdentityExtension(f *testing.F) {
	f.Add(IdentityExtension(testIdentity))
	f.Add([]byte(identityTag))
	f.Add([]byte("qmq.identity/1:g1/0123456789abcdef0123456789abcdeg"))
	f.Add([]byte(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, ok := decodeIdentityExtension(b)
		if !ok {
			return
		}
		if err := CheckIdentity(id); err != nil {
			t.Fatalf("decoded %q: %v", id, err)
		}
		if string(IdentityExtension(id)) != string(b) {
			t.Fatalf("%q decodes to %q, which encodes differently", b, id)
		}
	})
}
