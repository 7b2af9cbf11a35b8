package transport

import (
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	uuid := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	for _, tc := range []struct {
		name   string
		values []string
		rules  Rules
		want   string // "" for an error
	}{
		{"quoted", []string{`"8e03978e-40d5-43e8-bc93-6894a57f9324"`}, DefaultRules, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"bare", []string{"KG5LxwFBepaKHyUD"}, DefaultRules, "KG5LxwFBepaKHyUD"},
		{"surrounding space", []string{`  "k"  `}, DefaultRules, "k"},
		{"escapes", []string{`"a\"b\\c"`}, DefaultRules, `a"b\c`},
		{"space inside a string", []string{`"a b"`}, DefaultRules, "a b"},
		{"parameters", []string{`"k";a=1;b="x;y";c;d=?1;e=:YWJj:;f=tok;g=-1.5`}, DefaultRules, "k"},
		{"parameter with space", []string{`"k"; a=1`}, DefaultRules, "k"},
		{"strict quoted", []string{`"k"`}, Rules{Strict: true, MinLength: 1, MaxLength: 5}, "k"},
		{"strict bare", []string{"k"}, Rules{Strict: true, MinLength: 1, MaxLength: 5}, ""},
		{"two fields", []string{`"a"`, `"b"`}, DefaultRules, ""},
		{"list", []string{`"a", "b"`}, DefaultRules, ""},
		{"empty", []string{" "}, DefaultRules, ""},
		{"empty string", []string{`""`}, DefaultRules, ""},
		{"unclosed", []string{`"abc`}, DefaultRules, ""},
		{"bad escape", []string{`"a\nb"`}, DefaultRules, ""},
		{"non-ASCII in a string", []string{"\"clé\""}, DefaultRules, ""},
		{"non-ASCII bare", []string{"clé"}, DefaultRules, ""},
		{"quote in a bare key", []string{`a"b`}, DefaultRules, ""},
		{"bad parameter key", []string{`"k";A=1`}, DefaultRules, ""},
		{"bad parameter value", []string{`"k";a=`}, DefaultRules, ""},
		{"bad boolean", []string{`"k";a=?2`}, DefaultRules, ""},
		{"too long", []string{strings.Repeat("k", 257)}, DefaultRules, ""},
		{"longest", []string{strings.Repeat("k", 256)}, DefaultRules, strings.Repeat("k", 256)},
		{"too short", []string{"abc"}, Rules{MinLength: 4, MaxLength: 10}, ""},
		{"pattern", []string{"8e03978e-40d5-43e8-bc93-6894a57f9324"}, Rules{MinLength: 1, MaxLength: 64, Pattern: uuid}, "8e03978e-40d5-43e8-bc93-6894a57f9324"},
		{"pattern miss", []string{"order-1"}, Rules{MinLength: 1, MaxLength: 64, Pattern: uuid}, ""},
	} {
		got, err := Parse(tc.values, tc.rules)
		switch {
		case tc.want == "" && err == nil:
			t.Errorf("%s: Parse(%q) = %q, want an error", tc.name, tc.values, got)
		case tc.want == "" && !errors.Is(err, ErrInvalid):
			t.Errorf("%s: error %v does not match ErrInvalid", tc.name, err)
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: Parse(%q) = %q, %v; want %q", tc.name, tc.values, got, err, tc.want)
		}
	}
}

func TestRulesCheck(t *testing.T) {
	if err := DefaultRules.Check(); err != nil {
		t.Error(err)
	}
	for _, r := range []Rules{{MinLength: 0, MaxLength: 5}, {MinLength: 6, MaxLength: 5}} {
		if r.Check() == nil {
			t.Errorf("%+v: no error", r)
		}
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		lease time.Time
		skew  time.Duration
		want  int
	}{
		{time.Time{}, time.Second, 1},
		{now.Add(-time.Hour), time.Second, 1},
		{now.Add(4100 * time.Millisecond), time.Second, 6},
		{now.Add(5 * time.Second), time.Second, 6},
		{now, 0, 1},
	} {
		if got := RetryAfter(tc.lease, tc.skew, now); got != tc.want {
			t.Errorf("RetryAfter(%v, %v) = %d, want %d", tc.lease.Sub(now), tc.skew, got, tc.want)
		}
	}
}

func TestExpires(t *testing.T) {
	base := time.Date(2026, 1, 1, 0, 0, 7, 0, time.UTC)
	for _, tc := range []struct{ in, want time.Time }{
		{time.Time{}, time.Time{}},
		{base, base},
		{base.Add(time.Nanosecond), base.Add(time.Second)},
		{base.Add(999 * time.Millisecond), base.Add(time.Second)},
		{base.Add(-time.Nanosecond), base},
	} {
		if got := Expires(tc.in); !got.Equal(tc.want) {
			t.Errorf("Expires(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

func TestCredential(t *testing.T) {
	if got := Credential(nil); got != "" {
		t.Errorf("Credential(nil) = %q, want empty", got)
	}
	seen := map[string][]string{}
	for _, v := range [][]string{{"Bearer alice"}, {"Bearer bob"}, {"Bearer alice", "x"}, {"x", "Bearer alice"}, {"Bearer alicex"}, {""}} {
		c := Credential(v)
		if len(c) != 64 || strings.Contains(c, "alice") {
			t.Errorf("Credential(%q) = %q, want 64 hex digits", v, c)
		}
		if other, dup := seen[c]; dup {
			t.Errorf("Credential(%q) = Credential(%q)", v, other)
		}
		seen[c] = v
	}
}
