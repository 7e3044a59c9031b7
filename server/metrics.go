package server

import (
	"cmp"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/transport"
)

// metrics are the node's Prometheus metrics, on a registry of its own so
// that several nodes can live in one process (tests).
type metrics struct {
	registry      *prometheus.Registry
	requests      *prometheus.CounterVec
	messagesIn    prometheus.Counter
	messagesOut   prometheus.Counter
	batchSize     prometheus.Histogram
	leaderChanges prometheus.Counter
	delaysFired   prometheus.Counter
	delayLateness prometheus.Histogram
	sendsRefused  *prometheus.CounterVec
	nacked        prometheus.Counter
	expired       prometheus.Counter
	// requestSeconds and requestErrors: every client request, by type
	// (and its error's code): a byte of types and a few dozen codes.
	requestSeconds *prometheus.HistogramVec
	requestErrors  *prometheus.CounterVec
	// commitSeconds: a command this node proposed, from its proposal to
	// the state machine's beginning to apply it here, by command type.
	commitSeconds *prometheus.HistogramVec
	// applySeconds: each command entry's apply, on every node, by command
	// type; applyByCmd caches its series by type byte, filled on the apply
	// goroutine (the only one that observes it), so that an entry's
	// observation takes no lock of the vector's.
	applySeconds *prometheus.HistogramVec
	applyByCmd   [256]prometheus.Observer
}

func newMetrics(n *Node) *metrics {
	m := &metrics{
		registry: prometheus.NewRegistry(),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_requests_total", Help: "Client requests received, by type.",
		}, []string{"type"}),
		messagesIn: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_messages_sent_total", Help: "Messages acknowledged to producers (appended or duplicate).",
		}),
		messagesOut: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_messages_pulled_total", Help: "Messages handed to consumers.",
		}),
		batchSize: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "qmq_append_batch_messages", Help: "Messages per group-commit Append entry.",
			Buckets: prometheus.ExponentialBuckets(1, 4, 8),
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_leadership_changes_total", Help: "Times this node gained or lost leadership.",
		}),
		delaysFired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_delayed_fired_total", Help: "Delayed messages this node, as leader, moved to their subjects.",
		}),
		sendsRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_sends_refused_total", Help: "Send requests the leader refused before proposing them, by reason (disk_full).",
		}, []string{"reason"}),
		nacked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_messages_nacked_total", Help: "Messages consumers reported failed (nacked), retried or dead-lettered.",
		}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "qmq_messages_ack_timeouts_total", Help: "Messages this node, as leader, handed back to their group when their ack wait passed.",
		}),
		requestSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qmq_request_seconds",
			Help:    "Time to answer a client request, by type (a pull's includes its wait for messages).",
			Buckets: latencyBuckets,
		}, []string{"type"}),
		requestErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qmq_request_errors_total", Help: "Client requests answered with an error, by type and code (NOT_LEADER, INVALID, ...).",
		}, []string{"type", "code"}),
		commitSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "qmq_commit_seconds",
			Help: "Time from this node (as leader) proposing a command to its state machine beginning to apply it: " +
				"the wait in Raft's queue, the leader's write and fsync, replication to a quorum and its fsyncs, " +
				"and any wait for the apply loop (entries before it), by command (append, pull, ack, ...). " +
				"The apply itself is qmq_apply_seconds.",
			Buckets: latencyBuckets,
		}, []string{"command"}),
		applySeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "qmq_apply_seconds",
			Help: "Time this node's state machine took to apply one committed entry, on every node (followers too), by command (append, pull, ack, ...); " +
				"the entries of a batch are timed each, the batch's one flush of the logs to readers in none.",
			Buckets: latencyBuckets,
		}, []string{"command"}),
		delayLateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "qmq_delayed_lateness_seconds",
			Help:    "Time from a delayed message's delivery time to the commit of the Fire that delivered it.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 14),
		}),
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.registry.MustRegister(m.requestSeconds, m.requestErrors, m.commitSeconds, m.applySeconds, subjectCollector{n})
	m.registry.MustRegister(m.requests, m.messagesIn, m.messagesOut, m.batchSize, m.leaderChanges, m.delaysFired, m.delayLateness, m.sendsRefused, m.nacked, m.expired, groupCollector{n},
		gauge("qmq_disk_free_bytes", "Free space on the data disk, as the send path last saw it.", func() float64 { _, free := n.disk.full(); return float64(free) }),
		gauge("qmq_apply_waiting_for_disk", "1 while the state machine waits for disk space before applying.", func() float64 {
			if n.applyWaiting.Load() {
				return 1
			}
			return 0
		}),
		gauge("qmq_delayed_pending", "Delayed messages stored and not yet due.", func() float64 { return float64(n.fsm.Delays().Pending) }),
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		gauge("qmq_raft_applied_index", "Last Raft index applied to the state machine.", func() float64 { return float64(n.fsm.Applied()) }),
		gauge("qmq_raft_last_index", "Last index in the Raft log.", func() float64 { return float64(n.raft.LastIndex()) }),
		gauge("qmq_raft_leader", "1 if this node is its group's leader.", func() float64 {
			if n.raft.State() == raft.Leader {
				return 1
			}
			return 0
		}),
	)
	m.registry.MustRegister(gauge("qmq_clock_offset_seconds",
		"At this node's last election as leader: its wall clock minus the safe estimate of its group's clocks (positive: ahead).",
		func() float64 { return n.clock.offset().Seconds() }))
	return m
}

// applied observes one entry's apply (fsm.Config.OnApplied), on the apply
// goroutine: its time in qmq_apply_seconds, and when it began for the
// entry's proposer, if this node proposed it (applyTimes).
func (n *Node) applied(index uint64, cmd fsm.CommandType, began time.Time, took time.Duration) {
	n.applyBegan.record(index, began)
	m := n.metrics
	o := m.applyByCmd[cmd]
	if o == nil {
		o = m.applySeconds.WithLabelValues(cmd.String())
		m.applyByCmd[cmd] = o
	}
	o.Observe(took.Seconds())
}

// clientListenerMetrics export what the client listener holds and what
// its limits refused.
func clientListenerMetrics(s *transport.Server) []prometheus.Collector {
	stat := func(f func(transport.ServerStats) float64) func() float64 {
		return func() float64 { return f(s.Stats()) }
	}
	gauge := func(name, help string, f func(transport.ServerStats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, stat(f))
	}
	refused := func(limit string, f func(transport.ServerStats) float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_client_connections_refused_total",
			Help:        "Client connections refused by a connection limit (per-address or total).",
			ConstLabels: prometheus.Labels{"limit": limit}}, stat(f))
	}
	return []prometheus.Collector{
		gauge("qmq_client_connections", "Client connections open.",
			func(st transport.ServerStats) float64 { return float64(st.Conns) }),
		gauge("qmq_client_inflight_bytes", "Memory budget taken by client requests being read or handled and by their replies.",
			func(st transport.ServerStats) float64 { return float64(st.InFlightBytes) }),
		gauge("qmq_client_memory_waiters", "Client connection readers and handlers waiting for the memory budget.",
			func(st transport.ServerStats) float64 { return float64(st.WaitingForMemory) }),
		refused("per-address", func(st transport.ServerStats) float64 { return float64(st.RefusedPerAddr) }),
		refused("total", func(st transport.ServerStats) float64 { return float64(st.RefusedTotal) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_client_frame_timeouts_total",
			Help: "Client connections closed because a frame took longer than the frame timeout to arrive."},
			stat(func(st transport.ServerStats) float64 { return float64(st.FramesTimedOut) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_client_requests_per_conn_waits_total",
			Help: "Times a client connection's reader waited because the connection had its limit of requests in flight (--max-requests-per-conn)."},
			stat(func(st transport.ServerStats) float64 { return float64(st.InFlightFull) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_client_unidentified_closed_total",
			Help: "Client connections closed because, with --auth, they neither presented a node certificate nor said a Hello that held within 10 s."},
			stat(func(st transport.ServerStats) float64 { return float64(st.Unidentified) })),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "qmq_client_tls_handshakes_failed_total",
			Help: "Client connections closed because their TLS handshake failed or timed out (a certificate refused, a client without TLS)."},
			stat(func(st transport.ServerStats) float64 { return float64(st.HandshakesFailed) })),
	}
}

// groupCollector exports every consumer group's figures from this node's
// replica (QMQ's sequence lag among them), labelled by subject and group.
type groupCollector struct{ n *Node }

var groupDescs = struct{ lag, backlog, retrying, unacked, dead, lost, consumers *prometheus.Desc }{
	lag: prometheus.NewDesc("qmq_consumer_group_lag", "Messages the group has not finished: not yet handed out, due again, retrying or unacked.",
		[]string{"subject", "consumer_group"}, nil),
	backlog: prometheus.NewDesc("qmq_consumer_group_backlog", "Messages the group's cursor has not reached.",
		[]string{"subject", "consumer_group"}, nil),
	retrying: prometheus.NewDesc("qmq_consumer_group_retrying", "Messages waiting for their retry time.",
		[]string{"subject", "consumer_group"}, nil),
	unacked: prometheus.NewDesc("qmq_consumer_group_unacked", "Messages handed to consumers and not finished.",
		[]string{"subject", "consumer_group"}, nil),
	dead: prometheus.NewDesc("qmq_consumer_group_dead_letters", "Dead letters kept.",
		[]string{"subject", "consumer_group"}, nil),
	lost: prometheus.NewDesc("qmq_consumer_group_lost_total", "Messages retention removed before the group finished them.",
		[]string{"subject", "consumer_group"}, nil),
	consumers: prometheus.NewDesc("qmq_consumer_group_consumers", "Consumers registered (online).",
		[]string{"subject", "consumer_group"}, nil),
}

func (c groupCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{groupDescs.lag, groupDescs.backlog, groupDescs.retrying, groupDescs.unacked,
		groupDescs.dead, groupDescs.lost, groupDescs.consumers} {
		ch <- d
	}
}

func (c groupCollector) Collect(ch chan<- prometheus.Metric) {
	for _, g := range c.n.fsm.ConsumerGroups() {
		gauge := func(d *prometheus.Desc, v float64) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, g.Subject, g.ConsumerGroup)
		}
		gauge(groupDescs.lag, float64(g.Lag()))
		gauge(groupDescs.backlog, float64(g.Backlog))
		gauge(groupDescs.retrying, float64(g.Retrying))
		gauge(groupDescs.unacked, float64(g.Unacked))
		gauge(groupDescs.dead, float64(g.DeadLetters))
		ch <- prometheus.MustNewConstMetric(groupDescs.lost, prometheus.CounterValue, float64(g.Lost), g.Subject, g.ConsumerGroup)
		gauge(groupDescs.consumers, float64(g.Consumers))
	}
}

// subjectCollector exports the messages and bytes this replica stores, in
// all and for the maxSubjectSeries subjects that store most messages (a
// series each, so that 10,000 subjects do not make 10,000 series; the rest
// are summed under subject=""). Both metrics name the same subjects: the
// top ones by messages.
type subjectCollector struct{ n *Node }

var maxSubjectSeries = 100 // tests lower it

var (
	descSubjectStored = prometheus.NewDesc("qmq_subject_stored_messages",
		"Messages stored of each of the 100 subjects that store most on this replica, and of the others summed (subject=\"\").", []string{"subject"}, nil)
	descSubjectBytes = prometheus.NewDesc("qmq_subject_stored_bytes",
		"Bytes stored (message-log records: encoded message and record header) of each of the 100 subjects that store most messages on this replica "+
			"(the subjects of qmq_subject_stored_messages), and of the others summed (subject=\"\").", []string{"subject"}, nil)
	descSubjects = prometheus.NewDesc("qmq_subjects", "Subjects this replica stores messages of.", nil, nil)
)

func (c subjectCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- descSubjectStored
	ch <- descSubjectBytes
	ch <- descSubjects
}

func (c subjectCollector) Collect(ch chan<- prometheus.Metric) {
	all := c.n.fsm.StoredBySubject()
	ch <- prometheus.MustNewConstMetric(descSubjects, prometheus.GaugeValue, float64(len(all)))
	slices.SortStableFunc(all, func(a, b fsm.SubjectStored) int { return cmp.Compare(b.Messages, a.Messages) })
	var rest fsm.SubjectStored
	for i, s := range all {
		if i >= maxSubjectSeries {
			rest.Messages += s.Messages
			rest.Bytes += s.Bytes
			continue
		}
		ch <- prometheus.MustNewConstMetric(descSubjectStored, prometheus.GaugeValue, float64(s.Messages), s.Subject)
		ch <- prometheus.MustNewConstMetric(descSubjectBytes, prometheus.GaugeValue, float64(s.Bytes), s.Subject)
	}
	if len(all) > maxSubjectSeries {
		ch <- prometheus.MustNewConstMetric(descSubjectStored, prometheus.GaugeValue, float64(rest.Messages), "")
		ch <- prometheus.MustNewConstMetric(descSubjectBytes, prometheus.GaugeValue, float64(rest.Bytes), "")
	}
}

// latencyBuckets: 0.25 ms to about 8 s, doubling: a commit at loopback
// RTT takes under a millisecond, one across hosts with fsync some, a long
// poll its wait.
var latencyBuckets = prometheus.ExponentialBuckets(0.00025, 2, 16)
