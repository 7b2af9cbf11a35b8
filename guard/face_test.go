package guard_test

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/adapt"
	"github.com/idemguard/idemguard/store/memory"
)

// An option has one type per scope: one that names a single call
// (WithKey) is neither a guard's default nor a batch's, so that
// guard.New(s, guard.WithKey(x)) does not compile; a call setting is all
// three; a guard-wide or batch option is only its own.
func TestOptionScopes(t *testing.T) {
	option := reflect.TypeFor[guard.Option]()
	call := reflect.TypeFor[guard.CallOption]()
	batch := reflect.TypeFor[guard.BatchOption]()
	for _, c := range []struct {
		name                string
		typ                 reflect.Type
		guard, calls, batch bool
	}{
		{"WithKey", reflect.TypeOf(guard.WithKey).Out(0), false, true, false},
		{"WithTTL", reflect.TypeOf(guard.WithTTL).Out(0), true, true, true},
		{"WithCache", reflect.TypeOf(guard.WithCache).Out(0), true, false, false},
		{"WithConcurrency", reflect.TypeOf(guard.WithConcurrency).Out(0), false, false, true},
	} {
		if got := c.typ.Implements(option); got != c.guard {
			t.Errorf("%s is an Option: %v, want %v", c.name, got, c.guard)
		}
		if got := c.typ.Implements(call); got != c.calls {
			t.Errorf("%s is a CallOption: %v, want %v", c.name, got, c.calls)
		}
		if got := c.typ.Implements(batch); got != c.batch {
			t.Errorf("%s is a BatchOption: %v, want %v", c.name, got, c.batch)
		}
	}
}

// An adapter that lifts its user's call options to a guard's defaults
// meets a single call's option as an invalid option when the guard is
// built.
func TestLiftedOneCallOptionRefused(t *testing.T) {
	for name, o := range map[string]guard.CallOption{
		"WithKey":        guard.WithKey("k"),
		"WithClaimToken": adapt.WithClaimToken("t"),
	} {
		if _, err := guard.New(memory.New(), adapt.Lift(o)); !errors.Is(err, guard.ErrInvalidOption) {
			t.Errorf("New(Lift(%s)) = %v, want ErrInvalidOption", name, err)
		}
	}
	if _, err := guard.New(memory.New(), adapt.Lift(guard.WithTTL(time.Minute))); err != nil {
		t.Errorf("New(Lift(WithTTL)) = %v", err)
	}
}

// adapt.Execute reports the outcome without writing into the spare
// capacity of the caller's options, which adapters share between calls.
func TestExecuteLeavesOptionsAlone(t *testing.T) {
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	opts := make([]guard.CallOption, 1, 2)
	opts[0] = guard.WithTTL(time.Minute)
	for _, want := range []guard.Outcome{guard.OutcomeExecuted, guard.OutcomeReplayed} {
		_, out, err := adapt.Execute(t.Context(), g, "s", "k", benchFn, opts...)
		if err != nil || out != want {
			t.Errorf("Execute = %v, %v; want %v", out, err, want)
		}
		if spare := opts[:2][1]; spare != nil {
			t.Fatalf("Execute wrote %T into the caller's options", spare)
		}
	}
}

// The guard's face is what a user calls: New, Guard, the calls, their
// options and errors (issue 34); what only adapters need is in
// internal/adapt.
func TestFaceSize(t *testing.T) {
	const limit = 55
	pkgs, err := parser.ParseDir(token.NewFileSet(), ".", func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pkgs {
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if d.Recv == nil && d.Name.IsExported() {
						names = append(names, d.Name.Name)
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if s.Name.IsExported() {
								names = append(names, s.Name.Name)
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									names = append(names, n.Name)
								}
							}
						}
					}
				}
			}
		}
	}
	if len(names) > limit {
		t.Errorf("guard exports %d names, more than %d: %v", len(names), limit, names)
	}
}
