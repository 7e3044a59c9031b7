package qmq

import (
	"context"
	"errors"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// What tracing costs a send and a handler call, beside what a send costs
// before it reaches the network (check: the message as sent, validated):
// off (the global provider, a no-op one as none is installed) and on (an
// OpenTelemetry SDK provider sampling every span, exporting none).
//
//	go test . -run '^$' -bench 'Trace' -benchmem
func BenchmarkTrace(b *testing.B) {
	on := sdktrace.NewTracerProvider()
	defer on.Shutdown(context.Background())
	for _, c := range []struct {
		name string
		opts []TraceOption
	}{{"off", nil}, {"on", []TraceOption{WithTracerProvider(on)}}} {
		var po producerOptions
		po.now = time.Now
		po.maxDelay = DefaultMaxDelay
		for _, o := range c.opts {
			o.applyProducer(&po)
		}
		po.tracing.setup()
		p := &Producer{opts: po}
		m := p.GenerateMessage("orders.created")
		m.SetString("order", "42")
		m.SetBody([]byte("hello"))
		ctx := context.Background()
		b.Run("send-check-only/"+c.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := p.check(m); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run("send/"+c.name, func(b *testing.B) {
			for b.Loop() {
				sctx, s := p.startSend(ctx, m)
				w, err := p.check(m)
				if err != nil {
					b.Fatal(err)
				}
				p.inject(sctx, m, w)
				s.end(m, nil)
			}
		})
		if c.name == "off" {
			if w, _ := p.check(m); len(w.Properties) != 1 {
				b.Fatalf("tracing off, the message is sent with %d properties, want its 1", len(w.Properties))
			}
		}
		in := &Message{id: m.id, subject: m.subject, props: m.props, body: m.body, deliveries: 1}
		failed := errors.New("failed")
		b.Run("process/"+c.name, func(b *testing.B) {
			for b.Loop() {
				_, span := po.tracing.startProcess(ctx, "billing", in)
				endProcess(span, failed)
			}
		})
	}
}
