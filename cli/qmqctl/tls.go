package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq"
	"github.com/qmqgo/qmq/internal/tlsconf"
)

// tlsFlags are qmqctl's global TLS flags: given before the command, like
// --server, and read by every command that connects.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"QMQ_TLS_CA"},
			Usage: "connect over TLS, trusting the CA certificates in `FILE` (PEM; qmqctl tls init makes one)"},
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"QMQ_TLS_CERT"},
			Usage: "with --tls-ca: this client's certificate `FILE` (PEM), which nodes require unless their --tls-client-auth is none or request"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"QMQ_TLS_KEY"},
			Usage: "with --tls-cert: the certificate's private key `FILE` (PEM)"},
		&cli.StringFlag{Name: "app", EnvVars: []string{"QMQ_APP"},
			Usage: "work as the application `CODE`, proved with --secret, on a cluster that checks applications (qmqd --auth)"},
		&cli.StringFlag{Name: "secret", EnvVars: []string{"QMQ_SECRET"},
			Usage: "with --app: the application's `SECRET` (qmqctl app create prints it); prefer --secret-file or the environment " +
				"variable, which other users cannot read from the process list"},
		&cli.StringFlag{Name: "secret-file", EnvVars: []string{"QMQ_SECRET_FILE"},
			Usage: "with --app: read the application's secret from `FILE` (qmqctl app create --secret-out writes one)"},
	}
}

// checkCredentials refuses, before any command runs, --app without a
// secret, a secret without --app, and a --secret-file that cannot be read.
func checkCredentials(c *cli.Context) error {
	_, _, err := appCredentials(c)
	return err
}

// appCredentials reads --app with --secret or --secret-file; "" when
// --app is not given.
func appCredentials(c *cli.Context) (app, secret string, err error) {
	app, secret = c.String("app"), c.String("secret")
	file := c.String("secret-file")
	switch {
	case app == "" && (secret != "" || file != ""):
		return "", "", errors.New("--secret and --secret-file go with --app")
	case secret != "" && file != "":
		return "", "", errors.New("give --secret or --secret-file, not both")
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", "", fmt.Errorf("--secret-file: %w", err)
		}
		secret = strings.TrimSpace(string(b))
	}
	if app != "" && secret == "" {
		return "", "", errors.New("--app needs --secret or --secret-file (or QMQ_SECRET, QMQ_SECRET_FILE)")
	}
	return app, secret, nil
}

// tlsFiles are the files the global TLS flags name.
func tlsFiles(c *cli.Context) qmq.TLSFiles {
	return qmq.TLSFiles{CA: c.String("tls-ca"), Cert: c.String("tls-cert"), Key: c.String("tls-key")}
}

// connOption is how every command connects: over TLS when a TLS flag is
// given (files that do not load fail the command, naming them), else over
// plaintext TCP; as the application --app names, when given.
func connOption(c *cli.Context) qmq.ConnOption {
	var o qmq.ConnOption
	if f := tlsFiles(c); f != (qmq.TLSFiles{}) {
		o = qmq.WithTLS(f)
	}
	// checkCredentials, the app's Before, refused bad ones.
	if app, secret, _ := appCredentials(c); app != "" {
		o = o.And(qmq.WithApp(app, secret))
	}
	return o
}

func tlsCommand() *cli.Command {
	return &cli.Command{
		Name:  "tls",
		Usage: "make the certificates a cluster and its clients use for TLS",
		Subcommands: []*cli.Command{{
			Name:      "init",
			Usage:     "make a CA, and certificates signed by it for nodes and clients",
			ArgsUsage: " ",
			Description: "Writes PEM files into --dir. The CA is ca.pem (the certificate every node and client\n" +
				"trusts) and ca-key.pem: an ECDSA P-256 key that signs end certificates only. If both are\n" +
				"already in --dir, that CA is used, so nodes and clients can be added later; keep\n" +
				"ca-key.pem off the nodes. Each --node ID=ADDR[,ADDR…] gets ID.pem and ID-key.pem, valid\n" +
				"for serving and for dialling other nodes (Raft, joins, the brokers' link to the\n" +
				"metaserver) at each ADDR: an IP address or a DNS name. Every host a node is dialled at\n" +
				"must be among them: its --listen and --advertise hosts, and its --raft and\n" +
				"--raft-advertise hosts. Each --client NAME gets NAME.pem and NAME-key.pem, valid as a\n" +
				"client only: the nodes' Raft port refuses it.\n\n" +
				"Keys are written with mode 0600, certificates 0644, each through a temporary file and a\n" +
				"rename. An existing file is never overwritten unless --force is given (nothing is\n" +
				"written if one would be), and the CA never is. To rotate a node's certificate, run\n" +
				"again with --force for that node: nodes reload replaced files within a second.\n\n" +
				"It prints the flags each node and client then takes.\n\n" +
				"Examples:\n" +
				"  qmqctl tls init --dir certs --node m1=127.0.0.1 --client app\n" +
				"  qmqctl tls init --dir certs --node b1=10.0.0.11,b1.example.com --node b2=10.0.0.12,b2.example.com\n" +
				"  qmqctl tls init --dir certs --node b1=10.0.0.11 --days 90 --force   (renew b1's certificate)\n" +
				"  qmqctl --tls-ca certs/ca.pem --tls-cert certs/app.pem --tls-key certs/app-key.pem status",
			Flags: []cli.Flag{
				&cli.StringFlag{Name: "dir", Required: true, Usage: "write the files into `DIR` (made, mode 0700, if missing)"},
				&cli.GenericFlag{Name: "node", Value: &repeated{}, Usage: "a node certificate: `ID=ADDR[,ADDR…]`, each ADDR an IP address or DNS name it is dialled at (repeatable)"},
				&cli.GenericFlag{Name: "client", Value: &repeated{}, Usage: "a client certificate for `NAME` (repeatable)"},
				&cli.IntFlag{Name: "days", Value: 365, Usage: "node and client certificates are valid for `N` days (at most until the CA expires)"},
				&cli.IntFlag{Name: "ca-days", Value: 3650, Usage: "a new CA is valid for `N` days"},
				&cli.BoolFlag{Name: "force", Usage: "replace node and client files that exist (never the CA)"},
			},
			Action: func(c *cli.Context) error {
				if c.NArg() > 0 {
					return fmt.Errorf("tls init takes no arguments, got %q", c.Args().Slice())
				}
				return tlsInit(c.App.Writer, tlsInitConfig{dir: c.String("dir"), nodes: repeatedOf(c, "node"), clients: repeatedOf(c, "client"),
					days: c.Int("days"), caDays: c.Int("ca-days"), force: c.Bool("force")})
			},
		}},
	}
}

// repeated is a flag given any number of times, each value whole: a
// StringSliceFlag would split ID=ADDR,ADDR at its commas.
type repeated []string

func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }
func (r *repeated) String() string     { return strings.Join(*r, " ") }

// repeatedOf is the values of the repeated flag name.
func repeatedOf(c *cli.Context, name string) []string {
	if r, ok := c.Generic(name).(*repeated); ok {
		return *r
	}
	return nil
}

// tlsInitConfig is what `tls init` was asked for.
type tlsInitConfig struct {
	dir     string
	nodes   []string // ID=ADDR[,ADDR…]
	clients []string // names
	days    int
	caDays  int
	force   bool
}

// tlsInit makes or loads the CA in cfg.dir and issues the certificates
// asked for, then prints the flags that use them.
func tlsInit(out io.Writer, cfg tlsInitConfig) error {
	if cfg.days < 1 || cfg.caDays < 1 {
		return fmt.Errorf("--days %d and --ca-days %d must be at least 1", cfg.days, cfg.caDays)
	}
	specs, err := tlsSpecs(cfg)
	if err != nil {
		return err
	}
	if !cfg.force {
		for _, s := range specs {
			for _, f := range []string{s.CN + ".pem", s.CN + "-key.pem"} {
				path := filepath.Join(cfg.dir, f)
				if ok, err := exists(path); err != nil || ok {
					return fmt.Errorf("%s exists: give --force to replace it (nothing was written)", path)
				}
			}
		}
	}
	ca, made, err := loadOrMakeCA(cfg.dir, time.Duration(cfg.caDays)*24*time.Hour)
	if err != nil {
		return err
	}
	caPath := filepath.Join(cfg.dir, "ca.pem")
	if made {
		fmt.Fprintf(out, "made a CA, valid until %s: %s (and its key, ca-key.pem: keep it off the nodes)\n",
			ca.Cert.NotAfter.UTC().Format(time.DateOnly), caPath)
	} else {
		fmt.Fprintf(out, "using the CA in %s, valid until %s\n", caPath, ca.Cert.NotAfter.UTC().Format(time.DateOnly))
	}
	for _, s := range specs {
		s.Validity = time.Duration(cfg.days) * 24 * time.Hour
		cert, key, err := ca.Issue(s)
		if err != nil {
			return err
		}
		if err := tlsconf.WriteFiles(cfg.dir, s.CN, cert, key, cfg.force); err != nil {
			return err
		}
		flags := fmt.Sprintf("--tls-ca %s --tls-cert %s --tls-key %s", caPath,
			filepath.Join(cfg.dir, s.CN+".pem"), filepath.Join(cfg.dir, s.CN+"-key.pem"))
		if s.Node {
			fmt.Fprintf(out, "node %s (%s): qmqd … %s\n", s.CN, strings.Join(specAddrs(s), ", "), flags)
		} else {
			fmt.Fprintf(out, "client %s: qmqctl %s …\n", s.CN, flags)
		}
	}
	return nil
}

// tlsSpecs parses the nodes and clients asked for, refusing a name given
// twice and the CA's own.
func tlsSpecs(cfg tlsInitConfig) ([]tlsconf.Spec, error) {
	var specs []tlsconf.Spec
	seen := map[string]bool{"ca": true}
	add := func(s tlsconf.Spec) error {
		if seen[s.CN] {
			return fmt.Errorf("the name %q is given twice, or is the CA's", s.CN)
		}
		if s.CN == "" || s.CN == "." || s.CN == ".." || strings.ContainsAny(s.CN, `/\`) {
			return fmt.Errorf("%q cannot name a file: use letters, digits, '.', '_' and '-'", s.CN)
		}
		seen[s.CN] = true
		specs = append(specs, s)
		return nil
	}
	for _, n := range cfg.nodes {
		id, addrs, ok := strings.Cut(n, "=")
		if !ok || strings.TrimSpace(addrs) == "" {
			return nil, fmt.Errorf("--node %q: want ID=ADDR[,ADDR…], each ADDR an IP address or DNS name", n)
		}
		s := tlsconf.Spec{CN: strings.TrimSpace(id), Node: true}
		for _, a := range strings.Split(addrs, ",") {
			a = strings.TrimSpace(a)
			switch ip := net.ParseIP(a); {
			case a == "":
				return nil, fmt.Errorf("--node %q: an empty address", n)
			case ip != nil:
				s.IPs = append(s.IPs, ip)
			default:
				s.DNS = append(s.DNS, a)
			}
		}
		if err := add(s); err != nil {
			return nil, fmt.Errorf("--node %q: %w", n, err)
		}
	}
	for _, name := range cfg.clients {
		if err := add(tlsconf.Spec{CN: strings.TrimSpace(name)}); err != nil {
			return nil, fmt.Errorf("--client %q: %w", name, err)
		}
	}
	return specs, nil
}

// specAddrs lists what a node certificate is valid for.
func specAddrs(s tlsconf.Spec) []string {
	var out []string
	for _, ip := range s.IPs {
		out = append(out, ip.String())
	}
	return append(out, s.DNS...)
}

// loadOrMakeCA loads the CA in dir, or makes and writes one if dir has
// neither of its files; it reports whether it made one.
func loadOrMakeCA(dir string, validity time.Duration) (*tlsconf.CA, bool, error) {
	certExists, err := exists(filepath.Join(dir, "ca.pem"))
	if err != nil {
		return nil, false, err
	}
	keyExists, err := exists(filepath.Join(dir, "ca-key.pem"))
	if err != nil {
		return nil, false, err
	}
	switch {
	case certExists && keyExists:
		ca, err := tlsconf.LoadCA(dir)
		return ca, false, err
	case certExists || keyExists:
		return nil, false, fmt.Errorf("%s has one of ca.pem and ca-key.pem but not the other: restore it, or start in another directory", dir)
	}
	ca, err := tlsconf.NewCA("", validity)
	if err != nil {
		return nil, false, err
	}
	if err := ca.Write(dir); err != nil {
		return nil, false, err
	}
	return ca, true, nil
}

// exists reports whether path names something, following no symlink.
func exists(path string) (bool, error) {
	_, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	return err == nil, err
}
