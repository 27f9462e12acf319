package configs

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Rate is a rate limit: at most N writes per Per, enforced as a GCRA (N may come at once,
// then one every Per/N). The zero Rate is no limit.
type Rate struct {
	N   int
	Per time.Duration
}

// Off reports whether the rate limits nothing.
func (r Rate) Off() bool { return r.N == 0 }

func (r Rate) String() string {
	if r.Off() {
		return "off"
	}
	return fmt.Sprintf("%d/%s", r.N, r.Per)
}

// ParseRate reads "N/duration" (10/60s, 100/1m) or "off".
func ParseRate(s string) (Rate, error) {
	if strings.TrimSpace(s) == "off" {
		return Rate{}, nil
	}
	n, per, ok := strings.Cut(strings.TrimSpace(s), "/")
	count, err1 := strconv.Atoi(n)
	d, err2 := time.ParseDuration(per)
	if !ok || err1 != nil || err2 != nil || count < 1 || count > 1_000_000 || d < time.Second || d > 24*time.Hour {
		return Rate{}, fmt.Errorf("%q: want N/duration (1 to 1000000 per 1s to 24h, e.g. 10/60s) or off", s)
	}
	return Rate{N: count, Per: d}, nil
}

// PerSecond is the rate in events per second (0 when off).
func (r Rate) PerSecond() float64 {
	if r.Off() {
		return 0
	}
	return float64(r.N) / r.Per.Seconds()
}

// SignatureSkew is how far an increment's timestamp may be from the server's clock when
// signatures are required (API.md).
const SignatureSkew = 60 * time.Second

// MinSigningSecretBytes is the shortest LEADERBOARD_SIGNING_SECRET accepted.
const MinSigningSecretBytes = 16
