package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	lbhttp "github.com/openleaderboard/leaderboard/http"
)

// TestLivePageInBrowser opens the live page in headless Chromium, submits a score, and
// checks that the page shows it. The screenshot is kept in test-artifacts/.
func TestLivePageInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a browser")
	}
	browser, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") != "" || os.Getenv("LEADERBOARD_REQUIRE_BROWSER") != "" {
			t.Fatal("chromium not installed (make test installs it)")
		}
		t.Skip("chromium not installed; make test installs it")
	}
	t.Parallel()
	t.Run("with a token", func(t *testing.T) {
		env := newTestEnv(t)
		svc := env.start(nil)
		livePage(t, browser, svc, mintToken(t, "viewer"), mintToken(t, "browser-hero"), "live-page.png")
	})
	t.Run("development secret, no token", func(t *testing.T) {
		env := newTestEnv(t)
		svc := env.start(map[string]string{"LEADERBOARD_JWT_SECRET": ""})
		hero := signTokenWith(t, configs.DevJWTSecret, lbhttp.Claims{
			RegisteredClaims: jwt.RegisteredClaims{Subject: "browser-hero", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))},
			Name:             "Player browser-hero",
		})
		livePage(t, browser, svc, "", hero, "live-page-dev.png")
	})
	t.Run("any board", func(t *testing.T) {
		env := newTestEnv(t)
		clock := dayClock()
		liveBoards(t, browser, env.startWith(nil, clock), clock)
	})
}

// livePage opens the page in Chromium, pastes viewer (a bearer token) into its form when
// given, waits for the stream, submits a score with tok and waits for the page to show it;
// the screenshot goes to test-artifacts/<shot>. No URL the page requested may carry the
// bearer token.
func livePage(t *testing.T, browser string, svc *service, viewer, tok, shotName string) {
	ctx, pageErrors := newBrowser(t, browser)
	if err := chromedp.Do(ctx, chromedp.Navigate(svc.base+"/")); err != nil {
		t.Fatalf("open the page: %v%s", err, pageErrors())
	}
	if viewer != "" {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#auth`)), chromedp.SendKeys(chromedp.CSS(`#token`), viewer), chromedp.Click(chromedp.CSS(`#auth button`))); err != nil {
			t.Fatalf("paste the token: %v%s", err, pageErrors())
		}
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#state.live`))); err != nil {
		t.Fatalf("page did not go live: %v%s", err, pageErrors())
	}
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 4242}`); r.status != 200 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#top li[data-user="browser-hero"]`))); err != nil {
		t.Fatalf("page did not show the score: %v%s", err, pageErrors())
	}
	text, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(`#top`)))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text, "Player browser-hero") || !strings.Contains(text, "4,242") {
		t.Fatalf("top-10 on the page: %q", text)
	}
	urls, err := chromedp.Run(ctx, chromedp.Evaluate[string](`[location.href, source.url, ...performance.getEntriesByType("resource").map(e => e.name)].join("\n")`))
	if err != nil {
		t.Fatal(err)
	}
	if viewer != "" && strings.Contains(urls, viewer) {
		t.Fatalf("the bearer token went into a URL:\n%s", urls)
	}
	if !strings.Contains(urls, "/v1/realtime/leaderboard?") {
		t.Fatalf("the stream was not among the page's requests:\n%s", urls)
	}
	saveShot(t, ctx, shotName)
}

// newBrowser starts headless Chromium; the test's end closes it. Uncaught script errors of
// the page are collected for failure messages (errs).
func newBrowser(t *testing.T, browser string) (ctx context.Context, errs func() string) {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(browser),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(900, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	t.Cleanup(cancelTimeout)
	var mu sync.Mutex
	var thrown []string
	if err := chromedp.Listen(ctx, func(ev any) {
		if e, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			d := e.ExceptionDetails
			msg := d.Text
			if d.Exception != nil && d.Exception.Description != "" {
				msg = d.Exception.Description
			}
			thrown = append(thrown, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start the browser: %v", err)
	}
	return ctx, func() string {
		mu.Lock()
		defer mu.Unlock()
		if len(thrown) == 0 {
			return ""
		}
		return "; page errors: " + strings.Join(thrown, " | ")
	}
}

// saveShot keeps a screenshot of the page in test-artifacts/.
func saveShot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "test-artifacts")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, name), shot, 0o644)
	}
}

// liveBoards picks the daily board on the page: it shows the time to the next reset, the
// viewer's own entry below the top-10 while outside it and highlighted inside it, and
// "updated" as the time the top last changed, not when the page got its snapshot.
func liveBoards(t *testing.T, browser string, svc *service, clock func() time.Time) {
	srv := mintToken(t, "gs", "server")
	for i := 1; i <= 11; i++ {
		// Applied before the next: the rivals are on other partitions than the viewer, so
		// the viewer's ?wait=true below would not wait for them.
		if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, fmt.Sprintf(`{"value": %d, "user_id": "rival-%02d"}`, 100*i, i)); r.status != 200 {
			t.Fatalf("seed: %d %s", r.status, r.raw)
		}
	}
	if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 5, "user_id": "viewer-x"}`); r.status != 200 || num(r.body["rank"]) != 12 {
		t.Fatalf("the viewer's entry: %d %s", r.status, r.raw)
	}
	top := svc.do(t, http.MethodGet, "/v1/boards/daily/top", mintToken(t, "viewer-x"), "")
	updatedAt, _ := top.body["updated_at"].(string)
	if updatedAt == "" {
		t.Fatalf("top: %s", top.raw)
	}
	time.Sleep(2100 * time.Millisecond) // the page opens seconds after the top last changed

	ctx, pageErrors := newBrowser(t, browser)
	if err := chromedp.Do(ctx, chromedp.Navigate(svc.base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#auth`)), chromedp.SendKeys(chromedp.CSS(`#token`), mintToken(t, "viewer-x")), chromedp.Click(chromedp.CSS(`#auth button`)),
		chromedp.WaitVisible(chromedp.CSS(`#state.live`)),
		chromedp.SetValue(chromedp.CSS(`#board-select`), "daily"), chromedp.Click(chromedp.CSS(`#go`)),
		chromedp.WaitVisible(chromedp.CSS(`#mine li.me.outside[data-user="viewer-x"]`)),
	); err != nil {
		t.Fatalf("pick the daily board and see the viewer below the top: %v%s", err, pageErrors())
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("%s: %v%s", sel, err, pageErrors())
		}
		return s
	}
	today := clock().UTC().Format(time.DateOnly)
	if got := text(`#board`) + " " + text(`#period`); got != "daily "+today {
		t.Errorf("board and period shown: %q", got)
	}
	if got := text(`#mine`); !strings.Contains(got, "#12") || !strings.Contains(got, "viewer-x") {
		t.Errorf("the viewer's own entry: %q", got)
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#top li").length`)); err != nil || n != 10 {
		t.Errorf("top rows: %d %v", n, err)
	}
	if got := text(`#reset`); !strings.HasPrefix(got, "resets in ") {
		t.Errorf("time to the next reset: %q", got)
	}
	want, err := chromedp.Run(ctx, chromedp.Evaluate[string](`"updated " + new Date(`+strconv.Quote(updatedAt)+`).toLocaleTimeString()`))
	if err != nil {
		t.Fatal(err)
	}
	if got := text(`#updated`); got != want {
		t.Errorf("updated: %q, want %q (when the top last changed)", got, want)
	}
	saveShot(t, ctx, "live-page-outside-top.png")

	// The viewer climbs to the top: highlighted in the top-10, no longer below it.
	if r := svc.do(t, http.MethodPost, "/v1/boards/daily/scores?wait=true", srv, `{"value": 5000, "user_id": "viewer-x"}`); r.status != 200 || num(r.body["rank"]) != 1 {
		t.Fatalf("climb: %d %s", r.status, r.raw)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#top li.me[data-user="viewer-x"]`))); err != nil {
		t.Fatalf("the viewer is not highlighted in the top: %v%s", err, pageErrors())
	}
	if n, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#mine li").length`)); err != nil || n != 0 {
		t.Errorf("the viewer is still shown below the top: %d %v", n, err)
	}
	saveShot(t, ctx, "live-page-board.png")
}
