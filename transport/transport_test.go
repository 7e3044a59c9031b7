package transport

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
)

func TestFrameRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	w := bufio.NewWriter(&buf)
	frames := []Frame{{Type: TypeSend, ID: 1, Payload: []byte("abc")}, {Type: TypePull | ResponseBit, ID: 1 << 60}, {Type: TypeAck, ID: 7, Payload: make([]byte, 1000)}}
	for _, f := range frames {
		if err := WriteFrame(w, f); err != nil {
			t.Fatal(err)
		}
	}
	w.Flush()
	r := bufio.NewReader(&buf)
	for _, want := range frames {
		got, err := ReadFrame(r, DefaultMaxFrame)
		if err != nil {
			t.Fatal(err)
		}
		if got.Type != want.Type || got.ID != want.ID || !bytes.Equal(got.Payload, want.Payload) {
			t.Fatalf("got %+v, want %+v", got, want)
		}
	}
	if _, err := ReadFrame(r, DefaultMaxFrame); err != io.EOF {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReadFrameErrors(t *testing.T) {
	le := func(n uint32) []byte { return binary.LittleEndian.AppendUint32(nil, n) }
	tests := []struct {
		name string
		in   []byte
		want error
	}{
		{"length below header", le(3), ErrMalformed},
		{"too large", le(DefaultMaxFrame + 1), ErrFrameTooLarge},
		{"truncated header", append(le(20), 1, 2), io.ErrUnexpectedEOF},
		{"truncated payload", append(le(20), make([]byte, 12)...), io.ErrUnexpectedEOF},
		{"truncated length", []byte{1, 0}, io.ErrUnexpectedEOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ReadFrame(bufio.NewReader(bytes.NewReader(tt.in)), DefaultMaxFrame)
			if !errors.Is(err, tt.want) {
				t.Fatalf("err = %v, want %v", err, tt.want)
			}
		})
	}
}

func sampleMessage() *message.Message {
	return &message.Message{ID: "id-1", Subject: "orders", CreatedAt: 5, Tags: []string{"a"},
		Properties: []message.Property{{Key: "k", Value: "v"}}, Body: []byte("body")}
}

func TestPayloadRoundTrips(t *testing.T) {
	send := &SendRequest{Messages: []*message.Message{sampleMessage(), sampleMessage()}}
	if got, err := DecodeSendRequest(send.Encode()); err != nil || len(got.Messages) != 2 || got.Messages[1].ID != "id-1" {
		t.Fatalf("send: %+v, %v", got, err)
	}
	sr := &SendResponse{Results: []SendResult{{Status: SendAppended}, {Status: SendRejected, Error: "bad"}}}
	if got, err := DecodeSendResponse(sr.Encode()); err != nil || got.Results[1].Error != "bad" {
		t.Fatalf("send response: %+v, %v", got, err)
	}
	pull := &PullRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Max: 10, Wait: 1500 * time.Millisecond, From: 4, Epoch: 1 << 40,
		Version: 3, AtMostOnce: true, TagsAll: true, Tags: []string{"a", "b"}, Start: StartAtTime, StartAt: time.UnixMilli(1234567), IdleExpiry: time.Minute}
	if got, err := DecodePullRequest(pull.Encode()); err != nil || !reflect.DeepEqual(got, pull) {
		t.Fatalf("pull: %+v, %v", got, err)
	}
	pr := &PullResponse{Epoch: 7, Messages: []PulledMessage{{PullSeq: 3, Deliveries: 5, Message: sampleMessage()}}}
	if got, err := DecodePullResponse(pr.Encode()); err != nil || got.Epoch != 7 || got.Messages[0].PullSeq != 3 ||
		got.Messages[0].Deliveries != 5 || string(got.Messages[0].Message.Body) != "body" {
		t.Fatalf("pull response: %+v, %v", got, err)
	}
	// Version 2, an older SDK's: answered in version 2, its group at the earliest message.
	if got, err := DecodePullRequest(append(appendNames([]byte{2}, "s", "g", "c"), 10, 0, 4, 1)); err != nil || got.Start != StartEarliest || got.Version != 2 {
		t.Fatalf("version 2 pull: %+v, %v", got, err)
	}
	pr.Version = 2
	if got, err := DecodePullResponse(pr.Encode()); err != nil || got.Messages[0].Deliveries != 0 || got.Version != 2 {
		t.Fatalf("version 2 pull response: %+v, %v", got, err)
	}
	nack := &NackRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, RetryAt: time.UnixMilli(99), Ranges: []message.AckRange{{First: 1, Last: 2}}}
	if got, err := DecodeNackRequest(nack.Encode()); err != nil || !reflect.DeepEqual(got, nack) {
		t.Fatalf("nack: %+v, %v", got, err)
	}
	ext := &ExtendRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 3, Ranges: []message.AckRange{{First: 1, Last: 2}}}
	if got, err := DecodeExtendRequest(ext.Encode()); err != nil || !reflect.DeepEqual(got, ext) {
		t.Fatalf("extend: %+v, %v", got, err)
	}
	ack := &AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 2, Ranges: []message.AckRange{{First: 0, Last: 4}, {First: 7, Last: 7}}}
	if got, err := DecodeAckRequest(ack.Encode()); err != nil || got.Epoch != 2 || len(got.Ranges) != 2 || got.Ranges[1] != (message.AckRange{First: 7, Last: 7}) {
		t.Fatalf("ack: %+v, %v", got, err)
	}
	if got, err := DecodeAckResponse((&AckResponse{AckPos: 9}).Encode()); err != nil || got.AckPos != 9 {
		t.Fatalf("ack response: %+v, %v", got, err)
	}
	hb := &HeartbeatRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c"}
	if got, err := DecodeHeartbeatRequest(hb.Encode()); err != nil || *got != *hb {
		t.Fatalf("heartbeat: %+v, %v", got, err)
	}
}

func TestDecodersRefuseBadInput(t *testing.T) {
	bad := [][]byte{nil, {2}, {payloadVersion, 0xff}, append((&AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1}).Encode(), 1),
		(&AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c"}).Encode(),                                                  // epoch 0
		append([]byte{payloadVersion}, (&AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1}).Encode()[1:]...), // the version before epochs
	}
	for _, b := range bad {
		if _, err := DecodeAckRequest(b); CodeOf(err) != Invalid {
			t.Errorf("DecodeAckRequest(%v) = %v, want INVALID", b, err)
		}
		if _, err := DecodeSendRequest(b); CodeOf(err) != Invalid {
			t.Errorf("DecodeSendRequest(%v) = %v, want INVALID", b, err)
		}
	}
	reversed := (&AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "c", Epoch: 1, Ranges: []message.AckRange{{First: 5, Last: 2}}}).Encode()
	if _, err := DecodeAckRequest(reversed); CodeOf(err) != Invalid {
		t.Errorf("reversed range: %v, want INVALID", err)
	}
}

func TestStatusRoundTrip(t *testing.T) {
	body, err := DecodeStatus(EncodeStatus(nil, []byte("ok")))
	if err != nil || string(body) != "ok" {
		t.Fatalf("OK status: %q, %v", body, err)
	}
	_, err = DecodeStatus(EncodeStatus(&Error{Code: NotLeader, Message: "no", Leader: "127.0.0.1:1"}, nil))
	var e *Error
	if !errors.As(err, &e) || e.Code != NotLeader || e.Leader != "127.0.0.1:1" || !e.Retriable() {
		t.Fatalf("NOT_LEADER status: %v", err)
	}
	if !errors.Is(err, &Error{Code: NotLeader}) || errors.Is(err, &Error{Code: Invalid}) {
		t.Fatal("errors.Is does not match by code")
	}
	if _, err := DecodeStatus(EncodeStatus(errors.New("boom"), nil)); CodeOf(err) != Internal {
		t.Fatalf("plain error: %v, want INTERNAL", err)
	}
	if _, err := DecodeStatus([]byte{byte(Invalid), 0xff}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated status: %v, want ErrMalformed", err)
	}
}

// startServer runs a Server on a loopback port with h; it stops at cleanup.
func startServer(t *testing.T, h Handler) (*Server, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{Handler: h, MaxFrame: 1 << 16}
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() {
		s.Close()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, lis.Addr().String()
}

func TestClientServerConcurrentCalls(t *testing.T) {
	release := make(chan struct{})
	_, addr := startServer(t, func(ctx context.Context, typ Type, p []byte) ([]byte, error) {
		if string(p) == "first" {
			<-release // answered after later requests: responses come out of order
		}
		if typ == TypeAck {
			return nil, Errorf(Invalid, "no acks here")
		}
		return append([]byte("re:"), p...), nil
	})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	first := make(chan []byte)
	go func() {
		b, _ := c.Call(ctx, TypeSend, []byte("first"))
		first <- b
	}()
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := []byte{byte(i)}
			b, err := c.Call(ctx, TypePull, p)
			if err != nil || !bytes.Equal(b, append([]byte("re:"), p...)) {
				t.Errorf("call %d: %q, %v", i, b, err)
			}
		}()
	}
	wg.Wait()
	close(release)
	if b := <-first; string(b) != "re:first" {
		t.Fatalf("first: %q", b)
	}
	if _, err := c.Call(ctx, TypeAck, nil); CodeOf(err) != Invalid {
		t.Fatalf("handler error: %v, want INVALID", err)
	}
}

func TestCallTimeout(t *testing.T) {
	block := make(chan struct{})
	defer close(block)
	_, addr := startServer(t, func(ctx context.Context, _ Type, _ []byte) ([]byte, error) {
		<-block
		return nil, nil
	})
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Call(ctx, TypeSend, nil); CodeOf(err) != Timeout {
		t.Fatalf("err = %v, want TIMEOUT", err)
	}
}

// TestServerClosesOnBadFrames sends malformed and oversize frames on raw
// connections: the server answers an error frame where it can, closes the
// connection, and keeps serving others.
func TestServerClosesOnBadFrames(t *testing.T) {
	_, addr := startServer(t, func(context.Context, Type, []byte) ([]byte, error) { return []byte("ok"), nil })
	le := func(n uint32) []byte { return binary.LittleEndian.AppendUint32(nil, n) }
	tests := []struct {
		name string
		in   []byte
		code Code
	}{
		{"oversize", le(1 << 20), TooLarge},
		{"length below header", le(2), Invalid},
		{"response frame from client", append(le(9), ResponseBit|1, 0, 0, 0, 0, 0, 0, 0, 0), Invalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			c.SetDeadline(time.Now().Add(10 * time.Second))
			c.Write(tt.in)
			r := bufio.NewReader(c)
			if tt.code != OK {
				f, err := ReadFrame(r, DefaultMaxFrame)
				if err != nil {
					t.Fatalf("no error frame: %v", err)
				}
				if _, err := DecodeStatus(f.Payload); CodeOf(err) != tt.code {
					t.Fatalf("error frame says %v, want %s", err, tt.code)
				}
			}
			if _, err := ReadFrame(r, DefaultMaxFrame); !errors.Is(err, io.EOF) {
				t.Fatalf("connection not closed: %v", err)
			}
		})
	}
	// The server still answers a well-behaved client.
	c, err := Dial(context.Background(), addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if b, err := c.Call(context.Background(), TypeStatus, nil); err != nil || string(b) != "ok" {
		t.Fatalf("after bad clients: %q, %v", b, err)
	}
}

func TestOversizeMessageIsTooLarge(t *testing.T) {
	m := sampleMessage()
	m.Body = make([]byte, message.MaxBodyLen+1)
	b := (&SendRequest{Messages: []*message.Message{m}}).Encode()
	if _, err := DecodeSendRequest(b); CodeOf(err) != TooLarge {
		t.Fatalf("oversize body: %v, want TOO_LARGE", err)
	}
}

func TestBudgetWaitsForBytes(t *testing.T) {
	b := newBudget(100)
	ctx := context.Background()
	if !b.take(ctx, 80) {
		t.Fatal("take of 80 from 100 failed")
	}
	got := make(chan bool)
	go func() { got <- b.take(ctx, 50) }()
	select {
	case <-got:
		t.Fatal("took 50 bytes with only 20 free")
	case <-time.After(50 * time.Millisecond):
	}
	b.give(80)
	if !<-got {
		t.Fatal("take did not succeed once the bytes were given back")
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { got <- b.take(cctx, 100) }()
	cancel()
	if <-got {
		t.Fatal("take succeeded after its context ended")
	}
	b.give(50)
	if !b.take(ctx, 1000) { // larger than the budget: waits for all of it
		t.Fatal("take of more than the budget failed with everything free")
	}
}

// A client that never reached any node of a group says so after about two
// seconds, in one line naming the address and the cause; a malformed
// address is refused at once.
func TestUnreachableIsReportedFast(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close() // nothing listens there now
	gc, err := Dialer{}.NewLeaderClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer gc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = gc.Call(ctx, TypeStatus, nil)
	took := time.Since(start)
	want := "qmq: cannot reach " + addr + ": connection refused: is qmqd running?"
	if !errors.Is(err, ErrUnreachable) || err.Error() != want {
		t.Fatalf("call to %s: %v, want %q", addr, err, want)
	}
	if took > 5*unreachableAfter { // it used to try until the context ended
		t.Errorf("reported after %s, want about %s", took, unreachableAfter)
	}
	// A client of addresses a route gave keeps trying until its context
	// ends: a group that is down comes back.
	routed, err := Dialer{}.NewLeaderClient([]string{addr})
	if err != nil {
		t.Fatal(err)
	}
	defer routed.Close()
	routed.KeepTrying()
	short, cancelShort := context.WithTimeout(ctx, 2*unreachableAfter)
	defer cancelShort()
	if _, err := routed.Call(short, TypeStatus, nil); errors.Is(err, ErrUnreachable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a routed client: %v, want it to try until its context ended", err)
	}
	for _, bad := range []string{"127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:http", "a:b:1"} {
		if _, err := (Dialer{}).NewLeaderClient([]string{bad}); err == nil || !strings.Contains(err.Error(), "malformed server address") {
			t.Errorf("address %q: %v, want it refused as malformed", bad, err)
		}
	}
}

// TestDialerDialsFromItsSource: a Dialer with a Source connects from that
// IP (a node bound to one dials from it, so that a peer sees which node
// calls); without one, from the system's choice.
func TestDialerDialsFromItsSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	for _, src := range []net.IP{net.ParseIP("127.0.0.9"), nil} {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := Dialer{Source: src}.Dial(ctx, ln.Addr().String())
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		in, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		got := in.RemoteAddr().(*net.TCPAddr).IP
		want := src
		if want == nil {
			want = net.ParseIP("127.0.0.1")
		}
		if !got.Equal(want) {
			t.Errorf("Source %v: the connection came from %v, want %v", src, got, want)
		}
		in.Close()
		c.Close()
	}
}
