package workflow_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
	"github.com/idemguard/idemguard/workflow"
)

// The workflow guard sets the claim's lease and mode itself: given through
// WithGuardOptions, guard.WithLease, guard.WithWait and guard.WithReject
// would be overridden, so Guard refuses them when the worker is built.
func TestGuardRefusesLeaseAndModeThroughGuardOptions(t *testing.T) {
	g, err := guard.New(memory.New())
	if err != nil {
		t.Fatal(err)
	}
	for name, opt := range map[string]guard.CallOption{
		"WithLease":  guard.WithLease(time.Minute),
		"WithWait":   guard.WithWait(time.Minute),
		"WithReject": guard.WithReject(),
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "workflow.WithLease") {
					t.Errorf("Guard with %s recovered %v; want a panic naming the workflow options to use", name, r)
				}
			}()
			workflow.Guard(g, shipOrder, workflow.WithGuardOptions(opt))
		})
	}
	// Other guard options are taken.
	workflow.Guard(g, shipOrder, workflow.WithGuardOptions(guard.WithTTL(time.Hour), guard.WithPayloadValidation("@")))
}
