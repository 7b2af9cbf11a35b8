package httpguard_test

import (
	"io"
	"net/http"
	"sync"
	"testing"
	"time"
)

// TestPreferWait: "Prefer: wait=N" (RFC 7240) bounds how long a duplicate
// of a request in progress waits before its 409: wait=0 answers at once
// although the API waits (30 s by default); a duplicate without the
// preference waits and gets the first request's response.
func TestPreferWait(t *testing.T) {
	release := make(chan struct{})
	started := make(chan struct{})
	var once sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		once.Do(func() { close(started) })
		<-release
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "paid")
	})
	srv := serve(t, newGuard(t, memoryStore()), h)
	c := srv.Client()

	first := make(chan result, 1)
	go func() { first <- post(t, c, srv.URL+"/pay", "k-prefer", "{}") }()
	<-started
	// A duplicate that ignored the preference would wait for the API's 30 s:
	// the first request is let go after 10 s, and such a duplicate gets 201.
	letGo := time.AfterFunc(10*time.Second, func() { close(release) })
	for _, pref := range []string{"wait=0", "respond-async, wait=1"} {
		r := post(t, c, srv.URL+"/pay", "k-prefer", "{}", "Prefer: "+pref)
		wantProblem(t, r, http.StatusConflict, "in-progress")
	}
	waiting := make(chan result, 1)
	go func() { waiting <- post(t, c, srv.URL+"/pay", "k-prefer", "{}") }()
	time.Sleep(50 * time.Millisecond) // let it find the request in progress (either way it gets the response)
	if letGo.Stop() {
		close(release)
	}
	for _, ch := range []chan result{first, waiting} {
		if r := <-ch; r.status != http.StatusCreated || string(r.body) != "paid" {
			t.Errorf("got %d %q, want the first request's 201 paid", r.status, r.body)
		}
	}
}
