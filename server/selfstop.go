package server

import "sync"

// selfStop is how a node that stopped itself says so: its state machine
// stopped applying (a failed write, an entry of a newer release), and so
// the node closes. Failed and FailedErr are the node's.
type selfStop struct {
	failed   chan struct{}
	failOnce sync.Once
	failure  error
}

func newSelfStop() selfStop { return selfStop{failed: make(chan struct{})} }

// stop records err as why the node stops and runs then (which closes
// the node) on a goroutine of its own, once: stop is called from where
// the state machine applies, which the node's Close waits for.
func (s *selfStop) stop(err error, then func()) {
	s.failOnce.Do(func() {
		s.failure = err
		close(s.failed)
		go then()
	})
}

// Failed is closed when the node stopped itself; FailedErr then says why.
func (s *selfStop) Failed() <-chan struct{} { return s.failed }

// FailedErr returns why the node stopped itself, once Failed is closed.
func (s *selfStop) FailedErr() error {
	select {
	case <-s.failed:
		return s.failure
	default:
		return nil
	}
}
