package workflow_test

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporaltest"
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

// WithDataConverter: a guarded workflow's stored result is encoded by the
// data converter given, so that its payload codec applies to the stored
// record (the payload has the codec's encoding and none of the result's
// plaintext), and a second workflow with the key decodes it back to the
// first one's result. The control, without the option, stores the
// plaintext, which shows the check can fail.
func TestDataConverterEncodesStoredResult(t *testing.T) {
	dc := temporaltest.XORDataConverter()
	c := temporaltest.Client(t, client.Options{DataConverter: dc})
	for _, tc := range []struct {
		name    string
		opts    []workflow.Option
		encoded bool
	}{
		{"codec", []workflow.Option{workflow.WithDataConverter(dc)}, true},
		{"control without the option", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := memory.New()
			g, err := guard.New(s)
			if err != nil {
				t.Fatal(err)
			}
			var ships ledger
			tq := shipWorker(t, c, g, &ships, tc.opts...)
			o := Order{OrderID: "o-dc", Amount: 12, Note: "web"}
			var first Receipt
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "a"), time.Minute, &first, "shipOrder", o); err != nil {
				t.Fatalf("first workflow: %v", err)
			}

			key, _, err := g.Key("shipOrder", o, guard.WithKeyPath("order_id"))
			if err != nil {
				t.Fatal(err)
			}
			rec, err := s.Get(t.Context(), key)
			if err != nil {
				t.Fatalf("the stored record: %v", err)
			}
			var p commonpb.Payloads
			if err := proto.Unmarshal(rec.Result, &p); err != nil || len(p.Payloads) != 1 {
				t.Fatalf("stored result is not one Temporal payload: %v", err)
			}
			enc := string(p.Payloads[0].GetMetadata()[converter.MetadataEncoding])
			if (enc == temporaltest.XOREncoding) != tc.encoded {
				t.Errorf("stored payload encoding %q; want the codec's: %v", enc, tc.encoded)
			}
			if plain := bytes.Contains(rec.Result, []byte(first.ChargeID)); plain == tc.encoded {
				t.Errorf("stored result holds the plaintext charge ID: %v, want %v", plain, !tc.encoded)
			}
			var stored Receipt
			if err := (activity.PayloadCodec{DataConverter: dc}).Unmarshal(rec.Result, &stored); err != nil || stored != first {
				t.Errorf("stored result decodes to %+v (%v), want %+v", stored, err, first)
			}

			o.Note = "phone"
			var second Receipt
			if err := temporaltest.Run(t, c, tq, temporaltest.Name(t, "b"), time.Minute, &second, "shipOrder", o); err != nil {
				t.Fatalf("second workflow: %v", err)
			}
			if second != first || ships.count("ship") != 1 {
				t.Errorf("second workflow: %+v after %d shipments, want %+v after 1", second, ships.count("ship"), first)
			}
		})
	}
}
