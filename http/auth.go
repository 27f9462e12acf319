package http

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/openleaderboard/leaderboard/configs"
	"github.com/openleaderboard/leaderboard/messages"
)

// Claims are the JWT claims the API reads.
type Claims struct {
	jwt.RegisteredClaims
	Name  string   `json:"name,omitempty"`
	Roles []string `json:"roles,omitempty"`
}

// HasRole reports whether the token carries the role.
func (c *Claims) HasRole(role string) bool { return slices.Contains(c.Roles, role) }

type claimsKey struct{}

func claimsFrom(ctx context.Context) *Claims {
	c, _ := ctx.Value(claimsKey{}).(*Claims)
	return c
}

// clockSkew is how far exp, nbf and iat may be off the server's clock.
const clockSkew = 30 * time.Second

// realtimeAudience marks the short-lived tokens browsers put in the stream URL. Such a
// token opens streams and nothing else.
const realtimeAudience = configs.RealtimeAudience

// errRealtimeToken refuses a realtime token where a bearer token is required.
var errRealtimeToken = errors.New("a realtime token only opens streams")

// tokens verifies and signs the service's HS256 tokens.
type tokens struct {
	secret []byte
	maxTTL time.Duration
	// audience, when set, is what a bearer token's aud must name (LEADERBOARD_JWT_AUDIENCE).
	audience string
	now      func() time.Time
	// verified remembers bearer tokens that passed every check (nil: none): a client sends
	// the same token with every request, and verifying it again costs more than the rest
	// of a read. Only the checks that depend on the time are made again.
	verified *tokenCache
}

// tokenCache holds verified bearer tokens by their exact text: up to max recent ones and
// up to max of the generation before, so a token in use survives a turnover (a get
// from the old generation moves it to the new one).
type tokenCache struct {
	mu       sync.Mutex
	max      int
	cur, old map[string]*Claims
}

func newTokenCache(max int) *tokenCache {
	return &tokenCache{max: max, cur: map[string]*Claims{}}
}

func (c *tokenCache) get(raw string) *Claims {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if claims, ok := c.cur[raw]; ok {
		return claims
	}
	claims, ok := c.old[raw]
	if ok {
		c.putLocked(raw, claims)
	}
	return claims
}

func (c *tokenCache) put(raw string, claims *Claims) {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.putLocked(raw, claims)
}

func (c *tokenCache) putLocked(raw string, claims *Claims) {
	if len(c.cur) >= c.max {
		c.old, c.cur = c.cur, make(map[string]*Claims, c.max)
	}
	c.cur[raw] = claims
}

// parse verifies a token: HS256 with the secret, exp required, exp/nbf/iat within the
// clock skew, iat not in the future, a lifetime of at most maxTTL (from iat, or from now
// without one) and sub a valid user id.
func (k tokens) parse(raw string, opts ...jwt.ParserOption) (*Claims, error) {
	claims := &Claims{}
	opts = append(opts, jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired(),
		jwt.WithLeeway(clockSkew), jwt.WithIssuedAt(), jwt.WithTimeFunc(k.now))
	if _, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return k.secret, nil }, opts...); err != nil {
		return nil, err
	}
	if !messages.ValidUserID(claims.Subject) {
		return nil, errors.New("sub is not a valid user id")
	}
	from := k.now()
	if claims.IssuedAt != nil {
		from = claims.IssuedAt.Time
	}
	if claims.ExpiresAt.Sub(from) > k.maxTTL {
		return nil, fmt.Errorf("token lives longer than %v", k.maxTTL)
	}
	return claims, nil
}

// bearer verifies a token from the Authorization header: any valid token but a realtime one.
// A token verified before is only checked against the clock again (exp, nbf).
func (k tokens) bearer(raw string) (*Claims, error) {
	if c := k.verified.get(raw); c != nil {
		now := k.now()
		if now.After(c.ExpiresAt.Add(clockSkew)) {
			return nil, jwt.ErrTokenExpired
		}
		if c.NotBefore != nil && now.Add(clockSkew).Before(c.NotBefore.Time) {
			return nil, jwt.ErrTokenNotValidYet
		}
		return c, nil
	}
	var opts []jwt.ParserOption
	if k.audience != "" {
		opts = append(opts, jwt.WithAudience(k.audience))
	}
	c, err := k.parse(raw, opts...)
	if err != nil {
		return nil, err
	}
	if slices.Contains(c.Audience, realtimeAudience) {
		return nil, errRealtimeToken
	}
	k.verified.put(raw, c)
	return c, nil
}

// realtime verifies a realtime token (from a stream URL). With an audience configured it
// must name that one too, as the service's own do: another deployment that shares the
// secret signs realtime tokens without it.
func (k tokens) realtime(raw string) (*Claims, error) {
	c, err := k.parse(raw, jwt.WithAudience(realtimeAudience))
	if err != nil {
		return nil, err
	}
	if k.audience != "" && !slices.Contains(c.Audience, k.audience) {
		return nil, fmt.Errorf("a realtime token without the audience %q", k.audience)
	}
	return c, nil
}

// signRealtime signs a realtime token for a user, valid for ttl but never longer than the
// service accepts (maxTTL) nor past until, the expiry of the bearer token it is traded
// for (zero: none): a derived credential is worth no more than its parent.
func (k tokens) signRealtime(sub, name string, ttl time.Duration, until time.Time) (string, time.Time, error) {
	now := k.now()
	exp := now.Add(min(ttl, k.maxTTL))
	if !until.IsZero() && until.Before(exp) {
		exp = until
	}
	exp = exp.UTC().Truncate(time.Second)
	aud := jwt.ClaimStrings{realtimeAudience}
	if k.audience != "" {
		aud = append(aud, k.audience)
	}
	claims := Claims{
		RegisteredClaims: jwt.RegisteredClaims{Subject: sub, Audience: aud, ExpiresAt: jwt.NewNumericDate(exp), IssuedAt: jwt.NewNumericDate(now)},
		Name:             name,
	}
	tok, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(k.secret)
	return tok, exp, err
}

// bearerToken is the token of an Authorization header of the Bearer scheme, whose name is
// case-insensitive (RFC 9110 11.1: OAuth servers answer token_type "bearer", which
// clients copy).
func bearerToken(header string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	return strings.TrimSpace(token), true
}

// authenticate requires a bearer token; realtime tokens are refused.
func (s *server) authenticate(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, ok := bearerToken(r.Header.Get("Authorization"))
		if !ok || raw == "" {
			writeError(w, r, http.StatusUnauthorized, "unauthorized", "missing bearer token", "")
			return
		}
		claims, err := s.tokens.bearer(raw)
		if err != nil {
			msg := "invalid token"
			switch {
			case errors.Is(err, jwt.ErrTokenExpired):
				msg = "token expired"
			case errors.Is(err, errRealtimeToken):
				msg = "a realtime token only opens streams: send a bearer token"
			}
			writeError(w, r, http.StatusUnauthorized, "unauthorized", msg, "")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, claims)))
	})
}

// requireRole answers 403 to tokens without the role.
func (s *server) requireRole(role string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !claimsFrom(r.Context()).HasRole(role) {
				writeError(w, r, http.StatusForbidden, "forbidden", "this endpoint needs the "+role+" role", "")
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}
