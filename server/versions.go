package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/hashicorp/raft"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// memberRanges asks every other server of the group's configuration,
// voter or not (each applies the group's entries), for the version
// Numbers its build supports, by a status request to its recorded client
// address, all at once within clockReadTimeout. A node that advertises no
// range (one of a release before version gates) supports V1 alone. The
// error names each member that could not be asked: a raise of the group's
// active Number must not go past a member nobody heard from.
func (g *raftGroup) memberRanges(ctx context.Context) (map[string]version.Range, error) {
	out := map[string]version.Range{g.id: g.supports()}
	var mu sync.Mutex
	err := g.askOthers(ctx, false, func(ctx context.Context, id string) error {
		r, err := g.askRange(ctx, id)
		if err == nil {
			mu.Lock()
			out[id] = r
			mu.Unlock()
		}
		return err
	})
	if err != nil {
		return out, fmt.Errorf("server: %w", err)
	}
	return out, nil
}

// askOthers runs ask for every other server of the group's configuration
// (voters only, if votersOnly), all at once within clockReadTimeout, and
// returns every error they gave, joined.
func (g *raftGroup) askOthers(ctx context.Context, votersOnly bool, ask func(ctx context.Context, id string) error) error {
	f := g.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return fmt.Errorf("server: reading the group's configuration: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, clockReadTimeout)
	defer cancel()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range f.Configuration().Servers {
		id := string(s.ID)
		if id == g.id || (votersOnly && s.Suffrage != raft.Voter) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := ask(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// askRange asks member id for its status and returns the range it says its
// build supports.
func (g *raftGroup) askRange(ctx context.Context, id string) (version.Range, error) {
	addr := g.memberAddr(id)
	if addr == "" {
		return version.Range{}, fmt.Errorf("member %s: its client address is not recorded yet", id)
	}
	conn, err := g.dial.Dial(ctx, addr)
	if err != nil {
		return version.Range{}, fmt.Errorf("member %s: %w", id, err)
	}
	defer conn.Close()
	body, err := conn.Call(ctx, transport.TypeStatus, nil)
	if err != nil {
		return version.Range{}, fmt.Errorf("member %s: %w", id, err)
	}
	var st transport.Status
	if err := json.Unmarshal(body, &st); err != nil {
		return version.Range{}, fmt.Errorf("member %s: its status: %w", id, err)
	}
	if st.ID != id || st.Group != g.group {
		return version.Range{}, fmt.Errorf("member %s: %s answers as node %q of group %q", id, addr, st.ID, st.Group)
	}
	if st.Versions == nil {
		return version.Range{}.OrV1(), nil
	}
	return *st.Versions, nil
}

// handleSetVersion, on the group's leader, raises the group's active
// version Number to the one asked for (qmqctl upgrade finalize), once
// every member of the group says its build supports it, and answers with
// the Number before and after. Asking for the active Number, or one
// below it, changes nothing (a Number is never lowered). A member that
// does not answer, or whose build stops short of the Number, refuses the
// raise, naming it. Joins wait meanwhile (gateMu), so that no node of an
// older release is added between the check and the raise.
func (g *raftGroup) handleSetVersion(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.SetVersionRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	if req.Group != g.group {
		return nil, transport.Errorf(transport.Invalid, "node %s is of group %s, not %s", g.id, g.group, req.Group)
	}
	if !g.isLeader() {
		return nil, g.notLeader()
	}
	if g.versions == nil {
		return nil, transport.Errorf(transport.Invalid, "group %s holds no version Number", g.group)
	}
	if !version.Supports(req.Version) {
		return nil, transport.Errorf(transport.Invalid, "version %d: this build supports %s", req.Version, version.Build())
	}
	g.gateMu.Lock()
	defer g.gateMu.Unlock()
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	if err := g.barrier(ctx); err != nil {
		return nil, g.raftError(err)
	}
	prev := g.versions.active()
	answer := func() ([]byte, error) {
		return json.Marshal(transport.SetVersionResponse{Group: g.group, Previous: prev, Active: g.versions.active()})
	}
	if req.Version <= prev {
		return answer()
	}
	if err := g.raiseTo(ctx, req.Version); err != nil {
		return nil, err
	}
	g.log.Info("active version raised", "from", prev, "to", req.Version)
	return answer()
}

// raiseTo proposes the raise of the group's active Number to want once
// every member says its build supports it: UNAVAILABLE if one cannot be
// asked, INVALID naming the first (by id) that stops short. The caller
// holds gateMu.
func (g *raftGroup) raiseTo(ctx context.Context, want version.Number) error {
	ranges, err := g.memberRanges(ctx)
	if err != nil {
		return transport.Errorf(transport.Unavailable, "group %s stays at version %d: %v", g.group, g.versions.active(), err)
	}
	for _, id := range slices.Sorted(maps.Keys(ranges)) {
		if r := ranges[id]; r.Max < want {
			return transport.Errorf(transport.Invalid, "group %s stays at version %d: node %s supports versions %s; upgrade it first",
				g.group, g.versions.active(), id, r)
		}
	}
	_, err = g.propose(ctx, g.versions.command(want))
	return err
}

// groupVersions is how a group's state machine holds its active version
// Number: the Number it records (version.V1 while it records none), and
// the command that raises it.
type groupVersions struct {
	active  func() version.Number
	command func(version.Number) []byte
	// need, if set, is the Number an encoded command needs: applyAsync
	// refuses a proposal past the active Number (gate).
	need func(cmd []byte) version.Number
}

// errPastGate is a proposal past the group's active version Number: a
// proposal site that should have written an earlier format. It never
// reaches the log.
var errPastGate = errors.New("server: proposal past the group's active version")

// gate refuses cmd if it needs a Number past the group's active one: the
// net under the proposal sites, which write only what the active Number
// allows (batcher.go, consumergroups.go). A replica at that Number would
// refuse it, and one of an earlier release stop at it.
func (g *raftGroup) gate(cmd []byte) error {
	v := g.versions
	if v == nil || v.need == nil || len(cmd) < 2 {
		return nil
	}
	if need, active := v.need(cmd), v.active(); need > active {
		return fmt.Errorf("%w: command type %d version %d needs version %d; group %s is at version %d",
			errPastGate, cmd[0], cmd[1], need, g.group, active)
	}
	return nil
}

// refusedFuture is the answer to a proposal gate refused.
type refusedFuture struct{ err error }

func (f refusedFuture) Error() error  { return f.err }
func (f refusedFuture) Index() uint64 { return 0 }
func (f refusedFuture) Response() any { return nil }

// seedVersion, on the first leader of a group this node bootstrapped at
// this start (raftGroup.open ran raft.BootstrapCluster), raises the
// group's active Number to this build's newest, or to the node's initial
// Number if set (Config.InitialVersion): a new group has no member of an
// earlier release to roll back to, unless its operator said so. It checks the members as
// handleSetVersion does (any that joined meanwhile must support it), and
// runs once: a restart, or a failure, leaves the raise to the operator
// (qmqctl upgrade finalize). A broker node refuses sends, as retriable,
// until it ran (sendRefusal), so that a new group's first messages are
// written at its newest Number.
func (g *raftGroup) seedVersion(ctx context.Context) {
	if g.versions == nil || !g.bootstrapped.Load() {
		return
	}
	defer g.bootstrapped.Store(false) // once, raised or not
	want := g.supports().Max
	if g.initial != 0 {
		want = g.initial
	}
	g.gateMu.Lock()
	defer g.gateMu.Unlock()
	ctx, cancel := g.requestContext(ctx)
	defer cancel()
	if g.versions.active() >= want {
		return
	}
	if err := g.raiseTo(ctx, want); err != nil {
		g.log.Warn("a new group stays at its active version: raise it with qmqctl upgrade finalize",
			"active", g.versions.active(), "version", want, "error", err)
		return
	}
	g.log.Info("a new group starts at this build's newest version", "version", want)
}

// supports is the version Numbers this node's build supports, as it
// advertises them: version.Build(), unless the group's state machine
// applies fewer (build).
func (g *raftGroup) supports() version.Range {
	if g.build.Max != 0 {
		return g.build
	}
	return version.Build()
}

// joinerSupportsActive refuses to add a node whose build stops short of
// the group's active Number: it would stop at the first entry it cannot
// apply.
func (g *raftGroup) joinerSupportsActive(st *transport.Status) error {
	if g.versions == nil {
		return nil
	}
	var r version.Range
	if st.Versions != nil {
		r = *st.Versions
	}
	if r = r.OrV1(); r.Max < g.versions.active() {
		return fmt.Errorf("node %s supports versions %s; group %s is at version %d: run a release that supports it",
			st.ID, r, g.group, g.versions.active())
	}
	return nil
}
