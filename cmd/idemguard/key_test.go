package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

// keyVector is an entry of guard/testdata/keys.json, the key-derivation
// test vectors.
type keyVector struct {
	Scope       string          `json:"scope"`
	Input       json.RawMessage `json:"input"`
	KeyPath     *string         `json:"keyPath"`
	ExpectedKey string          `json:"expectedKey"`
}

func keyVectors(t *testing.T) []keyVector {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "guard", "testdata", "keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	var vs []keyVector
	if err := json.Unmarshal(data, &vs); err != nil {
		t.Fatal(err)
	}
	if len(vs) < 20 {
		t.Fatalf("only %d key vectors", len(vs))
	}
	return vs
}

// guardKey is the key and payload hash the guard itself derives.
func guardKey(t *testing.T, secret []byte, scope string, input json.RawMessage, keyPath, validate string) (string, string) {
	t.Helper()
	var gopts []guard.Option
	if secret != nil {
		gopts = append(gopts, guard.WithKeySecret(secret))
	}
	g, err := guard.New(memory.New(), gopts...)
	if err != nil {
		t.Fatal(err)
	}
	var copts []guard.CallOption
	if keyPath != "" {
		copts = append(copts, guard.WithKeyPath(keyPath))
	}
	if validate != "" {
		copts = append(copts, guard.WithPayloadValidation(validate))
	}
	k, h, err := g.Key(scope, input, copts...)
	if err != nil {
		t.Fatalf("Guard.Key: %v", err)
	}
	return k, h
}

// Acceptance 2: for every input of the key-derivation vectors, key prints
// the vector's expected key, which is the key the guard derives; with a key
// secret and payload validation it prints what the guard derives with
// those options. Each run is a process of its own, reading a file.
func TestKeyMatchesVectors(t *testing.T) {
	const secretHex = "8f0e2d7c6b5a49382716051423324150"
	secret, _ := hex.DecodeString(secretHex)
	dir := t.TempDir()
	for i, v := range keyVectors(t) {
		file := filepath.Join(dir, fmt.Sprintf("input-%02d.json", i))
		if err := os.WriteFile(file, v.Input, 0o600); err != nil {
			t.Fatal(err)
		}
		args := []string{"key", "--scope", v.Scope}
		keyPath := ""
		if v.KeyPath != nil {
			keyPath = *v.KeyPath
			args = append(args, "--key-path", keyPath)
		}
		name := fmt.Sprintf("%02d", i)
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			want, _ := guardKey(t, nil, v.Scope, v.Input, keyPath, "")
			if want != v.ExpectedKey {
				t.Fatalf("the guard derives %q, the vector says %q", want, v.ExpectedKey)
			}
			r := cli(t, nil, "", append(args, file)...)
			if want == "" {
				r.want(t, exitNotFound, args...)
				if r.stdout != "" || !strings.Contains(r.stderr, "selects nothing") {
					t.Errorf("empty selection: stdout %q, stderr %q", r.stdout, r.stderr)
				}
				return
			}
			r.want(t, exitOK, args...)
			if r.stdout != want+"\n" {
				t.Errorf("key printed %q, want %q", r.stdout, want+"\n")
			}

			// With a key secret (hex in the environment) and payload
			// validation of the whole input.
			wantKey, wantHash := guardKey(t, secret, v.Scope, v.Input, keyPath, "@")
			args := append(args, "--validate", "@", "--key-secret-env", "KEY_SECRET", "--key-secret-encoding", "hex", file)
			r = cli(t, []string{"KEY_SECRET=" + secretHex}, "", args...).want(t, exitOK, args...)
			if got := r.stdout; got != wantKey+"\n"+wantHash+"\n" || wantKey == want {
				t.Errorf("with a secret and validation, key printed %q; the guard derives %q and %q", got, wantKey, wantHash)
			}
		})
	}
}

func TestKeyStdinAndJSON(t *testing.T) {
	in := `{"order": {"id": "o-1", "total": 12.50}}`
	want, hash := guardKey(t, nil, "charge", json.RawMessage(in), "order.id", "order")
	r := cli(t, nil, in, "key", "--scope", "charge", "--key-path", "order.id", "--validate", "order", "--json").want(t, exitOK)
	var got map[string]string
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("--json printed %q: %v", r.stdout, err)
	}
	if len(got) != 3 || got["scope"] != "charge" || got["key"] != want || got["payload_hash"] != hash {
		t.Errorf("--json = %v; want scope, key %q and payload_hash %q", got, want, hash)
	}
	// "-" is standard input too; a raw secret is the variable's bytes.
	wantRaw, _ := guardKey(t, []byte("s3cret"), "charge", json.RawMessage(in), "", "")
	r = cli(t, []string{"K=s3cret"}, in, "key", "--scope", "charge", "--key-secret-env", "K", "-").want(t, exitOK)
	if r.stdout != wantRaw+"\n" {
		t.Errorf("raw secret from stdin: %q, want %q", r.stdout, wantRaw)
	}
}

func TestKeyUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		stdin string
		env   map[string]string
		want  string
	}{
		{[]string{"key"}, `{}`, nil, "needs --scope"},
		{[]string{"key", "--scope", "s"}, `{"a":`, nil, "not JSON"},
		{[]string{"key", "--scope", "s", "/nonexistent/input.json"}, ``, nil, "no such file"},
		{[]string{"key", "--scope", "s", "--key-path", "a["}, `{"a":1}`, nil, "deriving the key"},
		{[]string{"key", "--scope", "s", "--key-secret-env", "NOPE"}, `{"a":1}`, nil, "unset or empty"},
		{[]string{"key", "--scope", "s", "--key-secret-env", "K", "--key-secret-encoding", "hex"}, `{"a":1}`, map[string]string{"K": "zz"}, "not hex"},
		{[]string{"key", "--scope", "s", "--key-secret-env", "K", "--key-secret-encoding", "rot13"}, `{"a":1}`, map[string]string{"K": "x"}, "want raw, hex or base64"},
		{[]string{"key", "--scope", "s", "a.json", "b.json"}, ``, nil, "accepts at most 1 arg"},
		{[]string{"key", "--scope", "s"}, "\"\xff\"", nil, "deriving the key"}, // not UTF-8: the guard refuses it
	} {
		r := runIn(tc.args, strings.NewReader(tc.stdin), tc.env)
		if r.code != exitError || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("idemguard %q: exit %d, stderr %q; want 2 and %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
