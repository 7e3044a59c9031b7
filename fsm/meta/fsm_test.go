package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/auth"
)

func apply(t *testing.T, f *FSM, cmd Command) error {
	t.Helper()
	idx := f.Applied() + 1
	res := f.Apply(&raft.Log{Index: idx, Type: raft.LogCommand, Data: Encode(cmd)})
	if res == nil {
		return nil
	}
	return res.(error)
}

func mustApply(t *testing.T, f *FSM, cmd Command) {
	t.Helper()
	if err := apply(t, f, cmd); err != nil {
		t.Fatalf("%T: %v", cmd, err)
	}
}

// stateBytes is the state alone, without the applied index.
func stateBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	b, err := json.Marshal(f.s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func snapshotBytes(t *testing.T, f *FSM) []byte {
	t.Helper()
	s, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s.(snapshot)
}

func TestRoutesGrowAndNeverShrink(t *testing.T) {
	f := New()
	mustApply(t, f, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	mustApply(t, f, &Register{BrokerGroup: "g2", ID: "a", RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g1"}})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g2", "g1"}})
	r, ok := f.Route("orders")
	if !ok || !slices.Equal(r.BrokerGroups, []string{"g1", "g2"}) {
		t.Fatalf("route %v %v, want [g1 g2]", r, ok)
	}
	if counts := f.SubjectCounts(); counts["g1"] != 1 || counts["g2"] != 1 {
		t.Fatalf("counts %v", counts)
	}
	// A node leaving does not drop its group while subjects route to it.
	mustApply(t, f, &Deregister{BrokerGroup: "g2", ID: "a"})
	if _, ok := f.BrokerGroup("g2"); !ok {
		t.Fatal("group g2 forgotten while orders routes to it")
	}
	mustApply(t, f, &Deregister{BrokerGroup: "g2", ID: "a"}) // idempotent
}

func TestRefusedCommandsChangeNothing(t *testing.T) {
	f := New()
	mustApply(t, f, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g1"}})
	// A route at its limit: one more group is refused, and the route is left
	// as it was (not grown and then refused).
	var many []string
	for i := range MaxBrokerGroupsPerSubject {
		g := fmt.Sprintf("m%02d", i)
		mustApply(t, f, &Register{BrokerGroup: g, ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
		many = append(many, g)
	}
	mustApply(t, f, &Assign{Subject: "full", BrokerGroups: many[:MaxBrokerGroupsPerSubject-1]})
	before := stateBytes(t, f)
	for _, cmd := range []Command{
		&Assign{Subject: "full", BrokerGroups: []string{"g1", many[MaxBrokerGroupsPerSubject-1]}},
		&Assign{Subject: "orders", BrokerGroups: []string{"g1", "nope"}},
		&SetWritable{BrokerGroup: "nope"},
		&Consumer{Subject: "unrouted", ConsumerGroup: "c"},
		&Register{BrokerGroup: "g1", ID: "b", RaftAddr: "no-port", ClientAddr: "127.0.0.1:2"},
		&Assign{Subject: "bad/subject", BrokerGroups: []string{"g1"}},
	} {
		if err := apply(t, f, cmd); !errors.Is(err, ErrInvalid) {
			t.Errorf("%T %+v: %v, want ErrInvalid", cmd, cmd, err)
		}
	}
	if after := stateBytes(t, f); !bytes.Equal(before, after) {
		t.Fatalf("refused commands changed the state:\n%s\n%s", before, after)
	}
	// And what the state holds still restores.
	if err := New().Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
}

func TestAssignIfNewKeepsAnExistingRoute(t *testing.T) {
	f := New()
	mustApply(t, f, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	mustApply(t, f, &Register{BrokerGroup: "g2", ID: "a", RaftAddr: "127.0.0.1:3", ClientAddr: "127.0.0.1:4"})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g1"}, IfNew: true})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g2"}, IfNew: true})
	if r, _ := f.Route("orders"); !slices.Equal(r.BrokerGroups, []string{"g1"}) {
		t.Fatalf("route %v, want the first assignment [g1] alone", r.BrokerGroups)
	}
}

func TestConsumersAndWritable(t *testing.T) {
	f := New()
	mustApply(t, f, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g1"}})
	for _, c := range []string{"ship", "bill", "ship"} {
		mustApply(t, f, &Consumer{Subject: "orders", ConsumerGroup: c})
	}
	if r, _ := f.Route("orders"); !slices.Equal(r.Consumers, []string{"bill", "ship"}) {
		t.Fatalf("consumers %v", r.Consumers)
	}
	mustApply(t, f, &SetWritable{BrokerGroup: "g1", Writable: false})
	if g, _ := f.BrokerGroup("g1"); !g.ReadOnly {
		t.Fatal("g1 not readonly")
	}
	mustApply(t, f, &Member{ID: "m1", ClientAddr: "127.0.0.1:9"})
	if f.MemberAddr("m1") != "127.0.0.1:9" {
		t.Fatal("member address not recorded")
	}
}

type sink struct{ bytes.Buffer }

func (*sink) ID() string    { return "test" }
func (*sink) Cancel() error { return nil }
func (*sink) Close() error  { return nil }

func TestSnapshotRestoreRoundTrip(t *testing.T) {
	f := New()
	mustApply(t, f, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2", HTTPAddr: "127.0.0.1:3"})
	mustApply(t, f, &Assign{Subject: "orders", BrokerGroups: []string{"g1"}})
	mustApply(t, f, &Consumer{Subject: "orders", ConsumerGroup: "ship"})
	mustApply(t, f, &Member{ID: "m1", ClientAddr: "127.0.0.1:9"})
	snap, _ := f.Snapshot()
	var s sink
	if err := snap.Persist(&s); err != nil {
		t.Fatal(err)
	}
	g := New()
	if err := g.Restore(io.NopCloser(bytes.NewReader(s.Bytes()))); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
		t.Fatal("restored state differs")
	}
	if g.Applied() != f.Applied() {
		t.Fatalf("restored applied index %d, want %d", g.Applied(), f.Applied())
	}
	// A snapshot without its state (or a bare state) is refused, not taken
	// for an empty one.
	for _, bad := range []string{`{"applied":9}`, `{"groups":{},"subjects":{},"members":{}}`, `{"applied":9,"state":{}}`} {
		if err := g.Restore(io.NopCloser(strings.NewReader(bad))); !errors.Is(err, ErrInvalid) {
			t.Errorf("restore of %s: %v, want ErrInvalid", bad, err)
		}
	}
	// A snapshot that does not check leaves the state alone.
	bad := bytes.Replace(s.Bytes(), []byte(`"g1"`), []byte(`"g/1"`), 1)
	if err := g.Restore(io.NopCloser(bytes.NewReader(bad))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("restore of a bad snapshot: %v", err)
	}
	if !bytes.Equal(snapshotBytes(t, f), snapshotBytes(t, g)) {
		t.Fatal("a refused snapshot changed the state")
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode(&Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}))
	f.Add(Encode(&Assign{Subject: "s", BrokerGroups: []string{"g1"}}))
	f.Add(Encode(&Consumer{Subject: "s", ConsumerGroup: "c"}))
	f.Add(Encode(&ForgetConsumer{Subject: "s", ConsumerGroup: "c"}))
	f.Add(Encode(&Assign{Subject: "t", BrokerGroups: []string{"g1"}, App: "billing"}))
	f.Add(Encode(&Consumer{Subject: "s", ConsumerGroup: "c", App: "billing"}))
	create, _ := createApp(f, "ops", func(a *auth.App) {
		a.Send = []string{"orders.*", "*"}
		a.Consume = []auth.Grant{{Subject: "s", Group: "c*"}}
	})
	f.Add(Encode(create))
	f.Add(Encode(&PutApp{App: auth.App{Code: "billing", Admin: true, MaxSubjects: 1}}))
	f.Add(Encode(&RotateApp{Code: "billing", Secret: create.App.Secrets[0], OldExpires: 99}))
	f.Add(Encode(&DeleteApp{Code: "billing"}))
	f.Add([]byte{8, '{', '}'})
	f.Add([]byte{11, '{', '}'})
	f.Add(Encode(&SetVersion{Version: 2}))
	f.Add(Encode(&SetVersion{Version: 1 << 31}))
	f.Add([]byte{12, '{', '}'})
	f.Fuzz(func(t *testing.T, b []byte) {
		cmd, err := Decode(b)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if _, err := Decode(Encode(cmd)); err != nil {
			t.Fatalf("re-encoded %T does not decode: %v", cmd, err)
		}
		// Applied to a state that has a group, a route and an application: a
		// refused command changes nothing, and whatever the state becomes
		// restores.
		m := New()
		mustApply(t, m, &Register{BrokerGroup: "g1", ID: "a", RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"})
		mustApply(t, m, &Assign{Subject: "s", BrokerGroups: []string{"g1"}})
		mustApply(t, m, &PutApp{App: auth.App{Code: "billing", Secrets: []auth.Secret{rightsOnly}, MaxGroups: 1}, Create: true})
		before := stateBytes(t, m)
		checked := m.Check(cmd)
		err = apply(t, m, cmd)
		if (err == nil) != (checked == nil) {
			t.Fatalf("%T: apply answered %v, check %v", cmd, err, checked)
		}
		if err != nil && !bytes.Equal(before, stateBytes(t, m)) {
			t.Fatalf("refused %T changed the state", cmd)
		}
		if errors.Is(err, ErrNeedsUpgrade) {
			return // the replica stopped: it takes no snapshot
		}
		doc, err := decodeSnapshot(snapshotBytes(t, m))
		if err != nil {
			t.Fatalf("state after %T does not restore: %v", cmd, err)
		}
		if doc.State.table.Version() != m.Apps().Version() {
			t.Fatalf("after %T the table differs from the restored one's", cmd)
		}
	})
}

// FuzzRestore: a snapshot that decodes (and that CheckSnapshot accepts,
// exactly those) restores a state that answers every read and takes
// commands.
func FuzzRestore(f *testing.F) {
	f.Add([]byte(`{"applied":7,"state":{"groups":{"g1":{"nodes":{"a":{"raft_addr":"127.0.0.1:1","client_addr":"127.0.0.1:2"}}}},"subjects":{"s":{"groups":["g1"]}},"members":{}}}`))
	f.Add([]byte(`{"state":{"groups":{},"subjects":{"s":{"groups":["x"]}},"members":{}}}`))
	f.Add([]byte(`{"state":{"groups":{"g":{"nodes":{}}},"subjects":{"s":{"groups":["g"],"consumers":["a","b"],"app":"x","consumer_apps":["x",""]}},"members":{},` +
		`"apps":{"x":{"code":"x","secrets":[{"salt":"00000000000000000000000000000000","hash":"0000000000000000000000000000000000000000000000000000000000000000"}]}}}}`))
	f.Add([]byte(`{"state":{"groups":{"g":{"nodes":{}}},"subjects":{"s":{"groups":["g"],"consumers":["a","b"],"consumer_apps":[]}},"members":{},` +
		`"apps":{"x":{"code":"x","secrets":[{"salt":"00000000000000000000000000000000","hash":"0000000000000000000000000000000000000000000000000000000000000000"}]}}}}`))
	f.Add([]byte(`{"applied":1}`))                            // no state: refused
	f.Add([]byte(`{"groups":{},"subjects":{},"members":{}}`)) // a bare state: refused
	f.Fuzz(func(t *testing.T, b []byte) {
		doc, err := decodeSnapshot(b)
		if cerr := CheckSnapshot(bytes.NewReader(b)); (cerr == nil) != (err == nil) {
			t.Fatalf("CheckSnapshot says %v, the decoder %v", cerr, err)
		}
		if err != nil {
			return
		}
		// A state that checks answers every read without panicking.
		m := &FSM{s: doc.State}
		for _, subject := range m.Subjects() {
			m.Route(subject)
		}
		for _, g := range m.BrokerGroupNames() {
			m.BrokerGroup(g)
		}
		m.SubjectCounts()
		for _, a := range m.Apps().Apps() {
			m.Usage(a.Code)
		}
		// And takes commands: a consumer group of each application and of
		// none on each subject, then one forgotten.
		for _, subject := range m.Subjects() {
			r, _ := m.Route(subject)
			for _, a := range append(m.Apps().Apps(), auth.App{}) {
				apply(t, m, &Consumer{Subject: subject, ConsumerGroup: "fuzz-" + a.Code, App: a.Code})
			}
			for _, c := range r.Consumers {
				apply(t, m, &ForgetConsumer{Subject: subject, ConsumerGroup: c})
				break
			}
		}
		if _, err := decodeSnapshot(snapshotBytes(t, m)); err != nil {
			t.Fatalf("a restored state after commands does not restore: %v", err)
		}
	})
}

// recount returns the state check computes from the snapshot, its
// tallies counted from scratch.
func recount(t *testing.T, f *FSM) *state {
	t.Helper()
	doc, err := decodeSnapshot(snapshotBytes(t, f))
	if err != nil {
		t.Fatalf("the state does not restore: %v", err)
	}
	return doc.State
}

// FuzzCommandSequence applies a sequence of commands over a few names, each
// from three bytes (op, a, b): FSM.Check foretells every refusal, a refused
// command changes nothing, the tallies behind the limits that span
// subjects and the applications' limits stay what counting the state
// gives, and the table is the one its applications build.
func FuzzCommandSequence(f *testing.F) {
	f.Add([]byte{0, 0, 0, 2, 0, 1, 4, 0, 0, 4, 0, 1, 5, 0, 0, 1, 0, 0})
	f.Add([]byte{0, 1, 0, 0, 2, 0, 2, 1, 7, 2, 1, 23, 4, 1, 2, 5, 1, 2, 5, 1, 2, 1, 2, 0, 3, 2, 1})
	f.Add([]byte{6, 0, 1, 6, 1, 1, 6, 0, 0, 3, 0, 0})
	// Applications: created with limits of 1, routes and groups of theirs,
	// updates, rotations, a deletion and a creation again.
	f.Add([]byte{0, 0, 0, 7, 1, 1, 7, 2, 0, 2, 0, 0x21, 2, 1, 0x21, 4, 0, 0x40, 4, 0, 0x41, 5, 0, 0x40, 4, 0, 0x41,
		8, 1, 3, 8, 1, 2, 9, 1, 0, 7, 1, 0, 2, 2, 0x21, 8, 2, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		name := func(prefix string, x byte) string { return fmt.Sprintf("%s%d", prefix, x%4) }
		// app is an application code from a byte's high bits: "" or one
		// of three.
		app := func(x byte) string {
			if x>>5%4 == 0 {
				return ""
			}
			return name("app", x>>5)
		}
		m := New()
		for ; len(b) >= 3; b = b[3:] {
			x, y := b[1], b[2]
			var cmd Command
			switch b[0] % 10 {
			case 0:
				cmd = &Register{BrokerGroup: name("g", x), ID: name("n", y), RaftAddr: "127.0.0.1:1", ClientAddr: "127.0.0.1:2"}
			case 1:
				cmd = &Deregister{BrokerGroup: name("g", x), ID: name("n", y)}
			case 2:
				a := &Assign{Subject: name("s", x), IfNew: y&16 != 0}
				for i := range byte(4) {
					if y&(1<<i) != 0 {
						a.BrokerGroups = append(a.BrokerGroups, name("g", i))
					}
				}
				if len(a.BrokerGroups) == 0 {
					a.BrokerGroups = []string{"g0"}
				}
				a.App = app(y)
				cmd = a
			case 3:
				cmd = &SetWritable{BrokerGroup: name("g", x), Writable: y&1 != 0}
			case 4:
				cmd = &Consumer{Subject: name("s", x), ConsumerGroup: name("c", y), App: app(y)}
			case 5:
				cmd = &ForgetConsumer{Subject: name("s", x), ConsumerGroup: name("c", y)}
			case 6:
				addr := ""
				if y&4 != 0 {
					addr = "127.0.0.1:9"
				}
				cmd = &Member{ID: name("m", x), ClientAddr: addr}
			case 7: // create (y odd) or update, with limits of y%4
				a := auth.App{Code: name("app", x), MaxSubjects: int(y % 4), MaxGroups: int(y % 4)}
				if y&1 != 0 {
					a.Secrets = []auth.Secret{rightsOnly}
				}
				cmd = &PutApp{App: a, Create: y&1 != 0}
			case 8:
				cmd = &RotateApp{Code: name("app", x), Secret: rightsOnly, OldExpires: int64(y % 3)}
			case 9:
				cmd = &DeleteApp{Code: name("app", x)}
			}
			before := stateBytes(t, m)
			beforeSubjects, beforeGroups := maps.Clone(m.s.appSubjects), maps.Clone(m.s.appGroups)
			checked := m.Check(cmd)
			err := apply(t, m, cmd)
			if (err == nil) != (checked == nil) {
				t.Fatalf("%T %+v: apply answered %v, check %v", cmd, cmd, err, checked)
			}
			if err != nil && !bytes.Equal(before, stateBytes(t, m)) {
				t.Fatalf("refused %T %+v changed the state", cmd, cmd)
			}
			r := recount(t, m)
			if r.routed != m.s.routed || r.consumers != m.s.consumers {
				t.Fatalf("after %T %+v: tallies %d route entries, %d consumer groups; the state holds %d, %d",
					cmd, cmd, m.s.routed, m.s.consumers, r.routed, r.consumers)
			}
			if !maps.Equal(r.appSubjects, m.s.appSubjects) || !maps.Equal(r.appGroups, m.s.appGroups) {
				t.Fatalf("after %T %+v: application tallies %v %v; the state holds %v %v",
					cmd, cmd, m.s.appSubjects, m.s.appGroups, r.appSubjects, r.appGroups)
			}
			if r.table.Version() != m.Apps().Version() {
				t.Fatalf("after %T %+v: the table is not the one the applications build", cmd, cmd)
			}
			// A limit may be lowered below what an application created,
			// but nothing it creates takes it past.
			for code, a := range m.s.Apps {
				if m.s.appSubjects[code] > beforeSubjects[code] && m.s.appSubjects[code] > a.SubjectLimit() ||
					m.s.appGroups[code] > beforeGroups[code] && m.s.appGroups[code] > a.GroupLimit() {
					t.Fatalf("after %T %+v: application %s created %d subjects and %d groups, past its limits %d and %d",
						cmd, cmd, code, m.s.appSubjects[code], m.s.appGroups[code], a.SubjectLimit(), a.GroupLimit())
				}
			}
		}
	})
}
