package message

import (
	"bytes"
	"errors"
	"testing"
)

func FuzzDecode(f *testing.F) {
	for i := range 3 {
		f.Add(sampleMessage(i).AppendEncoded(nil))
	}
	f.Add((&Message{ID: "a", Subject: "b"}).AppendEncoded(nil))
	f.Add((&Message{ID: "a", Subject: "b", Tags: []string{"x", "y"}, Body: make([]byte, 300)}).AppendEncoded(nil))
	f.Add([]byte{})
	f.Add([]byte{messageVersion})
	f.Add((&Message{ID: "a", Subject: "b", DeliverAt: 1_795_831_200_000}).AppendEncoded(nil))
	f.Add([]byte("garbage, not a message at all"))
	f.Add(bytes.Repeat([]byte{0xff}, 64))
	f.Add(overlongSubject())
	f.Fuzz(func(t *testing.T, p []byte) {
		m, err := Decode(p)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Decode error %v is not ErrInvalid", err)
			}
			return
		}
		if err := m.Check(); err != nil {
			t.Fatalf("decoded message fails Check: %v", err)
		}
		if enc := m.AppendEncoded(nil); !bytes.Equal(enc, p) {
			t.Fatalf("re-encoding differs:\n in  %x\n out %x", p, enc)
		}
		checkWire(t, p)
	})
}
