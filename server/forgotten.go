package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/qmqgo/qmq/internal/lograte"
	"github.com/qmqgo/qmq/internal/wait"
	"github.com/qmqgo/qmq/transport"
)

// forgottenGroups tells the metaserver of the consumer groups this broker
// group's state machine forgot by itself (an idle broadcast group, a group
// gone with its last consumer before its subject had a message), so that
// the records recordNewGroup made for them stop counting against their
// application's limit of consumer groups (meta.ForgetConsumer with
// Broker). The leader reports each once, in the background, retrying for
// a while; a report lost with the leader leaves the record, which
// `qmqctl group forget` removes.
type forgottenGroups struct {
	queue   chan transport.ForgetGroupRequest
	dropped *lograte.Limiter
	log     hclog.Logger
}

// forgottenQueue bounds the reports waiting: past it a report is dropped
// (logged, at most once a second), its record staying.
const forgottenQueue = 4096

// forgottenTries bounds how often one report is sent, backing off from
// 100 ms to 5 s between tries (about half a minute in all).
const forgottenTries = 10

func newForgottenGroups(log hclog.Logger) *forgottenGroups {
	return &forgottenGroups{queue: make(chan transport.ForgetGroupRequest, forgottenQueue),
		dropped: lograte.New(time.Second), log: log}
}

// report queues the report that group of subject was forgotten here; it
// never blocks. A nil *forgottenGroups (no metaserver) reports nothing.
func (f *forgottenGroups) report(subject, group string) {
	if f == nil {
		return
	}
	select {
	case f.queue <- transport.ForgetGroupRequest{Subject: subject, Group: group}:
	default:
		if ok, held := f.dropped.Allow(); ok {
			f.log.Warn("too many forgotten consumer groups to tell the metaserver of; their records stay counted",
				"subject", subject, "consumer-group", group, "suppressed", held)
		}
	}
}

// run sends the reports until ctx ends, each as broker group's.
func (f *forgottenGroups) run(ctx context.Context, broker string, send func(context.Context, []byte) error) {
	for {
		var req transport.ForgetGroupRequest
		select {
		case req = <-f.queue:
		case <-ctx.Done():
			return
		}
		req.Broker = broker
		body, _ := json.Marshal(req)
		backoff := 100 * time.Millisecond
		for try := 1; ; try++ {
			err := send(ctx, body)
			if err == nil || ctx.Err() != nil {
				break
			}
			if try == forgottenTries {
				f.log.Warn("telling the metaserver of a forgotten consumer group; its record stays counted",
					"subject", req.Subject, "consumer-group", req.Group, "error", err)
				break
			}
			if !wait.Sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
		}
	}
}
