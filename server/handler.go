package server

import (
	"context"
	"encoding/json"
	"time"

	"github.com/qmqgo/qmq/transport"
)

// A broker node's request handlers, by what they serve (transport's
// request types):
//
//	send.go            send: a batch of messages, answered once applied
//	pull.go            pull, register-consumer: long polls and the consumer's registration
//	consume.go         ack, nack, extend, heartbeat: what a consumer settles and its session
//	consumergroups.go  consumer-groups, set-, reset-, forget-consumer-group, dead letters
//	lookup.go          messages: by id, or a subject's by time or sequence
//	brokerconfig.go    broker-config, set-broker-config
//	delays.go          delays
//	membership.go      join, leave, transfer-leader (raftgroup's, the metaserver's too)
//	status.go          status
//	clock_anchor.go    time: a voter's clock, read by a new leader
//	metalink.go        what the metaserver serves, forwarded to it
//
// What a leader runs besides answering requests is in leader.go.

// handle answers one client request, counting it, its time and its error
// by type (and code).
func (n *Node) handle(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	name := t.String()
	n.metrics.requests.WithLabelValues(name).Inc()
	start := time.Now()
	out, err := n.answer(ctx, t, p)
	n.metrics.requestSeconds.WithLabelValues(name).Observe(time.Since(start).Seconds())
	if err != nil {
		n.metrics.requestErrors.WithLabelValues(name, transport.CodeOf(err).String()).Inc()
	}
	return out, err
}

// answer answers one client request by its type.
func (n *Node) answer(ctx context.Context, t transport.Type, p []byte) ([]byte, error) {
	switch t {
	case transport.TypeSend:
		return n.handleSend(ctx, p)
	case transport.TypePull:
		return n.handlePull(ctx, p)
	case transport.TypeAck:
		return n.handleAck(ctx, p)
	case transport.TypeNack:
		return n.handleNack(ctx, p)
	case transport.TypeExtend:
		return n.handleExtend(ctx, p)
	case transport.TypeConsumerGroups:
		return n.handleConsumerGroups(p)
	case transport.TypeRegisterConsumer:
		return n.handleRegisterConsumer(ctx, p)
	case transport.TypeSetConsumerGroup:
		return n.handleSetConsumerGroup(ctx, p)
	case transport.TypeResetConsumerGroup:
		return n.handleResetConsumerGroup(ctx, p)
	case transport.TypeDeadLetters:
		return n.handleDeadLetters(ctx, p)
	case transport.TypeDeadLetterOp:
		return n.handleDeadLetterOp(ctx, p)
	case transport.TypeMessages:
		return n.handleMessages(ctx, p)
	case transport.TypeHeartbeat:
		return n.handleHeartbeat(ctx, p)
	case transport.TypeStatus:
		return json.Marshal(n.Status())
	case transport.TypeDelays:
		return json.Marshal(n.Delays())
	case transport.TypeForgetConsumerGroup:
		return n.handleForgetConsumerGroup(ctx, p)
	case transport.TypeJoin:
		return n.handleJoin(ctx, p)
	case transport.TypeLeave:
		return n.handleLeave(ctx, p)
	case transport.TypeTransfer:
		return n.handleTransfer(p)
	case transport.TypeTime:
		return n.handleTime(p)
	case transport.TypeBrokerConfig:
		return n.handleBrokerConfig(p)
	case transport.TypeSetBrokerConfig:
		return n.handleSetBrokerConfig(ctx, p)
	case transport.TypeSetVersion:
		return n.handleSetVersion(ctx, p)
	case transport.TypeBackup:
		return n.handleBackup(ctx, p)
	case transport.TypeRoute, transport.TypeRegister, transport.TypeDeregister, transport.TypeBrokerHeartbeat,
		transport.TypeCluster, transport.TypeAssign, transport.TypeSetWritable, transport.TypeSubjects, transport.TypeMetaForgetConsumerGroup,
		transport.TypeApps, transport.TypeAppPut, transport.TypeAppRotate, transport.TypeAppDelete:
		return n.forwardToMeta(ctx, t, p)
	}
	return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(t))
}
