package fsm

import (
	"errors"
	"fmt"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/version"
)

// SetVersion raises the broker group's active version Number (see
// internal/version and DESIGN.md, "The active version"): from the entry
// that applies it on, the group's leaders may propose, and its replicas
// write, what that Number allows. A Number at or below the active one
// changes nothing (a Number is never lowered, and the command may be
// proposed again); one past what this build applies stops the replica.
// Payload, version 1:
//
//	version uvarint   (at least 1)
type SetVersion struct {
	Now     int64
	Version version.Number
}

// VersionResult answers a SetVersion: the group's active Number before it
// and after it.
type VersionResult struct {
	Previous, Active version.Number
}

// ErrNeedsUpgrade means the group's entries need a version Number this
// build does not apply: a SetVersion past it, or a command it does not know
// (proposed by a leader of a newer release). The replica stops applying for
// good (Config.OnFatal); the error names the Numbers and what to run.
var ErrNeedsUpgrade = errors.New("fsm: this build cannot apply the group's entries")

// ErrNewerData means the state machine's data was written by a newer
// release: a checkpoint of a format, or a group at an active Number, past
// what this build reads. Open refuses it (the node does not start), and
// so does a restore; the error names the versions.
var ErrNewerData = errors.New("fsm: data of a newer release")

// needOf is the version Number a command of type t in payload version v
// needs: what a replica of that Number, and of no earlier one, applies.
// SetVersion is its own case: it raises the Number, and what it needs is
// the Number it sets (applySetVersion). A new command type, or a new
// version of one, adds its line here: its leader writes it only once the
// group is at that Number (server: the proposal sites strip or downgrade,
// and raftGroup.applyAsync refuses what still needs more), and a replica
// refuses it below that Number (applyCommand).
func needOf(t CommandType, v byte) version.Number {
	switch {
	case t == CmdAppend && v >= commandVersionAppendAddr:
		return version.V2
	case t == CmdDeadLetters && v >= commandVersionDeadBy:
		return version.V2
	}
	return version.V1
}

// CommandNeeds returns the version Number the encoded command cmd needs
// (needOf of its type and version bytes); V1 for bytes too short to say.
// A leader checks every proposal against its group's active Number with it.
func CommandNeeds(cmd []byte) version.Number {
	if len(cmd) < 2 {
		return version.V1
	}
	return needOf(CommandType(cmd[0]), cmd[1])
}

// activeVersion is the group's active Number: the one the state records,
// V1 while it records none (a group formed before version gates).
func (s *state) activeVersion() version.Number { return max(s.version, version.V1) }

// ActiveVersion returns the broker group's active version Number as of the
// last entry applied: V1 while the state records none. Any goroutine.
func (f *FSM) ActiveVersion() version.Number {
	return max(version.Number(f.version.Load()), version.V1)
}

// maxVersion is the newest Number this replica applies: this build's,
// or Config.MaxVersion.
func (f *FSM) maxVersion() version.Number {
	if f.cfg.MaxVersion != 0 {
		return f.cfg.MaxVersion
	}
	return version.Max
}

// Supports returns the version Numbers this replica applies: this
// build's, up to Config.MaxVersion if set. A node advertises it.
func (f *FSM) Supports() version.Range { return f.buildRange() }

// buildRange is what this replica applies.
func (f *FSM) buildRange() version.Range {
	return version.Range{Min: version.Min, Max: f.maxVersion()}
}

// groupName is the broker group's name for messages.
func (f *FSM) groupName() string {
	if f.cfg.Group != "" {
		return "broker group " + f.cfg.Group
	}
	return "the broker group"
}

// writesTimeline reports whether the group's active Number has the
// timeline (V2): below it, apply records no timeline, so that the data
// and snapshots hold only what a replica of the release before gates
// reads.
func (f *FSM) writesTimeline() bool { return f.st.activeVersion() >= version.V2 }

// recordsBytes reports whether checkpoints record the bytes stored per
// subject (V2, checkpoint version 7 on); below it they are counted again
// at every open from the consume logs.
func (f *FSM) recordsBytes() bool { return f.st.activeVersion() >= version.V2 }

// gate checks a decoded command of entry e against the group's active
// Number and this build's. An entry needing a Number past what this
// replica applies stops it (what a replica of an older release does at a
// command it does not know, which this one plays under
// Config.MaxVersion). An entry needing more than the group's recorded
// Number is refused (ErrInvalid), alike on every replica, since the
// Number is replicated state: a leader must never propose it, and this
// is the net. With no Number recorded (a log from before version gates)
// nothing is refused, so that such logs replay as they applied.
func (f *FSM) gate(e *raft.Log, cmd any) error {
	t, v := CommandType(e.Data[0]), e.Data[1]
	need := needOf(t, v)
	if sv, ok := cmd.(*SetVersion); ok {
		need = sv.Version
		if need > f.maxVersion() {
			panic(storageFailure{fmt.Errorf("%w: entry %d: %s's active version is %d; this build (qmq %s) applies versions %s: run a release that supports version %d",
				ErrNeedsUpgrade, e.Index, f.groupName(), need, version.String(), f.buildRange(), need)})
		}
		return nil
	}
	if need > f.maxVersion() {
		panic(storageFailure{fmt.Errorf("%w: entry %d: %s version %d needs version %d; this build (qmq %s) applies versions %s: run a release that supports version %d",
			ErrNeedsUpgrade, e.Index, t, v, need, version.String(), f.buildRange(), need)})
	}
	if f.st.version != 0 && need > f.st.version {
		return fmt.Errorf("%w: entry %d: %s version %d needs version %d; %s is at version %d",
			ErrInvalid, e.Index, t, v, need, f.groupName(), f.st.version)
	}
	return nil
}

// unknownCommand stops the replica at entry e, which holds a command this
// build does not know (err from Decode): a leader of a newer release
// proposed it.
func (f *FSM) unknownCommand(e *raft.Log, err error) {
	panic(storageFailure{fmt.Errorf("%w: entry %d: %w: a leader of a newer release proposed it; this build (qmq %s) applies versions %s, %s is at version %d: run the release of the group's leader",
		ErrNeedsUpgrade, e.Index, err, version.String(), f.buildRange(), f.groupName(), f.st.activeVersion())})
}

// applySetVersion raises the active Number to c.Version if it is higher
// (gate stopped the replica if this build does not apply it).
func (f *FSM) applySetVersion(c *SetVersion) any {
	f.st.stamp(c.Now)
	prev := f.st.activeVersion()
	if c.Version > prev {
		f.st.version = c.Version
		f.version.Store(uint32(c.Version))
		f.log.Info("active version raised", "from", prev, "to", c.Version)
	}
	return &VersionResult{Previous: prev, Active: f.st.activeVersion()}
}

// checkVersion refuses a state (at Open, or in a snapshot to restore)
// whose active Number this replica does not apply.
func (f *FSM) checkVersion(st *state) error { return f.CheckVersion(st.version) }

// CheckVersion returns ErrNewerData, naming the versions, if this replica
// does not apply a group at active Number n. Open checks its checkpoint's
// Number with it; a node checks too the SetVersion entries its Raft log
// holds past the checkpoint, so as to refuse to start rather than stop at
// the first of them.
func (f *FSM) CheckVersion(n version.Number) error {
	if n > f.maxVersion() {
		return fmt.Errorf("%w: %s's active version is %d; this build (qmq %s) applies versions %s: run a release that supports version %d",
			ErrNewerData, f.groupName(), n, version.String(), f.buildRange(), n)
	}
	return nil
}
