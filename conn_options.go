package qmq

import (
	"crypto/tls"
	"fmt"
	"log/slog"

	"github.com/qmqgo/qmq/internal/tlsconf"
	"github.com/qmqgo/qmq/transport"
)

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

// ConnOption says how a Producer, Puller, Subscription or Admin connects
// to the cluster's nodes; it is an option of NewProducer, NewPuller,
// Subscribe and NewAdmin alike. The zero value (the default) connects
// over plaintext TCP; the last ConnOption given wins.
type ConnOption struct {
	dial transport.Dialer
	err  error // WithTLS's files did not load: the constructor returns it
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
	if err != nil {
		return ConnOption{err: fmt.Errorf("qmq: tls: %w", err)}
	}
	return ConnOption{dial: transport.Dialer{TLS: r.Client}}
}

// WithTLSConfig connects over TLS with config as it is: nothing is
// reloaded. An empty ServerName checks each node's certificate against
// the address dialled. The nodes speak TLS 1.3 only. A nil config
// connects over plaintext TCP.
func WithTLSConfig(config *tls.Config) ConnOption {
	if config == nil {
		return ConnOption{}
	}
	return ConnOption{dial: transport.Dialer{TLS: func() *tls.Config { return config }}}
}

// warnTLS reports replaced TLS files that do not load.
func warnTLS(msg string, kv ...any) { slog.Default().Warn("qmq: "+msg, kv...) }

func (o ConnOption) applyProducer(p *producerOptions)   { p.conn = o }
func (o ConnOption) applyPuller(p *pullerOptions)       { p.conn = o }
func (o ConnOption) applySubscribe(p *subscribeOptions) { p.conn = o }
func (o ConnOption) applyAdmin(a *adminOptions)         { a.conn = o }

// AdminOption configures NewAdmin: a ConnOption.
type AdminOption interface {
	applyAdmin(*adminOptions)
}

// adminOptions configure an Admin.
type adminOptions struct {
	conn ConnOption
}
