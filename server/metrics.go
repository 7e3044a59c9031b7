package server

import (
	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
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
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	m.registry.MustRegister(m.requests, m.messagesIn, m.messagesOut, m.batchSize, m.leaderChanges,
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
	return m
}
