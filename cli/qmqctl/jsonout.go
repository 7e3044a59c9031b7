package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// qmqctl's --json output is what encoding/json writes of the value, field
// for field, but for every time.Duration, written as a Go duration string
// ("1.5s", "168h0m0s") rather than a count of nanoseconds. The values are
// the SDK's and the protocol's types, whose own encoding stays as it is:
// jsonView makes the view printed.

// printJSONTo writes v as indented JSON, durations as Go duration strings.
func printJSONTo(w io.Writer, v any) error {
	b, err := json.Marshal(jsonView(reflect.ValueOf(v)))
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

var (
	durationType  = reflect.TypeFor[time.Duration]()
	marshalerType = reflect.TypeFor[json.Marshaler]()
	textType      = reflect.TypeFor[encoding.TextMarshaler]()
)

// object is a JSON object whose members keep their order.
type object []member

type member struct {
	name  string
	value any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, m := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(m.name)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(m.value)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// jsonView returns what encoding/json encodes v as, with durations as
// strings: values with an encoding of their own (json.Marshaler,
// encoding.TextMarshaler) as they are, structs as objects of their
// encoded fields (embedded structs' fields promoted, by encoding/json's
// rules for tags, omitempty and names a shallower field takes).
func jsonView(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	if t == durationType {
		return time.Duration(v.Int()).String()
	}
	if t.Implements(marshalerType) || t.Implements(textType) {
		if t.Kind() == reflect.Pointer && v.IsNil() {
			return nil
		}
		return v.Interface()
	}
	if v.CanAddr() && (reflect.PointerTo(t).Implements(marshalerType) || reflect.PointerTo(t).Implements(textType)) {
		return v.Addr().Interface()
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return jsonView(v.Elem())
	case reflect.Struct:
		return structView(v)
	case reflect.Map:
		if v.IsNil() {
			return nil
		}
		type kv struct {
			k string
			v reflect.Value
		}
		var kvs []kv
		for it := v.MapRange(); it.Next(); {
			kvs = append(kvs, kv{mapKey(it.Key()), it.Value()})
		}
		slices.SortFunc(kvs, func(a, b kv) int { return strings.Compare(a.k, b.k) })
		o := make(object, 0, len(kvs))
		for _, e := range kvs {
			o = append(o, member{e.k, jsonView(e.v)})
		}
		return o
	case reflect.Slice:
		if v.IsNil() {
			return nil
		}
		if t.Elem().Kind() == reflect.Uint8 {
			return v.Interface() // base64, as encoding/json writes bytes
		}
		fallthrough
	case reflect.Array:
		out := make([]any, v.Len())
		for i := range out {
			out[i] = jsonView(v.Index(i))
		}
		return out
	}
	return v.Interface()
}

func mapKey(k reflect.Value) string {
	if k.Kind() == reflect.String {
		return k.String()
	}
	if tm, ok := k.Interface().(encoding.TextMarshaler); ok {
		b, _ := tm.MarshalText()
		return string(b)
	}
	switch k.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(k.Int(), 10)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return strconv.FormatUint(k.Uint(), 10)
	}
	return fmt.Sprint(k.Interface())
}

// field is one encoded field of a struct, found at depth (0: its own).
type field struct {
	name   string
	depth  int
	tagged bool
	value  reflect.Value
}

func structView(v reflect.Value) object {
	var fields []field
	collectFields(v, 0, &fields)
	// encoding/json: of the fields with one name, the shallowest wins, a
	// tagged one among several at that depth; several left: none.
	var out object
	for i, f := range fields {
		keep := true
		n := 0
		for j, g := range fields {
			if g.name != f.name || j == i {
				continue
			}
			switch {
			case g.depth < f.depth, g.depth == f.depth && g.tagged && !f.tagged:
				keep = false
			case g.depth == f.depth && g.tagged == f.tagged:
				n++
			}
		}
		if keep && n == 0 {
			out = append(out, member{f.name, jsonView(f.value)})
		}
	}
	if out == nil {
		out = object{}
	}
	return out
}

func collectFields(v reflect.Value, depth int, out *[]field) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				if fv.Kind() == reflect.Pointer {
					if fv.IsNil() {
						continue
					}
					fv = fv.Elem()
				}
				collectFields(fv, depth+1, out)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if strings.Contains(","+opts+",", ",omitempty,") && isEmpty(fv) {
			continue
		}
		tagged := name != ""
		if name == "" {
			name = sf.Name
		}
		*out = append(*out, field{name: name, depth: depth, tagged: tagged, value: fv})
	}
}

// isEmpty is encoding/json's test for omitempty.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}
