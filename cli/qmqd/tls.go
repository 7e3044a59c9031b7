package main

import (
	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/server"
)

// tlsFlags are the TLS flags of every command that runs a node: meta,
// broker and dev. They name the same files as qmqctl's, and read the
// same environment variables, but for --insecure, which has none: an
// inherited environment cannot open a node to the network.
func tlsFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "tls-cert", EnvVars: []string{"QMQ_TLS_CERT"},
			Usage: "serve TLS 1.3 only, on the client, Raft and --http ports, with the node certificate in `FILE` (PEM; " +
				"qmqctl tls init --node makes one), and dial other nodes over TLS with it; it must be valid for every host " +
				"the node is dialled at (the --listen or --advertise host, the --raft or --raft-advertise host, the --http host). " +
				"The files are looked at once a second and reloaded when replaced (by rename): new connections use them"},
		&cli.StringFlag{Name: "tls-key", EnvVars: []string{"QMQ_TLS_KEY"},
			Usage: "with --tls-cert: the certificate's private key `FILE` (PEM)"},
		&cli.StringFlag{Name: "tls-ca", EnvVars: []string{"QMQ_TLS_CA"},
			Usage: "with --tls-cert: trust the CA certificates in `FILE` (PEM): other nodes' certificates, and clients', must be signed by one of them"},
		&cli.StringFlag{Name: "tls-client-auth", Value: "require", EnvVars: []string{"QMQ_TLS_CLIENT_AUTH"},
			Usage: "with --tls-cert: the `MODE` of the client and --http ports for client certificates: require (one signed by the CA), " +
				"request (checked if the client presents one) or none; the Raft port always requires a node certificate"},
		&cli.BoolFlag{Name: "insecure",
			Usage: "start without --tls-cert although an address (--listen, --raft, --http or an advertised one) is not on loopback " +
				"(127.0.0.0/8, ::1, localhost): anyone who reaches it can send, consume and change the cluster. The node warns at start " +
				"and /status says \"insecure\": true. Without TLS and without this flag, such a node refuses to start. No environment " +
				"variable sets it, so an inherited environment cannot turn it on"},
	}
}

// authFlags are the flags of every command that runs a node about who may
// use it: --auth, and --open-http, which like --insecure has no
// environment variable.
func authFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "auth", EnvVars: []string{"QMQ_AUTH"},
			Usage: "check applications: every client request must come from an application proved by its secret (qmqctl app create; " +
				"the SDK's qmq.WithApp, qmqctl --app and --secret) and may do only what its rights allow, or from a connection with a " +
				"node certificate of the CA (nodes, and operators holding one). Needs --tls-cert, --tls-key and --tls-ca with " +
				"--tls-client-auth request or require; a broker also needs --meta. See docs/security.md"},
		&cli.BoolFlag{Name: "open-http",
			Usage: "serve /status and /metrics on --http to anyone who reaches it, without asking for a client certificate (by " +
				"default the HTTP port asks what --tls-client-auth says, and with --auth requires one of the CA). The HTTP port never " +
				"serves an admin operation. No environment variable sets it"},
	}
}

// insecure reads --insecure, from the command line only.
func insecure(c *cli.Context) bool { return c.Bool("insecure") }

// tlsConfig reads tlsFlags but --insecure (see insecure). The client auth mode goes with the files: given
// without them (by flag or environment), it is refused by the node's
// config check rather than ignored.
func tlsConfig(c *cli.Context) server.TLSConfig {
	t := server.TLSConfig{CAFile: c.String("tls-ca"), CertFile: c.String("tls-cert"), KeyFile: c.String("tls-key")}
	if t != (server.TLSConfig{}) || c.IsSet("tls-client-auth") {
		t.ClientAuth = c.String("tls-client-auth")
	}
	return t
}
