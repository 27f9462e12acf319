package main

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
}

// livePage opens the page in Chromium, pastes viewer (a bearer token) into its form when
// given, waits for the stream, submits a score with tok and waits for the page to show it;
// the screenshot goes to test-artifacts/<shot>. No URL the page requested may carry the
// bearer token.
func livePage(t *testing.T, browser string, svc *service, viewer, tok, shotName string) {

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
		chromedp.WindowSize(900, 760),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(allocCtx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 60*time.Second)
	defer cancelTimeout()

	if err := chromedp.Do(ctx, chromedp.Navigate(svc.base+"/")); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	if viewer != "" {
		if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#auth`)), chromedp.SendKeys(chromedp.CSS(`#token`), viewer), chromedp.Click(chromedp.CSS(`#auth button`))); err != nil {
			t.Fatalf("paste the token: %v", err)
		}
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#state.live`))); err != nil {
		t.Fatalf("page did not go live: %v", err)
	}
	if r := svc.do(t, http.MethodPost, "/v1/scores?wait=true", tok, `{"score": 4242}`); r.status != 200 {
		t.Fatalf("submit: %d %s", r.status, r.raw)
	}
	if err := chromedp.Do(ctx, chromedp.WaitVisible(chromedp.CSS(`#top li[data-user="browser-hero"]`))); err != nil {
		t.Fatalf("page did not show the score: %v", err)
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
	shot, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "..", "test-artifacts")
	if err := os.MkdirAll(dir, 0o755); err == nil {
		_ = os.WriteFile(filepath.Join(dir, shotName), shot, 0o644)
	}
}
