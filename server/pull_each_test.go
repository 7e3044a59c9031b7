package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// sendBlobs sends n messages "big-0", "big-1"… of size bytes each to
// subject "blobs", one a request; mutate, if any, changes each message
// before it is sent.
func sendBlobs(t *testing.T, ctx context.Context, gc *transport.LeaderClient, n, size int, mutate ...func(*message.Message)) {
	t.Helper()
	for i := range n {
		m := &message.Message{ID: fmt.Sprint("big-", i), Subject: "blobs", CreatedAt: 1, Body: make([]byte, size)}
		for _, f := range mutate {
			f(m)
		}
		if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: []*message.Message{m}}).Encode()); err != nil {
			t.Fatal(err)
		}
	}
}

// pullEach pulls with req until n messages have come, each pull from
// after the last message pulled (req's From and Epoch are set for each),
// and passes each pull's response, with its number from 0, to each.
func pullEach(t *testing.T, ctx context.Context, gc *transport.LeaderClient, req transport.PullRequest, n int, each func(pull int, resp *transport.PullResponse)) {
	t.Helper()
	for got, pull := 0, 0; got < n; pull++ {
		body, err := gc.Call(ctx, transport.TypePull, req.Encode())
		if err != nil {
			t.Fatal(err)
		}
		resp, err := transport.DecodePullResponse(body)
		if err != nil {
			t.Fatal(err)
		}
		each(pull, resp)
		if k := len(resp.Messages); k > 0 {
			got += k
			req.From, req.Epoch = resp.Messages[k-1].PullSeq+1, resp.Epoch
		}
	}
}
