package main

import (
	"context"
	"strings"
	"sync"

	"github.com/qmqgo/qmq"
)

// sender is the outbox's Sender: a Producer that reports resends and the
// sends answered as duplicates.
type sender struct {
	p      *qmq.Producer
	prefix string // of the order ids this process makes

	mu   sync.Mutex
	sent map[string]bool // message ids this process has begun to send: one per row it sent, for the life of a test's process
}

func newSender(p *qmq.Producer, prefix string) *sender {
	return &sender{p: p, prefix: prefix + "-", sent: map[string]bool{}}
}

// Check is the Producer's.
func (s *sender) Check(m *qmq.Message) error { return s.p.Check(m) }

// SendMessage sends m with the Producer. A message this process sent
// before, or whose order another process made, is a watchdog's resend;
// a send answered as a duplicate stored nothing.
func (s *sender) SendMessage(ctx context.Context, m *qmq.Message) error {
	order := m.String("order")
	s.mu.Lock()
	again := s.sent[m.ID()]
	s.sent[m.ID()] = true
	s.mu.Unlock()
	if again || !strings.HasPrefix(order, s.prefix) {
		emit("resend", order, m.ID())
	}
	err := s.p.SendMessage(ctx, m)
	if err == nil && m.Duplicate() {
		emit("duplicate", order, m.ID())
	}
	return err
}
