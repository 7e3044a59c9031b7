package admin

import (
	"context"

	"github.com/qmqgo/qmq/internal/version"
	"github.com/qmqgo/qmq/transport"
)

// needs is the version Number a request needs of the node that answers
// it, and what to call it in the refusal: V1 (anything) for every request
// a node of the release before version gates answers in full. A request
// of a newer Number is sent only to a node whose build supports it (the
// Hello's answer says; transport.NeedVersion), since an older node would
// ignore the fields it does not know and answer something else.
func needs(t transport.Type, req any) (version.Number, string) {
	switch r := req.(type) {
	case transport.MessagesRequest:
		switch {
		case r.Timeline:
			return version.V2, "a message's timeline"
		case r.Property != nil:
			return version.V2, "a listing by property"
		}
	case transport.SetVersionRequest:
		return version.V2, "raising a group's active version"
	case transport.BackupRequest:
		return version.V2, "a backup"
	}
	return version.V1, ""
}

// callNeeding sends req (payload b) through c, only to a node that
// supports what it needs.
func callNeeding(ctx context.Context, c *transport.LeaderClient, t transport.Type, req any, b []byte) ([]byte, error) {
	if need, what := needs(t, req); need > version.V1 {
		return c.CallNeeding(ctx, need, what, t, b)
	}
	return c.Call(ctx, t, b)
}
