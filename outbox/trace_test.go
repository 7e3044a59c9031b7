package outbox

import (
	"context"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/qmqgo/qmq"
)

// TestSendCarriesTheTraceContext: a message written to the outbox under a
// span carries that span's context, so that the trace runs from where it
// was made to its consumers however late it is sent; one written with no
// span carries none; one that carries a context of its own keeps it; and
// the caller's message is not changed.
func TestSendCarriesTheTraceContext(t *testing.T) {
	db := sqliteDB(t)
	rec := newRecorder(nil)
	ob := db.newOutbox(t, rec, Config{})
	p := newProducer(t, "127.0.0.1:1")
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("app").Start(context.Background(), "create order")
	defer span.End()

	traced, untraced, own := p.GenerateMessage("orders"), p.GenerateMessage("orders"), p.GenerateMessage("orders")
	const theirs = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	qmq.MessageCarrier(own).Set("traceparent", theirs)
	err := ob.WithTx(ctx, func(tx *Tx) error {
		for _, s := range []struct {
			ctx context.Context
			m   *qmq.Message
		}{{ctx, traced}, {context.Background(), untraced}, {ctx, own}} {
			if err := tx.Send(s.ctx, s.m); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	sent := func(m *qmq.Message) string {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		if rec.last[m.ID()] == nil {
			t.Fatalf("%s was not sent", m.ID())
		}
		return qmq.MessageCarrier(rec.last[m.ID()]).Get("traceparent")
	}
	sc := span.SpanContext()
	if got := sent(traced); !strings.Contains(got, sc.TraceID().String()) || !strings.Contains(got, sc.SpanID().String()) {
		t.Errorf("sent under a span: traceparent %q, want the span's trace %s and id %s", got, sc.TraceID(), sc.SpanID())
	}
	if got := qmq.MessageCarrier(traced).Get("traceparent"); got != "" {
		t.Errorf("the caller's message was changed: traceparent %q", got)
	}
	if got := sent(untraced); got != "" {
		t.Errorf("sent under no span: traceparent %q, want none", got)
	}
	if got := sent(own); got != theirs {
		t.Errorf("a message with a context of its own: sent with %q, want its own %q", got, theirs)
	}
}
