// Package tlsconf gives every link of a cluster its TLS configuration:
// certificates read from PEM files that are reloaded when the files
// change, and a small certificate authority that issues them.
//
// Load reads a Files set (CA, certificate, key) into a Reloader. Its
// Server and Client methods return *tls.Config values that always use the
// latest files: a server's config picks the current certificate and CA
// pool on each handshake (GetConfigForClient), and Client builds a config
// per dial. The files are looked at, by their modification time, size and
// inode, at most once per Options.CheckEvery, so that replacing them by
// rename rotates a node's certificate or CA without a restart. A new set
// that does not load keeps the previous one and is reported once.
//
// Every config is TLS 1.3 only, without session tickets. A node's
// certificate carries both the serverAuth and clientAuth extended key
// usages (nodes dial each other); a client's carries clientAuth only, so
// a server made with nodesOnly (Raft) refuses it.
//
// NewCA, LoadCA and (*CA).Issue mint an ECDSA P-256 CA and its node and
// client certificates with crypto/x509 alone; WriteFiles stores them with
// keys readable by their owner only.
package tlsconf
