package server

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/transport"
)

// /metrics serves the time of each request by type, the errors by type
// and code, the time from proposing a command to the start of its apply,
// and the time of its apply, by command.
func TestLatencyMetrics(t *testing.T) {
	n := startNode(t, "n1", true, nil)
	waitLeader(t, n)
	gc := clientOf(t, n.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &transport.SendRequest{Messages: []*message.Message{{ID: "m1", Subject: "s", CreatedAt: 1}}}
	if _, err := gc.Call(ctx, transport.TypeSend, req.Encode()); err != nil {
		t.Fatal(err)
	}
	// Three subjects more, of 3, 2 and 1 messages: with two series, the
	// smaller two are summed under subject="".
	defer func(n int) { maxSubjectSeries = n }(maxSubjectSeries)
	maxSubjectSeries = 2
	more := &transport.SendRequest{}
	for i, subject := range []string{"a", "a", "a", "b", "b", "c"} {
		more.Messages = append(more.Messages, &message.Message{ID: fmt.Sprint("x", i), Subject: subject, CreatedAt: 1})
	}
	if _, err := gc.Call(ctx, transport.TypeSend, more.Encode()); err != nil {
		t.Fatal(err)
	}
	bad := &transport.AckRequest{Subject: "s", ConsumerGroup: "g", Consumer: "nobody", Ranges: []message.AckRange{{First: 0, Last: 0}}}
	if _, err := gc.Call(ctx, transport.TypeAck, bad.Encode()); err == nil {
		t.Fatal("an ack of a consumer never registered was answered")
	}
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	for _, want := range []string{
		`qmq_request_seconds_count{type="send"} 2`,
		`qmq_request_seconds_bucket{type="send",le="+Inf"} 2`,
		`qmq_request_errors_total{code="INVALID",type="ack"} 1`,
		`qmq_commit_seconds_count{command="append"} 2`,
		`qmq_apply_seconds_count{command="append"} 2`,
		`qmq_subjects 4`,
		`qmq_subject_stored_messages{subject="a"} 3`,
		`qmq_subject_stored_messages{subject="b"} 2`,
		`qmq_subject_stored_messages{subject=""} 2`, // c and s
		// Bytes of the same subjects: a message of a one-letter subject, an
		// id of two and no body takes 41 bytes in the message log (32
		// encoded, 9 of record header).
		`qmq_subject_stored_bytes{subject="a"} 123`,
		`qmq_subject_stored_bytes{subject="b"} 82`,
		`qmq_subject_stored_bytes{subject=""} 82`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if strings.Contains(body, `qmq_request_errors_total{code="INVALID",type="send"}`) {
		t.Error("a send counted as an error")
	}
}

// metricsOf returns what n serves at /metrics.
func metricsOf(t *testing.T, n *Node) string {
	t.Helper()
	resp, err := http.Get("http://" + n.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A follower times the entries it applies (qmq_apply_seconds), and only
// the leader, which proposed them, their commit.
func TestApplyMetricOnFollower(t *testing.T) {
	nodes := startGroup(t)
	leader := leaderOf(nodes)
	gc := clientOf(t, leader.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range 3 {
		req := &transport.SendRequest{Messages: []*message.Message{{ID: fmt.Sprint("m", i), Subject: "s", CreatedAt: 1}}}
		if _, err := gc.Call(ctx, transport.TypeSend, req.Encode()); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		waitFor(t, 10*time.Second, n.cfg.ID+" to apply the sends", func() bool { return n.fsm.Applied() >= leader.fsm.Applied() })
		body := metricsOf(t, n)
		if want := `qmq_apply_seconds_count{command="append"} 3`; !strings.Contains(body, want) {
			t.Errorf("%s's /metrics lacks %s", n.cfg.ID, want)
		}
		proposed := strings.Contains(body, `qmq_commit_seconds_count{command="append"} 3`)
		if n == leader && !proposed {
			t.Errorf("the leader's /metrics lacks its 3 appends' commit times")
		}
		if n != leader && strings.Contains(body, `qmq_commit_seconds_count{command="append"}`) {
			t.Errorf("follower %s observed the commit of appends it did not propose", n.cfg.ID)
		}
	}
}

// gaugeOf returns the value of the series line (name and labels) in a
// /metrics body, failing if there is none.
func gaugeOf(t *testing.T, body, series string) int64 {
	t.Helper()
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return int64(f)
		}
	}
	t.Fatalf("/metrics lacks %s", series)
	return 0
}

// qmq_subject_stored_bytes is the bytes of the messages stored, by the
// subjects of qmq_subject_stored_messages: exact once retention removed
// the first consume-log segment of a subject, and after a restart (from
// retention's checkpoint, the rest replayed).
func TestSubjectStoredBytesMetric(t *testing.T) {
	defer func(n int) { maxSubjectSeries = n }(maxSubjectSeries)
	maxSubjectSeries = 2
	n := startNode(t, "n1", true, func(c *Config) {
		c.FSM.SegmentSize, c.FSM.IndexSegmentSize = 1<<20, 64<<10
		c.FSM.Retention = logs.Retention{MaxBytes: 2 << 20}
	})
	waitLeader(t, n)
	gc := clientOf(t, n.ClientAddr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(msgs []*message.Message) {
		t.Helper()
		if _, err := gc.Call(ctx, transport.TypeSend, (&transport.SendRequest{Messages: msgs}).Encode()); err != nil {
			t.Fatal(err)
		}
	}
	// What a message's record takes in the message log: every message of
	// a subject here has the same.
	recordSize := func(m *message.Message) int64 { return int64(logs.RecordSize(m.EncodedSize())) }
	small := func(i int) *message.Message {
		return &message.Message{ID: fmt.Sprintf("s%04d", i), Subject: "small", CreatedAt: 1, Body: []byte("0123456789")}
	}
	big := func(i int) *message.Message {
		return &message.Message{ID: fmt.Sprintf("b%04d", i), Subject: "big", CreatedAt: 1, Body: bytes.Repeat([]byte{'b'}, 100<<10)}
	}
	for i := 0; i < 2000; i += 500 {
		var msgs []*message.Message
		for j := i; j < i+500; j++ {
			msgs = append(msgs, small(j))
		}
		send(msgs)
	}
	send([]*message.Message{{ID: "o1", Subject: "other", CreatedAt: 1}})
	body := metricsOf(t, n)
	if got, want := gaugeOf(t, body, `qmq_subject_stored_bytes{subject="small"}`), 2000*recordSize(small(0)); got != want {
		t.Fatalf("small stores %d bytes, want %d", got, want)
	}
	// The first consume-log segment of small holds 65536/40 = 1638 entries,
	// all of messages in the first message-log segment: 40 big messages
	// (4 MiB) make retention (2 MiB) remove it, and them.
	for i := 0; i < 40; i += 5 {
		send([]*message.Message{big(i), big(i + 1), big(i + 2), big(i + 3), big(i + 4)})
	}
	check := func(n *Node) {
		t.Helper()
		body := metricsOf(t, n)
		if got := gaugeOf(t, body, `qmq_subject_stored_messages{subject="small"}`); got != 2000-1638 {
			t.Fatalf("small stores %d messages, want %d once retention removed its first consume-log segment", got, 2000-1638)
		}
		if got, want := gaugeOf(t, body, `qmq_subject_stored_bytes{subject="small"}`), (2000-1638)*recordSize(small(0)); got != want {
			t.Fatalf("small stores %d bytes, want %d", got, want)
		}
		// big's 40 entries share its consume log's one segment: counted
		// until retention removes the segment, though some of their
		// messages went (as qmq_subject_stored_messages counts them).
		if got := gaugeOf(t, body, `qmq_subject_stored_messages{subject="big"}`); got != 40 {
			t.Fatalf("big stores %d messages, want 40", got)
		}
		if got, want := gaugeOf(t, body, `qmq_subject_stored_bytes{subject="big"}`), 40*recordSize(big(0)); got != want {
			t.Fatalf("big stores %d bytes, want %d", got, want)
		}
		// other, the third subject, is summed under subject="".
		if got, want := gaugeOf(t, body, `qmq_subject_stored_bytes{subject=""}`), recordSize(&message.Message{ID: "o1", Subject: "other", CreatedAt: 1}); got != want {
			t.Fatalf("the rest store %d bytes, want %d", got, want)
		}
	}
	check(n)

	applied, cfg := n.fsm.Applied(), n.cfg
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	waitFor(t, 10*time.Second, "the restarted node to replay what it applied", func() bool { return r.fsm.Applied() >= applied })
	check(r)
}

// The metaserver's leader reports each broker group's availability as
// the routes see it: 1 while its heartbeats come, 0 once they stop.
func TestBrokerGroupAvailabilityMetric(t *testing.T) {
	m := startMeta(t, "m1", true, func(c *MetaConfig) { c.HTTPAddr = "127.0.0.1:0" })
	waitFor(t, 10*time.Second, "the metaserver to lead", func() bool { return m.Status().State == "Leader" })
	b := startMetaBroker(t, "g1", m)
	waitLeader(t, b)
	metric := func() string {
		resp, err := http.Get("http://" + m.HTTPAddr() + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	waitFor(t, 10*time.Second, "g1 available", func() bool {
		return strings.Contains(metric(), `qmq_broker_group_available{broker_group="g1"} 1`)
	})
	if body := metric(); !strings.Contains(body, `qmq_broker_group_writable{broker_group="g1"} 1`) || !strings.Contains(body, `qmq_broker_group_max_lag{broker_group="g1"} 0`) {
		t.Errorf("g1's writable and lag missing:\n%s", body)
	}
	b.Close()
	waitFor(t, 10*time.Second, "g1 unavailable once its heartbeats stop", func() bool {
		return strings.Contains(metric(), `qmq_broker_group_available{broker_group="g1"} 0`)
	})
}

// A node with TLS serves when its certificate expires, for an alert.
func TestCertificateExpiryMetric(t *testing.T) {
	fx := newTLSFixture(t)
	fx.issue("app", tlsconf.Spec{CN: "app"})
	m := startMeta(t, "m1", true, func(c *MetaConfig) {
		c.TLS, c.OpenHTTP, c.HTTPAddr = fx.node("m1"), true, freeAddr(t)
	})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: clientConfig(t, fx.config("app"))}}
	resp, err := client.Get("https://" + m.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	want := fmt.Sprintf("qmq_tls_certificate_expiry_timestamp_seconds %g", float64(m.tls.files.Leaf().NotAfter.Unix()))
	if !strings.Contains(string(b), want) {
		t.Errorf("/metrics lacks %q", want)
	}
}
