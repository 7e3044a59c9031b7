package console

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/internal/message"
)

// Messages, read where they are stored and never consumed: by id in every
// broker group, or a subject's by time or from a sequence. The cluster
// decides who may (with --auth, an application reads the subjects it may
// send to or consume; an admin, all) and audits it.

// messageByID answers GET /api/v1/messages/{id}[?body=1]: each message
// with its timeline.
func (h *handler) messageByID(r *http.Request, c caller, a *admin.Client) (any, error) {
	id := r.PathValue("id")
	if id == "" || len(id) > message.MaxIDLen {
		return nil, badf("message id of %d bytes (1 to %d)", len(id), message.MaxIDLen)
	}
	q := r.URL.Query()
	for k, vs := range q {
		if k != "body" || len(vs) != 1 {
			return nil, badf("parameter %.40q: a lookup by id takes body=1 alone, once", k)
		}
	}
	found, err := a.FindMessage(r.Context(), id, q.Get("body") == "1", admin.WithTimeline())
	if err != nil {
		return nil, err
	}
	return map[string]any{"id": id, "messages": found}, nil
}

// subjectMessages answers GET /api/v1/subjects/{subject}/messages.
func (h *handler) subjectMessages(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject := r.PathValue("subject")
	if err := limits.CheckName("subject", subject); err != nil {
		return nil, badf("%v", err)
	}
	mq, err := parseMessageQuery(r.URL.Query(), h.now())
	if err != nil {
		return nil, err
	}
	mq.Subject = subject
	pages, err := a.Messages(r.Context(), mq)
	if pages == nil {
		pages = []admin.MessagePage{}
	}
	if err != nil && len(pages) == 0 {
		return nil, err
	}
	out := map[string]any{"subject": subject, "pages": pages}
	if err != nil {
		out["error"] = err.Error() // the broker groups that did not answer
	}
	return out, nil
}

// messageParams are the parameters a listing takes.
var messageParams = map[string]bool{"since": true, "until": true, "broker_group": true, "from_seq": true,
	"tag": true, "key": true, "property": true, "limit": true, "budget": true, "body": true}

// parseMessageQuery reads a listing's parameters: since and until as RFC
// 3339 times or durations before now (admin.ParseTime), from_seq with
// broker_group, tag, key, property (NAME=VALUE), limit, budget and body=1. Without since or from_seq it starts at
// the first retained message.
func parseMessageQuery(q url.Values, now time.Time) (admin.MessageQuery, error) {
	var mq admin.MessageQuery
	for k, vs := range q {
		if !messageParams[k] {
			return mq, badf("unknown parameter %.40q", k)
		}
		if len(vs) != 1 {
			return mq, badf("parameter %s given %d times", k, len(vs))
		}
	}
	var err error
	if mq.Since, err = admin.ParseTime(q.Get("since"), now); err != nil {
		return mq, badf("since %v", err)
	}
	if mq.Until, err = admin.ParseTime(q.Get("until"), now); err != nil {
		return mq, badf("until %v", err)
	}
	if !mq.Until.IsZero() && !mq.Until.After(mq.Since) {
		return mq, badf("until must be after since")
	}
	mq.BrokerGroup = q.Get("broker_group")
	if mq.BrokerGroup != "" {
		if err := limits.CheckName("broker group", mq.BrokerGroup); err != nil {
			return mq, badf("%v", err)
		}
	}
	if v := q.Get("from_seq"); v != "" {
		if !mq.Since.IsZero() {
			return mq, badf("give since or from_seq, not both")
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return mq, badf("from_seq %.20q: a sequence, at least 0", v)
		}
		mq.FromSeq = &n
	} else if mq.Since.IsZero() {
		first := int64(0)
		mq.FromSeq = &first
	}
	if mq.Tag = q.Get("tag"); len(mq.Tag) > message.MaxTagLen {
		return mq, badf("tag of %d bytes (at most %d)", len(mq.Tag), message.MaxTagLen)
	}
	if mq.Key = q.Get("key"); len(mq.Key) > 1024 {
		return mq, badf("key of %d bytes (at most 1,024 here)", len(mq.Key))
	}
	if p := q.Get("property"); p != "" {
		name, value, ok := strings.Cut(p, "=")
		if !ok || name == "" || len(p) > 1024 {
			return mq, badf("property %.40q: NAME=VALUE, at most 1,024 bytes here", p)
		}
		mq.Property, mq.PropertyValue = name, value
	}
	if mq.Limit, err = intParam(q, "limit", 1, limits.MaxQueryResults); err != nil {
		return mq, err
	}
	if mq.Budget, err = intParam(q, "budget", 1, limits.MaxScanBudget); err != nil {
		return mq, err
	}
	switch v := q.Get("body"); v {
	case "", "0":
	case "1":
		mq.Body = true
	default:
		return mq, badf("body %.20q: 1 or 0", v)
	}
	return mq, nil
}

// intParam reads an optional integer parameter within [lo, hi]; 0 when
// absent.
func intParam(q url.Values, name string, lo, hi int) (int, error) {
	v := q.Get(name)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, badf("%s %.20q: a number from %d to %d", name, v, lo, hi)
	}
	return n, nil
}
