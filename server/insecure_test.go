package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
)

// TestConfigRefusesPlaintextOffLoopback: a node without TLS whose client,
// Raft or HTTP address, or advertised address, is not on loopback is
// refused with ErrInsecure naming the address, unless it is Insecure or
// has TLS files; loopback addresses pass as they are.
func TestConfigRefusesPlaintextOffLoopback(t *testing.T) {
	f := newTLSFixture(t)
	tlsFiles := f.config("n1") // checked by name only: Validate does not load them
	slots := []struct {
		name string
		set  func(c *NodeConfig, addr string)
	}{
		{"client", func(c *NodeConfig, a string) { c.ClientAddr = a }},
		{"client advertise", func(c *NodeConfig, a string) { c.AdvertiseAddr = a }},
		{"raft", func(c *NodeConfig, a string) { c.RaftAddr = a }},
		{"raft advertise", func(c *NodeConfig, a string) { c.RaftAdvertiseAddr = a }},
		{"http", func(c *NodeConfig, a string) { c.HTTPAddr = a }},
	}
	config := func(slot func(*NodeConfig, string), addr string) MetaConfig {
		cfg := DefaultMetaConfig()
		cfg.ID, cfg.DataDir = "m1", t.TempDir()
		cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:6224", "127.0.0.1:6225"
		slot(&cfg.NodeConfig, addr)
		return cfg
	}
	for _, addr := range []string{"127.0.0.1:6222", "127.0.0.5:6222", "localhost:6222", "[::1]:6222"} {
		for _, s := range slots {
			cfg := config(s.set, addr)
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s address %s: %v, want accepted", s.name, addr, err)
			}
			cfg.Insecure = true
			if sec := cfg.security(); sec != (security{}) {
				t.Errorf("%s address %s, insecure: %+v, want neither tls nor insecure", s.name, addr, sec)
			}
		}
	}
	for _, addr := range []string{"0.0.0.0:6222", ":6222", "[::]:6222", "10.0.0.1:6222", "example.com:6222"} {
		for _, s := range slots {
			cfg := config(s.set, addr)
			err := cfg.Validate()
			if !errors.Is(err, ErrInsecure) {
				t.Errorf("%s address %s: %v, want %v", s.name, addr, err, ErrInsecure)
				continue
			}
			for _, want := range []string{s.name + " address " + addr, "--tls-cert, --tls-key and --tls-ca, or --insecure"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s address %s: %q does not say %q", s.name, addr, err, want)
				}
			}
			cfg.Insecure = true
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s address %s, insecure: %v, want accepted", s.name, addr, err)
			}
			if sec := cfg.security(); sec != (security{insecure: true}) {
				t.Errorf("%s address %s, insecure: %+v, want insecure", s.name, addr, sec)
			}
			cfg.Insecure, cfg.TLS = false, tlsFiles
			if err := cfg.Validate(); err != nil {
				t.Errorf("%s address %s, tls: %v, want accepted", s.name, addr, err)
			}
			cfg.Insecure = true
			if sec := cfg.security(); sec != (security{tls: true}) {
				t.Errorf("%s address %s, tls and insecure: %+v, want tls only", s.name, addr, sec)
			}
		}
	}
}

// TestStatusSaysInsecure: an Insecure node on loopback only is not
// insecure; one that hands out an address off loopback (it listens on
// loopback: advertising is only what it hands out) warns once at start
// and says "insecure": true in its status and on /status; a TLS node says
// "tls": true and is never insecure.
func TestStatusSaysInsecure(t *testing.T) {
	const warning = "serving anyone who reaches a non-loopback address"
	var logs lockedBuffer
	loopback := startMeta(t, "m1", true, func(c *MetaConfig) {
		c.Insecure = true
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
	})
	if st := loopback.Status(); st.TLS || st.Insecure {
		t.Errorf("insecure on loopback: tls %v, insecure %v; want neither", st.TLS, st.Insecure)
	}
	if strings.Contains(logs.String(), warning) {
		t.Errorf("insecure on loopback warned: %s", logs.String())
	}

	exposed := startMeta(t, "m2", true, func(c *MetaConfig) {
		c.Insecure, c.AdvertiseAddr, c.HTTPAddr = true, "10.0.0.1:6224", "127.0.0.1:0"
		c.Logger = hclog.New(&hclog.LoggerOptions{Level: hclog.Warn, Output: &logs})
	})
	if st := exposed.Status(); st.TLS || !st.Insecure {
		t.Errorf("insecure advertising 10.0.0.1: tls %v, insecure %v; want insecure", st.TLS, st.Insecure)
	}
	if got := logs.String(); strings.Count(got, warning) != 1 || !strings.Contains(got, "address=10.0.0.1:6224") {
		t.Errorf("insecure advertising 10.0.0.1: log %q, want one %q with the address", got, warning)
	}
	resp, err := http.Get("http://" + exposed.HTTPAddr() + "/status")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var page map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&page); err != nil {
		t.Fatal(err)
	}
	if page["insecure"] != true || page["tls"] != false {
		t.Errorf("/status: insecure %v, tls %v; want true, false", page["insecure"], page["tls"])
	}

	f := newTLSFixture(t)
	secured := startNode(t, "n1", true, func(c *Config) {
		c.TLS, c.Insecure, c.AdvertiseAddr = f.node("n1"), true, "10.0.0.1:6222"
	})
	if st := secured.Status(); !st.TLS || st.Insecure {
		t.Errorf("tls node: tls %v, insecure %v; want tls only", st.TLS, st.Insecure)
	}
}

// TestConfigRefusesOpenTLSOffLoopback: a node off loopback whose TLS lets
// in clients without a certificate (client auth none or request) is
// refused unless it checks applications or is Insecure; its status then
// says insecure.
func TestConfigRefusesOpenTLSOffLoopback(t *testing.T) {
	f := newTLSFixture(t)
	for _, c := range []struct {
		clientAuth     string
		auth, insecure bool
		ok             bool
	}{
		{"require", false, false, true},
		{"", false, false, true}, // require by default
		{"request", false, false, false},
		{"none", false, false, false},
		{"request", true, false, true},
		{"request", false, true, true},
		{"none", false, true, true},
	} {
		cfg := DefaultMetaConfig()
		cfg.ID, cfg.DataDir = "m1", t.TempDir()
		cfg.ClientAddr, cfg.RaftAddr = "0.0.0.0:6224", "127.0.0.1:6225"
		cfg.TLS = f.config("n1")
		cfg.TLS.ClientAuth, cfg.Auth, cfg.Insecure = c.clientAuth, c.auth, c.insecure
		err := cfg.Validate()
		if c.ok != (err == nil) {
			t.Errorf("client auth %q, auth %v, insecure %v: %v, want ok %v", c.clientAuth, c.auth, c.insecure, err, c.ok)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrInsecure) || !strings.Contains(err.Error(), "give --auth, or --tls-client-auth require, or --insecure") {
				t.Errorf("client auth %q: %v does not explain", c.clientAuth, err)
			}
			continue
		}
		if want := c.insecure; cfg.security().insecure != want {
			t.Errorf("client auth %q, auth %v, insecure %v: status insecure %v, want %v", c.clientAuth, c.auth, c.insecure, !want, want)
		}
	}
}

// TestConfigAuthNeeds: authentication needs TLS that asks clients for
// certificates (by which nodes know each other), and a broker needs its
// metaserver, which holds the applications.
func TestConfigAuthNeeds(t *testing.T) {
	f := newTLSFixture(t)
	meta := func(tls TLSConfig) MetaConfig {
		cfg := DefaultMetaConfig()
		cfg.ID, cfg.DataDir = "m1", t.TempDir()
		cfg.ClientAddr, cfg.RaftAddr, cfg.TLS, cfg.Auth = "127.0.0.1:6224", "127.0.0.1:6225", tls, true
		return cfg
	}
	none := f.config("n1")
	none.ClientAuth = "none"
	for name, cfg := range map[string]MetaConfig{"no tls": meta(TLSConfig{}), "client auth none": meta(none)} {
		if err := cfg.Validate(); !errors.Is(err, ErrAuthConfig) {
			t.Errorf("%s: %v, want %v", name, err, ErrAuthConfig)
		}
	}
	for _, mode := range []string{"request", "require", ""} {
		tls := f.config("n1")
		tls.ClientAuth = mode
		if cfg := meta(tls); cfg.Validate() != nil {
			t.Errorf("client auth %q: %v", mode, cfg.Validate())
		}
	}
	broker := DefaultConfig()
	broker.ID, broker.BrokerGroup, broker.DataDir = "b1", "g1", t.TempDir()
	broker.ClientAddr, broker.RaftAddr, broker.TLS, broker.Auth = "127.0.0.1:6222", "127.0.0.1:6223", f.config("n1"), true
	if err := broker.Validate(); !errors.Is(err, ErrAuthConfig) || !strings.Contains(err.Error(), "--meta") {
		t.Errorf("a broker without --meta: %v", err)
	}
	broker.Meta = []string{"127.0.0.1:6224"}
	if err := broker.Validate(); err != nil {
		t.Errorf("a broker with --meta: %v", err)
	}
}
