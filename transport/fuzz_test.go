package transport

import (
	"bufio"
	"bytes"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/version"
)

// FuzzReadFrame: any byte stream either yields frames within the limit or
// an error; never a panic, never a frame larger than the limit.
func FuzzReadFrame(f *testing.F) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	WriteFrame(w, Frame{Type: TypeSend, ID: 1, Payload: (&SendRequest{Messages: nil}).Encode()})
	WriteFrame(w, Frame{Type: TypePull, ID: 2, Payload: (&PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 1}).Encode()})
	w.Flush()
	f.Add(buf.Bytes())
	f.Add([]byte{9, 0, 0, 0, 1})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bufio.NewReader(bytes.NewReader(in))
		for {
			fr, err := ReadFrame(r, 1<<12)
			if err != nil {
				return
			}
			if len(fr.Payload)+9 > 1<<12 {
				t.Fatalf("frame of %d bytes passed a 4096-byte limit", len(fr.Payload))
			}
		}
	})
}

// FuzzDecodeRequests: every request decoder refuses or accepts any input
// without panicking; what it accepts re-encodes to the same bytes.
func FuzzDecodeRequests(f *testing.F) {
	f.Add((&SendRequest{Messages: nil}).Encode())
	f.Add((&HelloResponse{Versions: version.Range{Min: 1, Max: 2}}).Encode())
	f.Add(append((&HelloResponse{Versions: version.Range{Min: 1, Max: 2}}).Encode(), 9))
	f.Add((&SendRequest{}).Encode())
	f.Add(append((&SendRequest{}).Encode()[:1], (&PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5, Wait: time.Second}).Encode()[1:]...))
	f.Add((&AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, Ranges: []message.AckRange{{First: 1, Last: 2}}}).Encode())
	f.Add((&PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5, Wait: time.Second, From: 9, Epoch: 2}).Encode())
	f.Add((&HeartbeatRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c"}).Encode())
	f.Add((&PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5, Tags: []string{"t"}, TagsAll: true, AtMostOnce: true,
		Start: StartAtTime, StartAt: time.UnixMilli(5), IdleExpiry: time.Hour}).Encode())
	f.Add((&PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 5, Version: 2}).Encode())
	f.Add((&NackRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, RetryAt: time.UnixMilli(7), Ranges: []message.AckRange{{First: 1, Last: 2}}}).Encode())
	f.Add((&ExtendRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, Ranges: []message.AckRange{{First: 1, Last: 2}}}).Encode())
	f.Add([]byte(`{"id":"n2","raft_addr":"127.0.0.1:1","client_addr":"127.0.0.1:2"}`))
	f.Add([]byte(`{"subject":"s","consumer_group":"c"}`))
	f.Add([]byte(`{"status":{"id":"n1","group":"g1","state":"Leader","term":3},"load":{"subjects":1}}`))
	f.Add((&PullResponse{Epoch: 4, Messages: []PulledMessage{{PullSeq: 1, Message: sampleMessage()}}}).Encode())
	f.Add((&BackupChunk{Kind: BackupBroker, Group: "g1", SnapshotID: "2-10-1", Index: 10, Term: 2, Configuration: []byte(`{}`),
		Size: 9, Offset: 4, Data: []byte("abcde")}).Encode())
	f.Add([]byte(`{"group":"g1","snapshot_id":"2-10-1","offset":4096,"max":4096}`))
	f.Fuzz(func(t *testing.T, in []byte) {
		if c, err := DecodeBackupChunk(in); err == nil && (!bytes.Equal(c.Encode(), in) || c.Offset+int64(len(c.Data)) > c.Size) {
			t.Fatalf("backup chunk does not re-encode to its input, or lies past its snapshot")
		}
		if q, err := DecodeSendRequest(in); err == nil {
			if !bytes.Equal(q.Encode(), in) {
				t.Fatalf("send request does not re-encode to its input")
			}
			if len(q.Wire) != len(q.Messages) {
				t.Fatalf("send request: %d messages, %d wire forms", len(q.Messages), len(q.Wire))
			}
			for i, m := range q.Messages {
				if !bytes.Equal(q.Wire[i], m.AppendEncoded(nil)) {
					t.Fatalf("send request: message %d's wire form is not its encoding", i)
				}
			}
		}
		if q, err := DecodePullRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("pull request does not re-encode to its input")
		}
		if q, err := DecodeAckRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("ack request does not re-encode to its input")
		}
		if q, err := DecodeNackRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("nack request does not re-encode to its input")
		}
		if q, err := DecodeExtendRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("extend request does not re-encode to its input")
		}
		if q, err := DecodeHelloRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("hello request does not re-encode to its input")
		}
		if h, err := DecodeHelloResponse(in); err == nil {
			if h.Versions.Min < version.V1 || h.Versions.Max < h.Versions.Min {
				t.Fatalf("hello answer of versions %s accepted", h.Versions)
			}
			if len(in) > 0 && in[0] == payloadVersion && !bytes.Equal(h.Encode(), in) {
				t.Fatalf("hello answer does not re-encode to its input")
			}
		}
		if q, err := DecodeHeartbeatRequest(in); err == nil && !bytes.Equal(q.Encode(), in) {
			t.Fatalf("heartbeat request does not re-encode to its input")
		}
		for _, v := range []any{&JoinRequest{}, &RouteRequest{}, &RegisterRequest{}, &BrokerHeartbeat{},
			&AssignRequest{}, &SetWritableRequest{}, &DeregisterRequest{}, &Cluster{}, &Route{},
			&ConsumerGroupsRequest{}, &SetConsumerGroupRequest{}, &ResetConsumerGroupRequest{}, &DeadLettersRequest{}, &DeadLetterOpRequest{},
			&AppRequest{}, &AppRotateRequest{}, &AppDeleteRequest{}, &HeartbeatReply{}, &SetBrokerConfigRequest{}, &BrokerConfigInfo{}, &BackupRequest{}} {
			DecodeJSON(in, v)
		}
		var status Status
		DecodeJSON(in, &status)
		DecodeSendResponse(in)
		if p, err := DecodePullResponse(in); err == nil && !bytes.Equal(p.Encode(), in) {
			t.Fatalf("pull response does not re-encode to its input")
		}
		DecodeAckResponse(in)
		DecodeStatus(in)
	})
}
