package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// natsE2E is `qmqctl bench produce --rate R --consume G` for NATS: one
// publisher sending size-byte messages at rate for d with at most 1,000
// unacknowledged (PublishAsync), and cons (natsSystem.consumer: durable,
// pull, explicit acks) consuming from before the first publish, with pulls
// of 2 s and nats.go's other defaults. Each body's first 8 bytes
// carry the send time (Unix ns, big-endian), as qmqctl's do; the latency
// is from the publish call to the consumer's handler.
func natsE2E(ctx context.Context, logw io.Writer, nc *nats.Conn, cons jetstream.Consumer, stream, subject string, size, rate int, d time.Duration) (e2eFigures, error) {
	if size < 8 {
		return e2eFigures{}, fmt.Errorf("natsE2E: size %d: at least 8 bytes carry the send time", size)
	}
	var recvMu sync.Mutex
	var lat []time.Duration
	var received atomic.Int64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		now := time.Now()
		if data := m.Data(); len(data) >= 8 {
			sent := time.Unix(0, int64(binary.BigEndian.Uint64(data)))
			recvMu.Lock()
			lat = append(lat, now.Sub(sent))
			recvMu.Unlock()
			received.Add(1)
		}
		_ = m.Ack()
	}, jetstream.PullExpiry(2*time.Second), jetstream.PullMaxMessages(1000), jetstream.ConsumeErrHandler(func(_ jetstream.ConsumeContext, err error) {
		fmt.Fprintf(logw, "natsE2E: consume %s: %v\n", stream, err)
	}))
	if err != nil {
		return e2eFigures{}, err
	}
	defer cc.Stop()

	window := make(chan struct{}, 1000)
	var acked, failed atomic.Int64
	var lastAck atomic.Int64
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(2000), // above the window: PublishAsync never stalls on it
		jetstream.WithPublishAsyncAckHandler(func(_ jetstream.JetStream, _ *nats.Msg, _ *jetstream.PubAck) {
			acked.Add(1)
			lastAck.Store(time.Now().UnixNano())
			<-window
		}),
		jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, _ error) {
			failed.Add(1)
			<-window
		}))
	if err != nil {
		return e2eFigures{}, err
	}
	start := time.Now()
	pace := newPacer(float64(rate), start)
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var sent int64
	for runCtx.Err() == nil {
		select {
		case window <- struct{}{}:
		case <-runCtx.Done():
			continue
		}
		if !pace.wait(runCtx) {
			<-window
			break
		}
		body := make([]byte, size)
		binary.BigEndian.PutUint64(body, uint64(time.Now().UnixNano()))
		if _, err := js.PublishAsync(subject, body); err != nil {
			<-window
			failed.Add(1)
			continue
		}
		sent++
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(30 * time.Second):
		return e2eFigures{}, fmt.Errorf("natsE2E: publishes not acknowledged 30 s after the run")
	}
	elapsed := time.Duration(lastAck.Load() - start.UnixNano())
	// The consumer gets at most 2 s after the last ack, as qmqctl's.
	deadline := time.Now().Add(2 * time.Second)
	for received.Load() < acked.Load() && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond) // polls the count: there is no event to wait on
	}
	if failed.Load() > 0 {
		return e2eFigures{}, fmt.Errorf("natsE2E: %d of %d publishes failed", failed.Load(), sent)
	}
	recvMu.Lock()
	defer recvMu.Unlock()
	f := e2eFigures{asked: float64(rate), sent: acked.Load(), received: received.Load()}
	if elapsed > 0 {
		f.achieved = float64(f.sent) / elapsed.Seconds()
	}
	slices.Sort(lat)
	f.p50, f.p99, f.p999 = ms(percentile(lat, 50)), ms(percentile(lat, 99)), ms(percentile(lat, 99.9))
	if len(lat) > 0 {
		f.max = ms(lat[len(lat)-1])
	}
	return f, nil
}
