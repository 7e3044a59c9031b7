package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/qmqgo/qmq/internal/limits"
	"github.com/qmqgo/qmq/logs"
	"github.com/qmqgo/qmq/server"
)

// brokerSettingsOf parses args as a broker command's flags and returns the
// configuration brokerSettings makes of them.
func brokerSettingsOf(t *testing.T, args ...string) (server.Config, error) {
	t.Helper()
	cfg := server.DefaultConfig()
	app := &cli.App{Name: "qmqd", Writer: io.Discard, ErrWriter: io.Discard, Commands: []*cli.Command{{
		Name:   "broker",
		Flags:  brokerFlags(),
		Action: func(c *cli.Context) error { return brokerSettings(c, &cfg) },
	}}}
	err := app.Run(append([]string{"qmqd", "broker"}, args...))
	return cfg, err
}

func TestRetentionFlags(t *testing.T) {
	d := server.DefaultConfig()
	dedup, segmentMiB := d.FSM.DedupWindow, d.FSM.SegmentSize>>20
	if dedup != 10*time.Minute || segmentMiB != 64 {
		t.Fatalf("the limits below assume a 10m dedup window and 64 MiB segments, not %s and %d MiB", dedup, segmentMiB)
	}
	week := (7 * 24 * time.Hour).Milliseconds()
	for _, tc := range []struct {
		name string
		args []string
		want logs.Retention
		err  string // the refusal names this; "" when accepted
	}{
		{"defaults", nil, logs.Retention{MaxAge: week}, ""},
		{"age off", []string{"--retention-age", "0"}, logs.Retention{}, ""},
		{"age at the dedup window", []string{"--retention-age", "10m"}, logs.Retention{MaxAge: 600_000}, ""},
		{"age just under it", []string{"--retention-age", "9m59.999s"}, logs.Retention{}, "--retention-age 9m59.999s: below the 10m0s dedup window"},
		{"age just over it", []string{"--retention-age", "10m0.001s"}, logs.Retention{MaxAge: 600_001}, ""},
		{"age a fraction of a millisecond over it", []string{"--retention-age", "10m0.0001s"}, logs.Retention{MaxAge: 600_001}, ""},
		{"age of a nanosecond", []string{"--retention-age", "1ns"}, logs.Retention{}, "--retention-age 1ns: below"},
		{"age negative", []string{"--retention-age", "-1s"}, logs.Retention{}, "--retention-age -1s: negative"},
		{"age unparsable", []string{"--retention-age", "a week"}, logs.Retention{}, `invalid value "a week" for flag -retention-age`},
		{"age without a unit", []string{"--retention-age", "168"}, logs.Retention{}, `invalid value "168" for flag -retention-age`},
		{"size at one segment", []string{"--retention-size", "64"}, logs.Retention{MaxAge: week, MaxBytes: 64 << 20}, ""},
		{"size just under", []string{"--retention-size", "63"}, logs.Retention{}, "--retention-size 63: below one message-log segment (64 MiB)"},
		{"size just over", []string{"--retention-size", "65"}, logs.Retention{MaxAge: week, MaxBytes: 65 << 20}, ""},
		{"size of 1 MiB", []string{"--retention-size", "1"}, logs.Retention{}, "--retention-size 1: below"},
		{"size negative", []string{"--retention-size", "-1"}, logs.Retention{}, "--retention-size -1: negative"},
		{"size at the largest byte count", []string{"--retention-size", fmt.Sprint(maxMiB)}, logs.Retention{MaxAge: week, MaxBytes: maxMiB << 20}, ""},
		{"size just past it", []string{"--retention-size", fmt.Sprint(maxMiB + 1)}, logs.Retention{}, fmt.Sprintf("--retention-size %d: above", maxMiB+1)},
		{"size with a unit", []string{"--retention-size", "50GiB"}, logs.Retention{}, `invalid value "50GiB" for flag -retention-size`},
		{"size fractional", []string{"--retention-size", "64.5"}, logs.Retention{}, `invalid value "64.5" for flag -retention-size`},
		{"age at its bound", []string{"--retention-age", limits.MaxRetentionAge.String()}, logs.Retention{MaxAge: limits.MaxRetentionAge.Milliseconds()}, ""},
		{"age past its bound", []string{"--retention-age", (limits.MaxRetentionAge + time.Millisecond).String()}, logs.Retention{}, "--retention-age 175680h0m0.001s: above"},
		{"age at the largest duration", []string{"--retention-age", time.Duration(math.MaxInt64).String()}, logs.Retention{}, "above"},
		{"age at a shorter dedup window", []string{"--retention-age", "5m", "--dedup-window", "5m"}, logs.Retention{MaxAge: 300_000}, ""},
		{"age under a longer dedup window", []string{"--retention-age", "15m", "--dedup-window", "20m"}, logs.Retention{}, "--retention-age 15m0s: below the 20m0s dedup window"},
		{"size at a smaller segment", []string{"--retention-size", "8", "--segment-size", "8"}, logs.Retention{MaxAge: week, MaxBytes: 8 << 20}, ""},
		{"size under a larger segment", []string{"--retention-size", "100", "--segment-size", "128"}, logs.Retention{}, "--retention-size 100: below one message-log segment (128 MiB)"},
		{"both", []string{"--retention-age", "72h", "--retention-size", "51200"}, logs.Retention{MaxAge: (72 * time.Hour).Milliseconds(), MaxBytes: 50 << 30}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := brokerSettingsOf(t, tc.args...)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.FSM.Retention != tc.want {
				t.Fatalf("retention %+v, want %+v", cfg.FSM.Retention, tc.want)
			}
			// What the flags accept, the node accepts.
			cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
			cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the node refuses what the flags accept: %v", err)
			}
		})
	}
}

// A retention refused is refused at start, before a data directory is
// made or a port is opened, by both commands that run a broker.
func TestBadRetentionRefusedAtStart(t *testing.T) {
	for _, tc := range []struct{ command, flag, value, want string }{
		{"broker", "--retention-size", "63", "--retention-size 63: below one message-log segment"},
		{"broker", "--retention-age", "-1h", "--retention-age -1h0m0s: negative"},
		{"dev", "--retention-size", "-5", "--retention-size -5: negative"},
		{"dev", "--retention-age", "1m", "--retention-age 1m0s: below the 10m0s dedup window"},
	} {
		t.Run(tc.command+tc.flag, func(t *testing.T) {
			data := filepath.Join(t.TempDir(), "data")
			args := []string{"qmqd", "--log-level", "error", tc.command, "--data", data, tc.flag, tc.value}
			if tc.command == "broker" {
				args = append(args, "--id", "b1", "--group", "g1", "--listen", "127.0.0.1:0", "--raft", "127.0.0.1:0")
			} else {
				args = append(args, "--listen", "127.0.0.1:0", "--http", "", "--raft", "127.0.0.1:0",
					"--meta-listen", "127.0.0.1:0", "--meta-raft", "127.0.0.1:0")
			}
			app := newApp()
			app.Writer, app.ErrWriter = io.Discard, io.Discard
			err := app.Run(args)
			if !errors.Is(err, errInvalidFlag) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
			if _, err := os.Stat(data); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the refused %s made its data directory (%v)", tc.command, err)
			}
		})
	}
}

// The flags that seed the rest of a new broker group's configuration:
// accepted at their bounds, refused past them, naming the flag.
func TestConfigFlags(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want func(c *server.Config) bool
		err  string // the refusal names this; "" when accepted
	}{
		{"defaults", nil, func(c *server.Config) bool {
			f := c.FSM
			return f.DedupWindow == 10*time.Minute && f.MaxPull == 1000 && f.MaxUnacked == 10000 && f.SegmentSize == 64<<20 && f.IndexSegmentSize == 4<<20
		}, ""},
		{"lowest", []string{"--retention-age", "0", "--dedup-window", "0", "--max-pull", "1", "--max-unacked", "1", "--segment-size", "1", "--index-segment-size", "64"},
			func(c *server.Config) bool {
				f := c.FSM
				return f.DedupWindow == 0 && f.MaxPull == 1 && f.MaxUnacked == 1 && f.SegmentSize == 1<<20 && f.IndexSegmentSize == 64<<10
			}, ""},
		{"highest", []string{"--dedup-window", "30m", "--max-pull", "10000", "--max-unacked", "100000", "--segment-size", "1024", "--index-segment-size", "262144"},
			func(c *server.Config) bool {
				f := c.FSM
				return f.DedupWindow == 30*time.Minute && f.MaxPull == 10000 && f.MaxUnacked == 100000 && f.SegmentSize == 1<<30 && f.IndexSegmentSize == 256<<20
			}, ""},
		{"window negative", []string{"--dedup-window", "-1s"}, nil, "--dedup-window -1s"},
		{"window too long", []string{"--dedup-window", "30m0.001s"}, nil, "--dedup-window 30m0.001s: whole milliseconds, 0 to 30m0s"},
		{"window of a fraction of a millisecond", []string{"--dedup-window", "1.5ms"}, nil, "--dedup-window 1.5ms"},
		{"no pull", []string{"--max-pull", "0"}, nil, "--max-pull 0: 1..10000"},
		{"too large a pull", []string{"--max-pull", "10001"}, nil, "--max-pull 10001: 1..10000"},
		{"no unacked", []string{"--max-unacked", "0"}, nil, "--max-unacked 0: 1..100000"},
		{"too many unacked", []string{"--max-unacked", "100001"}, nil, "--max-unacked 100001"},
		{"segment too small", []string{"--segment-size", "0"}, nil, "--segment-size 0: 1..1024 MiB"},
		{"segment too large", []string{"--segment-size", "1025"}, nil, "--segment-size 1025"},
		{"index segment too small", []string{"--index-segment-size", "63"}, nil, "--index-segment-size 63: 64..262144 KiB"},
		{"index segment too large", []string{"--index-segment-size", "262145"}, nil, "--index-segment-size 262145"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := brokerSettingsOf(t, tc.args...)
			if tc.err != "" {
				if !errors.Is(err, errInvalidFlag) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.want(&cfg) {
				t.Fatalf("FSM configuration %+v", cfg.FSM)
			}
			cfg.ID, cfg.BrokerGroup, cfg.DataDir = "n1", "g1", t.TempDir()
			cfg.ClientAddr, cfg.RaftAddr = "127.0.0.1:0", "127.0.0.1:0"
			if err := cfg.Validate(); err != nil {
				t.Fatalf("the node refuses what the flags accept: %v", err)
			}
		})
	}
}
