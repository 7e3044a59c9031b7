// Package sdk is what the SDK's public packages, qmq and qmq/admin, share
// and their users do not see: how a qmq.ConnOption connects, and how an
// error comes to match the SDK's sentinel of its cause.
//
// Package qmq declares ConnOption and the sentinels; package admin takes
// ConnOptions and returns those sentinels too. admin cannot read a
// ConnOption (its fields are qmq's), and this package cannot name one
// (qmq imports it), so qmq sets the functions below as it initializes.
// admin imports qmq, so they are set before any of admin's code runs.
package sdk

import "github.com/qmqgo/qmq/transport"

var (
	// Dial returns how opts, a []qmq.ConnOption, say to connect, or the
	// error one of them holds (WithTLS's files did not load).
	Dial func(opts any) (transport.Dialer, error)

	// Error returns err matching the SDK's sentinel of each cause it
	// holds, with err's text (what qmq's own functions return).
	Error func(err error) error
)
