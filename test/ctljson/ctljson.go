// Package ctljson decodes qmqctl's --json output in tests: as
// encoding/json does, but for each time.Duration, which qmqctl writes as
// a Go duration string ("1.5s").
package ctljson

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"time"
)

// Decode decodes qmqctl's --json output into out: what encoding/json
// decodes, but for each time.Duration of out's type, which qmqctl writes
// as a Go duration string ("1.5s").
func Decode(b []byte, out any) error {
	var x any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(&x); err != nil {
		return err
	}
	b, err := json.Marshal(durationsToNumbers(reflect.TypeOf(out), x))
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// durationsToNumbers turns each duration string of x, decoded JSON of a
// value of type t, into its count of nanoseconds.
func durationsToNumbers(t reflect.Type, x any) any {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t == reflect.TypeFor[time.Duration]():
		if s, ok := x.(string); ok {
			if d, err := time.ParseDuration(s); err == nil {
				return int64(d)
			}
		}
		return x
	case reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()):
		return x
	}
	switch t.Kind() {
	case reflect.Slice, reflect.Array:
		if xs, ok := x.([]any); ok {
			for i := range xs {
				xs[i] = durationsToNumbers(t.Elem(), xs[i])
			}
		}
	case reflect.Map:
		if m, ok := x.(map[string]any); ok {
			for k := range m {
				m[k] = durationsToNumbers(t.Elem(), m[k])
			}
		}
	case reflect.Struct:
		if m, ok := x.(map[string]any); ok {
			fields := map[string]reflect.Type{}
			fieldTypes(t, fields)
			for k := range m {
				if ft, ok := fields[k]; ok {
					m[k] = durationsToNumbers(ft, m[k])
				}
			}
		}
	}
	return x
}

// fieldTypes records the type of each JSON field of struct type t,
// promoted ones included (a field of t's own taking precedence).
func fieldTypes(t reflect.Type, out map[string]reflect.Type) {
	var embedded []reflect.Type
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if f.Anonymous && name == "" && ft.Kind() == reflect.Struct {
			embedded = append(embedded, ft)
			continue
		}
		if name == "" {
			name = f.Name
		}
		out[name] = f.Type
	}
	for _, e := range embedded {
		inner := map[string]reflect.Type{}
		fieldTypes(e, inner)
		for k, v := range inner {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
}
