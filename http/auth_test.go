package http

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// TestVerifiedTokensExpire: a bearer token verified once is answered from the cache, but
// still refused once it expires or before it is valid.
func TestVerifiedTokensExpire(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	k := tokens{secret: []byte("0123456789abcdef0123456789abcdef"), maxTTL: 24 * time.Hour, now: clock, verified: newTokenCache(2)}
	sign := func(sub string, nbf, exp time.Time) string {
		c := Claims{RegisteredClaims: jwt.RegisteredClaims{Subject: sub, IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(nbf), ExpiresAt: jwt.NewNumericDate(exp)}}
		raw, err := jwt.NewWithClaims(jwt.SigningMethodHS256, c).SignedString(k.secret)
		if err != nil {
			t.Fatal(err)
		}
		return raw
	}
	raw := sign("u", now, now.Add(time.Hour))
	for range 2 { // verified, then from the cache
		if c, err := k.bearer(raw); err != nil || c.Subject != "u" {
			t.Fatalf("bearer: %v %v", c, err)
		}
	}
	if k.verified.get(raw) == nil {
		t.Fatal("a verified token is not cached")
	}
	now = now.Add(time.Hour + 31*time.Second)
	if _, err := k.bearer(raw); !errors.Is(err, jwt.ErrTokenExpired) {
		t.Fatalf("an expired cached token: %v", err)
	}
	// A forged token is never taken from the cache: its text differs.
	forged := raw[:len(raw)-2] + "xx"
	if _, err := k.bearer(forged); err == nil {
		t.Fatal("a forged token was accepted")
	}
	// The cache stays bounded.
	for i := range 5 {
		_, _ = k.bearer(sign(fmt.Sprintf("v%d", i), now, now.Add(time.Hour)))
	}
	if n := len(k.verified.cur) + len(k.verified.old); n > 4 {
		t.Fatalf("%d cached tokens, want at most 2 of each generation", n)
	}
}

// TestTokenCacheKeepsTokensInUse: a token used again after the cache turned over is
// still known; one unused for two turnovers is forgotten.
func TestTokenCacheKeepsTokensInUse(t *testing.T) {
	c := newTokenCache(2)
	claims := map[string]*Claims{}
	for _, raw := range []string{"a", "b", "c", "d", "e"} {
		claims[raw] = &Claims{}
	}
	c.put("a", claims["a"])
	c.put("b", claims["b"])
	c.put("c", claims["c"]) // turnover: a and b are the old generation
	if c.get("a") != claims["a"] {
		t.Fatal("a token of the generation before was forgotten at the first turnover")
	}
	c.put("d", claims["d"]) // turnover: c and a (moved up by its use) are the generation before
	c.put("e", claims["e"])
	if c.get("b") != nil {
		t.Error("a token unused for two turnovers is still cached")
	}
	if c.get("c") != claims["c"] {
		t.Error("a token of the generation before was forgotten")
	}
}
