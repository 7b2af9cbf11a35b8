package guard

import (
	"bytes"
	"fmt"
	"unicode/utf8"

	"github.com/idemguard/idemguard/internal/keyformat"
	"github.com/idemguard/idemguard/store"
)

// A call's key is derived before its function runs: the selection (the
// whole input, what a key path selects, or an explicit key), its canonical
// form, its hash under the guard's key secret, named within the call's
// scope (internal/keyformat holds the format). The payload hash, the keys
// under previous secrets and a step's key are derived with it.

// derived is a call's key, bound before the function runs.
type derived struct {
	key         string // "<scope>#<hash>"; empty when the selection is missing
	scope       string // the scope part of key
	payloadHash string // empty when validation is off
	validate    string // the payload-validation expression; "" when validation is off
	selection   []byte // the canonical selection, kept only for WithKeySelectionAttribute
	// previous are the key and payload hash under each previous key secret
	// (WithKeySecret), in order, for a guard rotating its secret.
	previous []derivedKey
}

// derivedKey is a key and payload hash under one key secret.
type derivedKey struct{ key, payloadHash string }

// hash returns the hash part of the key.
func (d *derived) hash() string {
	if d.key == "" {
		return ""
	}
	return d.key[len(d.scope)+1:]
}

// derive computes the key (and the payload hash) of input under c. A missing
// selection yields an empty key and no error.
func (g *Guard) derive(c *config, scope string, input any) (derived, error) {
	d := derived{scope: scope}
	in := keyformat.NewInput(input)
	defer in.Release()
	var sel []byte
	switch {
	case c.hasKey:
		b, err := keyformat.Canonical(c.explicitKey, "the explicit key")
		if err != nil {
			return d, &inputError{err}
		}
		if !keyformat.MissingCanonical(b) {
			sel = b
		}
	case c.keyPath == nil:
		b, err := in.Whole()
		if err != nil {
			return d, &inputError{err}
		}
		if !keyformat.MissingCanonical(b) {
			sel = b
		}
	default:
		b, m, err := in.Select(c.keyPath, "key path", "key selection")
		if err != nil {
			return d, &inputError{err}
		}
		if !m {
			sel = b
		}
	}
	var vsel []byte
	if c.validationPath != nil {
		b, _, err := in.Select(c.validationPath, "payload validation path", "validation selection")
		if err != nil {
			return d, &inputError{err}
		}
		vsel = b
		d.validate = c.validationPath.String()
		d.payloadHash = keyformat.Hash(g.secret, b)
	}
	if sel == nil {
		return d, nil
	}
	d.key = keyformat.Key(g.secret, scope, sel)
	if err := g.checkKey(&d); err != nil {
		// Under every secret the key has this length.
		return derived{scope: scope}, err
	}
	if c.rawKeyAttr {
		d.selection = bytes.Clone(sel) // sel may be in the pooled buffer
	}
	if len(g.previous) > 0 {
		d.previous = make([]derivedKey, len(g.previous))
		for i, secret := range g.previous {
			d.previous[i].key = keyformat.Key(secret, scope, sel)
			if vsel != nil {
				d.previous[i].payloadHash = keyformat.Hash(secret, vsel)
			}
		}
	}
	return d, nil
}

// deriveStep derives the key of the step called name of the call d: the
// hash, under each of the guard's secrets, of the enclosing call's key
// under the same secret, within the step's scope. The step carries the
// enclosing call's payload hash, so a step's record is checked against the
// payload as the call's own record is.
func (g *Guard) deriveStep(d *derived, name string) (derived, error) {
	scope := d.scope + "/" + name
	s := derived{scope: scope, payloadHash: d.payloadHash, validate: d.validate}
	sel, err := keyformat.Canonical(d.key, "the enclosing call's key")
	if err != nil {
		return s, &inputError{err}
	}
	s.key = keyformat.Key(g.secret, scope, sel)
	if err := g.checkKey(&s); err != nil {
		return derived{scope: scope}, err
	}
	if len(d.previous) > 0 {
		s.previous = make([]derivedKey, len(d.previous))
		for i, p := range d.previous {
			if sel, err = keyformat.Canonical(p.key, "the enclosing call's key"); err != nil {
				return s, &inputError{err}
			}
			s.previous[i] = derivedKey{key: keyformat.Key(g.previous[i], scope, sel), payloadHash: p.payloadHash}
		}
	}
	return s, nil
}

// inputError is an input that cannot be keyed; it matches ErrInvalidInput.
type inputError struct{ err error }

func (e *inputError) Error() string        { return fmt.Sprintf("%v: %v", ErrInvalidInput, e.err) }
func (e *inputError) Unwrap() error        { return e.err }
func (e *inputError) Is(target error) bool { return target == ErrInvalidInput }

// A store may hold keys only up to a length (DynamoDB: 2,048 bytes for a
// partition key); it says so through store.KeyLimiter. The guard refuses a
// longer key before it calls the store: a scope when it is fixed (Wrap,
// WrapTx, the adapters' constructors), and each call's key when it is
// derived, so that a key no store can hold is a permanent invalid input,
// never a store error that a retry meets again.

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

// validate fails with ErrPayloadMismatch when rec was written for another
// payload than the one whose hash (under rec's key secret) is hash. Every
// path that hands out a stored outcome goes through it.
func validate(d *derived, rec *store.Record, hash string) error {
	if d.validate != "" && rec.PayloadHash != hash {
		return &mismatchError{Key: d.key, Path: d.validate, PayloadHash: d.payloadHash, Existing: rec}
	}
	return nil
}
