package server

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/lograte"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// forgottenGroups tells the metaserver of the consumer groups this broker
// group's state machine forgot by itself (an idle broadcast group, a group
// gone with its last consumer before its subject had a message, a pull
// refused after recordNewGroup recorded its group), so that the records
// recordNewGroup made for them stop counting against their application's
// limit of consumer groups (meta.ForgetConsumer with Broker). The leader
// reports each once, in the background, retrying for a while; a report
// lost with the leader leaves the record, which `qmqctl subject forget-group`
// removes.
//
// A report must never take the record of a group that exists here again:
// a report is not sent while a pull that recorded the group is on its way
// to creating it (creating), nor while the group exists, and such a pull
// waits for a report being sent (sending) before it records the group, so
// the metaserver applies the report before the record.
type forgottenGroups struct {
	queue   chan transport.ForgetConsumerGroupRequest
	dropped *lograte.Limiter
	log     hclog.Logger
	exists  func(subject, group string) bool
	hold    <-chan struct{} // nil, or reports wait until it is closed
	stale   atomic.Int64    // reports dropped because their group is back

	mu      sync.Mutex
	settled *sync.Cond
	pulls   map[forgottenKey]int  // pulls between recording the group and applying
	sending map[forgottenKey]bool // a report being sent
}

type forgottenKey struct{ subject, group string }

// forgottenQueue bounds the reports waiting: past it a report is dropped
// (logged, at most once a second), its record staying.
const forgottenQueue = 4096

// forgottenTries bounds how often one report is sent, backing off from
// 100 ms to 5 s between tries (about half a minute in all).
const forgottenTries = 10

// newForgottenGroups returns the reporter; exists says whether a group
// exists here.
func newForgottenGroups(log hclog.Logger, exists func(subject, group string) bool) *forgottenGroups {
	f := &forgottenGroups{queue: make(chan transport.ForgetConsumerGroupRequest, forgottenQueue),
		dropped: lograte.New(time.Second), log: log, exists: exists,
		pulls: map[forgottenKey]int{}, sending: map[forgottenKey]bool{}}
	f.settled = sync.NewCond(&f.mu)
	return f
}

// report queues the report that group of subject was forgotten here; it
// never blocks. A nil *forgottenGroups (no metaserver, no authentication)
// reports nothing.
func (f *forgottenGroups) report(subject, group string) {
	if f == nil {
		return
	}
	select {
	case f.queue <- transport.ForgetConsumerGroupRequest{Subject: subject, ConsumerGroup: group}:
	default:
		if ok, held := f.dropped.Allow(); ok {
			f.log.Warn("too many forgotten consumer groups to tell the metaserver of; their records stay counted",
				"subject", subject, "consumer_group", group, "suppressed", held)
		}
	}
}

// creating says a pull is about to record k and create it here: it waits
// for a report of k being sent, and holds back further ones until created.
func (f *forgottenGroups) creating(k forgottenKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.sending[k] {
		f.settled.Wait()
	}
	f.pulls[k]++
}

// created says that pull has applied (or failed).
func (f *forgottenGroups) created(k forgottenKey) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pulls[k]--; f.pulls[k] <= 0 {
		delete(f.pulls, k)
	}
}

// claim marks k's report as being sent, unless the group exists here or a
// pull is creating it: then the report is stale and is dropped.
func (f *forgottenGroups) claim(k forgottenKey) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pulls[k] > 0 || f.exists(k.subject, k.group) {
		return false
	}
	f.sending[k] = true
	return true
}

func (f *forgottenGroups) release(k forgottenKey) {
	f.mu.Lock()
	delete(f.sending, k)
	f.settled.Broadcast()
	f.mu.Unlock()
}

// run sends the reports until ctx ends, each as broker group's.
func (f *forgottenGroups) run(ctx context.Context, broker string, send func(context.Context, []byte) error) {
	if f.hold != nil {
		select {
		case <-f.hold:
		case <-ctx.Done():
			return
		}
	}
	for {
		var req transport.ForgetConsumerGroupRequest
		select {
		case req = <-f.queue:
		case <-ctx.Done():
			return
		}
		req.Broker = broker
		k := forgottenKey{req.Subject, req.ConsumerGroup}
		body, _ := json.Marshal(req)
		backoff := 100 * time.Millisecond
		for try := 1; ; try++ {
			if !f.claim(k) {
				f.stale.Add(1) // the group is back: its record is right as it is
				break
			}
			err := send(ctx, body)
			f.release(k)
			if err == nil || ctx.Err() != nil {
				break
			}
			if try == forgottenTries {
				f.log.Warn("telling the metaserver of a forgotten consumer group; its record stays counted",
					"subject", req.Subject, "consumer_group", req.ConsumerGroup, "error", err)
				break
			}
			if !wait.Sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}
