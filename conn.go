package qmq

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/qmqgo/qmq/internal/sdk"
	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

// DefaultServer is the address `qmqd dev` listens on.
const DefaultServer = "127.0.0.1:6222"

// TLSFiles names the PEM files a client connects with over TLS. CA is
// required: the certificates of the authority that signed the cluster's
// nodes. Cert and Key go together: the client's own certificate and its
// key, which nodes require unless they run with --tls-client-auth none
// (or request). A client's certificate needs the clientAuth extended key
// usage (`qmqctl tls init --client NAME` makes one).
type TLSFiles struct {
	CA   string
	Cert string
	Key  string
}

// ConnOption says how a Producer, Puller, Subscription or admin.Client
// connects to the cluster's nodes; it is an option of NewProducer,
// NewPuller, Subscribe and admin.New alike. Without one a client connects
// over plaintext TCP and names no application. WithTLS (or WithTLSConfig)
// and WithApp combine; of two TLS options, the last given wins.
type ConnOption struct {
	set func(*connection)
}

// connection is what the ConnOptions given say.
type connection struct {
	dial transport.Dialer
	err  error // WithTLS's files did not load: the constructor returns it
}

func (o ConnOption) apply(c *connection) {
	if o.set != nil {
		o.set(c)
	}
}

// And returns one ConnOption that applies o, then each of more: for code
// that passes how to connect around as one value, such as
// qmq.WithTLS(files).And(qmq.WithApp(code, secret)).
func (o ConnOption) And(more ...ConnOption) ConnOption {
	return ConnOption{set: func(c *connection) {
		o.apply(c)
		for _, m := range more {
			m.apply(c)
		}
	}}
}

// WithTLS connects over TLS 1.3 with the certificates in files. They are
// read now; a constructor given an option whose files did not load
// returns that error. Afterwards the files are looked at, by modification
// time, size and inode, at most once a second as connections are made,
// and reloaded when they change, so a certificate or CA replaced by
// rename is used from the next connection on without a restart (a
// replaced set that does not load keeps the previous one and is logged
// to slog.Default). Each node's certificate must be valid for the address
// dialled: an IP literal for one of its IP addresses, a name for one of
// its DNS names.
func WithTLS(files TLSFiles) ConnOption {
	r, err := tlsconf.Load(tlsconf.Files(files), tlsconf.Options{Warn: warnTLS})
	return ConnOption{set: func(c *connection) {
		if err != nil {
			c.err = fmt.Errorf("qmq: tls: %w", err)
			return
		}
		c.dial.TLS, c.err = r.Client, nil
	}}
}

// WithTLSConfig connects over TLS with config as it is: nothing is
// reloaded. An empty ServerName checks each node's certificate against
// the address dialled. The nodes speak TLS 1.3 only. A nil config
// connects over plaintext TCP.
func WithTLSConfig(config *tls.Config) ConnOption {
	return ConnOption{set: func(c *connection) {
		c.dial.TLS, c.err = nil, nil
		if config != nil {
			c.dial.TLS = func() *tls.Config { return config }
		}
	}}
}

// WithApp makes every connection work for the application code, proved
// with its secret (`qmqctl app create` makes both). A cluster that checks
// applications refuses a client without one, or with a wrong secret, with
// an error whose code is UNAUTHENTICATED (errors.Is(err, ErrUnauthenticated)),
// and what the application may not do with PERMISSION_DENIED
// (ErrPermissionDenied). A cluster that does not check applications
// ignores them. The secret crosses each connection as it is: use it with
// WithTLS. Without TLS, a client refuses to connect to an address off
// loopback at all (transport.ErrPlaintextSecret), rather than send the
// secret in the clear.
func WithApp(code, secret string) ConnOption {
	return ConnOption{set: func(c *connection) {
		c.dial.Credentials = &transport.Credentials{App: code, Secret: secret}
	}}
}

// warnTLS reports replaced TLS files that do not load.
func warnTLS(msg string, kv ...any) { slog.Default().Warn("qmq: "+msg, kv...) }

// admin.New takes ConnOptions too: it reads them through sdk.Dial.
func init() {
	sdk.Dial = func(opts any) (transport.Dialer, error) {
		var c connection
		for _, o := range opts.([]ConnOption) {
			o.apply(&c)
		}
		return c.dial, c.err
	}
}

func (o ConnOption) applyProducer(p *producerOptions)   { o.apply(&p.conn) }
func (o ConnOption) applyPuller(p *pullerOptions)       { o.apply(&p.conn) }
func (o ConnOption) applySubscribe(p *subscribeOptions) { o.apply(&p.conn) }
