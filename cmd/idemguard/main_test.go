package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// asCLI is set in the environment of the subprocesses the tests start: the
// test binary then runs main() with its arguments instead of the tests, so
// the CLI runs as a real process (its own argv, streams and exit status)
// without a second build.
const asCLI = "IDEMGUARD_TEST_RUN_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		main()
		return // main exits
	}
	os.Exit(m.Run())
}

// result is what one run of the CLI gave.
type result struct {
	stdout, stderr string
	code           int
}

// cli runs the CLI as a subprocess with args, stdin as its standard input,
// and env added to a clean environment (PATH and HOME only, so that no AWS
// or IDEMGUARD variable of the developer's leaks in).
func cli(t testing.TB, env []string, stdin string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], args...)
	// Under -race the subprocess is race-enabled too (a race makes it exit
	// 66); atexit_sleep_ms=0 drops the race runtime's one-second pause at
	// every successful exit.
	cmd.Env = append([]string{asCLI + "=1", "PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}, env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Stdin = strings.NewReader(stdin)
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatalf("running idemguard %q: %v", args, err)
	}
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}

// want fails the test unless r ended with exit status code.
func (r result) want(t testing.TB, code int, args ...string) result {
	t.Helper()
	if r.code != code {
		t.Fatalf("idemguard %q: exit status %d, want %d\nstdout:\n%s\nstderr:\n%s", args, r.code, code, r.stdout, r.stderr)
	}
	return r
}

// runIn runs the CLI in this process (for tests of behaviour that needs no
// process, and for coverage).
func runIn(args []string, stdin io.Reader, env map[string]string) result {
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), args, stdin, &stdout, &stderr, func(k string) string { return env[k] })
	return result{stdout: stdout.String(), stderr: stderr.String(), code: code}
}
