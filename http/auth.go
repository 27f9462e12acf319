package http

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/golang-jwt/jwt/v5"

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

// ParseToken verifies an HS256 token and its claims: exp required, sub a valid user id.
func ParseToken(secret []byte, raw string, opts ...jwt.ParserOption) (*Claims, error) {
	claims := &Claims{}
	opts = append(opts, jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
	_, err := jwt.ParseWithClaims(raw, claims, func(*jwt.Token) (any, error) { return secret, nil }, opts...)
	if err != nil {
		return nil, err
	}
	if !messages.ValidUserID(claims.Subject) {
		return nil, errors.New("sub is not a valid user id")
	}
	return claims, nil
}

func (s *server) authenticate(next http.Handler) http.Handler {
	secret := []byte(s.Config.JWTSecret)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		raw, ok := strings.CutPrefix(h, "Bearer ")
		if !ok || raw == "" {
			writeError(w, r, http.StatusUnauthorized, "unauthorized", "missing bearer token", "")
			return
		}
		claims, err := ParseToken(secret, strings.TrimSpace(raw))
		if err != nil {
			msg := "invalid token"
			if errors.Is(err, jwt.ErrTokenExpired) {
				msg = "token expired"
			}
			writeError(w, r, http.StatusUnauthorized, "unauthorized", msg, "")
			return
		}
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), claimsKey{}, claims)))
	})
}
