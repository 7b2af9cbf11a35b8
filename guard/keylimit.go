package guard

import (
	"fmt"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store"
)

// A store may hold keys only up to a length (DynamoDB: 2,048 bytes for a
// partition key); it says so through store.KeyLimiter. The guard refuses a
// longer key before it calls the store: a scope when it is fixed (Wrap,
// WrapTx, the adapters' constructors), and each call's key when it is
// derived, so that a key no store can hold is a permanent invalid input,
// never a store error that a retry meets again.

// maxKeyBytes returns the longest key s can hold, or 0 for no limit.
func maxKeyBytes(s store.Store) int {
	if l, ok := s.(store.KeyLimiter); ok {
		return max(l.MaxKeyBytes(), 0)
	}
	return 0
}

// CheckScope reports whether the keys of scope fit in the guard's store:
// nil, or an error matching [ErrInvalidOption] that gives the scope's
// length and the longest scope the store can hold (see
// [store.KeyLimiter]; a key is the scope, "#" and 64 hex digits, and a
// step's scope is its call's, "/" and the step's name). [Wrap] and [WrapTx]
// check their scope with it, and so do the adapters that fix a scope when
// they are built; [Do] checks each call's key as it derives it, and
// refuses one that is too long with [ErrInvalidInput], before it calls the
// store.
func (g *Guard) CheckScope(scope string) error {
	if scope == "" {
		return invalidOption("empty scope")
	}
	if g.maxKey > 0 && len(scope)+1+keyformat.HashLen > g.maxKey {
		return invalidOption("scope %s is %d bytes, too long for the %s store: a key (the scope, \"#\" and %d hex digits) may be at most %d bytes, so a scope at most %d",
			clip(scope), len(scope), storeName(g.store), keyformat.HashLen, g.maxKey, g.maxKey-1-keyformat.HashLen)
	}
	return nil
}

// checkKey refuses the key of d if the store cannot hold it.
func (g *Guard) checkKey(d *derived) error {
	if g.maxKey > 0 && len(d.key) > g.maxKey {
		return g.keyTooLong(d)
	}
	return nil
}

// keyTooLong is the error of a key too long for the store.
func (g *Guard) keyTooLong(d *derived) error {
	return &inputError{&keyformat.InputError{What: "the key", Err: &keyTooLongError{key: d.key, scope: len(d.scope), max: g.maxKey, store: storeName(g.store)}}}
}

// keyTooLongError is a key longer than its store can hold.
type keyTooLongError struct {
	key   string
	scope int // the length of the key's scope
	max   int
	store string
}

func (e *keyTooLongError) Error() string {
	return fmt.Sprintf("%s is %d bytes, longer than the %d the %s store can hold (its scope is %d bytes; a key is the scope, \"#\" and %d hex digits)",
		clip(e.key), len(e.key), e.max, e.store, e.scope, keyformat.HashLen)
}

// clip quotes the first 64 bytes of s, cut on a character boundary, and
// marks what it left out: errors name a long key or scope without
// echoing kilobytes of it.
func clip(s string) string {
	const keep = 64
	if len(s) <= keep {
		return fmt.Sprintf("%q", s)
	}
	head := s[:keep]
	for len(head) > 0 && !utf8.ValidString(head) {
		head = head[:len(head)-1]
	}
	return fmt.Sprintf("%q…", head)
}
