package qmq_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/server"
	"github.com/qmqgo/qmq/test/poll"
	"github.com/qmqgo/qmq/test/testcluster"
)

// traced is a tracer provider whose every span is recorded in memory.
type traced struct {
	tp  *sdktrace.TracerProvider
	rec *tracetest.SpanRecorder
}

func newTraced(t *testing.T) *traced {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })
	return &traced{tp: tp, rec: rec}
}

// ended returns the ended spans named name.
func (tr *traced) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range tr.rec.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// await waits until n spans named name have ended, and returns them.
func (tr *traced) await(t *testing.T, name string, n int) []sdktrace.ReadOnlySpan {
	t.Helper()
	poll.Until(t, 20*time.Second, fmt.Sprintf("%d spans %q ended", n, name), func() bool { return len(tr.ended(name)) >= n })
	return tr.ended(name)
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	out := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		out[kv.Key] = kv.Value
	}
	return out
}

// wantAttrs checks that s has each of want, compared as strings.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	got := attrs(s)
	for k, v := range want {
		if g, ok := got[attribute.Key(k)]; !ok || g.Emit() != v {
			t.Errorf("span %q: attribute %s = %q (set %v), want %q", s.Name(), k, g.Emit(), ok, v)
		}
	}
}

// tracedBroker starts a one-node broker group, and a producer for it
// tracing with tr (nil: tracing off), and a context for the test.
func tracedBroker(t *testing.T, tr *traced) (*server.Node, *qmq.Producer, context.Context) {
	t.Helper()
	n := testcluster.Broker(t, nil)
	var opts []qmq.ProducerOption
	if tr != nil {
		opts = append(opts, qmq.WithTracerProvider(tr.tp))
	}
	p, err := qmq.NewProducer(n.ClientAddr(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return n, p, ctx
}

// received records the messages a handler got.
type received struct {
	mu   sync.Mutex
	msgs []*qmq.Message
}

func (r *received) add(m *qmq.Message) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, m)
}

func (r *received) all() []*qmq.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]*qmq.Message(nil), r.msgs...)
}

var traceparent = regexp.MustCompile(`^00-([0-9a-f]{32})-([0-9a-f]{16})-01$`)

// One trace runs from the application's span around a send, through the
// send's span (PRODUCER, ended once the broker acknowledged the message),
// to the handler's span (CONSUMER, its child) and the spans the handler
// makes from its ctx.
func TestTraceRunsFromSendToHandler(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, tr)
	var got received
	sub, err := qmq.Subscribe(n.ClientAddr(), "trace.orders", "billing", func(ctx context.Context, m *qmq.Message) error {
		_, own := tr.tp.Tracer("app").Start(ctx, "bill")
		own.End()
		got.add(m)
		return nil
	}, qmq.WithTracerProvider(tr.tp), qmq.WithPullWait(200*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()

	actx, app := tr.tp.Tracer("app").Start(ctx, "checkout")
	m := p.GenerateMessage("trace.orders")
	m.SetString("order", "42")
	m.SetBody([]byte("hello"))
	if err := p.SendMessage(actx, m); err != nil {
		t.Fatal(err)
	}
	app.End()
	// The send's span ended as the send was acknowledged, before
	// SendMessage returned.
	sends := tr.ended("send trace.orders")
	if len(sends) != 1 {
		t.Fatalf("%d send spans ended as SendMessage returned, want 1", len(sends))
	}
	send := sends[0]
	if send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span kind %s, want producer", send.SpanKind())
	}
	if send.Parent().SpanID() != app.SpanContext().SpanID() || send.SpanContext().TraceID() != app.SpanContext().TraceID() {
		t.Errorf("send span's parent %s, want the application's span %s", send.Parent().SpanID(), app.SpanContext().SpanID())
	}
	if send.Status().Code != codes.Unset {
		t.Errorf("send span status %v, want unset", send.Status())
	}
	wantAttrs(t, send, map[string]string{"messaging.system": "qmq", "messaging.operation.name": "send",
		"messaging.operation.type": "send", "messaging.destination.name": "trace.orders", "messaging.message.id": m.ID(),
		"messaging.message.body.size": "5", "messaging.qmq.message.duplicate": "false"})
	if _, ok := attrs(send)["messaging.qmq.message.deliver_at"]; ok {
		t.Error("a message sent at once has a delivery time attribute")
	}
	if _, ok := m.Property("traceparent"); ok {
		t.Error("the sent message itself was given a traceparent: only what is sent should carry it")
	}

	process := tr.await(t, "process trace.orders", 1)[0]
	if process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process span kind %s, want consumer", process.SpanKind())
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Errorf("process span's parent %s of trace %s, want the send span %s of trace %s", process.Parent().SpanID(),
			process.SpanContext().TraceID(), send.SpanContext().SpanID(), send.SpanContext().TraceID())
	}
	if !process.Parent().IsRemote() {
		t.Error("the process span's parent is not remote: it should come from the message")
	}
	wantAttrs(t, process, map[string]string{"messaging.system": "qmq", "messaging.operation.name": "process",
		"messaging.operation.type": "process", "messaging.destination.name": "trace.orders", "messaging.message.id": m.ID(),
		"messaging.consumer.group.name": "billing", "messaging.qmq.message.deliveries": "1", "messaging.message.body.size": "5"})
	bill := tr.await(t, "bill", 1)[0]
	if bill.Parent().SpanID() != process.SpanContext().SpanID() {
		t.Errorf("the handler's own span has parent %s, want the process span %s", bill.Parent().SpanID(), process.SpanContext().SpanID())
	}

	in := got.all()[0]
	tp, _ := in.Property("traceparent")
	if sm := traceparent.FindStringSubmatch(tp); sm == nil || sm[1] != send.SpanContext().TraceID().String() ||
		sm[2] != send.SpanContext().SpanID().String() {
		t.Errorf("the stored message's traceparent %q, want the send span's context (trace %s, span %s)", tp,
			send.SpanContext().TraceID(), send.SpanContext().SpanID())
	}
	if v := in.String("order"); v != "42" {
		t.Errorf("property order = %q, want 42", v)
	}
}

// A send that fails ends its span with the error.
func TestTraceSendFailureSetsTheStatus(t *testing.T) {
	tr := newTraced(t)
	_, p, ctx := tracedBroker(t, tr)
	m := p.GenerateMessage("trace.orders")
	for range qmq.MaxTags + 1 {
		m.AddTag("t")
	}
	err := p.SendMessage(ctx, m)
	if err == nil {
		t.Fatal("a message with too many tags was sent")
	}
	spans := tr.ended("send trace.orders")
	if len(spans) != 1 {
		t.Fatalf("%d send spans ended, want 1", len(spans))
	}
	s := spans[0]
	if s.Status().Code != codes.Error || !strings.Contains(s.Status().Description, m.ID()) {
		t.Errorf("span status %+v, want an error naming the message", s.Status())
	}
	if len(s.Events()) == 0 || s.Events()[0].Name != "exception" {
		t.Errorf("span events %+v, want the error recorded", s.Events())
	}
	wantAttrs(t, s, map[string]string{"error.type": "_OTHER"})

	// An asynchronous send too, reported failed to its listener.
	failed := make(chan error, 1)
	p.SendAsync(m, qmq.SendFunc(func(_ *qmq.Message, err error) { failed <- err }))
	if err := <-failed; err == nil {
		t.Fatal("an asynchronous send of a message with too many tags succeeded")
	}
	if spans := tr.ended("send trace.orders"); len(spans) != 2 || spans[1].Status().Code != codes.Error {
		t.Fatalf("send spans after the asynchronous send: %d, want 2, the second an error", len(spans))
	}
}

// A delayed message carries its context through the delay: the handler's
// span, after it, is a child of the send's.
func TestTraceThroughADelay(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, tr)
	var got received
	sub, err := qmq.Subscribe(n.ClientAddr(), "trace.later", "g", func(_ context.Context, m *qmq.Message) error {
		got.add(m)
		return nil
	}, qmq.WithTracerProvider(tr.tp), qmq.WithPullWait(200*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	m := p.GenerateMessage("trace.later")
	m.SetDelay(500 * time.Millisecond)
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	send := tr.ended("send trace.later")[0]
	wantAttrs(t, send, map[string]string{"messaging.qmq.message.deliver_at": m.DeliverAt().UTC().Format(time.RFC3339Nano)})
	process := tr.await(t, "process trace.later", 1)[0]
	if due := m.DeliverAt().Truncate(time.Millisecond); process.StartTime().Before(due) {
		t.Errorf("handled %s before its delivery time", due.Sub(process.StartTime()))
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanContext().TraceID() != send.SpanContext().TraceID() {
		t.Errorf("the delayed message's process span has parent %s of trace %s, want the send span %s of trace %s",
			process.Parent().SpanID(), process.SpanContext().TraceID(), send.SpanContext().SpanID(), send.SpanContext().TraceID())
	}
}

// A message nacked and delivered again is handled in two spans of the
// send's trace, each a child of the send's span, the first failed, each
// with its delivery.
func TestTraceThroughARetry(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, tr)
	setRetries(t, n, "jobs", "workers", 50*time.Millisecond, 10)
	subscribeJobs(t, n, func(_ context.Context, m *qmq.Message) error {
		if m.Deliveries() == 1 {
			return errors.New("not yet")
		}
		return nil
	}, qmq.WithTracerProvider(tr.tp))
	m := p.GenerateMessage("jobs")
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	send := tr.ended("send jobs")[0]
	spans := tr.await(t, "process jobs", 2)
	if len(spans) != 2 {
		t.Fatalf("%d process spans, want 2", len(spans))
	}
	for i, s := range spans {
		if s.Parent().SpanID() != send.SpanContext().SpanID() || s.SpanContext().TraceID() != send.SpanContext().TraceID() {
			t.Errorf("delivery %d's span has parent %s of trace %s, want the send span %s of trace %s", i+1,
				s.Parent().SpanID(), s.SpanContext().TraceID(), send.SpanContext().SpanID(), send.SpanContext().TraceID())
		}
		wantAttrs(t, s, map[string]string{"messaging.qmq.message.deliveries": fmt.Sprint(i + 1), "messaging.message.id": m.ID(),
			"messaging.consumer.group.name": "workers"})
	}
	if st := spans[0].Status(); st.Code != codes.Error || st.Description != "not yet" {
		t.Errorf("the failed delivery's span status %+v, want the handler's error", st)
	}
	if st := spans[1].Status(); st.Code != codes.Unset {
		t.Errorf("the handled delivery's span status %+v, want unset", st)
	}
}

// Puller.Handle runs a handler in the span of handling a pulled message,
// a child of the send's.
func TestTracePullerHandle(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, tr)
	c, err := qmq.NewPuller(n.ClientAddr(), "trace.pulled", "g", qmq.WithTracerProvider(tr.tp), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := p.SendMessage(ctx, p.GenerateMessage("trace.pulled")); err != nil {
		t.Fatal(err)
	}
	send := tr.ended("send trace.pulled")[0]
	got := pullN(ctx, t, c, 1, "the message")
	var inHandler trace.SpanContext
	failure := errors.New("downstream down")
	err = c.Handle(ctx, got[0], func(ctx context.Context, m *qmq.Message) error {
		inHandler = trace.SpanContextFromContext(ctx)
		return failure
	})
	if !errors.Is(err, failure) {
		t.Fatalf("Handle returned %v, want the handler's error", err)
	}
	process := tr.ended("process trace.pulled")
	if len(process) != 1 {
		t.Fatalf("%d process spans, want 1", len(process))
	}
	if process[0].Parent().SpanID() != send.SpanContext().SpanID() || !process[0].SpanContext().Equal(inHandler) ||
		process[0].Status().Code != codes.Error {
		t.Errorf("process span: parent %s (want the send's %s), handler's context %v (want the span's), status %v",
			process[0].Parent().SpanID(), send.SpanContext().SpanID(), inHandler.SpanID(), process[0].Status())
	}
	if err := c.Ack(ctx, got...); err != nil {
		t.Fatal(err)
	}
}

// With tracing off (no provider given, none installed) the messages are
// stored as the producer made them: no trace property is added, even when
// the consumer traces.
func TestTraceOffAddsNoProperty(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, nil)
	var got received
	sub, err := qmq.Subscribe(n.ClientAddr(), "trace.off", "g", func(_ context.Context, m *qmq.Message) error {
		got.add(m)
		return nil
	}, qmq.WithTracerProvider(tr.tp), qmq.WithPullWait(200*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	m := p.GenerateMessage("trace.off")
	m.SetString("k", "v")
	if err := p.SendMessage(ctx, m); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 20*time.Second, "the message", func() bool { return len(got.all()) == 1 })
	in := got.all()[0]
	if props := in.Properties(); !maps.Equal(props, map[string]string{"k": "v"}) {
		t.Errorf("stored properties %v, want only k=v", props)
	}
	if _, ok := in.Property("traceparent"); ok {
		t.Error("a message sent with tracing off carries a traceparent")
	}
	// The consumer, tracing, handles it in a trace of its own.
	process := tr.await(t, "process trace.off", 1)[0]
	if process.Parent().IsValid() {
		t.Errorf("the process span of a message without a context has parent %s", process.Parent().SpanID())
	}
}

// A message at its limit of properties, or of size, is sent without the
// context rather than refused; the send's span says so. One carrying a
// context of its own is sent with it, and the span links to it.
func TestTraceInjectionRespectsTheLimits(t *testing.T) {
	tr := newTraced(t)
	p, err := qmq.NewProducer("127.0.0.1:1", qmq.WithTracerProvider(tr.tp))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := context.Background()

	plain := p.GenerateMessage("trace.limits")
	props, err := qmq.WireProperties(ctx, p, plain)
	if err != nil {
		t.Fatal(err)
	}
	if !traceparent.MatchString(props["traceparent"]) || len(props) != 1 {
		t.Fatalf("a plain message is sent with %v, want only a traceparent", props)
	}

	full := p.GenerateMessage("trace.limits")
	for i := range qmq.MaxProperties {
		full.SetInt(fmt.Sprint("p", i), int64(i))
	}
	big := p.GenerateMessage("trace.limits")
	big.SetBody(make([]byte, qmq.MaxBodyLen))
	value := strings.Repeat("v", qmq.MaxPropertyValueLen)
	for i := 0; p.Check(big) == nil; i++ {
		big.SetString(fmt.Sprint("p", i), value)
	}
	// Now over by less than a value: shorten the last one until it fits
	// with fewer bytes to spare than a traceparent takes.
	last := fmt.Sprint("p", len(big.Properties())-1)
	for n := len(value); p.Check(big) != nil; n -= 16 {
		big.SetString(last, value[:n])
	}
	for i, m := range []*qmq.Message{full, big} {
		props, err := qmq.WireProperties(ctx, p, m)
		if err != nil {
			t.Fatalf("message %d at its limit: %v", i, err)
		}
		if _, ok := props["traceparent"]; ok {
			t.Errorf("message %d, at its limit, was given a traceparent", i)
		}
		if got := qmq.TraceSkipped(p); got != int64(i+1) {
			t.Errorf("skipped injections %d, want %d", got, i+1)
		}
		spans := tr.ended("send trace.limits")
		wantAttrs(t, spans[len(spans)-1], map[string]string{"messaging.qmq.trace_context.carried": "false"})
	}

	// A context of the message's own is sent as it is.
	own := p.GenerateMessage("trace.limits")
	const theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	own.SetString("traceparent", theirs)
	props, err = qmq.WireProperties(ctx, p, own)
	if err != nil {
		t.Fatal(err)
	}
	if props["traceparent"] != theirs {
		t.Errorf("a message's own traceparent was sent as %q", props["traceparent"])
	}
	spans := tr.ended("send trace.limits")
	if links := spans[len(spans)-1].Links(); len(links) != 1 || links[0].SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" {
		t.Errorf("the send span's links %+v, want the message's own context", links)
	}
}

// WithPropagator sets how the context travels: here W3C trace context and
// baggage, which the handler finds in its ctx.
func TestTraceWithPropagator(t *testing.T) {
	tr := newTraced(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	p, err := qmq.NewProducer("127.0.0.1:1", qmq.WithTracerProvider(tr.tp), qmq.WithPropagator(prop))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := prop.Extract(context.Background(), propagation.MapCarrier{"baggage": "tenant=acme"})
	props, err := qmq.WireProperties(ctx, p, p.GenerateMessage("trace.prop"))
	if err != nil {
		t.Fatal(err)
	}
	if props["baggage"] != "tenant=acme" || !traceparent.MatchString(props["traceparent"]) {
		t.Errorf("sent with %v, want the baggage and a traceparent", props)
	}
}

// A client given no provider uses the global one once the application
// installs it, even a client made before. The global provider delegates
// only to the first one installed, so the test installs it in a process
// of its own: this test binary, run again for this test alone.
func TestTraceUsesTheGlobalProvider(t *testing.T) {
	if os.Getenv("QMQ_TEST_TRACE_GLOBAL") == "" {
		cmd := exec.Command(os.Args[0], "-test.run", "^TestTraceUsesTheGlobalProvider$", "-test.count", "1", "-test.v")
		cmd.Env = append(os.Environ(), "QMQ_TEST_TRACE_GLOBAL=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: TestTraceUsesTheGlobalProvider") {
			t.Fatalf("the test in a process of its own: %v\n%s", err, out)
		}
		return
	}
	before, err := qmq.NewProducer("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if props, err := qmq.WireProperties(context.Background(), before, before.GenerateMessage("trace.global")); err != nil || len(props) != 0 {
		t.Fatalf("with no provider installed, sent with %v (%v), want nothing added", props, err)
	}
	tr := newTraced(t)
	otel.SetTracerProvider(tr.tp)
	after, err := qmq.NewProducer("127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	for i, p := range []*qmq.Producer{before, after} {
		props, err := qmq.WireProperties(context.Background(), p, p.GenerateMessage("trace.global"))
		if err != nil || !traceparent.MatchString(props["traceparent"]) {
			t.Errorf("producer %d, the global provider installed, sent with %v (%v), want a traceparent", i, props, err)
		}
	}
	if n := len(tr.ended("send trace.global")); n != 2 {
		t.Errorf("%d send spans recorded by the global provider, want 2", n)
	}
}

// A context the application put in a message itself (MessageCarrier),
// one made in a database transaction for an outbox row, say, runs through
// to the handler: its span is the handler's parent, and the send's span
// links to it.
func TestTraceMessageCarrier(t *testing.T) {
	tr := newTraced(t)
	n, p, ctx := tracedBroker(t, tr)
	var got received
	sub, err := qmq.Subscribe(n.ClientAddr(), "trace.kept", "g", func(_ context.Context, m *qmq.Message) error {
		got.add(m)
		return nil
	}, qmq.WithTracerProvider(tr.tp), qmq.WithPullWait(200*time.Millisecond), qmq.WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Stop()
	tctx, made := tr.tp.Tracer("app").Start(ctx, "place order")
	m := p.GenerateMessage("trace.kept")
	propagation.TraceContext{}.Inject(tctx, qmq.MessageCarrier(m))
	made.End()
	kept, err := m.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	var later qmq.Message
	if err := later.UnmarshalBinary(kept); err != nil {
		t.Fatal(err)
	}
	if err := p.SendMessage(ctx, &later); err != nil { // no span in ctx: the send's span is a root
		t.Fatal(err)
	}
	send := tr.ended("send trace.kept")[0]
	if links := send.Links(); len(links) != 1 || links[0].SpanContext.SpanID() != made.SpanContext().SpanID() {
		t.Errorf("the send span's links %+v, want the span that made the message", links)
	}
	process := tr.await(t, "process trace.kept", 1)[0]
	if process.Parent().SpanID() != made.SpanContext().SpanID() || process.SpanContext().TraceID() != made.SpanContext().TraceID() {
		t.Errorf("the process span's parent %s, want the span that made the message, %s", process.Parent().SpanID(), made.SpanContext().SpanID())
	}
	if sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(ctx, qmq.MessageCarrier(got.all()[0]))); !sc.Equal(made.SpanContext().WithRemote(true)) {
		t.Errorf("the received message's context %v, want the one put there", sc)
	}
}
