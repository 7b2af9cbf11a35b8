package transport

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"
)

// Defaults shared by the HTTP middleware and the gRPC interceptor.
const (
	// DefaultMinLength and DefaultMaxLength bound a key's length in bytes.
	// 256 is the ASP.NET idempotency middleware's limit (Stripe's is 255);
	// a UUID is 36.
	DefaultMinLength = 1
	DefaultMaxLength = 256
)

// Rules are what makes a key acceptable.
type Rules struct {
	// Strict accepts only the RFC 8941 String form ("..."), as the IETF
	// draft requires; otherwise a bare value (Stripe's form) is accepted too.
	Strict bool
	// MinLength and MaxLength bound the key's length in bytes, after
	// unquoting.
	MinLength, MaxLength int
	// Pattern, if set, must match the whole key.
	Pattern *regexp.Regexp
}

// DefaultRules are the rules without options.
var DefaultRules = Rules{MinLength: DefaultMinLength, MaxLength: DefaultMaxLength}

// Check reports whether the rules themselves are usable.
func (r Rules) Check() error {
	if r.MinLength < 1 || r.MaxLength < r.MinLength {
		return fmt.Errorf("key length bounds need 1 <= min <= max, got %d, %d", r.MinLength, r.MaxLength)
	}
	return nil
}

// ErrInvalid is matched by every error Parse returns.
var ErrInvalid = errors.New("invalid idempotency key")

type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{fmt.Sprintf(format, args...)}
}

// Parse reads a key from the values of its header field (or metadata key)
// and checks it against r. The error says, in words fit for a client, what
// is wrong. A missing key is not Parse's concern: callers check len(values)
// first.
//
// A value that starts with a double quote is parsed as an RFC 8941 Item
// whose bare item is a String: the key is the string's content, and
// parameters after it (";name=value") are parsed and ignored, as RFC 8941
// says of parameters a recipient does not know. Any other value is, unless
// r.Strict, the key itself (Stripe's clients send keys unquoted); it must
// be visible ASCII without double quotes.
func Parse(values []string, r Rules) (string, error) {
	if len(values) != 1 {
		return "", invalid("the request has %d idempotency key fields; send exactly one", len(values))
	}
	v := strings.Trim(values[0], " \t")
	var key string
	switch {
	case v == "":
		return "", invalid("the idempotency key is empty")
	case v[0] == '"':
		s, rest, err := parseString(v)
		if err != nil {
			return "", err
		}
		if err := skipParameters(rest); err != nil {
			return "", err
		}
		key = s
	case r.Strict:
		return "", invalid(`the idempotency key must be a structured-field string in double quotes, such as "8e03978e-40d5-43e8-bc93-6894a57f9324"`)
	default:
		for i := 0; i < len(v); i++ {
			if c := v[i]; c < 0x21 || c > 0x7e || c == '"' {
				return "", invalid("the idempotency key has a character that is not visible ASCII (byte %d); quote it as a structured-field string or use letters, digits and punctuation only", i)
			}
		}
		key = v
	}
	switch {
	case len(key) < r.MinLength:
		return "", invalid("the idempotency key is %d bytes long; the shortest accepted is %d", len(key), r.MinLength)
	case len(key) > r.MaxLength:
		return "", invalid("the idempotency key is %d bytes long; the longest accepted is %d", len(key), r.MaxLength)
	case r.Pattern != nil && !r.Pattern.MatchString(key):
		return "", invalid("the idempotency key does not have the required format")
	}
	return key, nil
}

// parseString parses an RFC 8941 sf-string at the start of v (which starts
// with a double quote) and returns its content and what follows it.
func parseString(v string) (string, string, error) {
	var b strings.Builder
	for i := 1; i < len(v); i++ {
		c := v[i]
		switch {
		case c == '\\':
			i++
			if i == len(v) || (v[i] != '"' && v[i] != '\\') {
				return "", "", invalid(`the idempotency key has a backslash that escapes neither " nor \`)
			}
			b.WriteByte(v[i])
		case c == '"':
			return b.String(), v[i+1:], nil
		case c < 0x20 || c > 0x7e:
			return "", "", invalid("the idempotency key has a character a structured-field string cannot hold (byte %d): printable ASCII only", i)
		default:
			b.WriteByte(c)
		}
	}
	return "", "", invalid("the idempotency key's string has no closing double quote")
}

// skipParameters checks that rest is RFC 8941 parameters: *( ";" *SP key
// [ "=" bare-item ] ).
func skipParameters(rest string) error {
	for rest != "" {
		if rest[0] != ';' {
			return invalid("the idempotency key field has %q after its string; send one string, not a list", truncate(rest))
		}
		rest = strings.TrimLeft(rest[1:], " ")
		n := paramKeyLen(rest)
		if n == 0 {
			return invalid("the idempotency key field has a malformed parameter")
		}
		rest = rest[n:]
		if rest == "" || rest[0] != '=' {
			continue
		}
		var err error
		if rest, err = skipBareItem(rest[1:]); err != nil {
			return err
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 20 {
		return s[:20] + "…"
	}
	return s
}

// paramKeyLen is the length of the RFC 8941 key at the start of s: ( lcalpha
// / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ).
func paramKeyLen(s string) int {
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] == '*') {
		return 0
	}
	i := 1
	for i < len(s) && (s[i] >= 'a' && s[i] <= 'z' || s[i] >= '0' && s[i] <= '9' || strings.IndexByte("_-.*", s[i]) >= 0) {
		i++
	}
	return i
}

// skipBareItem skips an RFC 8941 bare item (integer, decimal, string,
// token, byte sequence, boolean) at the start of s.
func skipBareItem(s string) (string, error) {
	bad := invalid("the idempotency key field has a malformed parameter value")
	if s == "" {
		return "", bad
	}
	switch c := s[0]; {
	case c == '"':
		_, rest, err := parseString(s)
		return rest, err
	case c == '?':
		if len(s) < 2 || (s[1] != '0' && s[1] != '1') {
			return "", bad
		}
		return s[2:], nil
	case c == ':':
		end := strings.IndexByte(s[1:], ':')
		if end < 0 {
			return "", bad
		}
		for _, b := range s[1 : 1+end] {
			if !(b >= 'A' && b <= 'Z' || b >= 'a' && b <= 'z' || b >= '0' && b <= '9' || b == '+' || b == '/' || b == '=') {
				return "", bad
			}
		}
		return s[2+end:], nil
	case c == '-' || c >= '0' && c <= '9':
		i := 0
		if c == '-' {
			i++
		}
		start := i
		for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.') {
			i++
		}
		if i == start {
			return "", bad
		}
		return s[i:], nil
	case c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c == '*':
		i := 1
		for i < len(s) && s[i] > 0x20 && s[i] < 0x7f && strings.IndexByte(`"(),;<=>?@[\]{}`, s[i]) < 0 {
			i++
		}
		return s[i:], nil
	}
	return "", bad
}

// RetryAfter is how long a duplicate should wait before retrying, in whole
// seconds, at least 1: until the holder's lease end plus the clock-skew
// tolerance, the earliest another caller may take the key over if the
// holder died. The lease is extended while the holder runs, so a retry may
// find it still held; it then gets a new hint. A zero lease end (unknown)
// gives 1.
func RetryAfter(leaseEnd time.Time, skew time.Duration, now time.Time) int {
	if leaseEnd.IsZero() {
		return 1
	}
	d := leaseEnd.Add(skew).Sub(now)
	secs := math.Ceil(d.Seconds())
	if secs < 1 {
		return 1
	}
	if secs > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(secs)
}
