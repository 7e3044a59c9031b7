package qmq

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/qmqgo/qmq/internal/message"
)

// TraceOption turns on or shapes the spans of a Producer, Puller or
// Subscription: WithTracerProvider and WithPropagator. It is an option
// of NewProducer, NewPuller and Subscribe alike.
type TraceOption struct {
	set func(*tracing)
}

// tracing is how a client makes spans and carries their context in
// messages.
type tracing struct {
	provider   trace.TracerProvider // nil: the global one (otel.GetTracerProvider)
	propagator propagation.TextMapPropagator
	fields     []string     // the propagator's properties
	tracer     trace.Tracer // made by setup
}

func (o TraceOption) apply(t *tracing) {
	if o.set != nil {
		o.set(t)
	}
}

func (o TraceOption) applyProducer(p *producerOptions)   { o.apply(&p.tracing) }
func (o TraceOption) applyPuller(p *pullerOptions)       { o.apply(&p.consumerOptions.tracing) }
func (o TraceOption) applySubscribe(p *subscribeOptions) { o.apply(&p.consumerOptions.tracing) }

// WithTracerProvider makes the client's spans with tp. Without it they are
// made with the global provider (otel.GetTracerProvider), a no-op one
// until the application installs its own with otel.SetTracerProvider
// (before or after the client is made): a client that neither is given a
// provider nor finds one installed makes no span that records, and adds
// nothing to the messages it sends. A nil tp means the global provider.
//
// A Producer's span of a send ("send <subject>", kind PRODUCER) is a child
// of the span in SendMessage's ctx (SendAsync's has none: see
// MessageCarrier), and lasts
// until the broker group has committed the message, or the send failed
// (then its status is Error). Its context is added to the properties the
// message is sent with (not to the Message itself), by the propagator
// (WithPropagator): the W3C "traceparent" and "tracestate" by default.
// A message that carries a context of its own already (MessageCarrier)
// is sent with it, and the span links to it. One so near its limits
// (MaxProperties, MaxMessageSize) that the context would take it over is
// sent without it, rather than refused: the span's attribute
// "messaging.qmq.trace_context.carried" says false.
//
// A Subscription's span of a handler call ("process <subject>", kind
// CONSUMER) is a child of the context the message carries: the same
// send's span on every delivery of the message (its attribute
// "messaging.qmq.message.deliveries" counts them), after a delay too. The
// handler's ctx carries it, so that spans the handler starts nest under
// it; a handler's error sets its status to Error. Puller.Handle does the
// same for a message a Puller pulled. The attributes are those of the
// OpenTelemetry messaging semantic conventions (messaging.system "qmq",
// messaging.destination.name the subject, messaging.message.id,
// messaging.consumer.group.name, messaging.operation.name and .type).
func WithTracerProvider(tp trace.TracerProvider) TraceOption {
	return TraceOption{set: func(t *tracing) { t.provider = tp }}
}

// WithPropagator sets how a span's context travels in a message's
// properties. Default propagation.TraceContext{}: the W3C properties
// "traceparent" and "tracestate". A producer and the consumers of its
// messages must agree on it. A nil p means the default.
func WithPropagator(p propagation.TextMapPropagator) TraceOption {
	return TraceOption{set: func(t *tracing) { t.propagator = p }}
}

// tracerName names the SDK's tracer (its instrumentation scope).
const tracerName = "github.com/qmqgo/qmq"

// setup makes the tracer, once the options are applied.
func (t *tracing) setup() {
	if t.provider == nil {
		t.provider = otel.GetTracerProvider()
	}
	if t.propagator == nil {
		t.propagator = propagation.TraceContext{}
	}
	t.fields = t.propagator.Fields()
	t.tracer = t.provider.Tracer(tracerName)
}

// The attributes of the SDK's spans: the OpenTelemetry messaging semantic
// conventions' (v1.40.0), and the SDK's own under messaging.qmq.
const (
	attrSystem        = attribute.Key("messaging.system")
	attrOperationName = attribute.Key("messaging.operation.name")
	attrOperationType = attribute.Key("messaging.operation.type")
	attrDestination   = attribute.Key("messaging.destination.name")
	attrMessageID     = attribute.Key("messaging.message.id")
	attrBodySize      = attribute.Key("messaging.message.body.size")
	attrConsumerGroup = attribute.Key("messaging.consumer.group.name")
	attrErrorType     = attribute.Key("error.type")

	attrDeliveries  = attribute.Key("messaging.qmq.message.deliveries")
	attrDeliverAt   = attribute.Key("messaging.qmq.message.deliver_at")
	attrDuplicate   = attribute.Key("messaging.qmq.message.duplicate")
	attrBrokerGroup = attribute.Key("messaging.qmq.broker_group")
	attrCarried     = attribute.Key("messaging.qmq.trace_context.carried")
)

// The attributes every span of a kind has.
var (
	systemQMQ     = attrSystem.String("qmq")
	opSend        = attrOperationName.String("send")
	opTypeSend    = attrOperationType.String("send")
	opProcess     = attrOperationName.String("process")
	opTypeProcess = attrOperationType.String("process")
)

// sendSpan is the span of one send, from the call until the broker group
// acknowledges the message (or the send fails).
type sendSpan struct {
	span  trace.Span
	ended atomic.Bool
}

// startSend starts the span of sending m (kind PRODUCER), as a child of
// the span in ctx, and returns ctx with it. When m already carries a
// context of its own (one the application or the outbox put there), the
// span links to it.
func (p *Producer) startSend(ctx context.Context, m *Message) (context.Context, *sendSpan) {
	t := &p.opts.tracing
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, systemQMQ, opSend, opTypeSend,
		attrDestination.String(m.subject), attrMessageID.String(m.id), attrBodySize.Int(len(m.body)))
	if !m.deliverAt.IsZero() {
		attrs = append(attrs, attrDeliverAt.String(m.deliverAt.UTC().Format(time.RFC3339Nano)))
	}
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...)}
	if carriesContext(t.fields, m) {
		if sc := trace.SpanContextFromContext(t.propagator.Extract(context.Background(), propsCarrier{props: &m.props})); sc.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sc}))
		}
	}
	ctx, span := t.tracer.Start(ctx, "send "+m.subject, opts...)
	return ctx, &sendSpan{span: span}
}

// carriesContext says whether m has a property the propagator sets.
func carriesContext(fields []string, m *Message) bool {
	for _, f := range fields {
		if _, ok := m.Property(f); ok {
			return true
		}
	}
	return false
}

// inject adds the context of the send's span in ctx to w, m as it is
// sent, in a copy of m's properties (m is not changed). Nothing is added
// when the span's context is not valid (no tracer provider installed, and
// no span in the caller's context), when m carries a context of its own
// (it is sent as it is), or when adding it would take the message over a
// limit: then the span says so and the send goes on without it (counted
// in traceSkipped).
func (p *Producer) inject(ctx context.Context, m *Message, w *message.Message) {
	t := &p.opts.tracing
	span := trace.SpanFromContext(ctx)
	if !span.SpanContext().IsValid() || carriesContext(t.fields, m) {
		return
	}
	props := slices.Clip(m.props)
	t.propagator.Inject(ctx, propsCarrier{props: &props})
	if len(props) == len(m.props) {
		return
	}
	w.Properties = props
	if w.Check() != nil {
		w.Properties = m.props
		p.traceSkipped.Add(1)
		span.SetAttributes(attrCarried.Bool(false))
		span.AddEvent("trace context not carried: the message is at a limit of its properties or its size")
	}
}

// end ends the send's span with its outcome; only the first call counts.
func (s *sendSpan) end(m *Message, err error) {
	if !s.ended.CompareAndSwap(false, true) {
		return
	}
	if err != nil {
		s.span.RecordError(err)
		s.span.SetStatus(codes.Error, err.Error())
		s.span.SetAttributes(attrErrorType.String(errorType(err)))
	} else if s.span.IsRecording() {
		s.span.SetAttributes(attrDuplicate.Bool(m.duplicate.Load()))
	}
	s.span.End()
}

// errorType is error.type's value for err: the wire code a broker answered
// with, or "_OTHER".
func errorType(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code.String()
	}
	return "_OTHER"
}

// startProcess starts the span of handling m, delivered to a consumer of
// group, as a child of the span that sent it (the context m carries), and
// returns ctx with it.
func (t *tracing) startProcess(ctx context.Context, group string, m *Message) (context.Context, trace.Span) {
	ctx = t.propagator.Extract(ctx, propsCarrier{props: &m.props})
	return t.tracer.Start(ctx, "process "+m.subject, trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(systemQMQ, opProcess, opTypeProcess,
			attrDestination.String(m.subject), attrConsumerGroup.String(group), attrMessageID.String(m.id),
			attrBodySize.Int(len(m.body)), attrDeliveries.Int(int(m.deliveries)), attrBrokerGroup.String(m.brokerGroup)))
}

// endProcess ends a handler's span with what the handler returned.
func endProcess(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrorType.String(errorType(err)))
	}
	span.End()
}

// MessageCarrier returns a carrier of a span's context in m's properties,
// for a propagator's Inject and Extract: for an application that puts a
// context in a message itself, such as one it keeps to send later (in an
// outbox row, say) so that the trace runs from where it made the message,
// or that reads the context of a message received. A message that
// carries a context of its own is sent with it: the send's span links to
// it (see WithTracerProvider). What Inject sets counts towards the
// message's limits like any property.
func MessageCarrier(m *Message) propagation.TextMapCarrier { return propsCarrier{props: &m.props} }

// propsCarrier carries a span's context in a message's properties.
type propsCarrier struct {
	props *[]message.Property
}

func (c propsCarrier) Get(key string) string {
	for _, p := range *c.props {
		if p.Key == key {
			return p.Value
		}
	}
	return ""
}

func (c propsCarrier) Set(key, value string) {
	for i := range *c.props {
		if (*c.props)[i].Key == key {
			(*c.props)[i].Value = value
			return
		}
	}
	*c.props = append(*c.props, message.Property{Key: key, Value: value})
}

func (c propsCarrier) Keys() []string {
	keys := make([]string, len(*c.props))
	for i, p := range *c.props {
		keys[i] = p.Key
	}
	return keys
}
