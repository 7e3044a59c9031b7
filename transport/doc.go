// Package transport is the client wire protocol: length-prefixed binary
// frames over TCP, or over TLS (Dialer, Server.TLS), each carrying a
// request id so that many requests are in flight on one connection
// (Conn), a Server that runs a handler per request, the payload codecs of
// every request, and the wire error codes with whether a retry can help.
// docs/protocol.md describes the bytes.
//
// A malformed, truncated, oversize or stalled frame gets an error frame
// where possible and the connection is closed; nothing a peer sends can
// crash the process, and what a peer can make the Server hold is bounded:
// connections per address and in all, memory for requests and replies,
// and the time a started frame or a TLS handshake may take.
package transport
