package server

import (
	"context"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/qmqgo/qmq/internal/auth"
	"github.com/qmqgo/qmq/transport"
)

// BenchmarkGuard is the cost the guard adds to one request, with the
// largest table (auth.MaxApps applications) and an application holding
// auth.MaxRules rules, the one that matches last: admitting the request
// (the connection's identity, the application's rights) and checking one
// message's subject or one consumer's subject and group.
func BenchmarkGuard(b *testing.B) {
	var apps []auth.App
	var secret string
	for i := range auth.MaxApps {
		s, rec, err := auth.NewSecret()
		if err != nil {
			b.Fatal(err)
		}
		a := auth.App{Code: fmt.Sprintf("app-%03d", i), Secrets: []auth.Secret{rec}}
		for r := range auth.MaxRules / 2 {
			a.Send = append(a.Send, fmt.Sprintf("subject-%02d.*", r))
			a.Consume = append(a.Consume, auth.Grant{Subject: fmt.Sprintf("subject-%02d.*", r), Group: fmt.Sprintf("group-%02d", r)})
		}
		apps = append(apps, a)
		secret = s
	}
	table, err := auth.NewTable(apps)
	if err != nil {
		b.Fatal(err)
	}
	g := newGuard(true, func() *auth.Table { return table }, newAuditLog(hclog.NewNullLogger()), prometheus.NewRegistry())
	peer := &transport.Peer{Addr: "127.0.0.1:1"}
	code := apps[len(apps)-1].Code
	if _, _, err := g.admit(transport.WithPeer(context.Background(), peer), transport.TypeHello,
		(&transport.HelloRequest{App: code, Secret: secret}).Encode()); err != nil {
		b.Fatal(err)
	}
	ctx := transport.WithPeer(context.Background(), peer)
	last := auth.MaxRules/2 - 1
	subject, group := fmt.Sprintf("subject-%02d.x", last), fmt.Sprintf("group-%02d", last)
	b.Run("admit", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := g.admit(ctx, transport.TypeSend, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	acc, _, _ := g.admit(ctx, transport.TypeSend, nil)
	b.Run("send", func(b *testing.B) {
		for b.Loop() {
			if err := acc.send(subject); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("consume", func(b *testing.B) {
		for b.Loop() {
			if err := acc.consume(transport.TypePull, subject, group); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("hello", func(b *testing.B) {
		hello := (&transport.HelloRequest{App: code, Secret: secret}).Encode()
		for b.Loop() {
			if _, _, err := g.admit(ctx, transport.TypeHello, hello); err != nil {
				b.Fatal(err)
			}
		}
	})
}
