package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

func benchHostileCommand() *cli.Command {
	return &cli.Command{
		Name:  "hostile",
		Usage: "act as misbehaving clients against a node, to measure what they cost well-behaved ones",
		Description: "For --duration, --loops goroutines each open a connection, say Hello with a wrong secret\n" +
			"for --as, and close it, over and over, while --idle connections are opened and held\n" +
			"without a word, spread over the --from source addresses (opened again whenever the node\n" +
			"closes one for saying nothing). Run `qmqctl bench produce` (as a\n" +
			"real application) at the same time, and alone, to see the difference. It uses the global\n" +
			"--tls-* flags to reach a TLS node. It prints what the node answered: refused hellos,\n" +
			"connections refused by a connection limit, and other errors; an interrupt (SIGINT,\n" +
			"SIGTERM) ends it early.",
		Flags: []cli.Flag{
			&cli.IntFlag{Name: "loops", Value: 4, Usage: "`N` goroutines saying Hello with a wrong secret in a loop"},
			&cli.IntFlag{Name: "idle", Value: 1000, Usage: "hold `N` connections open without a word"},
			&cli.StringFlag{Name: "from", Value: "127.0.0.1", Usage: "comma-separated loopback source `IPS` the connections are spread over"},
			&cli.DurationFlag{Name: "duration", Value: 30 * time.Second, Usage: "run for `DUR`"},
			&cli.StringFlag{Name: "as", Value: "hostile", Usage: "the application `CODE` the wrong secrets are given for"},
		},
		Action: func(c *cli.Context) error {
			var cfg *tls.Config
			if f := tlsFiles(c); f.CA != "" {
				r, err := tlsconf.Load(tlsconf.Files(f), tlsconf.Options{})
				if err != nil {
					return fmt.Errorf("tls: %w", err)
				}
				cfg = r.Client()
			}
			target := strings.Split(c.String("server"), ",")[0]
			var from []net.IP
			for _, s := range strings.Split(c.String("from"), ",") {
				ip := net.ParseIP(strings.TrimSpace(s))
				if ip == nil || !ip.IsLoopback() {
					return fmt.Errorf("--from %q: give loopback IP addresses", s)
				}
				from = append(from, ip)
			}
			h := &hostile{target: target, tls: cfg, from: from, app: c.String("as")}
			// An interrupt ends the run early, and its counts are printed.
			sigCtx, stop := signalContext()
			defer stop()
			ctx, cancel := context.WithTimeout(sigCtx, c.Duration("duration"))
			defer cancel()
			h.run(ctx, c.Int("loops"), c.Int("idle"), func() {
				fmt.Fprintf(c.App.ErrWriter, "holding %d connections; %d goroutines saying wrong secrets\n", h.held.Load(), c.Int("loops"))
			})
			fmt.Fprintf(c.App.Writer, "hellos refused %d, connections held %d, refused by a limit %d, other errors %d, idle connections closed by the node %d\n",
				h.refused.Load(), h.held.Load(), h.limited.Load(), h.failed.Load(), h.closedIdle.Load())
			if err := h.firstFailure.Load(); err != nil {
				fmt.Fprintf(c.App.Writer, "the first other error: %v\n", *err)
			}
			return interruption(sigCtx)
		},
	}
}

// hostile is a set of misbehaving clients of one node.
type hostile struct {
	target string
	tls    *tls.Config
	from   []net.IP
	app    string
	next   atomic.Uint64 // picks the next source address

	refused, held, limited, failed, closedIdle atomic.Int64
	firstFailure                               atomic.Pointer[error] // the first of the other errors
}

// run holds idle connections, then says wrong secrets in loops until
// until ends; ready is called once the idle connections are open.
func (h *hostile) run(until context.Context, loops, idle int, ready func()) {
	// The clients end when until does, by cancellation: a dial given its
	// deadline times out by the kernel's clock a moment before it ends,
	// and that i/o timeout would count as another error.
	ctx, cancel := context.WithCancel(context.WithoutCancel(until))
	defer cancel()
	defer context.AfterFunc(until, cancel)()
	var wg sync.WaitGroup
	opened := make(chan struct{}, idle)
	for range idle {
		wg.Go(func() { h.holdIdle(ctx, opened) })
	}
	for range idle {
		select {
		case <-opened:
		case <-ctx.Done():
		}
	}
	ready()
	for range loops {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := h.wrongHello(ctx); ctx.Err() == nil { // one cut short by the end is not counted
					h.count(err)
				}
			}
		})
	}
	wg.Wait()
}

// holdIdle holds one connection open without a word until ctx ends,
// opening it again whenever the node closes it for saying nothing (as a
// node checking applications does), and giving up when the node refuses
// it at a connection limit. It signals opened once, when its first
// attempt is over.
func (h *hostile) holdIdle(ctx context.Context, opened chan<- struct{}) {
	first := true
	defer func() {
		if first {
			opened <- struct{}{}
		}
	}()
	for ctx.Err() == nil {
		c, err := h.dial(ctx)
		if err != nil {
			if ctx.Err() == nil {
				h.count(err)
			}
			return
		}
		h.held.Add(1)
		if first {
			first = false
			opened <- struct{}{}
		}
		stop := context.AfterFunc(ctx, func() { c.Close() })
		f, err := transport.ReadFrame(bufio.NewReader(c), transport.DefaultMaxFrame)
		stop()
		c.Close()
		h.held.Add(-1)
		if ctx.Err() != nil {
			h.held.Add(1) // held to the end: counted as held
			return
		}
		if err == nil {
			// TOO_MANY_CONNECTIONS: not held after all.
			_, err = transport.DecodeStatus(f.Payload)
			h.count(err)
			return
		}
		h.closedIdle.Add(1) // closed for saying nothing: open it again
	}
}

// count files a failure by what the node answered.
func (h *hostile) count(err error) {
	var e *transport.Error
	switch {
	case err == nil:
	case errors.As(err, &e) && e.Code == transport.Unauthenticated:
		h.refused.Add(1)
	case errors.As(err, &e) && e.Code == transport.TooManyConnections:
		h.limited.Add(1)
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled):
	default:
		h.failed.Add(1)
		h.firstFailure.CompareAndSwap(nil, &err)
	}
}

// dial opens a connection from the next source address.
func (h *hostile) dial(ctx context.Context) (net.Conn, error) {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: h.from[h.next.Add(1)%uint64(len(h.from))]}}
	if h.tls == nil {
		return d.DialContext(ctx, "tcp", h.target)
	}
	return (&tls.Dialer{NetDialer: d, Config: h.tls}).DialContext(ctx, "tcp", h.target)
}

// wrongHello connects, says Hello with a wrong secret, reads the answer
// and closes.
func (h *hostile) wrongHello(ctx context.Context) error {
	c, err := h.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	w := bufio.NewWriter(c)
	hello := &transport.HelloRequest{App: h.app, Secret: "qmqs_wrong"}
	if err := transport.WriteFrame(w, transport.Frame{Type: transport.TypeHello, ID: 1, Payload: hello.Encode()}); err != nil {
		return err
	}
	if err := w.Flush(); err != nil {
		return err
	}
	f, err := transport.ReadFrame(bufio.NewReader(c), transport.DefaultMaxFrame)
	if err != nil {
		return err
	}
	_, err = transport.DecodeStatus(f.Payload)
	if err == nil {
		return errors.New("a wrong secret was accepted")
	}
	return err
}
