package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// The broker group's configuration (fsm.BrokerConfig) is replicated state:
// every node applies by the group's, whatever its own Config.FSM says. A
// node's own values only seed a group that has none: its leader proposes
// them, once every voter can apply the command. Operators change it with
// qmqctl config set (TypeSetBrokerConfig), which the leader checks before
// proposing and apply checks again.

// seedRetry is how often a leader whose group has no configuration tries
// again to propose its own, while a voter cannot take it (an earlier
// release, or one that does not answer).
const seedRetry = 5 * time.Second

// errEarlierVoter means a voter answered a broker-config request as a node
// of a release without the broker group configuration.
var errEarlierVoter = errors.New("server: a voter of an earlier release cannot apply the broker group configuration")

// errSeedWaits means a group's configuration cannot be seeded yet: some
// voter cannot apply the command (an earlier release, or one that does
// not answer). The group applies by each node's own values meanwhile, as
// a group upgraded in place did before.
var errSeedWaits = errors.New("server: the broker group's configuration waits for every voter")

// seedBrokerConfig proposes this node's own values as the configuration of
// a group that has none (a new group, or one upgraded from a release
// without it), once every voter can apply the command. It returns nil
// once the group has a configuration (or never will from this node),
// errSeedWaits while a voter cannot take it, or why the proposal failed.
// A new leader calls it before it anchors its clock, so that the group's
// sends, pulls and acks apply by it: until then each replica applies by
// its own node's values (fsm.ConfigNode), which only a group upgraded in
// place may go on doing (see startLeading).
func (n *Node) seedBrokerConfig(ctx context.Context, logged *bool) error {
	if n.fsm.BrokerConfig().Source == fsm.ConfigGroup {
		return nil
	}
	// An earlier leader may have configured the group in entries this
	// node has not applied yet.
	if err := n.barrier(ctx); err != nil {
		return err
	}
	if n.fsm.BrokerConfig().Source == fsm.ConfigGroup {
		return nil
	}
	seed := n.cfg.FSM.BrokerConfig()
	if err := seed.Check(); err != nil { // Validate refuses such a node
		n.log.Error("this node's settings cannot seed its broker group's configuration", "error", err)
		return nil
	}
	if err := n.votersKnowBrokerConfig(ctx); err != nil {
		if !*logged {
			n.log.Warn("the broker group has no configuration yet; proposing this node's once every voter can apply it",
				"error", err, "retry", seedRetry)
			*logged = true
		}
		return fmt.Errorf("%w: %w", errSeedWaits, err)
	}
	ctx, cancel := n.requestContext(ctx)
	defer cancel()
	// Not stamped: the leader's clock is not anchored yet, and the
	// configuration does not depend on time.
	cmd := &fsm.SetBrokerConfig{Set: fsm.SetAllConfig, Seed: true, Config: seed}
	resp, err := n.propose(ctx, cmd.Encode())
	if err != nil {
		n.log.Warn("proposing this node's settings as the broker group's configuration", "error", err)
		return err
	}
	if r, ok := resp.(*fsm.BrokerConfigResult); ok && r.Changed {
		n.log.Info("proposed this node's settings as the broker group's configuration", brokerConfigKeys(seed)...)
	}
	return nil
}

// seedFirst seeds the group's configuration before the leader serves: it
// tries seedBrokerConfig again, every second, while the proposal fails
// for another reason than a voter that cannot take it, and returns what
// the last try returned (errSeedWaits then: the leader serves by its own
// values meanwhile, as a group upgraded in place did before), or ctx's
// error once the term ends. A new group's only voter (its first leader)
// so seeds before anything that depends on the configuration, which its
// members, and a node joining later and replaying its log from entry 1,
// apply by their own values until the seed.
func (n *Node) seedFirst(ctx context.Context, logged *bool) error {
	for {
		err := n.seedBrokerConfig(ctx, logged)
		if err == nil || errors.Is(err, errSeedWaits) {
			return err
		}
		if !wait.Sleep(ctx, time.Second) {
			return ctx.Err()
		}
	}
}

// keepSeeding tries seedBrokerConfig again every seedRetry until the group
// has a configuration or the term ends.
func (n *Node) keepSeeding(ctx context.Context, logged *bool) {
	for wait.Sleep(ctx, seedRetry) {
		if n.seedBrokerConfig(ctx, logged) == nil {
			return
		}
	}
}

// votersKnowBrokerConfig asks every other voter whether it knows the broker
// group configuration (a broker-config request, which a node of an earlier
// release answers UNKNOWN_TYPE): the command that sets it would stop such
// a node. It returns the first voter that does not, or cannot be asked.
func (n *Node) votersKnowBrokerConfig(ctx context.Context) error {
	return n.askOthers(ctx, true, n.askBrokerConfig)
}

// askBrokerConfig asks voter id for its broker group configuration.
func (n *Node) askBrokerConfig(ctx context.Context, id string) error {
	addr := n.fsm.MemberAddr(id)
	if addr == "" {
		return fmt.Errorf("voter %s: its client address is not recorded yet", id)
	}
	conn, err := n.dial.Dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("voter %s: %w", id, err)
	}
	defer conn.Close()
	_, err = conn.Call(ctx, transport.TypeBrokerConfig, nil)
	if transport.CodeOf(err) == transport.UnknownType {
		return fmt.Errorf("voter %s: %w", id, errEarlierVoter)
	}
	if err != nil {
		return fmt.Errorf("voter %s: %w", id, err)
	}
	return nil
}

// joinerKnowsBrokerConfig refuses to add a node of a release without the
// broker group configuration (its status says nothing of it) to a group
// that has one: it would stop at the command that set it, or at a
// snapshot's checkpoint holding it.
func (n *Node) joinerKnowsBrokerConfig(st *transport.Status) error {
	if st.BrokerConfig == nil && n.fsm.BrokerConfig().Source == fsm.ConfigGroup {
		return fmt.Errorf("node %s is of an earlier release, which cannot apply this group's configuration: upgrade it first", st.ID)
	}
	return nil
}

// handleBrokerConfig answers with the configuration this node's replica
// holds, leader or not.
func (n *Node) handleBrokerConfig(p []byte) ([]byte, error) {
	if len(p) != 0 {
		return nil, transport.Errorf(transport.Invalid, "a broker-config request has no payload (got %d bytes)", len(p))
	}
	return json.Marshal(n.brokerConfigInfo())
}

func (n *Node) brokerConfigInfo() transport.BrokerConfigInfo {
	return transport.BrokerConfigInfo{BrokerGroup: n.cfg.BrokerGroup, Node: n.cfg.ID, AppliedIndex: n.fsm.Applied(),
		Config: brokerConfigOut(n.fsm.BrokerConfig())}
}

// handleSetBrokerConfig changes the broker group's configuration: the
// leader checks the change against its replica's configuration and the
// bounds, and that every voter can apply it, before proposing; apply
// checks it again.
func (n *Node) handleSetBrokerConfig(ctx context.Context, p []byte) ([]byte, error) {
	var req transport.SetBrokerConfigRequest
	if err := transport.DecodeJSON(p, &req); err != nil {
		return nil, err
	}
	cmd, err := setBrokerConfigCommand(req)
	if err != nil {
		return nil, transport.Errorf(transport.Invalid, "broker group configuration: %v", err)
	}
	if !n.isLeader() {
		return nil, n.notLeader()
	}
	if err := n.votersKnowBrokerConfig(ctx); err != nil {
		return nil, transport.Errorf(transport.Invalid, "the broker group configuration cannot change until every voter can apply it: %v", err)
	}
	// A group without a configuration gets this node's first: a change
	// naming some settings only would take the others from each replica's
	// own values, and apply refuses it.
	logged := true
	if err := n.seedBrokerConfig(ctx, &logged); err != nil {
		return nil, transport.Errorf(transport.Unavailable, "the broker group has no configuration yet, and this leader could not seed it first: %v", err)
	}
	cur := n.fsm.BrokerConfig()
	if cur.Source != fsm.ConfigGroup && cmd.Set != fsm.SetAllConfig {
		return nil, transport.Errorf(transport.Invalid, "the broker group has no configuration yet: its first names every setting")
	}
	if err := cmd.With(cur.BrokerConfig).Check(); err != nil {
		return nil, transport.Errorf(transport.Invalid, "%v", err)
	}
	resp, err := n.proposeAsLeader(ctx, func(now int64) []byte { cmd.Now = now; return cmd.Encode() })
	if err != nil {
		return nil, err
	}
	r := resp.(*fsm.BrokerConfigResult)
	n.log.Info("broker group configuration set", append([]any{"index", r.Config.Index}, brokerConfigKeys(r.Config.BrokerConfig)...)...)
	return json.Marshal(n.brokerConfigInfo())
}

// setBrokerConfigCommand turns a request into the command that makes its
// changes.
func setBrokerConfigCommand(req transport.SetBrokerConfigRequest) (*fsm.SetBrokerConfig, error) {
	cmd := &fsm.SetBrokerConfig{}
	c := &cmd.Config
	for _, d := range []struct {
		v    *time.Duration
		name string
		bit  fsm.ConfigBits
		to   *int64
	}{{req.RetentionAge, "retention-age", fsm.SetRetentionAge, &c.RetentionAge}, {req.DedupWindow, "dedup-window", fsm.SetDedupWindow, &c.DedupWindow}} {
		if d.v == nil {
			continue
		}
		if *d.v%time.Millisecond != 0 || *d.v < 0 {
			return nil, fmt.Errorf("%s %s: not a whole, positive number of milliseconds", d.name, *d.v)
		}
		cmd.Set, *d.to = cmd.Set|d.bit, d.v.Milliseconds()
	}
	for _, v := range []struct {
		v   *int64
		bit fsm.ConfigBits
		to  *int64
	}{{req.RetentionBytes, fsm.SetRetentionBytes, &c.RetentionBytes}, {req.SegmentSize, fsm.SetSegmentSize, &c.SegmentSize},
		{req.IndexSegmentSize, fsm.SetIndexSegmentSize, &c.IndexSegmentSize}} {
		if v.v != nil {
			cmd.Set, *v.to = cmd.Set|v.bit, *v.v
		}
	}
	if req.MaxPull != nil {
		cmd.Set, c.MaxPull = cmd.Set|fsm.SetMaxPull, *req.MaxPull
	}
	if req.MaxUnacked != nil {
		cmd.Set, c.MaxUnacked = cmd.Set|fsm.SetMaxUnacked, *req.MaxUnacked
	}
	if cmd.Set == 0 {
		return nil, errors.New("no setting to change")
	}
	return cmd, nil
}

// brokerConfigOut is a replica's configuration as the wire carries it.
func brokerConfigOut(c fsm.BrokerConfigInfo) transport.BrokerConfig {
	return transport.BrokerConfig{RetentionAge: millis(c.RetentionAge), RetentionBytes: c.RetentionBytes, DedupWindow: millis(c.DedupWindow),
		MaxPull: c.MaxPull, MaxUnacked: c.MaxUnacked, SegmentSize: c.SegmentSize, IndexSegmentSize: c.IndexSegmentSize,
		Source: c.Source.String(), Index: c.Index}
}

// brokerConfigKeys are log key-value pairs of c's settings.
func brokerConfigKeys(c fsm.BrokerConfig) []any {
	return []any{"retention-age", millis(c.RetentionAge), "retention-bytes", c.RetentionBytes, "dedup-window", millis(c.DedupWindow),
		"max-pull", c.MaxPull, "max-unacked", c.MaxUnacked, "segment-size", c.SegmentSize, "index-segment-size", c.IndexSegmentSize}
}
