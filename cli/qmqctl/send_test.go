package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// send reads the body from stdin with "-", or with no BODY when stdin is
// not a terminal, or from --file; binary bytes go through unchanged and
// consume --body raw gives them back exactly (base64 encodes them; text
// is the JSON string it always was).
func TestBodies(t *testing.T) {
	srv := startCluster(t)
	s := []string{"--server", srv}
	binary := []byte{0, 1, 2, 0xff, 0xfe, '\n', 0x80, 'x', 0xc3, 0x28}
	defer func() { sendStdin, stdinIsTerminal = os.Stdin, func() bool { return false } }()
	file := filepath.Join(t.TempDir(), "body.bin")
	if err := os.WriteFile(file, binary, 0o600); err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		args     []string
		stdin    []byte
		terminal bool
		want     []byte
	}{
		{[]string{"-"}, binary, false, binary},
		{nil, binary, false, binary},
		{[]string{"--file", file}, nil, false, binary},
		{[]string{"-"}, []byte("piped\n"), true, []byte("piped\n")},
		{nil, []byte("not read"), true, nil},
		{[]string{"an argument"}, []byte("not read"), false, []byte("an argument")},
	} {
		subject := "bodies-" + string(rune('a'+i))
		sendStdin, stdinIsTerminal = bytes.NewReader(c.stdin), func() bool { return c.terminal }
		if _, stderr, status := runCLIStatus(append(append(s, "send", "--subject", subject), c.args...)...); status != 0 {
			t.Fatalf("send %q: exit status %d: %s", c.args, status, stderr)
		}
		raw, stderr, status := runCLIStatus(append(s, "consume", "--subject", subject, "--group", "g", "--start", "earliest", "--count", "1", "--body", "raw")...)
		if status != 0 || raw != string(c.want) {
			t.Errorf("send %q (stdin %q, a terminal: %v), consume --body raw: exit status %d, %q (stderr %q), want %q",
				c.args, c.stdin, c.terminal, status, raw, stderr, c.want)
		}
	}
	if _, stderr, status := runCLIStatus(append(s, "send", "--subject", "x", "--file", file, "body")...); status != 2 || !strings.Contains(stderr, "give a BODY or --file, not both") {
		t.Errorf("send with a BODY and --file: exit status %d, %q", status, stderr)
	}
	if _, stderr, status := runCLIStatus(append(s, "send", "--subject", "x", "--file", file+".missing")...); status != 1 || !strings.Contains(stderr, "no such file") {
		t.Errorf("send --file of a missing file: exit status %d, %q", status, stderr)
	}
	// base64 and text, of the same binary message (consumed by two groups).
	sendStdin, stdinIsTerminal = bytes.NewReader(binary), func() bool { return false }
	mustRun(t, append(s, "send", "--subject", "bin", "-")...)
	var got struct {
		Body          string `json:"body"`
		BodyEncoding  string `json:"body_encoding"`
		ConsumerGroup string `json:"consumer_group"`
		BrokerGroup   string `json:"broker_group"`
	}
	out := mustRun(t, append(s, "consume", "--subject", "bin", "--group", "b64", "--start", "earliest", "--count", "1", "--body", "base64")...)
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.BodyEncoding != "base64" || got.ConsumerGroup != "b64" || got.BrokerGroup == "" {
		t.Fatalf("consume --body base64: %v %+v", err, got)
	}
	if b, err := base64.StdEncoding.DecodeString(got.Body); err != nil || !bytes.Equal(b, binary) {
		t.Errorf("consume --body base64 decodes to %q (%v), want %q", b, err, binary)
	}
	got.BodyEncoding = ""
	out = mustRun(t, append(s, "consume", "--subject", "bin", "--group", "text", "--start", "earliest", "--count", "1")...)
	if err := json.Unmarshal([]byte(out), &got); err != nil || got.BodyEncoding != "" || !strings.Contains(got.Body, "\ufffd") {
		t.Errorf("consume --body text: %v %+v", err, got)
	}
}
