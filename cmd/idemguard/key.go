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
	"github.com/idemguard/idemguard/internal/transport"
	"github.com/idemguard/idemguard/store/memory"
)

// maxInput bounds the JSON input key reads.
const maxInput = 64 << 20

func (a *app) keyCmd() *cobra.Command {
	var (
		scope, keyPath, validate string
		secretEnv, secretEnc     string
		hr                       httpRequest
	)
	c := &cobra.Command{
		Use:   "key --scope SCOPE [--key-path EXPR] [--validate EXPR] [--key-secret-env VAR] [FILE|-]\n  idemguard key --http --route ROUTE --idempotency-key KEY [--method M] [--authorization-env VAR | --principal P | --shared-keys] [--scope SCOPE] [--key-secret-env VAR]",
		Short: "Print the key the guard derives for a JSON input, or httpguard for a request",
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
guard then runs the call unguarded (or fails it with guard.ErrKeyMissing).

With --http, key prints the record key httpguard's middleware derives for
an HTTP request, with the same code: from its --method (default POST), its
--route (the ServeMux pattern the request was routed by, such as
'POST /payments', the value of the middleware's WithRoute, or else the URL
path), the caller, and the client's Idempotency-Key (quoted or bare, as
sent). The caller is, as in the middleware: the --principal its
WithPrincipal function returned; else, unless the middleware has
WithSharedKeys (--shared-keys), the request's Authorization header, read
from the environment variable --authorization-env names (hashed, as the
middleware hashes it; omit it for a request without one). --scope defaults
to the middleware's, "http"; give --key-secret-env if the guard has a key
secret.`,
		Example: `  idemguard key --scope charge --key-path order.id order.json
  echo '{"order":{"id":"o-1"}}' | idemguard key --scope charge --key-path order.id
  idemguard get "$(idemguard key --scope charge --key-path order.id order.json)"
  PAYMENT_KEY_SECRET=… idemguard key --scope charge --key-secret-env PAYMENT_KEY_SECRET order.json
  AUTH='Bearer sk_live_…' idemguard key --http --route 'POST /payments' --idempotency-key 8e03978e-… --authorization-env AUTH`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if hr.http {
				if len(args) > 0 || keyPath != "" || validate != "" {
					return usage("key --http takes no input, --key-path or --validate: the key comes from --route, --idempotency-key and the caller")
				}
				return a.httpKey(cmd, hr, scope, secretEnv, secretEnc)
			}
			if hr.set(cmd) {
				return usage("--method, --route, --idempotency-key, --principal, --authorization-env and --shared-keys go with --http")
			}
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
	f.BoolVar(&hr.http, "http", false, "print the record key httpguard derives for an HTTP request (see below)")
	f.StringVar(&hr.method, "method", "POST", "with --http: the request method")
	f.StringVar(&hr.route, "route", "", "with --http: the route, as the middleware names it (the ServeMux pattern, WithRoute's value, or the URL path)")
	f.StringVar(&hr.key, "idempotency-key", "", "with --http: the Idempotency-Key header's value, quoted or bare")
	f.StringVar(&hr.principal, "principal", "", "with --http: what the middleware's WithPrincipal function returned for the request")
	f.StringVar(&hr.authEnv, "authorization-env", "", "with --http: the environment variable holding the request's Authorization header")
	f.BoolVar(&hr.shared, "shared-keys", false, "with --http: the middleware has WithSharedKeys (keys not scoped by caller)")
	return c
}

// httpRequest is what key --http derives a record key from.
type httpRequest struct {
	http                          bool
	method, route, key, principal string
	authEnv                       string
	shared                        bool
}

// set reports whether any of the --http flags was given.
func (h httpRequest) set(cmd *cobra.Command) bool {
	for _, name := range []string{"method", "route", "idempotency-key", "principal", "authorization-env", "shared-keys"} {
		if cmd.Flags().Changed(name) {
			return true
		}
	}
	return false
}

// httpKey prints the record key httpguard derives for the request h.
func (a *app) httpKey(cmd *cobra.Command, h httpRequest, scope, secretEnv, secretEnc string) error {
	switch {
	case h.route == "":
		return usage("key --http needs --route: the ServeMux pattern the request was routed by (such as 'POST /payments'), the middleware's WithRoute value, or the URL path")
	case h.key == "":
		return usage("key --http needs --idempotency-key: the value of the request's Idempotency-Key header")
	case h.principal != "" && (h.shared || h.authEnv != ""):
		return usage("--principal names the caller when the middleware has WithPrincipal; --authorization-env and --shared-keys are for a middleware without it")
	case h.shared && h.authEnv != "":
		return usage("--shared-keys: the middleware does not scope keys by caller, so --authorization-env has no effect")
	}
	key, err := transport.Parse([]string{h.key}, transport.Rules{MinLength: 1, MaxLength: maxInput})
	if err != nil {
		return usage("--idempotency-key: %v", err)
	}
	sel := transport.Selection{Key: key, Method: strings.ToUpper(h.method), Route: h.route, Principal: h.principal}
	if h.principal == "" && !h.shared && h.authEnv != "" {
		v := a.getenv(h.authEnv)
		if v == "" {
			return usage("--authorization-env %s: the variable is unset or empty", h.authEnv)
		}
		sel.Credential = transport.Credential([]string{v})
	}
	if scope == "" {
		scope = transport.HTTPScope
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
	k, err := transport.Key(g, scope, sel)
	if err != nil {
		return usage("deriving the key: %v", err)
	}
	if a.json {
		return writeJSONLine(a.stdout, struct {
			Scope       string `json:"scope"`
			Key         string `json:"key"`
			PayloadHash string `json:"payload_hash"`
		}{scope, k, ""})
	}
	fmt.Fprintln(a.stdout, k)
	return nil
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
