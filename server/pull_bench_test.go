package server

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// BenchmarkPullAck measures a pull of 100 messages and its ack through one
// node's client port, over a backlog sent beforehand (outside the timing):
// the pull's proposal, apply, the reply's memory, the read of the messages
// and the reply.
//
//	go test ./server -run '^$' -bench PullAck -benchtime 2000x -count 5
func BenchmarkPullAck(b *testing.B) {
	for _, size := range []int{128, 16 << 10} {
		b.Run(fmt.Sprintf("%dB", size), func(b *testing.B) { benchmarkPullAck(b, size) })
	}
}

func benchmarkPullAck(b *testing.B, size int) {
	n := startNode(b, "n1", true, nil)
	waitLeader(b, n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	gc := clientOf(b, n.ClientAddr())
	const per = 100
	sent := 0
	fill := func() {
		msgs := make([]*message.Message, 1000)
		for i := range msgs {
			msgs[i] = &message.Message{ID: fmt.Sprint("m", sent), Subject: "bench", CreatedAt: 1, Body: make([]byte, size)}
			sent++
		}
		for len(msgs) > 0 {
			k := min(len(msgs), max(1, (8<<20)/(size+100)))
			if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: msgs[:k]}).Encode()); err != nil {
				b.Fatal(err)
			}
			msgs = msgs[k:]
		}
	}
	req := transport.PullRequest{Subject: "bench", ConsumerGroup: "g", Consumer: "c", Max: per, Wait: time.Second, Start: transport.StartEarliest}
	pulled := 0
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if sent-pulled < per {
			b.StopTimer()
			fill()
			b.StartTimer()
		}
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			b.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil {
			b.Fatal(err)
		}
		if len(resp.Messages) != per {
			b.Fatalf("pulled %d of %d", len(resp.Messages), per)
		}
		pulled += per
		last := resp.Messages[per-1].PullSeq
		req.From, req.Epoch = last+1, resp.Epoch
		ack := &transport.AckRequest{Subject: "bench", ConsumerGroup: "g", Consumer: "c", Epoch: resp.Epoch,
			Ranges: []message.AckRange{{First: resp.Messages[0].PullSeq, Last: last}}}
		if _, err := gc.Call(ctx, transport.TypeAck, ack.Encode()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*per)/b.Elapsed().Seconds(), "msgs/s")
}
