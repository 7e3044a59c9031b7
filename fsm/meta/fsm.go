package meta

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/auth"
)

// maxSnapshot bounds a snapshot read by Restore: four times the largest
// state the limits allow (limits.go). It was 256 MiB before applications.
const maxSnapshot = 512 << 20

// FSM is the metaserver's raft.FSM. Its read methods are safe to call from
// any goroutine and return copies.
type FSM struct {
	cfg     Config
	mu      sync.RWMutex
	s       *state
	applied uint64
	// broken is why the replica stopped applying (fatal), or nil.
	broken error
}

// New returns an empty state machine of this build.
func New() *FSM { return NewWith(Config{}) }

// NewWith returns an empty state machine configured by cfg.
func NewWith(cfg Config) *FSM { return &FSM{cfg: cfg, s: newState()} }

// Apply applies one committed entry. A refused command changes nothing and
// returns an error wrapping ErrInvalid; otherwise the result is nil. An
// entry this build cannot apply stops the replica (ErrNeedsUpgrade): it
// and every later entry change nothing.
func (f *FSM) Apply(l *raft.Log) any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.broken != nil {
		return f.broken
	}
	if l.Type != raft.LogCommand {
		f.applied = l.Index
		return nil
	}
	cmd, err := Decode(l.Data)
	if err := f.gate(l.Index, cmd, err); err != nil {
		return err
	}
	f.applied = l.Index
	if err != nil {
		return err
	}
	return f.s.apply(cmd)
}

// Check reports whether Apply would take cmd now: whether it is well
// formed (Check) and admitted by the state as it is, limits included. The
// server calls it before proposing, so that a command bound to be refused
// costs no Raft entry; Apply decides again on the state it meets then.
func (f *FSM) Check(cmd Command) error {
	if err := cmd.check(); err != nil {
		return err
	}
	if c, ok := cmd.(*SetVersion); ok {
		if err := f.CheckVersion(c.Version); err != nil {
			return err
		}
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.admit(cmd)
}

// Applied returns the index of the last entry applied.
func (f *FSM) Applied() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// snapshotDoc is a snapshot's JSON: the state and the index it reflects.
type snapshotDoc struct {
	Applied uint64 `json:"applied"`
	State   *state `json:"state"`
}

// Snapshot captures the state as JSON.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.broken != nil {
		return nil, fmt.Errorf("meta: snapshot of a replica that stopped applying: %w", f.broken)
	}
	b, err := json.Marshal(snapshotDoc{Applied: f.applied, State: f.s})
	if err != nil {
		return nil, fmt.Errorf("meta: snapshot: %w", err)
	}
	return snapshot(b), nil
}

// CheckSnapshot reads a snapshot's stream from r and checks it as Restore
// would, changing nothing: qmqd restore runs it on a backup before a node
// starts on it.
func CheckSnapshot(r io.Reader) error {
	b, err := io.ReadAll(io.LimitReader(r, maxSnapshot+1))
	if err != nil {
		return fmt.Errorf("meta: read snapshot: %w", err)
	}
	_, err = decodeSnapshot(b)
	return err
}

// Restore replaces the state with a snapshot's. A snapshot that does not
// decode or check leaves the state as it was.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, maxSnapshot+1))
	if err != nil {
		return fmt.Errorf("meta: read snapshot: %w", err)
	}
	doc, err := decodeSnapshot(b)
	if err != nil {
		return err
	}
	if err := f.CheckVersion(doc.State.Version); err != nil {
		return err
	}
	f.mu.Lock()
	f.s, f.applied = doc.State, doc.Applied
	f.mu.Unlock()
	return nil
}

func decodeSnapshot(b []byte) (*snapshotDoc, error) {
	if len(b) > maxSnapshot {
		return nil, fmt.Errorf("%w: snapshot over %d bytes", ErrInvalid, maxSnapshot)
	}
	doc := &snapshotDoc{}
	if err := json.Unmarshal(b, doc); err != nil {
		return nil, fmt.Errorf("%w: snapshot: %v", ErrInvalid, err)
	}
	if doc.State == nil {
		return nil, fmt.Errorf("%w: snapshot has no state", ErrInvalid)
	}
	if err := doc.State.check(); err != nil {
		return nil, err
	}
	return doc, nil
}

type snapshot []byte

func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		sink.Cancel()
		return err
	}
	return sink.Close()
}

func (snapshot) Release() {}

// BrokerGroupNames returns the registered broker groups, sorted.
func (f *FSM) BrokerGroupNames() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.s.BrokerGroups))
}

// BrokerGroup returns a copy of a registered group.
func (f *FSM) BrokerGroup(name string) (BrokerGroup, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	g := f.s.BrokerGroups[name]
	if g == nil {
		return BrokerGroup{}, false
	}
	return BrokerGroup{ReadOnly: g.ReadOnly, Nodes: maps.Clone(g.Nodes)}, true
}

// Route returns a copy of a subject's route.
func (f *FSM) Route(subject string) (Route, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	r := f.s.Subjects[subject]
	if r == nil {
		return Route{}, false
	}
	return Route{BrokerGroups: slices.Clone(r.BrokerGroups), Consumers: slices.Clone(r.Consumers), App: r.App,
		ConsumerApps: slices.Clone(r.ConsumerApps), ConsumerHolders: slices.Clone(r.ConsumerHolders)}, true
}

// Subjects returns every routed subject, sorted.
func (f *FSM) Subjects() []string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return slices.Sorted(maps.Keys(f.s.Subjects))
}

// SubjectCounts returns how many subjects are routed to each group.
func (f *FSM) SubjectCounts() map[string]int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	out := make(map[string]int, len(f.s.BrokerGroups))
	for _, r := range f.s.Subjects {
		for _, g := range r.BrokerGroups {
			out[g]++
		}
	}
	return out
}

// MemberAddr returns a metaserver node's client address, or "".
func (f *FSM) MemberAddr(id string) string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.Members[id]
}

// Apps returns the applications as a table: immutable, so the caller may
// keep it. It is rebuilt after each change and on Restore, and never nil.
func (f *FSM) Apps() *auth.Table {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.s.table == nil { // a state no check or apply has seen: only in tests
		t, _ := appTable(nil)
		return t
	}
	return f.s.table
}

// AppUsage is what an application created: the routes and the consumer
// groups recorded as its, which its limits bound.
type AppUsage struct {
	Subjects int
	Groups   int
}

// Usage returns what the application code created and still counts as
// its (see DeleteApp).
func (f *FSM) Usage(code string) AppUsage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return AppUsage{Subjects: f.s.appSubjects[code], Groups: f.s.appGroups[code]}
}
