package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/activity"
	"github.com/idemguard/idemguard/store"
)

func TestFmtDur(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0:                                       "0ms",
		250 * time.Millisecond:                  "250ms",
		time.Second:                             "1s",
		59*time.Minute + 59*time.Second:         "59m59s",
		time.Hour + 30*time.Second:              "1h",
		time.Hour + 2*time.Minute + time.Second: "1h2m",
		26 * time.Hour:                          "1d2h",
		30*24*time.Hour + time.Minute:           "30d",
		-5 * time.Second:                        "5s",
	} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
}

func TestState(t *testing.T) {
	now := time.Now()
	rec := func(s store.Status, lease, expiry time.Duration) *store.Record {
		r := &store.Record{Status: s, ExpiresAt: now.Add(expiry)}
		if lease != 0 {
			r.LeaseExpiresAt = now.Add(lease)
		}
		return r
	}
	for _, tc := range []struct {
		r    *store.Record
		want string
	}{
		{rec(store.StatusInProgress, time.Minute, time.Hour), stateLive},
		{rec(store.StatusInProgress, -time.Second, time.Hour), stateStuck},
		{rec(store.StatusInProgress, 0, time.Hour), stateLive}, // no lease: holds until expiry
		{rec(store.StatusInProgress, -time.Hour, -time.Minute), stateExpired},
		{rec(store.StatusCompleted, 0, time.Hour), stateLive},
		{rec(store.StatusCompleted, 0, -time.Second), stateExpired},
	} {
		if got := state(tc.r, now); got != tc.want {
			t.Errorf("state(%+v) = %q, want %q", tc.r, got, tc.want)
		}
	}
}

func completed(kind store.ResultKind, result []byte) *store.Record {
	return &store.Record{Key: "s#k", Status: store.StatusCompleted, Token: "tok", ResultKind: kind, Result: result,
		ExpiresAt: time.Now().Add(time.Hour)}
}

// Results as the library stores them decode to what they hold: JSON as
// JSON; activity.PayloadCodec's payloads with their encoding metadata
// (json/plain as JSON, binary and encrypted ones as base64); an activity's
// definite error as a Temporal failure; anything else as base64.
func TestDecodeResult(t *testing.T) {
	pc := activity.PayloadCodec{}
	jsonPayloads, err := pc.Marshal(map[string]int{"n": 1})
	if err != nil {
		t.Fatal(err)
	}
	binPayloads, err := pc.Marshal([]byte{0, 1, 2, 0xff})
	if err != nil {
		t.Fatal(err)
	}
	// A codec that rewrites the data and metadata, as encryption does.
	enc, err := proto.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{{
		Metadata: map[string][]byte{"encoding": []byte("binary/encrypted"), "encryption-key-id": []byte("k1"), "nonce": {0xff, 0xfe}},
		Data:     []byte{9, 8, 7},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	failure := temporal.GetDefaultFailureConverter().ErrorToFailure(temporal.NewNonRetryableApplicationError("card declined", "CardDeclined", nil))
	failureBytes, err := proto.Marshal(failure)
	if err != nil {
		t.Fatal(err)
	}
	noEncoding, _ := proto.Marshal(&commonpb.Payloads{Payloads: []*commonpb.Payload{{Data: []byte("x")}}})

	for _, tc := range []struct {
		name  string
		r     *store.Record
		check func(*resultJSON) error
	}{
		{"json", completed(store.ResultValue, []byte(`{"id":"r-1"}`)), func(r *resultJSON) error {
			return expect(r.Format == "json" && string(r.Value) == `{"id":"r-1"}`, r)
		}},
		{"payloads json/plain", completed(store.ResultValue, jsonPayloads), func(r *resultJSON) error {
			return expect(r.Format == "temporal-payloads" && len(r.Payloads) == 1 && r.Payloads[0].Metadata["encoding"] == converter.MetadataEncodingJSON &&
				string(r.Payloads[0].Value) == `{"n":1}` && r.Payloads[0].Base64 == "", r)
		}},
		{"payloads binary", completed(store.ResultValue, binPayloads), func(r *resultJSON) error {
			return expect(r.Format == "temporal-payloads" && r.Payloads[0].Metadata["encoding"] == converter.MetadataEncodingBinary &&
				r.Payloads[0].Base64 == base64.StdEncoding.EncodeToString([]byte{0, 1, 2, 0xff}) && r.Payloads[0].Value == nil, r)
		}},
		{"payloads encrypted", completed(store.ResultValue, enc), func(r *resultJSON) error {
			md := r.Payloads[0].Metadata
			return expect(r.Format == "temporal-payloads" && md["encoding"] == "binary/encrypted" && md["encryption-key-id"] == "k1" &&
				md["nonce"] == "base64:"+base64.StdEncoding.EncodeToString([]byte{0xff, 0xfe}) && r.Payloads[0].Size == 3, r)
		}},
		{"failure", completed(store.ResultError, failureBytes), func(r *resultJSON) error {
			return expect(r.Format == "temporal-failure" && strings.Contains(string(r.Value), `"message":"card declined"`) &&
				strings.Contains(string(r.Value), `"CardDeclined"`), r)
		}},
		{"payloads without an encoding are bytes", completed(store.ResultValue, noEncoding), func(r *resultJSON) error {
			return expect(r.Format == "base64", r)
		}},
		{"binary", completed(store.ResultValue, []byte{0xde, 0xad, 0xbe, 0xef}), func(r *resultJSON) error {
			return expect(r.Format == "base64" && r.Base64 == "3q2+7w==", r)
		}},
		{"empty", completed(store.ResultUnavailable, nil), func(r *resultJSON) error {
			return expect(r == nil, r)
		}},
	} {
		if err := tc.check(decodeResult(tc.r)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func expect(ok bool, r *resultJSON) error {
	if ok {
		return nil
	}
	b, _ := json.Marshal(r)
	return errors.New("decoded as " + string(b))
}

// get prints at most 64 KiB of a result unless --full.
func TestPrintRecordTruncates(t *testing.T) {
	big := []byte(`"` + strings.Repeat("x", 100<<10) + `"`)
	r := completed(store.ResultValue, big)
	now := time.Now()
	var short, full bytes.Buffer
	printRecord(&short, r, now, now, false)
	printRecord(&full, r, now, now, true)
	if !strings.Contains(short.String(), "more bytes; --full prints all of it") || short.Len() > 70<<10 {
		t.Errorf("without --full: %d bytes, truncation note %v", short.Len(), strings.Contains(short.String(), "--full"))
	}
	if !strings.Contains(full.String(), string(big)) {
		t.Error("with --full the result is not printed whole")
	}
}
