package messages_test

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/openleaderboard/leaderboard/messages"
)

func TestValidUserID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{"one character", "a", true},
		{"every allowed character", "AZaz09_.:-", true},
		{"typical", "player_42", true},
		{"namespaced", "steam:7656119", true},
		{"64 characters", strings.Repeat("x", 64), true},
		{"65 characters", strings.Repeat("x", 65), false},
		{"empty", "", false},
		{"space inside", "john doe", false},
		{"leading space", " john", false},
		{"trailing newline", "john\n", false},
		{"tab", "a\tb", false},
		{"NUL", "a\x00b", false},
		{"DEL", "a\x7f", false},
		{"slash", "a/b", false},
		{"at sign", "a@b", false},
		{"pipe", "a|b", false},
		{"braces", "{a}", false},
		{"accented letter", "josé", false},
		{"cyrillic lookalike", "аdmin", false}, // first letter is U+0430
		{"CJK", "玩家", false},
		{"emoji", "🎮", false},
		{"invalid UTF-8", "a\xff", false},
		{"fullwidth digit", "１", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := messages.ValidUserID(tt.id); got != tt.want {
				t.Errorf("ValidUserID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

func TestValidEventID(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		id   string
		want bool
	}{
		{"one character", "e", true},
		{"uuid", "0b5c3e5e-6f41-4f55-9a8f-2b4c1f7a9d10", true},
		{"punctuation", "match#12/round:3|point=7", true},
		{"64 characters", strings.Repeat("e", 64), true},
		{"65 characters", strings.Repeat("e", 65), false},
		{"64 multibyte characters", strings.Repeat("é", 64), true},
		{"65 multibyte characters", strings.Repeat("é", 65), false},
		{"unicode", "événement-日本-🎮", true},
		{"empty", "", false},
		{"space inside (API.md: any 1 to 64 characters)", "match 17 alice", true},
		{"only a space", " ", true},
		{"tab", "ev\t1", false},
		{"newline", "ev1\n", false},
		{"carriage return", "ev1\r", false},
		{"NUL", "ev\x001", false},
		{"escape", "\x1b[31m", false},
		{"DEL", "ev\x7f", false},
		{"C1 control", "ev\u0085", false},
		{"no-break space", "ev\u00a01", false},
		{"ideographic space", "ev\u30001", false},
		{"zero-width space", "ev\u200b1", false},
		{"right-to-left override", "ev\u202e1", false},
		{"invalid UTF-8", "ev\xff", false},
		{"truncated UTF-8", "ev\xc3", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := messages.ValidEventID(tt.id); got != tt.want {
				t.Errorf("ValidEventID(%q) = %v, want %v", tt.id, got, tt.want)
			}
		})
	}
}

func TestCleanNickName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain", "Alice", "Alice"},
		{"empty", "", ""},
		{"spaces kept", "Mary Jane Watson", "Mary Jane Watson"},
		{"unicode kept", "Zoë 玩家 🎮", "Zoë 玩家 🎮"},
		{"tab dropped", "Ali\tce", "Alice"},
		{"newlines dropped", "Al\nic\re", "Alice"},
		{"NUL dropped", "Ali\x00ce", "Alice"},
		{"escape sequence loses its ESC", "\x1b[31mRed", "[31mRed"},
		{"DEL dropped", "Bob\x7f", "Bob"},
		{"C1 control dropped", "Bob\u0085", "Bob"},
		{"zero-width and bidi controls dropped", "B\u200bo\u202eb", "Bob"},
		{"no-break space dropped", "Bob\u00a0", "Bob"},
		{"64 characters kept", strings.Repeat("n", 64), strings.Repeat("n", 64)},
		{"65 characters cut to 64", strings.Repeat("n", 65), strings.Repeat("n", 64)},
		{"cut by characters, not bytes", strings.Repeat("é", 70), strings.Repeat("é", 64)},
		{"dropped characters do not count", strings.Repeat("\x00", 10) + strings.Repeat("n", 64), strings.Repeat("n", 64)},
		{"emoji kept whole at the limit", strings.Repeat("n", 63) + "🎮🎮", strings.Repeat("n", 63) + "🎮"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := messages.CleanNickName(tt.in)
			if got != tt.want {
				t.Errorf("CleanNickName(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if again := messages.CleanNickName(got); again != got {
				t.Errorf("CleanNickName is not idempotent: %q -> %q", got, again)
			}
		})
	}
}

func TestCleanNickNameAlwaysValid(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"a\xffb", "\xc3", "\xed\xa0\x80x", strings.Repeat("\xff", 100), "ok\u2028line"} {
		got := messages.CleanNickName(in)
		if !utf8.ValidString(got) {
			t.Errorf("CleanNickName(%q) = %q is not valid UTF-8", in, got)
		}
		if n := utf8.RuneCountInString(got); n > 64 {
			t.Errorf("CleanNickName(%q) has %d characters", in, n)
		}
		if strings.ContainsAny(got, "\x00\t\n\r\u2028") {
			t.Errorf("CleanNickName(%q) = %q keeps control characters", in, got)
		}
		if messages.CleanNickName(got) != got {
			t.Errorf("CleanNickName(%q) is not idempotent", in)
		}
	}
}

func validScore() messages.ScoreSubmitted {
	return messages.ScoreSubmitted{
		EventID: "ev-1", Board: "global", Period: "all_time", UserID: "player_1",
		NickName: "Player One", Value: 1200, OccurredAt: time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC),
	}
}

func TestScoreSubmittedValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change func(*messages.ScoreSubmitted)
		errs   []string // substrings the error must hold; none: valid
	}{
		{"valid", func(*messages.ScoreSubmitted) {}, nil},
		{"no nick name", func(c *messages.ScoreSubmitted) { c.NickName = "" }, nil},
		{"unicode nick name", func(c *messages.ScoreSubmitted) { c.NickName = "Zoë 🎮" }, nil},
		{"zero and negative values are the board's business", func(c *messages.ScoreSubmitted) { c.Value = -5 }, nil},
		{"64-character ids", func(c *messages.ScoreSubmitted) {
			c.EventID, c.UserID = strings.Repeat("e", 64), strings.Repeat("u", 64)
		}, nil},
		{"empty event id", func(c *messages.ScoreSubmitted) { c.EventID = "" }, []string{"event_id"}},
		{"event id too long", func(c *messages.ScoreSubmitted) { c.EventID = strings.Repeat("e", 65) }, []string{"event_id"}},
		{"event id with a tab", func(c *messages.ScoreSubmitted) { c.EventID = "ev\t1" }, []string{"event_id"}},
		{"empty user id", func(c *messages.ScoreSubmitted) { c.UserID = "" }, []string{"user_id"}},
		{"user id too long", func(c *messages.ScoreSubmitted) { c.UserID = strings.Repeat("u", 65) }, []string{"user_id"}},
		{"user id with unicode", func(c *messages.ScoreSubmitted) { c.UserID = "josé" }, []string{"user_id"}},
		{"no board", func(c *messages.ScoreSubmitted) { c.Board = "" }, []string{"board"}},
		{"no period", func(c *messages.ScoreSubmitted) { c.Period = "" }, []string{"period"}},
		{"no time", func(c *messages.ScoreSubmitted) { c.OccurredAt = time.Time{} }, []string{"occurred_at"}},
		{"nick name with a newline", func(c *messages.ScoreSubmitted) { c.NickName = "Bob\nSmith" }, []string{"nick_name"}},
		{"nick name too long", func(c *messages.ScoreSubmitted) { c.NickName = strings.Repeat("n", 65) }, []string{"nick_name"}},
		{"nick name not UTF-8", func(c *messages.ScoreSubmitted) { c.NickName = "Bob\xff" }, []string{"nick_name"}},
		{"everything wrong", func(c *messages.ScoreSubmitted) {
			*c = messages.ScoreSubmitted{NickName: "\x00"}
		}, []string{"event_id", "user_id", "board", "occurred_at", "nick_name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validScore()
			tt.change(&c)
			err := c.Validate()
			if len(tt.errs) == 0 {
				if err != nil {
					t.Errorf("Validate(%+v) = %v, want nil", c, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate(%+v) = nil, want an error about %v", c, tt.errs)
			}
			for _, want := range tt.errs {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("Validate error %q does not mention %q", err, want)
				}
			}
		})
	}
}

// TestValidMetadataIsWhatJSONBStores: metadata is a JSON object of at most 1 KB that
// PostgreSQL's jsonb takes as it is: escapes jsonb refuses (\u0000, unpaired surrogates),
// bytes that are not UTF-8 and numbers whose exponent jsonb writes out past 1 KB are
// refused; escaped backslashes, surrogate pairs and small exponents are not.
func TestValidMetadataIsWhatJSONBStores(t *testing.T) {
	for raw, want := range map[string]bool{
		`{}`:                              true,
		`{"car":"red","lap":3}`:           true,
		`{"e":"\ud83d\ude00"}`:            true,
		`{"u":"\u00e9","q":"e\"E\\"}`:     true,
		`{"k":"\\u0000"}`:                 true, // a backslash, then the text u0000
		`{"x":1e10,"y":1.5E-3,"z":-2e+2}`: true,
		`{"t":true,"f":false,"n":null}`:   true,
		`{"a":"\u0000"}`:                  false,
		`{"a":"x\u0000y"}`:                false,
		`{"a":"\ud800"}`:                  false,
		`{"a":"\udc00"}`:                  false,
		`{"a":"\ud800\u0041"}`:            false,
		`{"a":"\ud800x"}`:                 false,
		`{"\u0000":1}`:                    false,
		"{\"a\":\"\xff\"}":                false,
		`{"a":1e131071}`:                  false,
		`{"a":1e-16384}`:                  false,
		`{"a":1e1100}`:                    false,
		`[]`:                              false,
		`null`:                            false,
		`"x"`:                             false,
		`{"a":` + strings.Repeat("1", 1020) + `}`: false,
		// the API measures what the client sent: its own escapes count whole
		`{"a":"` + strings.Repeat(`\u0026`, 170) + `"}`: false,
		`{"a":"` + strings.Repeat(`\u0026`, 169) + `"}`: true,
	} {
		if got := messages.ValidMetadata([]byte(raw)); got != want {
			t.Errorf("ValidMetadata(%q) = %v, want %v", raw, got, want)
		}
	}
}
