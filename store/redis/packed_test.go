package redis

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemguard/idemguard/store"
)

// The claim script's packed record reads back field by field; a reply cut
// short, with a bad length or with bytes left over is an error, not a
// panic or a record read wrong.
func TestDecodePacked(t *testing.T) {
	s := &Store{maxResult: defaultMaxResultSize}
	rec, err := s.decodePacked("k", "R9:COMPLETED10:1700000000-3:tok4:hash--7:{"+"\"a\":1}1:1")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != store.StatusCompleted || rec.ExpiresAt.Unix() != 1700000000 || !rec.LeaseExpiresAt.IsZero() ||
		rec.Token != "tok" || rec.PayloadHash != "hash" || string(rec.Result) != `{"a":1}` || rec.Key != "k" {
		t.Errorf("decoded %+v", rec)
	}
	for _, bad := range []string{
		"R",
		"R9:COMPLETED",
		"R9:COMPLETED10:1700000000-3:tok---",
		"R9:COMPLETED10:1700000000-3:tok------x",
		"R9:COMPLETED10:1700000000-3:tok-----99:x",
		"R9:COMPLETED10:1700000000-3:tok------2:ab",
		"R-1:x",
		"Rx:COMPLETED",
		"R:---------",
	} {
		if rec, err := s.decodePacked("k", bad); err == nil {
			t.Errorf("decodePacked(%q) = %+v, want an error", bad, rec)
		}
	}
	// A record the script returns as it is, unreadable: corrupt.
	_, err = s.decodePacked("k", "R7:EXPIRED10:1700000000-3:tok-----")
	if !errors.Is(err, store.ErrCorrupt) {
		t.Errorf("unknown status: %v, want ErrCorrupt", err)
	}
	// The format: absent is format 1; one this build does not know is
	// reported before anything else is read, even an unknown status.
	if _, err := s.decodePacked("k", "R9:COMPLETED10:1700000000-3:tok-----"); err != nil {
		t.Errorf("no format field: %v, want format 1", err)
	}
	_, err = s.decodePacked("k", "R7:EXPIRED10:1700000000-3:tok----1:2")
	var fe *store.FormatError
	if !errors.As(err, &fe) || fe.Format != 2 || errors.Is(err, store.ErrCorrupt) {
		t.Errorf("format 2: %v, want a *store.FormatError for format 2", err)
	}
	for _, f := range []string{"1:0", "2:-1", "1:x", "10:9999999999"} {
		if _, err := s.decodePacked("k", "R9:COMPLETED10:1700000000-3:tok----"+f); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("format field %q: %v, want ErrCorrupt", f, err)
		}
	}
}

func FuzzDecodePacked(f *testing.F) {
	f.Add("R9:COMPLETED10:1700000000-3:tok4:hash--7:{\"a\":1}1:1")
	f.Add("R10:INPROGRESS10:170000000013:1700000000000------")
	s := &Store{maxResult: defaultMaxResultSize}
	f.Fuzz(func(t *testing.T, v string) {
		if !strings.HasPrefix(v, "R") {
			return
		}
		s.decodePacked("k", v) // must not panic
	})
}
