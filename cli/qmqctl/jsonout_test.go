package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/qmqgo/qmq/test/ctljson"
)

// --json writes durations as Go duration strings, field names as the
// types give them (a field of the struct's own over a promoted one).
func TestJSONDurations(t *testing.T) {
	type inner struct {
		Meta string        `json:"meta"`
		Wait time.Duration `json:"wait"`
	}
	v := struct {
		Meta []string `json:"meta"`
		*inner
		Every   time.Duration            `json:"every"`
		Maybe   *time.Duration           `json:"maybe,omitempty"`
		None    *time.Duration           `json:"none,omitempty"`
		ByName  map[string]time.Duration `json:"by_name"`
		At      time.Time                `json:"at"`
		Bytes   []byte                   `json:"bytes"`
		private int
	}{Meta: []string{"m"}, inner: &inner{Meta: "hidden", Wait: 1500 * time.Millisecond}, Every: time.Hour,
		Maybe: new(time.Duration), ByName: map[string]time.Duration{"b": time.Second, "a": time.Millisecond},
		At: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), Bytes: []byte{1, 2}}
	var b bytes.Buffer
	if err := printJSONTo(&b, v); err != nil {
		t.Fatal(err)
	}
	want := `{
  "meta": [
    "m"
  ],
  "wait": "1.5s",
  "every": "1h0m0s",
  "maybe": "0s",
  "by_name": {
    "a": "1ms",
    "b": "1s"
  },
  "at": "2026-01-02T03:04:05Z",
  "bytes": "AQI="
}
`
	if b.String() != want {
		t.Errorf("printJSONTo wrote\n%s\nwant\n%s", b.String(), want)
	}
}

// decodeJSON decodes qmqctl's JSON into v, each time.Duration of v's
// type read from a Go duration string.
func decodeJSON(data []byte, v any) error { return ctljson.Decode(data, v) }
