package admin

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestParseTime(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{
		"":                            {},
		"90m":                         now.Add(-90 * time.Minute),
		"0s":                          now,
		"2026-01-31T09:00:00Z":        time.Date(2026, 1, 31, 9, 0, 0, 0, time.UTC),
		"1970-01-01T00:00:00Z":        time.UnixMilli(0).UTC(),
		"2026-01-31T09:00:00.5+01:00": time.Date(2026, 1, 31, 8, 0, 0, 5e8, time.UTC),
	} {
		got, err := ParseTime(in, now)
		if err != nil || !got.Equal(want) {
			t.Errorf("ParseTime(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-5m", "yesterday", "1969-12-31T23:59:59Z", "2026-01-31", "1e9h", "2562047h"} {
		if got, err := ParseTime(in, now); err == nil {
			t.Errorf("ParseTime(%q) = %v, want an error", in, got)
		}
	}
}

// A query the broker groups cannot answer is ErrBadQuery, saying why.
func TestBadQuery(t *testing.T) {
	now := time.Now()
	neg, zero := int64(-1), int64(0)
	for _, q := range []MessageQuery{
		{Subject: "s"},
		{Subject: "s", FromSeq: &neg},
		{Subject: "s", Since: now, Until: now},
		{Subject: "s", FromSeq: &zero, Limit: 1001},
		{Subject: "s", FromSeq: &zero, PropertyValue: "v"},
	} {
		if err := q.check(); !errors.Is(err, ErrBadQuery) || !strings.HasPrefix(err.Error(), "qmq: messages") {
			t.Errorf("%+v: %v, want ErrBadQuery", q, err)
		}
	}
	if err := (MessageQuery{Subject: "s", FromSeq: &zero}).check(); err != nil {
		t.Errorf("a query from sequence 0: %v", err)
	}
}
