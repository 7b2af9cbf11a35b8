package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/idemguard/idemguard/internal/respfmt"
	"github.com/idemguard/idemguard/store"
)

// States of a record at a time: what list --stuck and release go by.
const (
	stateLive    = "live"    // completed and not expired, or held under a running lease
	stateStuck   = "stuck"   // in progress, its lease lapsed, not expired
	stateExpired = "expired" // past its expiry: ignored and replaced by the next call
)

// state returns the state of r at time at (the operator's clock less the
// skew tolerance, as the guard compares).
func state(r *store.Record, at time.Time) string {
	switch {
	case !at.Before(r.ExpiresAt):
		return stateExpired
	case r.Live(at):
		return stateLive
	}
	return stateStuck
}

// shortToken is the start of a fencing token, enough to tell claims apart.
func shortToken(tok string) string {
	if utf8.RuneCountInString(tok) <= 8 {
		return tok
	}
	return string([]rune(tok)[:8])
}

// recordJSON is a record in --json output: list prints one per line; get
// adds the result. docs/cli.md documents the schema; keep them together.
type recordJSON struct {
	Key              string   `json:"key"`
	Status           string   `json:"status"`
	State            string   `json:"state"`
	Token            string   `json:"token"`
	PayloadHash      string   `json:"payload_hash"`
	ExpiresAt        string   `json:"expires_at"`
	ExpiresInSeconds float64  `json:"expires_in_seconds"`
	LeaseExpiresAt   *string  `json:"lease_expires_at"`
	LeaseLeftSeconds *float64 `json:"lease_left_seconds"`
	// ResultKind is null for a record in progress: it has no result.
	ResultKind *string `json:"result_kind"`
	ResultSize int     `json:"result_size"`
}

// getJSON is get's --json output: the record and its result.
type getJSON struct {
	recordJSON
	Result *resultJSON `json:"result"`
}

// resultJSON is a stored result, decoded as far as the CLI can.
type resultJSON struct {
	// Format is "json", "http-response", "grpc-message", "grpc-status",
	// "temporal-payloads", "temporal-failure" or "base64".
	Format string `json:"format"`
	// Status, Header and Trailer are an HTTP response's (http-response).
	Status  int                 `json:"status,omitempty"`
	Header  map[string][]string `json:"header,omitempty"`
	Trailer map[string][]string `json:"trailer,omitempty"`
	// Type is a gRPC message's full name (grpc-message).
	Type string `json:"type,omitempty"`
	// Value is the result (json), an HTTP response's body when it is JSON
	// (http-response), a gRPC message (grpc-message, when the CLI knows its
	// type) or status (grpc-status) or a Temporal failure
	// (temporal-failure) in protobuf's JSON form.
	Value json.RawMessage `json:"value,omitempty"`
	// Text is an HTTP response's body when it is text but not JSON
	// (http-response).
	Text *string `json:"text,omitempty"`
	// Payloads are the Temporal payloads (temporal-payloads).
	Payloads []payloadJSON `json:"payloads,omitempty"`
	// Base64 is the result's bytes (base64), an HTTP response's binary body
	// (http-response) or the wire bytes of a gRPC message of a type the CLI
	// does not know (grpc-message).
	Base64 string `json:"base64,omitempty"`
}

// payloadJSON is one Temporal payload.
type payloadJSON struct {
	// Metadata holds the payload's metadata; values that are not UTF-8
	// text are written "base64:" followed by their base64.
	Metadata map[string]string `json:"metadata"`
	// Size is the length of the payload's data.
	Size int `json:"size"`
	// Value is the data when the encoding is json/plain; else Base64 holds
	// it (encrypted, compressed or binary payloads).
	Value  json.RawMessage `json:"value,omitempty"`
	Base64 string          `json:"base64,omitempty"`
}

func seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1000) / 1000
}

// toJSON describes r at time now, judged at at (now less the skew).
func toJSON(r *store.Record, now, at time.Time) recordJSON {
	j := recordJSON{
		Key:              r.Key,
		Status:           r.Status.String(),
		State:            state(r, at),
		Token:            r.Token,
		PayloadHash:      r.PayloadHash,
		ExpiresAt:        r.ExpiresAt.UTC().Format(time.RFC3339Nano),
		ExpiresInSeconds: seconds(r.ExpiresAt.Sub(now)),
		ResultSize:       len(r.Result),
	}
	if r.Status == store.StatusCompleted {
		kind := r.ResultKind.String()
		j.ResultKind = &kind
	}
	if !r.LeaseExpiresAt.IsZero() {
		s := r.LeaseExpiresAt.UTC().Format(time.RFC3339Nano)
		left := seconds(r.LeaseExpiresAt.Sub(now))
		j.LeaseExpiresAt, j.LeaseLeftSeconds = &s, &left
	}
	return j
}

// decodeResult decodes a stored result as far as it can: an HTTP response
// (httpguard) or gRPC message (grpcguard); JSON text; else a Temporal
// failure or gRPC status (for a stored error) or Temporal payloads (what
// activity.PayloadCodec stores); else raw bytes. It returns nil for an
// empty result.
func decodeResult(r *store.Record) *resultJSON {
	b := r.Result
	if len(b) == 0 {
		return nil
	}
	if v := decodeHTTP(b); v != nil {
		return v
	}
	if v := decodeMessage(b); v != nil {
		return v
	}
	if json.Valid(b) {
		return &resultJSON{Format: "json", Value: json.RawMessage(b)}
	}
	if r.ResultKind == store.ResultError {
		if v := decodeFailure(b); v != nil {
			return v
		}
		if v := decodeStatus(b); v != nil {
			return v
		}
	}
	if v := decodePayloads(b); v != nil {
		return v
	}
	return &resultJSON{Format: "base64", Base64: base64.StdEncoding.EncodeToString(b)}
}

// decodePayloads reads b as *commonpb.Payloads in protobuf binary form, as
// activity.PayloadCodec stores results. It accepts b only if it parses
// with no unknown fields and every payload carries an "encoding" in its
// metadata, as the SDK's converters write, so that arbitrary bytes are not
// mistaken for payloads.
func decodePayloads(b []byte) *resultJSON {
	p := &commonpb.Payloads{}
	if err := (proto.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, p); err != nil || len(p.Payloads) == 0 {
		return nil
	}
	if len(p.ProtoReflect().GetUnknown()) > 0 {
		return nil
	}
	out := &resultJSON{Format: "temporal-payloads"}
	for _, pl := range p.Payloads {
		if len(pl.ProtoReflect().GetUnknown()) > 0 {
			return nil
		}
		enc, ok := pl.Metadata["encoding"]
		if !ok || len(enc) == 0 {
			return nil
		}
		pj := payloadJSON{Metadata: make(map[string]string, len(pl.Metadata)), Size: len(pl.Data)}
		for k, v := range pl.Metadata {
			if utf8.Valid(v) {
				pj.Metadata[k] = string(v)
			} else {
				pj.Metadata[k] = "base64:" + base64.StdEncoding.EncodeToString(v)
			}
		}
		if string(enc) == "json/plain" && json.Valid(pl.Data) {
			pj.Value = json.RawMessage(pl.Data)
		} else {
			pj.Base64 = base64.StdEncoding.EncodeToString(pl.Data)
		}
		out.Payloads = append(out.Payloads, pj)
	}
	return out
}

// decodeHTTP reads b as a response httpguard stored: its status, headers
// and trailers, and its body as JSON, text or base64.
func decodeHTTP(b []byte) *resultJSON {
	h, err := respfmt.DecodeHTTP(b)
	if err != nil {
		return nil
	}
	out := &resultJSON{Format: "http-response", Status: h.Status, Header: h.Header, Trailer: h.Trailer}
	if out.Header == nil {
		out.Header = map[string][]string{}
	}
	switch {
	case len(h.Body) == 0:
	case json.Valid(h.Body):
		var c bytes.Buffer
		if json.Compact(&c, h.Body) == nil {
			out.Value = json.RawMessage(c.Bytes())
		} else {
			out.Value = json.RawMessage(h.Body)
		}
	case utf8.Valid(h.Body) && !strings.ContainsRune(string(h.Body), 0):
		text := string(h.Body)
		out.Text = &text
	default:
		out.Base64 = base64.StdEncoding.EncodeToString(h.Body)
	}
	return out
}

// decodeMessage reads b as a response message grpcguard stored: its type,
// and the message in protobuf's JSON form when the CLI knows the type
// (the well-known types and those of the libraries it links), else its
// wire bytes.
func decodeMessage(b []byte) *resultJSON {
	name, wire, err := respfmt.SplitMessage(b)
	if err != nil {
		return nil
	}
	out := &resultJSON{Format: "grpc-message", Type: name}
	if mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(name)); err == nil {
		m := mt.New().Interface()
		if proto.Unmarshal(wire, m) == nil {
			if j, err := protojson.Marshal(m); err == nil {
				var c bytes.Buffer
				if json.Compact(&c, j) == nil {
					out.Value = json.RawMessage(c.Bytes())
					return out
				}
			}
		}
	}
	out.Base64 = base64.StdEncoding.EncodeToString(wire)
	return out
}

// decodeStatus reads b as a gRPC status (google.rpc.Status), as grpcguard
// stores a handler's error: its code, message and details, the details
// whose types the CLI does not know by their type URL alone.
func decodeStatus(b []byte) *resultJSON {
	st := &spb.Status{}
	if err := proto.Unmarshal(b, st); err != nil || len(st.ProtoReflect().GetUnknown()) > 0 || st.Code <= 0 || st.Code > 16 {
		return nil
	}
	j, err := protojson.Marshal(st)
	if err != nil {
		// A detail of a type the CLI does not know.
		known := &spb.Status{Code: st.Code, Message: st.Message}
		for _, d := range st.Details {
			known.Details = append(known.Details, &anypb.Any{TypeUrl: d.TypeUrl})
		}
		if j, err = protojson.Marshal(known); err != nil {
			return nil
		}
	}
	var c bytes.Buffer
	if json.Compact(&c, j) != nil {
		return nil
	}
	return &resultJSON{Format: "grpc-status", Value: json.RawMessage(c.Bytes())}
}

// decodeFailure reads b as a Temporal failure in protobuf binary form, as
// the activity guard stores definite errors.
func decodeFailure(b []byte) *resultJSON {
	f := &failurepb.Failure{}
	if err := proto.Unmarshal(b, f); err != nil || len(f.ProtoReflect().GetUnknown()) > 0 {
		return nil
	}
	if f.Message == "" && f.FailureInfo == nil {
		return nil
	}
	j, err := protojson.Marshal(f)
	if err != nil {
		return nil
	}
	var c bytes.Buffer
	if json.Compact(&c, j) != nil {
		return nil
	}
	return &resultJSON{Format: "temporal-failure", Value: json.RawMessage(c.Bytes())}
}

// Human output.

// fmtDur writes d (≥ 0) in its two largest units: "3d4h", "4h5m", "5m6s",
// "6s", "250ms".
func fmtDur(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	if d < time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	d = d.Truncate(time.Second)
	units := []struct {
		n    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}}
	var b strings.Builder
	parts := 0
	for _, u := range units {
		if parts == 2 {
			break
		}
		if n := d / u.n; n > 0 || parts > 0 {
			if n > 0 {
				fmt.Fprintf(&b, "%d%s", n, u.name)
			}
			d -= n * u.n
			parts++
		}
	}
	return b.String()
}

func fmtTime(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// leaseCell is where r's lease stands at now on the operator's clock, as
// list's LEASE column and get's and release's lease figures all write it,
// so that the three agree: "in 5m6s", "lapsed 5m6s", "none" for a claim
// without a lease, "-" for a completed record. A claimant takes a lapsed
// lease over only once it has lapsed by more than the clock-skew
// tolerance: state says when.
func leaseCell(r *store.Record, now time.Time) string {
	switch {
	case r.Status != store.StatusInProgress:
		return "-"
	case r.LeaseExpiresAt.IsZero():
		return "none"
	case r.LeaseExpiresAt.After(now):
		return "in " + fmtDur(r.LeaseExpiresAt.Sub(now))
	}
	return "lapsed " + fmtDur(now.Sub(r.LeaseExpiresAt))
}

// expiresCell is the EXPIRES column of list, and get's figure for the
// expiry: "in 23h59m" or "expired 5m".
func expiresCell(r *store.Record, now time.Time) string {
	if r.ExpiresAt.After(now) {
		return "in " + fmtDur(r.ExpiresAt.Sub(now))
	}
	return "expired " + fmtDur(now.Sub(r.ExpiresAt))
}

// fmtSize writes n bytes as "21B", "1.2KiB", "3.4MiB".
func fmtSize(n int) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%dB", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1fKiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%.1fMiB", float64(n)/(1<<20))
}

func resultCell(r *store.Record) string {
	if r.Status != store.StatusCompleted {
		return "-"
	}
	if r.ResultKind == store.ResultUnavailable {
		return "unavailable"
	}
	return r.ResultKind.String() + " " + fmtSize(len(r.Result))
}

// The columns of list's table. The key comes last, so every other column
// has a fixed width and pages line up without being buffered together.
const listHeader = "STATUS      STATE    LEASE           EXPIRES         RESULT           TOKEN     KEY"

func listRow(r *store.Record, now, at time.Time) string {
	return fmt.Sprintf("%-10s  %-7s  %-14s  %-14s  %-15s  %-8s  %s",
		r.Status, state(r, at), leaseCell(r, now), expiresCell(r, now), resultCell(r), shortToken(r.Token), r.Key)
}

// maxHumanResult is how much of a result get prints without --full.
const maxHumanResult = 64 << 10

// printRecord writes r for a person: one labelled line per field, then the
// result.
func printRecord(w io.Writer, r *store.Record, now, at time.Time, full bool) {
	row := func(label, format string, args ...any) {
		fmt.Fprintf(w, "%-13s %s\n", label, fmt.Sprintf(format, args...))
	}
	row("key", "%s", r.Key)
	st := state(r, at)
	switch {
	case st == stateStuck:
		row("status", "%s (stuck: the lease lapsed and no one holds the claim; the next call takes it over)", r.Status)
	case st == stateLive && r.Status == store.StatusInProgress && !r.LeaseExpiresAt.IsZero() && !r.LeaseExpiresAt.After(now):
		row("status", "%s (live: the lease lapsed less than the %s clock-skew tolerance ago, so its holder may still be running)", r.Status, fmtDur(now.Sub(at)))
	default:
		row("status", "%s (%s)", r.Status, st)
	}
	switch lease := leaseCell(r, now); {
	case lease == "none":
		row("lease ends", "none: the claim holds until the record expires")
	case lease == "-":
		row("lease ends", "-")
	default:
		row("lease ends", "%s (%s)", fmtTime(r.LeaseExpiresAt), lease)
	}
	row("expires", "%s (%s)", fmtTime(r.ExpiresAt), expiresCell(r, now))
	if r.PayloadHash == "" {
		row("payload hash", "- (no payload validation)")
	} else {
		row("payload hash", "%s", r.PayloadHash)
	}
	if r.Token == "" {
		row("token", "- (none: written by another library)")
	} else {
		row("token", "%s…", shortToken(r.Token))
	}
	if r.Status != store.StatusCompleted {
		row("result", "- (in progress)")
		return
	}
	row("result kind", "%s", r.ResultKind)
	row("result size", "%d bytes", len(r.Result))
	res := decodeResult(r)
	if res == nil {
		if r.ResultKind == store.ResultUnavailable {
			row("result", "- (the result was too large or could not be encoded; replays fail with guard.ErrResultUnavailable)")
		} else {
			row("result", "- (empty)")
		}
		return
	}
	var body bytes.Buffer
	switch res.Format {
	case "json":
		row("result", "JSON")
		writeJSON(&body, res.Value, "  ")
	case "http-response":
		row("result", "HTTP response")
		fmt.Fprintf(&body, "  %d %s\n", res.Status, http.StatusText(res.Status))
		writeFields(&body, "  ", res.Header)
		switch {
		case res.Value != nil:
			body.WriteString("\n")
			writeJSON(&body, res.Value, "  ")
		case res.Text != nil:
			body.WriteString("\n")
			for _, line := range strings.SplitAfter(*res.Text, "\n") {
				if line != "" {
					body.WriteString("  " + strings.TrimSuffix(line, "\n") + "\n")
				}
			}
		case res.Base64 != "":
			body.WriteString("\n  body (base64):\n")
			writeBase64(&body, res.Base64, "  ")
		}
		if len(res.Trailer) > 0 {
			body.WriteString("\n")
			writeFields(&body, "  trailer ", res.Trailer)
		}
	case "grpc-message":
		row("result", "gRPC message %s", res.Type)
		if res.Value != nil {
			writeJSON(&body, res.Value, "  ")
		} else {
			body.WriteString("  wire bytes (base64; the CLI does not know the type):\n")
			writeBase64(&body, res.Base64, "  ")
		}
	case "grpc-status":
		var st struct {
			Code int `json:"code"`
		}
		_ = json.Unmarshal(res.Value, &st)
		row("result", "gRPC status %s", codeName(st.Code))
		writeJSON(&body, res.Value, "  ")
	case "temporal-failure":
		row("result", "Temporal failure")
		writeJSON(&body, res.Value, "  ")
	case "temporal-payloads":
		row("result", "Temporal payloads (%d)", len(res.Payloads))
		for i, p := range res.Payloads {
			fmt.Fprintf(&body, "  payload %d: %s, %d bytes\n", i, metadataString(p.Metadata), p.Size)
			if p.Value != nil {
				writeJSON(&body, p.Value, "    ")
			} else {
				writeBase64(&body, p.Base64, "    ")
			}
		}
	default:
		row("result", "base64 (not JSON, not Temporal payloads)")
		writeBase64(&body, res.Base64, "  ")
	}
	if !full && body.Len() > maxHumanResult {
		w.Write(body.Bytes()[:maxHumanResult])
		fmt.Fprintf(w, "\n  … %d more bytes; --full prints all of it, --json gives it whole\n", body.Len()-maxHumanResult)
		return
	}
	w.Write(body.Bytes())
}

// writeFields writes header fields, one line per value, sorted by name,
// each prefixed.
func writeFields(w *bytes.Buffer, prefix string, h map[string][]string) {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		for _, v := range h[name] {
			fmt.Fprintf(w, "%s%s: %s\n", prefix, name, v)
		}
	}
}

// codeName is a gRPC status code's name, such as "FailedPrecondition".
func codeName(code int) string { return codes.Code(uint32(code)).String() }

// metadataString writes payload metadata as "encoding=json/plain, k=v",
// encoding first.
func metadataString(m map[string]string) string {
	parts := []string{"encoding=" + m["encoding"]}
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "encoding" {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ", ")
}

// writeJSON writes v indented, each line prefixed.
func writeJSON(w *bytes.Buffer, v json.RawMessage, prefix string) {
	var out bytes.Buffer
	if err := json.Indent(&out, v, prefix, "  "); err != nil {
		out.Reset()
		out.Write(v)
	}
	w.WriteString(prefix)
	w.Write(out.Bytes())
	w.WriteByte('\n')
}

// writeBase64 writes s in lines of 76 characters, each prefixed.
func writeBase64(w *bytes.Buffer, s, prefix string) {
	for len(s) > 0 {
		n := min(76, len(s))
		w.WriteString(prefix + s[:n] + "\n")
		s = s[n:]
	}
}
