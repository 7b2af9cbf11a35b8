package examples

// The README's promise is that everything in it works as written. These
// tests hold it to that:
//
//   - every ```sh block's commands are ones the repository supports: the
//     cheap examples are run exactly as written (go run ./examples/quickstart,
//     go run ./examples/workerpool), other examples are built and their flags
//     parsed, make targets must exist in the Makefile, docker compose must
//     name services of docker-compose.yml, scripts must exist, and go
//     test/vet/build must name packages that exist; the install lines (go
//     get, go install …@latest) must name packages of the repository, and
//     make release-check runs them from outside it. A command the test does
//     not know fails it: teach commandChecker.check below.
//   - every ```go block type-checks against the real packages (see
//     TestReadmeGoSnippets for the wrapper it is compiled in);
//   - every relative link points at a file in the repository.
//
// Other blocks must be ```text or unlabelled (diagrams and sample output).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// root is the repository root, from this package's directory.
const root = ".."

type block struct {
	lang string
	line int // of the opening fence, 1-based
	text string
}

// readme returns the README's text and its fenced code blocks.
func readme(t *testing.T) (string, []block) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	var blocks []block
	var cur *block
	var body strings.Builder
	for i, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "```") {
			if cur != nil {
				body.WriteString(line + "\n")
			}
			continue
		}
		if cur == nil {
			cur = &block{lang: strings.TrimSpace(strings.TrimPrefix(line, "```")), line: i + 1}
			body.Reset()
			continue
		}
		cur.text = body.String()
		blocks = append(blocks, *cur)
		cur = nil
	}
	if cur != nil {
		t.Fatalf("README.md:%d: code block never closed", cur.line)
	}
	return string(raw), blocks
}

func TestReadmeBlockLanguages(t *testing.T) {
	_, blocks := readme(t)
	for _, b := range blocks {
		switch b.lang {
		case "sh", "go", "text", "":
		default:
			t.Errorf("README.md:%d: a ```%s block, which this test cannot check; use sh, go or text", b.line, b.lang)
		}
	}
}

// --- Commands -------------------------------------------------------------

// runnable are the examples cheap enough to run as written, with a line
// their output must contain.
var runnable = map[string]string{
	"./examples/quickstart": "with guard.Step     charge requests: 1, charges made: 1, receipts e-mailed: 1\n",
	"./examples/workerpool": "effects = unique messages = ",
	"./examples/httpapi":    "payments created: 2\n",
}

func TestReadmeCommands(t *testing.T) {
	_, blocks := readme(t)
	c := &commandChecker{t: t, ran: map[string]bool{}}
	n := 0
	for _, b := range blocks {
		if b.lang != "sh" {
			continue
		}
		for i, line := range joinContinuations(b.text) {
			words, err := shellWords(line)
			if err != nil {
				t.Errorf("README.md:%d: %v", b.line+1+i, err)
				continue
			}
			if len(words) == 0 {
				continue
			}
			n++
			c.check(fmt.Sprintf("README.md:%d", b.line+1+i), words)
		}
	}
	if n == 0 {
		t.Fatal("no commands found in the README's sh blocks")
	}
}

// joinContinuations splits text into lines, joining those that end in a
// backslash with the next. Lines keep their position: a joined line leaves
// empty ones behind.
func joinContinuations(text string) []string {
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines)-1; i++ {
		if strings.HasSuffix(lines[i], "\\") {
			lines[i+1] = strings.TrimSuffix(lines[i], "\\") + " " + lines[i+1]
			lines[i] = ""
		}
	}
	return lines
}

// shellWords splits a command line as a POSIX shell would for the simple
// commands a README holds: words, single and double quotes, and a comment
// from an unquoted # at the start of a word. Anything fancier (pipes,
// redirections, substitutions) is an error.
func shellWords(line string) ([]string, error) {
	var words []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		ch := line[i]
		switch {
		case ch == ' ' || ch == '\t':
			if inWord {
				words = append(words, w.String())
				w.Reset()
				inWord = false
			}
		case ch == '#' && !inWord:
			return words, nil
		case ch == '\'' || ch == '"':
			j := strings.IndexByte(line[i+1:], ch)
			if j < 0 {
				return nil, fmt.Errorf("unterminated quote in %q", line)
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case strings.IndexByte("|&;<>$`(){}*?", ch) >= 0:
			return nil, fmt.Errorf("%q: shell syntax (%c) that this test does not check", line, ch)
		default:
			w.WriteByte(ch)
			inWord = true
		}
	}
	if inWord {
		words = append(words, w.String())
	}
	return words, nil
}

type commandChecker struct {
	t   *testing.T
	ran map[string]bool // commands already run
}

func (c *commandChecker) errorf(at, format string, args ...any) {
	c.t.Helper()
	c.t.Errorf(at+": "+format, args...)
}

// check checks one command given as words.
func (c *commandChecker) check(at string, w []string) {
	c.t.Helper()
	switch {
	case len(w) >= 3 && w[0] == "go" && w[1] == "run":
		c.goRun(at, w[2], w[3:])
	case len(w) >= 2 && w[0] == "go" && slices.Contains([]string{"test", "vet", "build"}, w[1]):
		c.goPackages(at, w[2:])
	case w[0] == "make":
		c.make(at, w[1:])
	case len(w) >= 3 && w[0] == "docker" && w[1] == "compose":
		c.compose(at, w[2:])
	case w[0] == "scripts/harness.sh":
		c.harness(at, w[1:])
	case len(w) == 3 && w[0] == "go" && (w[1] == "get" || w[1] == "install"):
		c.goFetch(at, w[1], w[2])
	case len(w) >= 2 && w[0] == "idemguard":
		// The operator's CLI: its subcommand exists and parses --help.
		c.goRun(at, "./cmd/idemguard", []string{w[1], "--help"})
	default:
		c.errorf(at, "%q is not a command readme_test.go knows how to check; teach commandChecker.check", strings.Join(w, " "))
	}
}

// goFetch checks an install line (go get or go install of a package of the
// repository at @latest): the package exists, and go install's is a
// command. make release-check runs these lines as written, outside the
// repository, against the working tree packaged as a release
// (scripts/release-check.sh).
func (c *commandChecker) goFetch(at, verb, arg string) {
	c.t.Helper()
	pkg, version, _ := strings.Cut(arg, "@")
	if version != "latest" || (pkg != "github.com/idemguard/idemguard" && !strings.HasPrefix(pkg, "github.com/idemguard/idemguard/")) {
		c.errorf(at, "go %s %s: want a package of github.com/idemguard/idemguard at @latest", verb, arg)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := goCmd(ctx, root, "list", "-f", "{{.Name}}", pkg)
	if err != nil {
		c.errorf(at, "go %s %s: %v\n%s", verb, arg, err, out)
	} else if verb == "install" && strings.TrimSpace(out) != "main" {
		c.errorf(at, "go install %s: not a command (package %s)", arg, strings.TrimSpace(out))
	}
}

// goCmd runs the go command in dir and returns its combined output.
func goCmd(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

func (c *commandChecker) goRun(at, pkg string, args []string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if out, err := goCmd(ctx, root, "list", "-f", "{{.Name}}", pkg); err != nil || strings.TrimSpace(out) != "main" {
		c.errorf(at, "go run %s: not a main package (%v): %s", pkg, err, out)
		return
	}
	run := append([]string{"run", pkg}, args...)
	want, cheap := runnable[pkg]
	if !cheap {
		// Needs servers: build it and let it parse the flags as written.
		run = append(run, "-h")
	}
	key := strings.Join(run, " ")
	if c.ran[key] {
		return
	}
	c.ran[key] = true
	start := time.Now()
	out, err := goCmd(ctx, root, run...)
	c.t.Logf("%s: go %s: %v (compile included)", at, key, time.Since(start).Round(time.Millisecond))
	if err != nil {
		c.errorf(at, "go %s: %v\n%s", key, err, out)
		return
	}
	if cheap && !strings.Contains(out, want) {
		c.errorf(at, "go %s: output lacks %q:\n%s", key, want, out)
	}
}

func (c *commandChecker) goPackages(at string, args []string) {
	c.t.Helper()
	var pkgs []string
	for _, a := range args {
		if strings.HasPrefix(a, "./") {
			pkgs = append(pkgs, a)
		}
	}
	if len(pkgs) == 0 {
		c.errorf(at, "names no package (./...)")
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if out, err := goCmd(ctx, root, append([]string{"list"}, pkgs...)...); err != nil {
		c.errorf(at, "packages %v: %v\n%s", pkgs, err, out)
	}
}

var makeTarget = regexp.MustCompile(`(?m)^([A-Za-z0-9_.-]+):`)

func (c *commandChecker) make(at string, args []string) {
	c.t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		c.errorf(at, "%v", err)
		return
	}
	targets := map[string]bool{}
	for _, m := range makeTarget.FindAllStringSubmatch(string(raw), -1) {
		targets[m[1]] = true
	}
	if len(args) == 0 {
		c.errorf(at, "make without a target: name it")
	}
	for _, a := range args {
		if !targets[a] {
			c.errorf(at, "make %s: no such target in the Makefile", a)
		}
	}
}

func (c *commandChecker) compose(at string, args []string) {
	c.t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		c.errorf(at, "%v", err)
		return
	}
	var f struct {
		Services map[string]any `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		c.errorf(at, "docker-compose.yml: %v", err)
		return
	}
	if !slices.Contains([]string{"up", "down", "ps", "logs", "stop", "start", "pull", "restart"}, args[0]) {
		c.errorf(at, "docker compose %s: not a subcommand this test knows", args[0])
	}
	for _, a := range args[1:] {
		if !strings.HasPrefix(a, "-") && f.Services[a] == nil {
			c.errorf(at, "docker compose %s: no service %s in docker-compose.yml", args[0], a)
		}
	}
}

func (c *commandChecker) harness(at string, args []string) {
	c.t.Helper()
	fi, err := os.Stat(filepath.Join(root, "scripts", "harness.sh"))
	if err != nil || fi.Mode()&0o111 == 0 {
		c.errorf(at, "scripts/harness.sh is missing or not executable (%v)", err)
		return
	}
	switch {
	case len(args) == 1 && args[0] == "install":
	case len(args) >= 2 && args[0] == "run":
		c.check(at, args[1:]) // the command it runs, as written
	default:
		c.errorf(at, "scripts/harness.sh %s: not a usage the script has", strings.Join(args, " "))
	}
}

// --- Go snippets ------------------------------------------------------------

// snippetImports are what every snippet is compiled with; a snippet uses
// the packages under these names.
var snippetImports = []string{
	`"context"`,
	`"net/http"`,
	`"time"`,
	`"github.com/aws/aws-sdk-go-v2/aws"`,
	`"github.com/aws/aws-sdk-go-v2/service/dynamodb"`,
	`"go.temporal.io/sdk/client"`,
	`"go.temporal.io/sdk/converter"`,
	`"go.temporal.io/sdk/interceptor"`,
	`"go.temporal.io/sdk/worker"`,
	`tworkflow "go.temporal.io/sdk/workflow"`,
	`"github.com/idemguard/idemguard/activity"`,
	`"github.com/idemguard/idemguard/guard"`,
	`"github.com/idemguard/idemguard/httpguard"`,
	`"github.com/idemguard/idemguard/store"`,
	`idemddb "github.com/idemguard/idemguard/store/dynamodb"`,
	`"github.com/idemguard/idemguard/store/memory"`,
	`"github.com/idemguard/idemguard/store/postgres"`,
	`idemredis "github.com/idemguard/idemguard/store/redis"`,
	`redis "github.com/redis/go-redis/v9"`,
	`"github.com/idemguard/idemguard/workflow"`,
	`"github.com/jackc/pgx/v5"`,
	`"github.com/ThreeDotsLabs/watermill/message"`,
	`"github.com/ThreeDotsLabs/watermill/message/router/middleware"`,
	`"github.com/idemguard/idemguard/watermillguard"`,
	`"github.com/aws/aws-lambda-go/events"`,
	`"github.com/aws/aws-lambda-go/lambda"`,
	`"github.com/idemguard/idemguard/lambdaguard"`,
}

// standIns declare, at package level, the identifiers the snippets use
// without declaring: the application's own types, values and clients. A
// stand-in is left out when the snippet declares the name itself.
var standIns = map[string]string{
	"ctx":           "var ctx context.Context",
	"cfg":           "var cfg aws.Config // aws-sdk-go-v2 configuration",
	"c":             "var c client.Client // a Temporal client",
	"dataConverter": "var dataConverter converter.DataConverter",
	"dynamoStore":   "var dynamoStore store.Store // e.g. an idemddb.Store",
	"Message":       "type Message struct{ MessageID string `json:\"message_id\"` }",
	"deliveries":    "var deliveries chan Message // an at-least-once stream",
	"mailer":        "var mailer interface { Send(context.Context, Message, string) (string, error) }",
	"Order":         "type Order struct{ OrderID string `json:\"order_id\"` }",
	"Receipt":       "type Receipt struct{ ChargeID string }",
	"payments":      "var payments interface { Charge(context.Context, Order, string) (Receipt, error) } // a payment provider",
	"createPayment": "func createPayment(w http.ResponseWriter, r *http.Request) {}",
	"OrderWorkflow": "func OrderWorkflow(ctx tworkflow.Context, o Order) (Receipt, error) { return Receipt{}, nil }",
	"g":             "var g *guard.Guard",
	"t":             "var t struct{ ID string; From, To int; Cents int64 } // a transfer",
	"router":        "var router *message.Router // a Watermill router",
	"pub":           "var pub message.Publisher // the broker's publisher",
	"shipOrder":     "func shipOrder(ctx context.Context, m events.SQSMessage) error { return nil }",
}

// TestReadmeGoSnippets type-checks every ```go block of the README against
// the real packages. A snippet is a mix of top-level declarations (lines
// from "func " or "type " at the left margin to the closing "}") and
// statements; it is compiled as one file:
//
//	package readme
//	import (...)              // snippetImports
//	<stand-ins>               // standIns the snippet does not declare
//	<its declarations>
//	func _() { <its statements> }
//
// A line holding only "..." (code the snippet leaves out) is dropped, and
// so are the "declared and not used" and "imported and not used" errors
// that the elision causes; every other error fails the test.
func TestReadmeGoSnippets(t *testing.T) {
	_, blocks := readme(t)
	imp := exportImporter(t)
	n := 0
	for _, b := range blocks {
		if b.lang != "go" {
			continue
		}
		n++
		src := wrapSnippet(b.text)
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "snippet.go", src, parser.SkipObjectResolution)
		if err != nil {
			t.Errorf("README.md:%d: the snippet does not parse: %v\n%s", b.line, err, numbered(src))
			continue
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) && te.Soft && (strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
				return
			}
			errs = append(errs, err.Error())
		}}
		conf.Check("readme", fset, []*ast.File{f}, nil)
		if len(errs) > 0 {
			t.Errorf("README.md:%d: the snippet does not compile:\n  %s\nas compiled:\n%s", b.line, strings.Join(errs, "\n  "), numbered(src))
		}
	}
	if n == 0 {
		t.Fatal("no Go snippets found in the README")
	}
}

// wrapSnippet returns the file a snippet is compiled as (see
// TestReadmeGoSnippets).
func wrapSnippet(snippet string) string {
	var decls, stmts strings.Builder
	declared := map[string]bool{}
	inDecl := false
	for _, line := range strings.Split(strings.TrimRight(snippet, "\n"), "\n") {
		if strings.TrimSpace(line) == "..." {
			continue
		}
		if !inDecl && (strings.HasPrefix(line, "func ") || strings.HasPrefix(line, "type ")) {
			if name := declName(line); name != "" {
				declared[name] = true
			}
			inDecl = strings.HasSuffix(strings.TrimSpace(stripComment(line)), "{")
			decls.WriteString(line + "\n")
			continue
		}
		if inDecl {
			decls.WriteString(line + "\n")
			if line == "}" {
				inDecl = false
			}
			continue
		}
		stmts.WriteString("\t" + line + "\n")
	}

	var b strings.Builder
	b.WriteString("package readme\n\nimport (\n")
	for _, imp := range snippetImports {
		b.WriteString("\t" + imp + "\n")
	}
	b.WriteString(")\n\n")
	// Keep every import used, whatever the snippet needs.
	b.WriteString("var (\n\t_ = context.Background\n\t_ = http.NewServeMux\n\t_ = time.Second\n\t_ = aws.String\n\t_ = dynamodb.New\n\t_ = client.Dial\n\t_ converter.DataConverter\n\t_ interceptor.WorkerInterceptor\n\t_ = worker.New\n\t_ tworkflow.Context\n\t_ = activity.Register\n\t_ = guard.New\n\t_ = httpguard.Middleware\n\t_ store.Store\n\t_ = idemddb.New\n\t_ = memory.New\n\t_ = postgres.New\n\t_ = idemredis.New\n\t_ = redis.NewClient\n\t_ = workflow.StepKey\n\t_ pgx.Tx\n\t_ events.SQSMessage\n\t_ = lambda.Start\n\t_ = lambdaguard.Must[int]\n)\n\n")
	names := make([]string, 0, len(standIns))
	for name := range standIns {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		if !declared[name] {
			b.WriteString(standIns[name] + "\n")
		}
	}
	b.WriteString("\n" + decls.String() + "\nfunc _() {\n" + stmts.String() + "}\n")
	return b.String()
}

var declNameRE = regexp.MustCompile(`^(?:func|type)\s+(?:\([^)]*\)\s*)?([A-Za-z_][A-Za-z0-9_]*)`)

func declName(line string) string {
	if m := declNameRE.FindStringSubmatch(line); m != nil {
		return m[1]
	}
	return ""
}

func stripComment(line string) string {
	if i := strings.Index(line, "//"); i >= 0 {
		return line[:i]
	}
	return line
}

func numbered(src string) string {
	var b strings.Builder
	for i, l := range strings.Split(src, "\n") {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, l)
	}
	return b.String()
}

// exportImporter returns an importer that reads the compiler's export data
// for the snippets' imports and everything they depend on, as `go list
// -export` reports it (building what is not in the build cache).
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{if .Export}}{{.ImportPath}}={{.Export}}{{end}}"}
	for _, imp := range snippetImports {
		path := imp[strings.IndexByte(imp, '"'):]
		args = append(args, strings.Trim(path, `"`))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v\n%s", err, stderr.String())
	}
	files := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "="); ok {
			files[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := files[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(file)
	})
}

// --- Links ------------------------------------------------------------------

var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

var headingRE = regexp.MustCompile(`(?m)^#+ +(.+)$`)

// anchor is the id GitHub gives a heading.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9':
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestReadmeLinks(t *testing.T) {
	text, blocks := readme(t)
	for _, b := range blocks { // "# comments" in code are not headings
		text = strings.Replace(text, b.text, "", 1)
	}
	anchors := map[string]bool{}
	for _, m := range headingRE.FindAllStringSubmatch(text, -1) {
		anchors[anchor(m[1])] = true
	}
	for _, m := range linkRE.FindAllStringSubmatch(text, -1) {
		target := m[1]
		if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
			continue
		}
		if a, ok := strings.CutPrefix(target, "#"); ok {
			if !anchors[a] {
				t.Errorf("README links to #%s, which no heading has", a)
			}
			continue
		}
		target, _, _ = strings.Cut(target, "#")
		if _, err := os.Stat(filepath.Join(root, target)); err != nil {
			t.Errorf("README links to %s: %v", target, err)
		}
	}
}
