package console

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/qmqgo/qmq/admin"
	"github.com/qmqgo/qmq/internal/limits"
)

// Export: a listing or a group's dead letters downloaded as JSON lines
// (one JSON value a line), read where they are stored and never
// consumed. An export is bounded in messages, in bytes, in the pages it
// asks the cluster for and in time (the request's timeout); its last
// line says how it ended:
//
//	{"end": true, "messages": 120, "complete": false, "reason": "..."}
//
// complete is false when a bound, an error or the timeout cut it short.

// Bounds of an export.
const (
	MaxExportMessages     = 10_000 // messages of one export (its limit, default DefaultExportMessages)
	DefaultExportMessages = 1_000
	MaxDeadLetterExport   = 1_000    // dead letters of one export, each read whole
	MaxExportBytes        = 64 << 20 // bytes written, the last message may pass it
	MaxExportPages        = 200      // listings asked for, in all broker groups
)

// ExportEnd is an export's last line.
type ExportEnd struct {
	End      bool   `json:"end"`
	Messages int    `json:"messages"`
	Complete bool   `json:"complete"`
	Reason   string `json:"reason,omitempty"`
}

// stream is an API answer written as it is read, not encoded whole.
type stream func(w http.ResponseWriter)

// exportWriter writes JSON lines, counting them and their bytes.
type exportWriter struct {
	w     http.ResponseWriter
	n     int
	bytes int64
	max   int
}

func newExportWriter(w http.ResponseWriter, name string, max int) *exportWriter {
	h := w.Header()
	h.Set("Content-Type", "application/jsonl; charset=utf-8")
	h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", name))
	w.WriteHeader(http.StatusOK)
	return &exportWriter{w: w, max: max}
}

// line writes v; false, with why, if a bound is reached first or it
// could not be written.
func (e *exportWriter) line(v any) (string, bool) {
	if why, full := e.full(); full {
		return why, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err.Error(), false
	}
	b = append(b, '\n')
	if _, err := e.w.Write(b); err != nil {
		return err.Error(), false
	}
	e.n++
	e.bytes += int64(len(b))
	return "", true
}

// full says whether the export has reached its limit or its bytes.
func (e *exportWriter) full() (string, bool) {
	switch {
	case e.n >= e.max:
		return fmt.Sprintf("the export's limit of %d messages", e.max), true
	case e.bytes >= MaxExportBytes:
		return fmt.Sprintf("the export's bound of %d MiB", MaxExportBytes>>20), true
	}
	return "", false
}

func (e *exportWriter) end(complete bool, reason string) {
	b, _ := json.Marshal(ExportEnd{End: true, Messages: e.n, Complete: complete, Reason: reason})
	e.w.Write(append(b, '\n'))
}

// parseExportQuery reads an export's parameters: a listing's (see
// parseMessageQuery), where limit bounds the whole export (1 to
// MaxExportMessages, default DefaultExportMessages).
func parseExportQuery(q url.Values, now time.Time) (admin.MessageQuery, int, error) {
	rest := url.Values{}
	for k, vs := range q {
		if k != "limit" {
			rest[k] = vs
		}
	}
	if len(q["limit"]) > 1 {
		return admin.MessageQuery{}, 0, badf("parameter limit given %d times", len(q["limit"]))
	}
	n, err := intParam(q, "limit", 1, MaxExportMessages)
	if err != nil {
		return admin.MessageQuery{}, 0, err
	}
	if n == 0 {
		n = DefaultExportMessages
	}
	mq, err := parseMessageQuery(rest, now)
	return mq, n, err
}

// exportMessages answers GET /api/v1/subjects/{subject}/messages/export:
// the listing's messages of every broker group, page after page.
func (h *handler) exportMessages(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject := r.PathValue("subject")
	if err := limits.CheckName("subject", subject); err != nil {
		return nil, badf("%v", err)
	}
	mq, max, err := parseExportQuery(r.URL.Query(), h.now())
	if err != nil {
		return nil, err
	}
	mq.Subject, mq.Limit = subject, min(max, limits.MaxQueryResults)
	// The first pages are asked for before answering: a refusal or a bad
	// query is an error status, not a line.
	first, err := a.Messages(r.Context(), mq)
	if err != nil && len(first) == 0 {
		return nil, err
	}
	return stream(func(w http.ResponseWriter) {
		e := newExportWriter(w, subject+"-messages.jsonl", max)
		complete, reason := exportPages(r.Context(), a, mq, first, e)
		if err != nil && complete {
			complete, reason = false, err.Error() // a broker group did not answer
		}
		e.end(complete, reason)
	}), nil
}

// exportPages writes the messages of first and of the pages after them.
func exportPages(ctx context.Context, a *admin.Client, mq admin.MessageQuery, first []admin.MessagePage, e *exportWriter) (bool, string) {
	asked := len(first)
	for _, p := range first {
		for {
			for _, m := range p.Messages {
				if why, ok := e.line(m); !ok {
					return false, why
				}
			}
			if p.Next < 0 {
				break
			}
			if why, full := e.full(); full {
				return false, why
			}
			if asked >= MaxExportPages {
				return false, fmt.Sprintf("the export's bound of %d listings", MaxExportPages)
			}
			next := p.Next
			q := mq
			q.BrokerGroup, q.FromSeq, q.Since = p.BrokerGroup, &next, time.Time{}
			q.Limit = min(limits.MaxQueryResults, e.max-e.n)
			asked++
			pages, err := a.Messages(ctx, q)
			if err != nil || len(pages) != 1 {
				return false, fmt.Sprintf("broker group %s from sequence %d: %v", p.BrokerGroup, next, err)
			}
			p = pages[0]
		}
	}
	return true, ""
}

// DeadLetterLine is a line of a dead-letter export: the dead letter whole.
type DeadLetterLine struct {
	BrokerGroup string           `json:"broker_group"`
	DeadLetter  admin.DeadLetter `json:"dead_letter"`
}

// exportDeadLetters answers GET .../dead-letters/export?offset=&limit=:
// from the offset-th of each broker group, at most limit in all (1 to
// MaxDeadLetterExport, default it), each read whole.
func (h *handler) exportDeadLetters(r *http.Request, c caller, a *admin.Client) (any, error) {
	subject, group, err := pathNames(r)
	if err != nil {
		return nil, err
	}
	q := r.URL.Query()
	if q.Get("limit") == "" {
		q.Set("limit", strconv.Itoa(MaxDeadLetterExport))
	}
	p, err := parsePage(q)
	if err != nil {
		return nil, err
	}
	if p.Prefix != "" {
		return nil, badf("dead letters take no q")
	}
	if p.Limit > MaxDeadLetterExport {
		return nil, badf("limit %d: an export reads at most %d dead letters", p.Limit, MaxDeadLetterExport)
	}
	pages, err := a.DeadLetters(r.Context(), subject, group, p.Offset, p.Limit)
	if err != nil && len(pages) == 0 {
		return nil, err
	}
	return stream(func(w http.ResponseWriter) {
		e := newExportWriter(w, subject+"-"+group+"-dead-letters.jsonl", p.Limit)
		complete, reason := true, ""
		if err != nil {
			complete, reason = false, err.Error()
		}
	pages:
		for _, pg := range pages {
			for _, l := range pg.Letters {
				if why, full := e.full(); full {
					complete, reason = false, why
					break pages
				}
				d, err := a.DeadLetter(r.Context(), subject, group, pg.BrokerGroup, l.Seq)
				if errors.Is(err, admin.ErrNoDeadLetter) {
					continue // resent or purged since it was listed
				}
				if err != nil {
					complete, reason = false, fmt.Sprintf("dead letter %d of broker group %s: %v", l.Seq, pg.BrokerGroup, err)
					break pages
				}
				why, ok := e.line(DeadLetterLine{BrokerGroup: pg.BrokerGroup, DeadLetter: *d})
				if !ok {
					complete, reason = false, why
					break pages
				}
			}
		}
		for _, pg := range pages {
			if complete && pg.Total > p.Offset+len(pg.Letters) {
				complete, reason = false, fmt.Sprintf("broker group %s keeps %d dead letters: export from offset %d for more", pg.BrokerGroup, pg.Total, p.Offset+len(pg.Letters))
			}
		}
		e.end(complete, reason)
	}), nil
}
