package console_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/qmqgo/qmq/test/poll"
)

// TestBrowser drives the console in headless Chromium against a test
// cluster: every page loads without a console error and shows what the
// cluster holds, and a resend from the page takes effect. Screenshots go
// to $QMQ_ARTIFACTS (a temporary directory by default).
func TestBrowser(t *testing.T) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("no chromium on PATH: `make test` installs it (make chromium), or apt-get install chromium")
	}
	artifacts := os.Getenv("QMQ_ARTIFACTS")
	if artifacts == "" {
		artifacts = t.TempDir()
	} else if err := os.MkdirAll(artifacts, 0o755); err != nil {
		t.Fatal(err)
	}
	f := start(t, false)
	deadLetters(t, f, "orders", "billing", 2)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	var mu sync.Mutex
	var problems []string
	listen := func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			problems = append(problems, "exception: "+ev.ExceptionDetails.Error())
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.APITypeError || ev.Type == runtime.APITypeWarning {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				problems = append(problems, fmt.Sprintf("console.%s: %s", ev.Type, strings.Join(args, " ")))
			}
		}
	}
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	defer cancelT()
	chromedp.ListenTarget(ctx, listen)

	shot := func(name string) chromedp.Action {
		return chromedp.ActionFunc(func(ctx context.Context) error {
			var buf []byte
			if err := chromedp.FullScreenshot(&buf, 90).Do(ctx); err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(artifacts, name+".jpg"), buf, 0o644)
		})
	}
	page := func(hash, heading, name string, want ...string) {
		t.Helper()
		var text string
		err := chromedp.Run(ctx,
			chromedp.Evaluate(fmt.Sprintf("location.hash = %q", hash), nil),
			chromedp.WaitVisible(fmt.Sprintf(`//h2[contains(., %q)] | //*[@id="error"]`, heading), chromedp.BySearch),
			chromedp.Text("#main", &text, chromedp.ByQuery),
			shot(name))
		if err != nil {
			t.Fatalf("page %s: %v", hash, err)
		}
		if !strings.Contains(text, heading) {
			t.Fatalf("page %s shows an error: %s", hash, text)
		}
		for _, w := range want {
			if !strings.Contains(text, w) {
				t.Errorf("page %s does not show %q:\n%s", hash, w, text)
			}
		}
	}
	if err := chromedp.Run(ctx, chromedp.Navigate(f.srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	page("#cluster", "Cluster health", "cluster", "Broker group g1", "g1-n1", "g1-n2", "g1-n3", "Follower")
	page("#subjects", "Subjects", "subjects", "orders", "billing")
	page("#groups?subject=orders", "Consumer groups of orders", "groups", "billing")
	page("#group?subject=orders&group=billing", "billing of orders", "group", "Dead letters (2)")
	page("#delays", "Delayed messages", "delays", "Broker group g1")
	page("#messages", "Messages", "messages")
	page("#dead?subject=orders&group=billing", "Dead letters of billing", "dead", "Broker group g1: 2")

	err = chromedp.Run(ctx,
		chromedp.Evaluate(`window.confirm = () => true`, nil),
		chromedp.Click(".resend-one", chromedp.ByQuery),
		chromedp.WaitVisible(`#action-result.ok`, chromedp.ByQuery),
		shot("resent"))
	if err != nil {
		t.Fatalf("resend from the page: %v", err)
	}
	poll.Until(t, 10*time.Second, "one dead letter left", func() bool {
		v, err := f.a.ConsumerGroup(context.Background(), "orders", "billing")
		return err == nil && v.Total.DeadLetters == 1
	})
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Errorf("browser: %s", p)
	}
	t.Logf("screenshots in %s", artifacts)
}
