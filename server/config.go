package server

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/segment"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/fsm/meta"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server/raftlog"
)

// Config configures a broker-group node. Start from DefaultConfig.
type Config struct {
	// NodeConfig is the node's id, data directory, addresses and bootstrap
	// flag. Its DataDir also holds the state machine's logs.
	NodeConfig
	// BrokerGroup names the broker group.
	BrokerGroup string
	// Meta lists metaserver client addresses (any subset of the group). The
	// node registers there on start and reports every MetaHeartbeat; it
	// forwards clients' route requests there. Empty: a standalone group
	// that answers route requests with itself.
	Meta []string
	// MetaHeartbeat is how often the node reports to the metaserver.
	// Default 2 s.
	MetaHeartbeat time.Duration

	// SessionTimeout is how long a consumer may go without a pull, ack or
	// heartbeat before the leader reclaims its unacked messages. Default 30 s.
	SessionTimeout time.Duration
	// ApplyTimeout bounds one Raft proposal. Default 10 s.
	ApplyTimeout time.Duration
	// MaxBatchMessages and MaxBatchBytes cap one group-commit batch: the
	// leader packs concurrent sends into one Raft entry up to these.
	// Defaults 4096 messages and 4 MiB; MaxBatchBytes at most
	// MaxMaxBatchBytes.
	MaxBatchMessages int
	MaxBatchBytes    int
	// MaxInflightBatches is how many batches may await commit at once while
	// the next one is being gathered. Default 16.
	MaxInflightBatches int
	// MaxPullWait caps a pull's long-poll wait. Default 30 s.
	MaxPullWait time.Duration
	// MaxDelay is how far ahead a delayed message may be due; a send beyond
	// it is refused, not clamped. Default DefaultMaxDelay (two years).
	MaxDelay time.Duration
	// RaftLog is the store a new data directory keeps its Raft log and
	// stable state in: raftlog.WAL (raft-wal, in raft-wal/) or raftlog.Bolt
	// (raft-boltdb, in raft.db). A data directory that already holds one
	// keeps it, whatever this says: one from an earlier version, with
	// raft.db, stays on raft-boltdb. Default raftlog.WAL.
	RaftLog raftlog.Kind
	// RaftLogCache is the bytes of the most recent Raft entries kept in
	// memory, from which the leader feeds followers that keep up without
	// reading entries back from the log store. An entry larger than it is
	// not kept. 0 keeps none. Default raftlog.DefaultCache (16 MiB).
	RaftLogCache int64
	// MinFreeDisk is the free space under which the leader refuses sends
	// (DISK_FULL) while it goes on serving consumers. It should be well
	// above FSM.DiskReserve, where a replica stops applying. Default 512 MiB.
	MinFreeDisk int64
	// InitialVersion is the active version Number of a group this node
	// bootstraps: its first leader raises the new group to it
	// (seedVersion). version.V1 records none, as a group formed by the
	// release before version gates, so that nodes of that release may
	// join it and run it until qmqctl upgrade finalize raises it. A
	// group that has data keeps its own. Default 0: this build's newest
	// (version.Max).
	InitialVersion version.Number

	// Raft timing. Defaults: heartbeat and election 1 s, lease 500 ms,
	// snapshot every 30 s or 2,048 entries, keeping 1,024 entries. Entries
	// are group-commit batches (up to MaxBatchBytes each) and snapshots
	// copy nothing, so both counts are kept small: they bound the Raft log
	// on disk and the replay after a restart.
	RaftTiming

	// FSM configures the state machine; its Dir is set from DataDir. Its
	// settings of the broker group configuration (Retention, DedupWindow,
	// MaxPull, MaxUnacked, SegmentSize, IndexSegmentSize) are this node's
	// own values: they seed a group that has no configuration (its leader
	// proposes them) and apply to a state from a release without it until
	// then; a group that has one goes by it, whatever they say (a node
	// whose values differ warns once). Validate refuses values outside the
	// bounds of internal/limits, a retention MaxBytes below one message-log
	// segment (FSM.SegmentSize) and a MaxAge below the dedup window
	// (FSM.DedupWindow). Default retention: MaxAge DefaultRetentionAge, no
	// MaxBytes.
	FSM fsm.Config
	// Now is the leader's clock, stamped into commands. Default time.Now.
	Now func() time.Time
	// Logger is the root logger. Default: hclog at info level on stderr.
	Logger hclog.Logger

	// holdForgetReports, when set, holds back the reports of consumer
	// groups forgotten here until it is closed (tests: a slow metaserver).
	holdForgetReports chan struct{}
	// afterRefusalLook, when set, runs once a refusing leader has looked
	// for a send's messages, before it answers (tests: a leader deposed
	// meanwhile).
	afterRefusalLook func()
}

// MaxMaxBatchBytes is the largest MaxBatchBytes allowed: 32 MiB. A batch
// goes past MaxBatchBytes by at most one send request (one frame), and the
// Raft entry it makes must stay under the largest entry raft-wal reads
// back (segment.MaxEntrySize, 64 MiB): it writes a larger one, then calls
// it corrupt.
const MaxMaxBatchBytes = 32 << 20

// The largest batch with its last request and the Append command's framing
// (a few bytes a message) fits a raft-wal entry: the build fails if it
// does not (a negative constant does not convert to uint).
const _ = uint(segment.MaxEntrySize - MaxMaxBatchBytes - limits.MaxFrame - 16*limits.MaxBatchMessages - 4096)

// DefaultMaxDelay is two years (731 days): the furthest ahead a delayed
// message may be due unless the broker is configured otherwise.
const DefaultMaxDelay = limits.DefaultMaxDelay

// MaxMaxDelay is the largest MaxDelay allowed: twenty years.
const MaxMaxDelay = 20 * 366 * 24 * time.Hour

// DefaultRetentionAge is how long a broker keeps messages unless
// configured otherwise: a week, so that a consumer group broken over a long
// weekend or a holiday can be repaired before anything it has not read
// goes. There is no size bound by default: a byte figure cannot know the
// disk it lands on, and MinFreeDisk already keeps the disk from filling by
// refusing sends, which loses nothing, where a size bound would delete
// messages consumers may not have read.
const DefaultRetentionAge = 7 * 24 * time.Hour

// ErrRetention is wrapped by Validate's errors about FSM.Retention.
var ErrRetention = errors.New("server: config: retention")

// DefaultConfig returns a configuration with every default set.
func DefaultConfig() Config {
	return Config{
		SessionTimeout:     30 * time.Second,
		ApplyTimeout:       10 * time.Second,
		MaxBatchMessages:   4096,
		MaxBatchBytes:      4 << 20,
		MaxInflightBatches: 16,
		MaxPullWait:        30 * time.Second,
		MaxDelay:           DefaultMaxDelay,
		MinFreeDisk:        512 << 20,
		RaftLog:            raftlog.WAL,
		RaftLogCache:       raftlog.DefaultCache,
		MetaHeartbeat:      2 * time.Second,
		RaftTiming: RaftTiming{
			HeartbeatTimeout:  1000 * time.Millisecond,
			ElectionTimeout:   1000 * time.Millisecond,
			LeaderLease:       500 * time.Millisecond,
			SnapshotInterval:  30 * time.Second,
			SnapshotThreshold: 2048,
			TrailingLogs:      1024,
		},
		FSM:    defaultFSMConfig(),
		Now:    time.Now,
		Logger: hclog.New(&hclog.LoggerOptions{Name: "qmqd", Level: hclog.Info}),
	}
}

// defaultFSMConfig is the state machine's defaults with the broker's
// retention.
func defaultFSMConfig() fsm.Config {
	c := fsm.DefaultConfig("")
	c.Retention = logs.Retention{MaxAge: DefaultRetentionAge.Milliseconds()}
	return c
}

// Validate reports the first setting that cannot work.
func (c *Config) Validate() error {
	if err := c.NodeConfig.check("config"); err != nil {
		return err
	}
	if c.Auth && len(c.Meta) == 0 {
		return fmt.Errorf("%w: a broker with --auth needs its metaserver (--meta), which holds the applications", ErrAuthConfig)
	}
	if err := meta.CheckBrokerGroup(c.BrokerGroup); err != nil {
		return fmt.Errorf("server: config: %w", err)
	}
	for _, addr := range c.Meta {
		if _, _, err := net.SplitHostPort(addr); err != nil {
			return fmt.Errorf("server: config: metaserver address %q: %w", addr, err)
		}
	}
	switch {
	case c.SessionTimeout <= 0 || c.ApplyTimeout <= 0 || c.MaxPullWait <= 0 || c.MetaHeartbeat <= 0:
		return errors.New("server: config: timeouts must be positive")
	case c.MaxDelay <= 0 || c.MaxDelay > MaxMaxDelay:
		return fmt.Errorf("server: config: MaxDelay %s outside (0, %s]", c.MaxDelay, MaxMaxDelay)
	case c.MaxBatchMessages <= 0 || c.MaxBatchMessages > limits.MaxBatchMessages:
		return fmt.Errorf("server: config: MaxBatchMessages %d outside 1..%d", c.MaxBatchMessages, limits.MaxBatchMessages)
	case c.MinFreeDisk < 0:
		return fmt.Errorf("server: config: MinFreeDisk %d is negative", c.MinFreeDisk)
	case c.InitialVersion != 0 && !version.Supports(c.InitialVersion):
		return fmt.Errorf("server: config: InitialVersion %d: this build supports %s", c.InitialVersion, version.Build())
	case c.RaftLogCache < 0:
		return fmt.Errorf("server: config: RaftLogCache %d is negative", c.RaftLogCache)
	case c.MaxBatchBytes <= 0 || c.MaxInflightBatches <= 0:
		return errors.New("server: config: batch limits must be positive")
	case c.MaxBatchBytes > MaxMaxBatchBytes:
		return fmt.Errorf("server: config: MaxBatchBytes %d over %d: a Raft entry must fit the log store", c.MaxBatchBytes, MaxMaxBatchBytes)
	case c.Now == nil || c.Logger == nil:
		return errors.New("server: config: Now and Logger must be set")
	}
	if _, err := raftlog.Parse(string(c.RaftLog)); err != nil {
		return fmt.Errorf("server: config: %w", err)
	}
	if err := c.checkRetention(); err != nil {
		return err
	}
	if err := c.FSM.BrokerConfig().Check(); err != nil {
		return fmt.Errorf("server: config: this node's broker group configuration: %w", err)
	}
	return nil
}

// checkRetention reports a retention that cannot work as meant: negative;
// a size below one message-log segment, which would remove every sealed
// segment as soon as it is sealed; or an age below the dedup window, which
// would remove messages whose ids are still remembered, so that a send
// retried within the window would be stored a second time.
func (c *Config) checkRetention() error {
	r, segment, dedup := c.FSM.Retention, c.FSM.SegmentSize, c.FSM.DedupWindow.Milliseconds()
	switch {
	case r.MaxAge < 0:
		return fmt.Errorf("%w: age %d ms is negative", ErrRetention, r.MaxAge)
	case r.MaxAge > 0 && r.MaxAge < dedup:
		return fmt.Errorf("%w: age %d ms is below the dedup window (%d ms)", ErrRetention, r.MaxAge, dedup)
	case r.MaxBytes < 0:
		return fmt.Errorf("%w: size %d bytes is negative", ErrRetention, r.MaxBytes)
	case r.MaxBytes > 0 && r.MaxBytes < segment:
		return fmt.Errorf("%w: size %d bytes is below one message-log segment (%d bytes)", ErrRetention, r.MaxBytes, segment)
	}
	return nil
}

// NodeConfig is what every node is configured with, broker or metaserver.
type NodeConfig struct {
	// ID names the node in its Raft group; unique within the group.
	ID string
	// DataDir holds the node's Raft log and snapshots.
	DataDir string
	// ClientAddr is where clients (and, for a metaserver, brokers) connect
	// (HOST:PORT); port 0 picks one.
	ClientAddr string
	// AdvertiseAddr is the client address handed out, when it differs from
	// the listening address. Default: the address listened on.
	AdvertiseAddr string
	// RaftAddr is where the node listens for its group's Raft traffic
	// (HOST:PORT). A node listening on a specific IP also dials its peers
	// from that IP.
	RaftAddr string
	// RaftAdvertiseAddr is the Raft address the group records for this
	// node, when peers reach it elsewhere (through a proxy). Default:
	// RaftAddr.
	RaftAdvertiseAddr string
	// HTTPAddr serves /status and /metrics (HOST:PORT); empty disables it.
	HTTPAddr string
	// SourceIP, if set, is the local IP the node's connections to other
	// nodes' client ports come from (the metaserver's, its peers' when it
	// reads their clocks or joins them), so that a firewall or a proxy can
	// tell which node calls. Default: the system's choice.
	SourceIP string
	// Bootstrap makes this node a one-voter group if it has no Raft state
	// yet. Other nodes are added with qmqctl join.
	Bootstrap bool
	// ClientLimits bound what clients can make the client listener hold.
	ClientLimits ClientLimits
	// Backups bound the snapshots the node holds open for backups.
	Backups BackupLimits
	// TLS, when its files are given, makes the client, Raft and HTTP
	// ports TLS-only and the node's dials to other nodes TLS. Default:
	// none, plaintext.
	TLS TLSConfig
	// Insecure lets a node without TLS files start with an address (client,
	// Raft or HTTP, or an advertised one) that is not on loopback; it then
	// warns at start and its status says insecure. Without it, such a node
	// is refused (ErrInsecure). Loopback is an IP for which IsLoopback
	// holds, or "localhost". Default false.
	Insecure bool
	// Auth makes the node check applications: every client request must
	// come from an application that proved its secret (a Hello), or over
	// a connection with a node certificate, and may do only what the
	// application's rights allow (see docs/security.md). It needs TLS with
	// client certificates requested or required, by which nodes know each
	// other; a broker also needs its metaserver, which holds the
	// applications. Default false: every request is served.
	Auth bool
	// OpenHTTP serves /status and /metrics to anyone who reaches
	// HTTPAddr, without asking for a client certificate. By default the
	// HTTP port asks what the client port asks (TLSConfig.ClientAuth),
	// and with Auth on requires a client certificate of the CA. The HTTP
	// port never serves an admin operation.
	OpenHTTP bool
}

// ClientLimits bound the client listener; a zero field takes its default.
type ClientLimits struct {
	// Memory is the bytes of requests and replies in flight, over every
	// connection. Default 256 MiB (transport.DefaultMaxInFlightBytes).
	Memory int64
	// ConnsPerAddr bounds the connections from one IP address. Default 256.
	ConnsPerAddr int
	// Conns bounds the connections in all. Default 8192.
	Conns int
	// RequestsPerConn bounds the requests handled at once on one
	// connection; beyond, the connection is not read until one finishes
	// (the client is slowed, not failed). Default 1024.
	RequestsPerConn int
}

// check reports the first setting that cannot work; what names the
// configuration in the error.
func (c *NodeConfig) check(what string) error {
	if err := fsm.CheckName("node id", c.ID); err != nil {
		return fmt.Errorf("server: %s: %w", what, err)
	}
	if c.DataDir == "" {
		return fmt.Errorf("server: %s: data directory is empty", what)
	}
	if l := c.ClientLimits; l.Memory < 0 || l.ConnsPerAddr < 0 || l.Conns < 0 || l.RequestsPerConn < 0 {
		return fmt.Errorf("server: %s: negative client limits %+v", what, l)
	}
	if l := c.Backups; l.Max < 0 || l.Idle < 0 || l.Rate < 0 {
		return fmt.Errorf("server: %s: negative backup limits %+v", what, l)
	}
	addrs := []struct{ name, addr string }{{"client", c.ClientAddr}, {"raft", c.RaftAddr}, {"http", c.HTTPAddr}, {"raft advertise", c.RaftAdvertiseAddr}}
	for _, a := range addrs {
		if a.addr == "" && (a.name == "http" || a.name == "raft advertise") {
			continue
		}
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			return fmt.Errorf("server: %s: %s address %q: %w", what, a.name, a.addr, err)
		}
	}
	if c.SourceIP != "" && net.ParseIP(c.SourceIP) == nil {
		return fmt.Errorf("server: %s: source IP %q is not an IP address", what, c.SourceIP)
	}
	if err := c.TLS.check(); err != nil {
		return err
	}
	if err := c.checkAuth(); err != nil {
		return err
	}
	return c.checkExposure()
}
