package server

import (
	"sync"

	"github.com/qmqgo/qmq/internal/message"
)

// notifier wakes long-polling pulls when their subject may have something
// new: after appends are applied, and after entries are reclaimed. Pulls
// of a subject that has no messages wait on one channel shared by all
// (woken by any append), so that subjects a client makes up leave nothing
// behind.
type notifier struct {
	mu  sync.Mutex
	ch  map[string]chan struct{}
	any chan struct{} // nil until someone waits for any append
}

func newNotifier() *notifier { return &notifier{ch: map[string]chan struct{}{}} }

// wait returns a channel closed at the subject's next change. Take it
// before looking, so a change between looking and waiting is not missed.
func (n *notifier) wait(subject string) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.ch[subject]
	if ch == nil {
		ch = make(chan struct{})
		n.ch[subject] = ch
	}
	return ch
}

// waitAny returns a channel closed at the next append, of any subject.
func (n *notifier) waitAny() <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.any == nil {
		n.any = make(chan struct{})
	}
	return n.any
}

// kick wakes the subject's waiters, and those waiting for any append.
func (n *notifier) kick(subject string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if ch := n.ch[subject]; ch != nil {
		close(ch)
		delete(n.ch, subject)
	}
	if n.any != nil {
		close(n.any)
		n.any = nil
	}
}

// subjects wakes the waiters of every subject in msgs.
func (n *notifier) subjects(msgs []*message.Message) {
	last := ""
	for _, m := range msgs {
		if m.Subject != last {
			n.kick(m.Subject)
			last = m.Subject
		}
	}
}
