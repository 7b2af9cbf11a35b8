package chaos

import (
	"fmt"
	"sort"
	"time"

	"github.com/idemguard/idemguard/store"
)

// Why a claim's lease was lost, or why a run was cut short.
const (
	causeKill       = "kill"       // its process was SIGKILLed before its lease end
	causePause      = "pause"      // its process was paused (SIGSTOP) across its lease end
	causeFault      = "fault"      // an extension or completion sent before its lease end failed or came back after it, or the claim itself came back after its first extension was due
	causeStop       = "stop"       // the driver stopped the workers at the end of the run, before its lease end
	causeDeliberate = "deliberate" // the body failed on purpose (a stepped body's first attempt), and the call released its key
	causeCancel     = "cancel"     // Temporal ended the attempt's context (it timed out on the server, or was cancelled), a store call failed, and the call released its key
	causeStepHeld   = "stepheld"   // a step of the body found its key held by another live claim (an earlier attempt's, whose holder was killed, paused or cancelled and whose lease had not run out): the call failed with ErrInProgress and released its key
)

// Tolerances of the claim checks. Times are read from one machine clock
// by every process, so no skew is allowed for; the stores keep lease ends
// to the millisecond, and the tolerance covers their rounding.
const (
	leaseTolerance = 2 * time.Millisecond
	// resumeSlack: a process resumed this long before its lease end may
	// not have had the time to extend it (its timers, heartbeats and store
	// calls all fire at once after a pause of seconds).
	resumeSlack = time.Second
	// cancelNoted: the most a process takes, once a call released its
	// key, to note that the call's attempt had its context ended by
	// Temporal ("cancel" in its done file).
	cancelNoted = time.Second
)

// claim is one claim a worker's guard made, rebuilt from its calls log:
// the acquisition under one fencing token, and the fenced calls made
// under it.
type claim struct {
	pid        int
	key, token string
	first      time.Time   // the start of its first acquire attempt
	acquired   time.Time   // the end of the attempt that won (or found) the claim
	now        time.Time   // the latest time the store compared leases with in those attempts
	lease0     time.Time   // the lease end of the claim as acquired
	calls      []storeCall // its extensions, completions, commits and releases, by start
	gotDone    time.Time   // the end of a read that found it completed, after a completion whose answer was an error

	// Derived by analyse.
	leaseEnd  time.Time // the last lease end confirmed in time (before the lease end it replaced)
	confirmed time.Time // when that lease end was confirmed
	completed time.Time // the end of the call that completed it; zero if none did
	released  time.Time // the start of its first release; zero if none
	fenced    time.Time // the end of its first call answered with a token mismatch; zero if none
	extended  int       // successful extensions
	failedExt int       // extensions that failed or came back after the lease end they were to extend
	// lost: its lease end passed before it completed or was released, or
	// a fenced call found it taken over. fencedLive: taken over while its
	// lease was live (a mismatch answered before its lease end). cause:
	// what explains a loss ("" if nothing does).
	lost       bool
	fencedLive bool
	cause      string
}

func (cl *claim) String() string {
	return fmt.Sprintf("claim of pid %d token %.8s acquired %s lease to %s", cl.pid, cl.token, clock(cl.acquired), clock(cl.leaseEnd))
}

func clock(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.Format("15:04:05.000")
}

// claims indexes the claims of a run.
type claims struct {
	byToken map[string]*claim
	byKey   map[string][]*claim // by acquisition
	byProc  map[procKey][]*claim
}

type procKey struct {
	pid int
	key string
}

// buildClaims rebuilds the claims from the calls logs (sorted by start).
func buildClaims(calls []storeCall) *claims {
	cs := &claims{byToken: map[string]*claim{}, byKey: map[string][]*claim{}, byProc: map[procKey][]*claim{}}
	attempts := map[string]*claim{} // by token: acquire attempts, won or not
	var gets []storeCall
	for _, c := range calls {
		switch c.call {
		case callAcquire:
			cl := attempts[c.token]
			if cl == nil {
				cl = &claim{pid: c.pid, key: c.key, token: c.token, first: c.start}
				attempts[c.token] = cl
			}
			if c.now.After(cl.now) {
				cl.now = c.now
			}
			if (c.result == resOK || c.result == resOwn) && cl.acquired.IsZero() {
				cl.acquired, cl.lease0 = c.end, c.lease
				cs.byToken[c.token] = cl
			}
		case callGet:
			gets = append(gets, c)
		default:
			if cl := attempts[c.token]; cl != nil && c.token != "" {
				cl.calls = append(cl.calls, c)
			}
		}
	}
	for _, g := range gets {
		if cl := cs.byToken[g.token]; cl != nil && g.result == string(store.StatusCompleted) && (cl.gotDone.IsZero() || g.end.Before(cl.gotDone)) {
			cl.gotDone = g.end
		}
	}
	for _, cl := range cs.byToken {
		cs.byKey[cl.key] = append(cs.byKey[cl.key], cl)
		pk := procKey{cl.pid, cl.key}
		cs.byProc[pk] = append(cs.byProc[pk], cl)
	}
	for _, m := range []map[string][]*claim{cs.byKey} {
		for _, l := range m {
			sort.Slice(l, func(i, j int) bool { return l[i].acquired.Before(l[j].acquired) })
		}
	}
	for _, l := range cs.byProc {
		sort.Slice(l, func(i, j int) bool { return l[i].acquired.Before(l[j].acquired) })
	}
	return cs
}

// at returns the claim of process pid on key under which a run at t ran:
// the last it acquired by then (times in a ledger may be cut to the
// millisecond).
func (cs *claims) at(pid int, key string, t time.Time) *claim {
	var found *claim
	for _, cl := range cs.byProc[procKey{pid, key}] {
		if cl.acquired.After(t.Add(time.Millisecond)) {
			break
		}
		found = cl
	}
	return found
}

// analyse works out, for every claim, when its lease ran out and what
// explains that, given the driver's kills and pauses and the moment it
// began to stop the workers (stopAt, zero if unknown).
func (cs *claims) analyse(kills map[int][]time.Time, pauses map[int][]Pause, stopAt time.Time) {
	for _, cl := range cs.byToken {
		cl.analyse(kills[cl.pid], pauses[cl.pid], stopAt)
	}
}

func (cl *claim) analyse(kills []time.Time, pauses []Pause, stopAt time.Time) {
	// The lease end the claim held, extension by extension: an extension
	// counts if its answer came back before the lease end it replaced
	// (the guard's lease keeper gives the claim up at that moment).
	L, conf := cl.lease0, cl.acquired
	var errDone time.Time // the start of a completion whose answer was an error
	for _, x := range cl.calls {
		switch x.call {
		case callExtend:
			if x.result == resSent {
				cl.failedExt++ // never answered
				continue
			}
			ok := x.result == resOK
			if ok {
				cl.extended++
			}
			if x.start.After(L.Add(leaseTolerance)) {
				continue // sent after the lease ran out
			}
			switch {
			case ok && !x.end.After(L.Add(leaseTolerance)):
				if x.lease.After(L) {
					L, conf = x.lease, x.end
				}
			case x.result != resMismatch:
				cl.failedExt++
			}
		case callComplete, callCommit:
			switch x.result {
			case resOK:
				if cl.completed.IsZero() || x.end.Before(cl.completed) {
					cl.completed = x.end
				}
			case resError:
				if errDone.IsZero() {
					errDone = x.start
				}
			}
		case callRelease:
			if cl.released.IsZero() {
				cl.released = x.start
			}
		}
	}
	for _, x := range cl.calls {
		// A mismatch fences the claim out, unless the call raced the
		// claim's own release: the lease keeper's extension is still in
		// flight when the function fails and the guard releases the key,
		// and the release may land first.
		if x.result == resMismatch && x.call != callRelease && cl.fenced.IsZero() && (cl.released.IsZero() || x.end.Before(cl.released)) {
			cl.fenced = x.end
		}
	}
	if cl.completed.IsZero() && !cl.gotDone.IsZero() && !errDone.IsZero() {
		// A completion whose answer was lost, which a read found landed.
		cl.completed = errDone
	}
	cl.leaseEnd, cl.confirmed = L, conf
	settled := cl.completed
	if settled.IsZero() || !cl.released.IsZero() && cl.released.Before(settled) {
		settled = cl.released
	}
	lend := L.Add(leaseTolerance)
	switch {
	case !cl.fenced.IsZero() && !cl.fenced.After(L) && cl.completed.IsZero():
		// Its token was gone from the store before its lease ended.
		cl.lost, cl.fencedLive = true, true
		return
	case settled.IsZero(), settled.After(L), !cl.fenced.IsZero() && cl.completed.IsZero():
		cl.lost = true
	default:
		return
	}
	for _, k := range kills {
		if !k.Before(cl.first) && !k.After(lend) {
			cl.cause = causeKill
			return
		}
	}
	if !stopAt.IsZero() && !stopAt.Before(cl.first) && !stopAt.After(lend) {
		cl.cause = causeStop
		return
	}
	for _, pa := range pauses {
		end := pa.At.Add(pa.For)
		if !pa.At.After(lend) && !end.Before(L.Add(-resumeSlack)) && end.After(cl.first) {
			cl.cause = causePause
			return
		}
	}
	if due := cl.first.Add(cl.lease0.Sub(cl.first) / 3); cl.acquired.After(due) {
		// The claim itself came back after its first extension was due:
		// the lease was mostly spent before the guard held it.
		cl.cause = causeFault
		return
	}
	for _, x := range cl.calls {
		switch x.call {
		case callExtend, callComplete, callTxComplete, callCommit:
		default:
			continue
		}
		// Failed, answered after the lease end, or never answered.
		if !x.start.Before(conf.Add(-leaseTolerance)) && !x.start.After(lend) && (x.result == resError || x.result == resSent || x.end.After(lend)) {
			cl.cause = causeFault
			return
		}
	}
}

// describe says how a lost claim was lost, for a violation.
func (cl *claim) describe() string {
	switch {
	case cl.fencedLive:
		return fmt.Sprintf("%s: its token was gone from the store at %s, before its lease end", cl, clock(cl.fenced))
	case !cl.lost:
		switch {
		case !cl.completed.IsZero():
			return fmt.Sprintf("%s: completed at %s", cl, clock(cl.completed))
		case !cl.released.IsZero():
			return fmt.Sprintf("%s: released at %s", cl, clock(cl.released))
		}
		return cl.String()
	}
	return fmt.Sprintf("%s (confirmed at %s; %d extensions, %d failed or late; completed %s, released %s, fenced %s): its lease ran out with no kill, pause or failed store call of pid %d across it",
		cl, clock(cl.confirmed), cl.extended, cl.failedExt, clock(cl.completed), clock(cl.released), clock(cl.fenced), cl.pid)
}

// leaseAsOf returns the lease end the claim had confirmed by t.
func (cl *claim) leaseAsOf(t time.Time) time.Time {
	L := cl.lease0
	for _, x := range cl.calls {
		if x.call == callExtend && x.result == resOK && x.end.Before(t) && x.lease.After(L) {
			L = x.lease
		}
	}
	return L
}

// takeovers checks every claim against the claims of the same key made
// before it: a key claimed after another process recorded its outcome, a
// claim taken over while its confirmed lease was live (the store is given
// the claimant's time less the skew tolerance, and may take over only a
// lease that ended by then), and a fenced write — an extension, a
// completion, a commit or a release — that the store accepted from a
// claim after another claim had taken the key over.
func (cs *claims) takeovers(r *Report) {
	keys := make([]string, 0, len(cs.byKey))
	for k := range cs.byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		l := cs.byKey[k]
		for i, c2 := range l {
			for _, c1 := range l[:i] {
				if !c1.acquired.Before(c2.first) || !c1.released.IsZero() && c1.released.Before(c2.acquired) {
					continue // not known to be held when c2 was made, or given back
				}
				if !c1.completed.IsZero() && c1.completed.Before(c2.first) {
					r.IllegalTakeovers++
					r.violate("key %s: claimed by pid %d at %s although pid %d had recorded its outcome at %s", k, c2.pid, clock(c2.acquired), c1.pid, clock(c1.completed))
					continue
				}
				if c1.completed.IsZero() || c1.completed.After(c2.acquired) {
					if L := c1.leaseAsOf(c2.first); L.After(c2.now.Add(leaseTolerance)) {
						r.IllegalTakeovers++
						r.violate("key %s: %s was taken over by pid %d at %s (store time %s) while its lease ran to %s", k, c1, c2.pid, clock(c2.acquired), clock(c2.now), clock(L))
					}
				}
				for _, x := range c1.calls {
					if x.result == resOK && x.start.After(c2.acquired) && (x.call == callExtend || x.call == callComplete || x.call == callCommit || x.call == callRelease) {
						r.FencedWritesAccepted++
						r.violate("key %s: the store accepted a %s at %s under the token of pid %d's %s after pid %d took the key over at %s", k, x.call, clock(x.start), c1.pid, c1, c2.pid, clock(c2.acquired))
					}
				}
			}
		}
	}
}
