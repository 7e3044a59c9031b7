package main

import (
	"context"
	"errors"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

// interrupted is how a command that a signal stopped ends: qmqctl exits
// 128 + the signal's number, 130 for Ctrl-C (SIGINT), 143 for SIGTERM, as
// a shell reports a program the signal killed.
type interrupted struct{ sig os.Signal }

func (e *interrupted) Error() string { return "interrupted by " + e.sig.String() }

func (e *interrupted) status() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

// signalContext is cancelled on SIGINT or SIGTERM, with an *interrupted
// as its cause (see interruption). Its cancel function also restores the
// default handling of both signals: a second one kills.
func signalContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(context.Background())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(&interrupted{s})
		case <-done:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			signal.Stop(sigs)
			close(done)
			cancel(context.Canceled)
		})
	}
}

// interruption returns the error a command ends with when a signal
// cancelled ctx (a signalContext), nil if none did.
func interruption(ctx context.Context) error {
	var e *interrupted
	if errors.As(context.Cause(ctx), &e) {
		return e
	}
	return nil
}
