package main

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

// maxInput bounds the JSON input key reads.
const maxInput = 64 << 20

func (a *app) keyCmd() *cobra.Command {
	var (
		scope, keyPath, validate string
		secretEnv, secretEnc     string
	)
	c := &cobra.Command{
		Use:   "key --scope SCOPE [--key-path EXPR] [--validate EXPR] [--key-secret-env VAR] [FILE|-]",
		Short: "Print the key the guard derives for a JSON input",
		Long: `key prints the idempotency key the guard derives for the JSON input in FILE
(or on standard input, with - or no FILE), computed by the library's own
code (guard.Guard.Key): the scope, "#", and the SHA-256 (HMAC-SHA-256 with a
key secret) of the RFC 8785 canonical form of the selection.

Give the same options the guarded call uses: --scope is the scope (for a
Temporal activity, its type), --key-path its guard.WithKeyPath expression,
--validate its guard.WithPayloadValidation expression (key then also prints
the payload hash, on a second line), and --key-secret-env the name of an
environment variable that holds its guard.WithKeySecret secret (never the
secret itself, so that it stays out of shell history).

No store is needed. The exit status is 1 when the selection is empty: the
guard then runs the call unguarded (or fails it with guard.ErrKeyMissing).`,
		Example: `  idemguard key --scope charge --key-path order.id order.json
  echo '{"order":{"id":"o-1"}}' | idemguard key --scope charge --key-path order.id
  idemguard get "$(idemguard key --scope charge --key-path order.id order.json)"
  PAYMENT_KEY_SECRET=… idemguard key --scope charge --key-secret-env PAYMENT_KEY_SECRET order.json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if scope == "" {
				return usage("key needs --scope: the scope of the guarded call (for a Temporal activity, its type)")
			}
			name := "-"
			if len(args) == 1 {
				name = args[0]
			}
			input, err := a.readInput(name)
			if err != nil {
				return err
			}
			var gopts []guard.Option
			if secretEnv != "" {
				secret, err := a.keySecret(secretEnv, secretEnc)
				if err != nil {
					return err
				}
				gopts = append(gopts, guard.WithKeySecret(secret))
			}
			g, err := guard.New(memory.New(), gopts...)
			if err != nil {
				return usage("%v", err)
			}
			var copts []guard.CallOption
			if keyPath != "" {
				copts = append(copts, guard.WithKeyPath(keyPath))
			}
			if validate != "" {
				copts = append(copts, guard.WithPayloadValidation(validate))
			}
			key, hash, err := g.Key(scope, json.RawMessage(input), copts...)
			if err != nil {
				return usage("deriving the key of %s: %v", inputName(name), err)
			}
			if key == "" {
				what := "the input"
				if keyPath != "" {
					what = "--key-path " + keyPath
				}
				return notFound("no key: %s selects nothing (null or empty); the guard runs such a call unguarded, or fails it with guard.ErrKeyMissing under guard.WithRequireKey", what)
			}
			if a.json {
				return writeJSONLine(a.stdout, struct {
					Scope       string `json:"scope"`
					Key         string `json:"key"`
					PayloadHash string `json:"payload_hash"`
				}{scope, key, hash})
			}
			fmt.Fprintln(a.stdout, key)
			if validate != "" {
				fmt.Fprintln(a.stdout, hash)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&scope, "scope", "", "the scope of the guarded call (required)")
	f.StringVar(&keyPath, "key-path", "", "the JMESPath expression that selects the key (guard.WithKeyPath); default: the whole input")
	f.StringVar(&validate, "validate", "", "the payload-validation expression (guard.WithPayloadValidation); prints the payload hash too")
	f.StringVar(&secretEnv, "key-secret-env", "", "the environment variable holding the key secret (guard.WithKeySecret)")
	f.StringVar(&secretEnc, "key-secret-encoding", "raw", "how that variable holds the secret: raw (its bytes, as []byte(os.Getenv(VAR))), hex or base64")
	return c
}

func inputName(name string) string {
	if name == "-" {
		return "standard input"
	}
	return name
}

// readInput reads the JSON input from the file name, or standard input for
// "-".
func (a *app) readInput(name string) ([]byte, error) {
	var r io.Reader = a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, usage("reading the input: %v", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, maxInput+1))
	if err != nil {
		return nil, usage("reading %s: %v", inputName(name), err)
	}
	if len(b) > maxInput {
		return nil, usage("%s is larger than %d MiB", inputName(name), maxInput>>20)
	}
	if !json.Valid(b) {
		var v any
		err := json.Unmarshal(b, &v)
		return nil, usage("%s is not JSON: %v", inputName(name), err)
	}
	return b, nil
}

// keySecret reads the key secret from the environment variable name.
func (a *app) keySecret(name, encoding string) ([]byte, error) {
	v := a.getenv(name)
	if v == "" {
		return nil, usage("--key-secret-env %s: the variable is unset or empty", name)
	}
	switch strings.ToLower(encoding) {
	case "raw":
		return []byte(v), nil
	case "hex":
		b, err := hex.DecodeString(strings.TrimSpace(v))
		if err != nil {
			return nil, usage("--key-secret-env %s is not hex: %v", name, err)
		}
		return b, nil
	case "base64":
		s := strings.TrimSpace(v)
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			if b, err = base64.RawStdEncoding.DecodeString(s); err != nil {
				return nil, usage("--key-secret-env %s is not base64: %v", name, err)
			}
		}
		return b, nil
	}
	return nil, usage("--key-secret-encoding %q: want raw, hex or base64", encoding)
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}
