package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// browser drives the dashboard in headless Chromium.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// chromium returns the path of an installed Chromium, or "".
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// openDashboard starts headless Chromium on url for the rest of t. With
// no Chromium installed it reports a skipped subtest "browser" and
// returns nil, so that the caller runs everything but the browser
// checks.
func openDashboard(t *testing.T, url string) *browser {
	t.Helper()
	path := chromium()
	if path == "" {
		t.Run("browser", func(t *testing.T) {
			t.Skip("no Chromium installed (Debian package chromium): the dashboard's browser checks do not run")
		})
		return nil
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root in a container
		chromedp.WindowSize(1280, 1000),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() {
		cancel()
		acancel()
	})
	b := &browser{t: t, ctx: ctx}
	// The first action starts the browser: no timeout on it (it would
	// stop the browser with it).
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatalf("browser: open %s: %v", url, err)
	}
	return b
}

// do runs actions with a bound on how long they may take.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("browser: %s: %v", what, err)
	}
}

// waitJS waits until the JavaScript expression cond is true in the page.
func (b *browser) waitJS(what, cond string) {
	b.t.Helper()
	b.do(what, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingTimeout(25*time.Second), chromedp.WithPollingInterval(100*time.Millisecond)))
}

// text returns the text of the first element matching the CSS selector.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("browser: read %s: %v", sel, err)
	}
	return s
}

// screenshot saves the whole page as the test artefact name.png (in
// $TEMPEST_SCREENSHOT_DIR when set).
func (b *browser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // quality 100 is PNG; below, JPEG
	if err != nil {
		b.t.Fatalf("browser: screenshot: %v", err)
	}
	dir := b.t.ArtifactDir()
	if d := os.Getenv("TEMPEST_SCREENSHOT_DIR"); d != "" {
		dir = d
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.t.Fatal(err)
		}
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("dashboard screenshot: %s (%d bytes)", path, len(png))
}

// rows is a JavaScript expression counting the member rows with status.
func rows(status string) string {
	return fmt.Sprintf(`document.querySelectorAll('#members tbody tr[data-status=%q]').length`, status)
}
