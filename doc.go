// Package qmq is the Go client of QMQ-on-Raft: QMQ's programming model in
// idiomatic Go.
//
//	p, err := qmq.NewProducer("127.0.0.1:6222")
//	m := p.GenerateMessage("orders.created")
//	m.SetString("order", "42")
//	err = p.SendMessage(ctx, m)
//
//	sub, err := qmq.Subscribe("127.0.0.1:6222", "orders.created", "billing",
//		func(ctx context.Context, m *qmq.Message) error { return bill(ctx, m.String("order")) })
//	defer sub.Close()
//
// Clients take the address of any node of the cluster (a metaserver node,
// or a broker node, which forwards): they ask where each subject lives,
// cache the answer, and talk to its broker groups directly. A subject lives
// in one or more broker groups; producers spread its messages over them,
// consumers pull from all of them.
//
// # Sending
//
// A Producer makes messages with GenerateMessage, sets typed properties,
// tags and a body, and sends them with SendMessage (returns once the broker
// group has committed and applied the message) or SendAsync (reports to a
// SendListener). Concurrent sends are batched into one request; retriable
// failures (a leader change, a lost connection) are retried with the same
// message id, which the broker deduplicates. Message.SetID gives a message
// an id of the caller's own, so that a resend from another process is
// stored once too. Message.MarshalBinary and UnmarshalBinary keep a
// message to send later (package outbox keeps them in the application's
// database, written in its transactions), and Producer.Check says what a
// send would refuse. The limits of a message are constants here
// (MaxMessageSize, MaxBodyLen, MaxTags, ...).
//
// # Consuming
//
// Subscribe delivers a subject's messages to a Handler as one consumer of a
// consumer group, returning a Subscription: every group gets every
// message, and within a group each message goes to one consumer, whatever
// the number of consumers. A new group starts with the messages sent after
// its first pull (StartAt(Earliest) and StartAtTime choose otherwise).
// A handler that returns nil acknowledges its message; an error nacks it,
// and the broker hands it to the group again after the group's backoff
// (5 s doubling to 15 min by default), or when a RetryError (RetryAfter,
// RetryAt) returned or wrapped says, until its group's most deliveries
// (32 by default) make it a dead letter. Message.Deliveries counts the
// deliveries; Message.InProgress holds off the group's ack wait (30 s by
// default), after which a message not acknowledged goes to the group
// again. Drain (and Close, a Drain of at most 30 s) handles what was
// pulled before the subscription goes down, Stop leaves it to come again;
// a handler's context is cancelled when a Drain gives up on it. Puller is
// the plain pull API for callers that drive consumption themselves (Pull,
// Ack, Nack).
//
// A consumer receives only messages with any of some tags (WithTags) or
// with every one (WithAllTags); with WithAtMostOnce its messages count as
// consumed as they are handed out; with WithBroadcast every instance gets
// every message, consuming as a group of its own.
//
// # Options
//
// Each constructor takes the options of what it makes: NewProducer
// ProducerOptions, NewPuller PullerOptions and Subscribe SubscribeOptions;
// ConsumerOptions (WithConsumerName, WithLogger, StartAt, StartAtTime,
// WithTags, WithAllTags, WithAtMostOnce, WithBroadcast) are both. A
// ConnOption is an option of every one of them, and of the operators'
// admin.New: WithTLS connects over TLS with PEM files (a CA, and the
// client's certificate and key), reloaded when they are replaced;
// WithTLSConfig with a *tls.Config of the caller's; WithApp names the
// application the client works for. Without one, clients connect over
// plaintext TCP. A TraceOption (WithTracerProvider, WithPropagator) is an
// option of NewProducer, NewPuller and Subscribe.
//
// # Traces
//
// Producers and consumers make OpenTelemetry spans, following the
// messaging semantic conventions: a send's span (kind PRODUCER, "send
// <subject>", a child of the span in SendMessage's ctx) lasts until the
// broker group has committed the message or the send failed, and its
// context travels in the message's properties (W3C "traceparent" and
// "tracestate" unless WithPropagator says otherwise); a handler's span
// (kind CONSUMER, "process <subject>") is a child of that context, on
// every delivery of the message, after a delay too, and the handler's
// ctx carries it, so that the application's own spans nest under it
// (Puller.Handle does the same for a Puller's caller). Spans are made
// with the provider WithTracerProvider gives, or else the global one
// (otel.GetTracerProvider): a no-op until the application installs one,
// and then no property is added to a message. A message at its limits is
// sent without the context rather than refused.
//
// # Errors
//
// The sentinel errors (ErrInvalidName, ErrMessageTooLarge, ErrStaleAck,
// ErrUnreachable, ...) are matched with errors.Is, whether the SDK found
// the cause before sending or a node answered it; a node's answer is also
// an *Error with its wire code.
//
// # Operators
//
// Package github.com/qmqgo/qmq/admin is the operator API: broker groups
// and their nodes, subjects' routes, consumer groups and their dead
// letters, applications. This package links only the wire protocol, the
// message encoding, internal pieces and the OpenTelemetry API, never the
// broker's code or Raft.
package qmq
