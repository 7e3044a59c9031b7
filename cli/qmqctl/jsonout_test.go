package main

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
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

// decodeJSON decodes qmqctl's JSON into v: what encoding/json decodes,
// with each time.Duration of v's type read from a Go duration string.
func decodeJSON(data []byte, v any) error {
	var x any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return err
	}
	b, err := json.Marshal(undurations(reflect.TypeOf(v), x))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

var unmarshalerType = reflect.TypeFor[json.Unmarshaler]()

// undurations turns each duration string of x, decoded JSON of a value of
// type t, into its count of nanoseconds.
func undurations(t reflect.Type, x any) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		if s, ok := x.(string); ok {
			if d, err := time.ParseDuration(s); err == nil {
				return int64(d)
			}
		}
		return x
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return x
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if xs, ok := x.([]any); ok {
			for i := range xs {
				xs[i] = undurations(t.Elem(), xs[i])
			}
		}
	case reflect.Map:
		if m, ok := x.(map[string]any); ok {
			for k := range m {
				m[k] = undurations(t.Elem(), m[k])
			}
		}
	case reflect.Struct:
		if m, ok := x.(map[string]any); ok {
			fields := map[string]reflect.Type{}
			jsonFieldTypes(t, fields)
			for k := range m {
				if ft, ok := fields[k]; ok {
					m[k] = undurations(ft, m[k])
				}
			}
		}
	}
	return x
}

// jsonFieldTypes records the type of each JSON field of struct type t,
// promoted ones included (a field of t's own taking precedence).
func jsonFieldTypes(t reflect.Type, out map[string]reflect.Type) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				embedded = append(embedded, ft)
				continue
			}
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	for _, e := range embedded {
		inner := map[string]reflect.Type{}
		jsonFieldTypes(e, inner)
		for k, v := range inner {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
}
