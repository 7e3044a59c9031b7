package version

import "fmt"

// Number is a version of what a group replicates and what nodes and
// clients say to each other: the commands a leader may propose, the
// formats a replica may write (checkpoints, snapshots, the logs' records),
// and the requests a client may send. Each group (every broker group and
// the metaserver group) holds an active Number in its replicated state: a
// leader proposes only what that Number allows, and it is raised, by an
// operator once every member supports the next one, never lowered. A
// build supports the Numbers from Min to Max: it applies a group whose
// active Number is among them, and refuses to start on one past Max.
type Number uint32

const (
	// V1 is what the release before version gates (commit eb696dd)
	// proposes and writes: commands 1 to 14 (Append up to version 2,
	// Pull up to 4, DeadLetters 1), checkpoints up to version 5, no
	// timeline; the wire's request types 1 to 36. A group whose state
	// records no Number (one formed before gates) is at V1, and so is a
	// node or a server that advertises none.
	V1 Number = 1
	// V2 adds Append version 3 (each sender's client address),
	// DeadLetters version 2 (who resent or purged), the timeline of
	// every message, the bytes stored per subject, the checkpoints that
	// record them (versions 6 and 7), and the command that sets a
	// group's active Number.
	V2 Number = 2

	// Min is the oldest active Number this build applies.
	Min = V1
	// Max is the newest: a group formed by this build starts at it.
	Max = V2
)

// Supports reports whether this build applies a group at n.
func Supports(n Number) bool { return n >= Min && n <= Max }

// Range is the Numbers a node supports, as it advertises them.
type Range struct {
	Min Number `json:"min"`
	Max Number `json:"max"`
}

// Build is this build's Range.
func Build() Range { return Range{Min: Min, Max: Max} }

// OrV1 is r, or V1..V1 for the zero Range: what a node that advertises no
// range (one of a release before gates) supports.
func (r Range) OrV1() Range {
	if r.Max == 0 {
		return Range{Min: V1, Max: V1}
	}
	return r
}

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.Min, r.Max) }
