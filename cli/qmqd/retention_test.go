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
		{"age at the largest duration", []string{"--retention-age", time.Duration(math.MaxInt64).String()}, logs.Retention{MaxAge: math.MaxInt64/int64(time.Millisecond) + 1}, ""},
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
			cfg.ID, cfg.Group, cfg.DataDir = "n1", "g1", t.TempDir()
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
