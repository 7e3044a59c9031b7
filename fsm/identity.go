package fsm

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/limits"
)

// A group's identity names one Raft history: the broker group's name and a
// random id its first leader chose, "g1/6f0c…" (32 hex digits). Every
// replica holds it in its state (and so in every checkpoint and snapshot),
// and each node keeps a copy in its Raft stable store, so a node can tell
// at start whether its state machine's data, its Raft store and its
// configuration belong together (server/identity.go).
//
// It reaches the state through the Extensions of a Raft entry (a leader's
// SetMember of its own address), not a command of its own: a replica of an
// earlier version ignores Extensions and applies the command as before, so
// a group being upgraded never meets a command some voter cannot apply.
// The first identity an entry carries is kept. Within one history no
// entry carries another (a leader records one only once it has applied
// every entry before its term, and only if its state has none), so one
// that does stops the replica: its data is of another history (a stale
// directory of an earlier life of the group, copied in), and every
// replica holding that identity would stop at the same entry.

// ErrBadIdentity means an identity is not of the form group/32-hex-digits.
var ErrBadIdentity = errors.New("fsm: malformed group identity")

// ErrOtherHistory means an entry carries another group identity than the
// one the state recorded: the replica's data is of another history.
var ErrOtherHistory = errors.New("fsm: entry of another group history")

// identityTag starts an entry's Extensions that carry an identity.
const identityTag = "qmq.identity/1:"

// identityIDLen is the hex digits of an identity's random part.
const identityIDLen = 32

// maxIdentity bounds an identity's length.
const maxIdentity = limits.MaxName + 1 + identityIDLen

// NewIdentity returns a new identity for group: its name and 128 random
// bits. Leaders call it, never apply.
func NewIdentity(group string) (string, error) {
	var b [identityIDLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("fsm: new group identity: %w", err)
	}
	id := group + "/" + hex.EncodeToString(b[:])
	return id, CheckIdentity(id)
}

// CheckIdentity checks that id is a group's name, a slash and 32 lowercase
// hex digits.
func CheckIdentity(id string) error {
	group, random, ok := strings.Cut(id, "/")
	if !ok || limits.CheckName("broker group", group) != nil || len(random) != identityIDLen ||
		strings.Trim(random, "0123456789abcdef") != "" {
		return fmt.Errorf("%w: %q", ErrBadIdentity, id)
	}
	return nil
}

// IdentityBrokerGroup returns the group name of a well-formed identity.
func IdentityBrokerGroup(id string) string {
	group, _, _ := strings.Cut(id, "/")
	return group
}

// IdentityExtension returns the Extensions of a Raft entry that records
// identity id in the state of a group that has none.
func IdentityExtension(id string) []byte { return []byte(identityTag + id) }

// decodeIdentityExtension returns the identity an entry's Extensions carry,
// if they carry a well-formed one.
func decodeIdentityExtension(ext []byte) (string, bool) {
	if len(ext) > len(identityTag)+maxIdentity {
		return "", false
	}
	id, ok := strings.CutPrefix(string(ext), identityTag)
	if !ok || CheckIdentity(id) != nil {
		return "", false
	}
	return id, true
}

// applyIdentity records the identity entry e's Extensions carry, if the
// state has none: the first one kept wins on every replica alike. One
// that differs from the state's is ErrOtherHistory, and the entry must
// not be applied. Before the entry's command.
func (f *FSM) applyIdentity(e *raft.Log) error {
	id, ok := decodeIdentityExtension(e.Extensions)
	switch {
	case !ok || id == f.st.identity:
		return nil
	case f.st.identity != "":
		return fmt.Errorf("%w: entry %d carries group identity %s, this replica's state %s: its data is of another history; "+
			"rebuild the node (leave, remove its data directory, join)", ErrOtherHistory, e.Index, id, f.st.identity)
	}
	f.st.identity = id
	f.learned = id
	return nil
}

// Identity returns the group identity the state holds, or "" (a group that
// has not recorded one yet, or a state machine that has not applied it).
// Any goroutine.
func (f *FSM) Identity() string {
	f.stateMu.RLock()
	defer f.stateMu.RUnlock()
	return f.st.identity
}
