package qmq_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/fsm"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
	"github.com/qmqgo/qmq/transport"
)

// sentinels are the SDK's exported errors, by name.
var sentinels = map[string]error{
	"ErrUnreachable":      qmq.ErrUnreachable,
	"ErrUnauthenticated":  qmq.ErrUnauthenticated,
	"ErrPermissionDenied": qmq.ErrPermissionDenied,
	"ErrUnsupported":      qmq.ErrUnsupported,
	"ErrClosed":           qmq.ErrClosed,
	"ErrInvalidName":      qmq.ErrInvalidName,
	"ErrInvalidID":        qmq.ErrInvalidID,
	"ErrInvalidMessage":   qmq.ErrInvalidMessage,
	"ErrMessageTooLarge":  qmq.ErrMessageTooLarge,
	"ErrDelayTooLong":     qmq.ErrDelayTooLong,
	"ErrInvalidOption":    qmq.ErrInvalidOption,
	"ErrStaleAck":         qmq.ErrStaleAck,
}

// Every exported error of the package is declared in errors.go, its text
// starts "qmq:", and it is none of an internal package's (whose text
// would send a user to the broker's code).
func TestSentinelsAreTheSDKsOwn(t *testing.T) {
	declared := map[string]bool{}
	for file, f := range sourceFiles(t) {
		for _, d := range f.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.VAR {
				continue
			}
			for _, s := range g.Specs {
				for _, name := range s.(*ast.ValueSpec).Names {
					if !name.IsExported() || !strings.HasPrefix(name.Name, "Err") {
						continue
					}
					declared[name.Name] = true
					if file != "errors.go" {
						t.Errorf("%s is declared in %s, not errors.go", name.Name, file)
					}
				}
			}
		}
	}
	for name := range declared {
		if sentinels[name] == nil {
			t.Errorf("%s is not in this test's list: add it", name)
		}
	}
	internal := []error{message.ErrTooLarge, message.ErrInvalid, limits.ErrName, transport.ErrUnreachable}
	for name, err := range sentinels {
		if !declared[name] {
			t.Errorf("%s is in this test's list but not declared", name)
		}
		if !strings.HasPrefix(err.Error(), "qmq: ") {
			t.Errorf("%s says %q: not starting \"qmq: \"", name, err)
		}
		for _, e := range internal {
			if errors.Is(err, e) {
				t.Errorf("%s is (or wraps) %v, an internal package's error", name, e)
			}
		}
	}
}

// A name that breaks the naming rule is ErrInvalidName wherever the SDK
// finds it (the error keeps its text, and the internal error it wraps).
func TestInvalidNamesAreErrInvalidName(t *testing.T) {
	n, p, ctx := brokerAndProducer(t, nil)
	bad := "orders created" // a space breaks the rule
	check := func(what string, err error, also ...error) {
		t.Helper()
		if !errors.Is(err, qmq.ErrInvalidName) {
			t.Errorf("%s: %v, want ErrInvalidName", what, err)
		}
		for _, a := range append(also, limits.ErrName) {
			if !errors.Is(err, a) {
				t.Errorf("%s: %v no longer wraps %v", what, err, a)
			}
		}
		if err != nil && !strings.Contains(err.Error(), limits.ErrName.Error()) {
			t.Errorf("%s: %q no longer says what the naming rule said", what, err)
		}
	}
	m := p.GenerateMessage(bad)
	check("Producer.Check", p.Check(m))
	check("SendMessage", p.SendMessage(ctx, m))
	failed := make(chan error, 1)
	p.SendAsync(m, qmq.SendFunc(func(_ *qmq.Message, err error) { failed <- err }))
	check("SendAsync", <-failed)

	for _, names := range [][3]string{{bad, "g", "c"}, {"orders", bad, "c"}, {"orders", "g", bad}} {
		pl, err := qmq.NewPuller(n.ClientAddr(), names[0], names[1], qmq.WithConsumerName(names[2]))
		if err == nil {
			pl.Close()
		}
		check("NewPuller "+strings.Join(names[:], "/"), err)
	}
	sub, err := qmq.Subscribe(n.ClientAddr(), "orders", bad, func(context.Context, *qmq.Message) error { return nil })
	if err == nil {
		sub.Close()
	}
	check("Subscribe", err)
	long := strings.Repeat("c", limits.MaxName)
	pl, err := qmq.NewPuller(n.ClientAddr(), "orders", "g", qmq.WithConsumerName(long), qmq.WithBroadcast(0))
	if err == nil {
		pl.Close()
	}
	check("a broadcast group's name over the bound", err, qmq.ErrInvalidOption)
}

// A message over a limit is ErrInvalidMessage, and one too large
// ErrMessageTooLarge too, wherever the SDK finds it.
func TestMessageLimitsAreTheirSentinels(t *testing.T) {
	_, p, ctx := brokerAndProducer(t, nil)
	tags := p.GenerateMessage("orders")
	for i := range message.MaxTags + 1 {
		tags.AddTag(strings.Repeat("t", i+1))
	}
	body := p.GenerateMessage("orders")
	body.SetBody(make([]byte, message.MaxBodyLen+1))
	for _, tc := range []struct {
		name    string
		m       *qmq.Message
		tooBig  bool
		wrapped error // the internal error it wraps still
	}{
		{"too many tags", tags, false, message.ErrInvalid},
		{"a body over its limit", body, true, message.ErrTooLarge},
	} {
		_, encErr := tc.m.MarshalBinary()
		for what, err := range map[string]error{
			"Check":         p.Check(tc.m),
			"SendMessage":   p.SendMessage(ctx, tc.m),
			"MarshalBinary": encErr,
		} {
			if !errors.Is(err, qmq.ErrInvalidMessage) || errors.Is(err, qmq.ErrMessageTooLarge) != tc.tooBig || !errors.Is(err, tc.wrapped) {
				t.Errorf("%s, %s: %v; want ErrInvalidMessage, ErrMessageTooLarge %v, and %v", tc.name, what, err, tc.tooBig, tc.wrapped)
			}
		}
	}
	var m qmq.Message
	if err := m.UnmarshalBinary([]byte("not a message")); !errors.Is(err, qmq.ErrInvalidMessage) || !errors.Is(err, message.ErrInvalid) {
		t.Errorf("UnmarshalBinary of garbage: %v, want ErrInvalidMessage", err)
	}
}

// refusingNode serves the route of every subject to itself, and answers
// every send with refuse's answer, as a broker does when its own checks
// refuse what the SDK let through (a broker with other limits, or of
// another release).
func refusingNode(t *testing.T, refuse func(*transport.SendRequest) ([]byte, error)) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	srv := &transport.Server{Handler: func(_ context.Context, typ transport.Type, p []byte) ([]byte, error) {
		switch typ {
		case transport.TypeRoute:
			var req transport.RouteRequest
			if err := json.Unmarshal(p, &req); err != nil {
				return nil, err
			}
			return json.Marshal(transport.Route{Subject: req.Subject, BrokerGroups: []transport.BrokerGroupRoute{
				{Name: "g1", Servers: []string{addr}, Leader: addr, Writable: true, Available: true}}})
		case transport.TypeSend:
			req, err := transport.DecodeSendRequest(p)
			if err != nil {
				return nil, err
			}
			return refuse(req)
		}
		return nil, transport.Errorf(transport.UnknownType, "unknown request type %d", uint8(typ))
	}}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() { srv.Close(); <-served })
	return addr
}

// A broker's rejection of a message, over the wire, is the SDK's sentinel
// of its cause: by its code (TOO_LARGE), or by the internal error its text
// quotes (a broker's state machine rejects a message with a text and no
// code). A coded one is still the broker's *Error.
func TestServerRefusalsAreTheirSentinels(t *testing.T) {
	// The errors a broker's own checks return, as it quotes them.
	nameErr := fsm.CheckName("subject", "orders created")
	tagsErr := fmtErr(fsm.ErrInvalid, (&message.Message{ID: "x", Subject: "s", Tags: make([]string, message.MaxTags+1)}).Check())
	if nameErr == nil || tagsErr == nil {
		t.Fatal("the checks passed what this test needs them to refuse")
	}
	rejectAll := func(text string) func(*transport.SendRequest) ([]byte, error) {
		return func(req *transport.SendRequest) ([]byte, error) {
			resp := transport.SendResponse{}
			for range req.Messages {
				resp.Results = append(resp.Results, transport.SendResult{Status: transport.SendRejected, Error: text})
			}
			return resp.Encode(), nil
		}
	}
	for _, tc := range []struct {
		name   string
		refuse func(*transport.SendRequest) ([]byte, error)
		want   []error
		code   transport.Code // the *Error it still is; OK for a rejection without a code
	}{
		{"a message rejected as too large", rejectAll(transport.RejectionText(transport.Errorf(transport.TooLarge, "message over this broker's limit"))),
			[]error{qmq.ErrMessageTooLarge}, transport.TooLarge},
		{"a message rejected by the state machine", rejectAll(tagsErr.Error()),
			[]error{qmq.ErrInvalidMessage}, transport.OK},
		{"a message rejected for its subject", rejectAll(nameErr.Error()),
			[]error{qmq.ErrInvalidName}, transport.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := qmq.NewProducer(refusingNode(t, tc.refuse))
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = p.SendMessage(ctx, p.GenerateMessage("orders"))
			if ctx.Err() != nil {
				t.Fatalf("the refusal was retried until the deadline: %v", err)
			}
			for _, want := range tc.want {
				if !errors.Is(err, want) {
					t.Errorf("%v: want %v", err, want)
				}
			}
			var e *transport.Error
			if got := errors.As(err, &e); got != (tc.code != transport.OK) || (got && e.Code != tc.code) {
				t.Errorf("%v: no longer the broker's error of code %s", err, tc.code)
			}
		})
	}
}

// fmtErr is inner as a broker's state machine returns it: wrapped in its
// own sentinel.
func fmtErr(outer, inner error) error {
	if inner == nil {
		return nil
	}
	return fmt.Errorf("%w: %w", outer, inner)
}

// sourceFiles parses the package's files, tests left out.
func sourceFiles(t *testing.T) map[string]*ast.File {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	out := map[string]*ast.File{}
	for _, e := range entries {
		if name := e.Name(); strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
			if err != nil {
				t.Fatal(err)
			}
			out[name] = f
		}
	}
	return out
}

// A client that reaches no node says so with ErrUnreachable, whichever
// call found out.
func TestUnreachableIsErrUnreachable(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, qmq.ErrUnreachable) || !errors.Is(err, transport.ErrUnreachable) {
			t.Errorf("%s: %v, want ErrUnreachable", what, err)
		}
		if err != nil && !strings.Contains(err.Error(), "qmq: cannot reach "+addr) {
			t.Errorf("%s: %q no longer names the address", what, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := qmq.NewProducer(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	check("SendMessage", p.SendMessage(ctx, p.GenerateMessage("orders")))
	pl, err := qmq.NewPuller(addr, "orders", "g")
	if err == nil {
		pl.Close()
	}
	check("NewPuller", err)
}

// A broker that refuses a whole send request with a final answer (INVALID,
// TOO_LARGE) is reported at once, with its answer: not retried until the
// caller's deadline and reported as a timeout.
func TestAWholeRequestRefusedIsReportedAtOnce(t *testing.T) {
	for _, c := range []struct {
		code transport.Code
		want error
	}{
		{transport.Invalid, nil},
		{transport.TooLarge, qmq.ErrMessageTooLarge},
	} {
		calls := 0
		var mu sync.Mutex
		addr := refusingNode(t, func(*transport.SendRequest) ([]byte, error) {
			mu.Lock()
			calls++
			mu.Unlock()
			return nil, transport.Errorf(c.code, "the broker refuses this request")
		})
		p, err := qmq.NewProducer(addr)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = p.SendMessage(ctx, p.GenerateMessage("orders"))
		late := ctx.Err()
		cancel()
		p.Close()
		var e *transport.Error
		if late != nil || !errors.As(err, &e) || e.Code != c.code || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("a send refused whole with %s: %v (the deadline passed: %v), want the broker's answer at once", c.code, err, late)
		}
		mu.Lock()
		if calls != 1 {
			t.Errorf("a send refused whole with %s was sent %d times, want once", c.code, calls)
		}
		mu.Unlock()
	}
}
