package meta

import (
	"errors"
	"fmt"

	"github.com/qmqgo/qmq/internal/version"
)

// SetVersion raises the metaserver group's active version Number (see
// internal/version): from the entry that applies it on, the group's
// leaders may propose what that Number allows. A Number at or below the
// active one changes nothing (a Number is never lowered, so the command
// may be proposed again); one past what this build applies stops the
// replica (ErrNeedsUpgrade).
type SetVersion struct {
	Version version.Number `json:"version"`
}

// ErrNeedsUpgrade means the group's entries need a version Number this
// build does not apply: a SetVersion past it, or a command it does not
// know (proposed by a leader of a newer release). The replica stops
// applying for good (Config.OnFatal) before the entry changes anything;
// the error names the Numbers and what to run.
var ErrNeedsUpgrade = errors.New("meta: this build cannot apply the metaserver group's entries")

// ErrNewerData means a snapshot, or an entry a node's log holds, records
// an active Number past what this build applies: Restore refuses it and
// the node does not start. The error names the versions.
var ErrNewerData = errors.New("meta: data of a newer release")

// Config changes what a state machine applies.
type Config struct {
	// MaxVersion, if set, is the newest version Number the replica
	// applies, instead of this build's (version.Max): a stand-in for a
	// node of an earlier release, in tests.
	MaxVersion version.Number
	// OnFatal is called, once, when the replica stops applying
	// (ErrNeedsUpgrade); the node should stop. Apply holds the state's
	// lock while it runs: it must not call back into the FSM.
	OnFatal func(error)
}

// maxVersion is the newest Number this replica applies.
func (f *FSM) maxVersion() version.Number {
	if f.cfg.MaxVersion != 0 {
		return f.cfg.MaxVersion
	}
	return version.Max
}

// Supports returns the version Numbers this replica applies: this
// build's, up to Config.MaxVersion if set. A node advertises it.
func (f *FSM) Supports() version.Range { return version.Range{Min: version.Min, Max: f.maxVersion()} }

// ActiveVersion returns the group's active version Number as of the last
// entry applied: V1 while the state records none (a group formed, or a
// snapshot taken, before version gates). Any goroutine.
func (f *FSM) ActiveVersion() version.Number {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.s.activeVersion()
}

func (s *state) activeVersion() version.Number { return max(s.Version, version.V1) }

// CheckVersion returns ErrNewerData, naming the versions, if this replica
// does not apply a group at active Number n.
func (f *FSM) CheckVersion(n version.Number) error {
	if n > f.maxVersion() {
		return fmt.Errorf("%w: the metaserver group's active version is %d; this build (qmq %s) applies versions %s: run a release that supports version %d",
			ErrNewerData, n, version.String(), f.Supports(), n)
	}
	return nil
}

// CheckEntry refuses, before a node starts, a command entry of its Raft
// log that would stop its replica: a SetVersion past this build, or a
// command this build does not know. Anything else (a command the state
// would refuse) passes: Apply refuses it alike on every replica.
func (f *FSM) CheckEntry(data []byte) error {
	cmd, err := Decode(data)
	switch {
	case errors.Is(err, errUnknownOp):
		return fmt.Errorf("%w: %w: this build (qmq %s) applies versions %s: run the release of the group's leader",
			ErrNewerData, err, version.String(), f.Supports())
	case err != nil:
		return nil
	}
	if c, ok := cmd.(*SetVersion); ok {
		return f.CheckVersion(c.Version)
	}
	return nil
}

// fatal stops the replica at entry index, holding f.mu: every later
// Apply changes nothing, Snapshot refuses (so that no snapshot claims an
// entry the state lacks), and OnFatal tells the node. A restart replays
// from the last snapshot.
func (f *FSM) fatal(index uint64, err error) error {
	err = fmt.Errorf("%w: entry %d: %w", ErrNeedsUpgrade, index, err)
	if f.broken == nil {
		f.broken = err
		if f.cfg.OnFatal != nil {
			f.cfg.OnFatal(err)
		}
	}
	return f.broken
}

// gate stops the replica at an entry this build cannot apply: err from
// Decode saying it does not know the command, or a SetVersion past this
// build. It returns nil for an entry to apply or refuse as usual.
func (f *FSM) gate(index uint64, cmd Command, err error) error {
	if errors.Is(err, errUnknownOp) {
		return f.fatal(index, fmt.Errorf("%w: a leader of a newer release proposed it; this build (qmq %s) applies versions %s, the group is at version %d: run the release of the group's leader",
			err, version.String(), f.Supports(), f.s.activeVersion()))
	}
	if c, ok := cmd.(*SetVersion); ok && c.Version > f.maxVersion() {
		return f.fatal(index, fmt.Errorf("the metaserver group's active version is %d; this build (qmq %s) applies versions %s: run a release that supports version %d",
			c.Version, version.String(), f.Supports(), c.Version))
	}
	return nil
}
