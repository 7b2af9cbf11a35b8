package chaos

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// Kill is one SIGKILL the driver sent; InWindow: timed into the window
// after a side effect.
type Kill struct {
	Slot     int       `json:"slot"`
	PID      int       `json:"pid"`
	At       time.Time `json:"at"`
	InWindow bool      `json:"in_window,omitempty"`
}

// Pause is one SIGSTOP the driver sent, followed by a SIGCONT For later:
// the process is a zombie holder if its leases lapse meanwhile.
type Pause struct {
	Slot     int           `json:"slot"`
	PID      int           `json:"pid"`
	At       time.Time     `json:"at"`
	For      time.Duration `json:"for"`
	InWindow bool          `json:"in_window,omitempty"` // timed into the window after a side effect
}

// proc is one worker process.
type proc struct {
	slot     int
	pid      int
	started  time.Time
	done     chan struct{} // closed when the process has been reaped
	mu       sync.Mutex
	expected bool   // protected by mu: the driver killed or stopped it
	state    string // protected by mu, once done: how it ended
}

func (p *proc) expect() {
	p.mu.Lock()
	p.expected = true
	p.mu.Unlock()
}

// workers starts, kills, restarts and stops the worker processes. Every
// process is started from one goroutine locked to its OS thread, because
// Pdeathsig (the child's SIGKILL when its parent dies) follows the thread
// that forked it; each is in a process group of its own, killed as a group.
type workers struct {
	argv   []string
	env    func(slot int) (string, error)
	logDir string

	spawn chan spawnReq
	quit  chan struct{}

	mu         sync.Mutex
	slots      []*proc  // protected by mu: the current process of each slot, nil while down
	all        []*proc  // protected by mu: every process started
	unexpected []string // protected by mu: processes that ended without the driver asking
	kills      []Kill   // protected by mu
	pauses     []Pause  // protected by mu
	stopping   bool     // protected by mu
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func newWorkers(argv []string, n int, logDir string, env func(int) (string, error)) *workers {
	w := &workers{argv: argv, env: env, logDir: logDir, spawn: make(chan spawnReq), quit: make(chan struct{}), slots: make([]*proc, n)}
	started := make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine, after every child is gone
		close(started)
		for {
			select {
			case r := <-w.spawn:
				r.errc <- r.cmd.Start()
			case <-w.quit:
				return
			}
		}
	}()
	<-started
	return w
}

// start starts a worker process in slot.
func (w *workers) start(slot int) error {
	w.mu.Lock()
	stopping := w.stopping
	w.mu.Unlock()
	if stopping {
		return errors.New("chaos: workers are stopping")
	}
	envVal, err := w.env(slot)
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(w.logDir, fmt.Sprintf("worker-%d.log", slot)), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(w.argv[0], w.argv[1:]...)
	cmd.Env = append(os.Environ(), WorkerEnv+"="+envVal)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	errc := make(chan error, 1)
	w.spawn <- spawnReq{cmd: cmd, errc: errc}
	if err := <-errc; err != nil {
		logf.Close()
		return fmt.Errorf("chaos: starting worker %d: %w", slot, err)
	}
	p := &proc{slot: slot, pid: cmd.Process.Pid, started: time.Now(), done: make(chan struct{})}
	fmt.Fprintf(logf, "driver: started worker slot %d pid %d at %s\n", slot, p.pid, p.started.Format(time.RFC3339Nano))
	w.mu.Lock()
	if w.stopping {
		// stop ran while this one started: it did not see it.
		w.mu.Unlock()
		syscall.Kill(-p.pid, syscall.SIGKILL)
		cmd.Wait()
		logf.Close()
		return errors.New("chaos: workers are stopping")
	}
	w.slots[slot] = p
	w.all = append(w.all, p)
	w.mu.Unlock()
	go func() {
		err := cmd.Wait()
		state := "exit 0"
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			state = ee.ProcessState.String()
		} else if err != nil {
			state = err.Error()
		}
		fmt.Fprintf(logf, "driver: worker slot %d pid %d ended (%s) at %s\n", slot, p.pid, state, time.Now().Format(time.RFC3339Nano))
		logf.Close()
		p.mu.Lock()
		p.state = state
		expected := p.expected
		p.mu.Unlock()
		w.mu.Lock()
		if w.slots[slot] == p {
			w.slots[slot] = nil
		}
		if !expected {
			w.unexpected = append(w.unexpected, fmt.Sprintf("worker slot %d pid %d ended by itself: %s (log %s)", slot, p.pid, state, logf.Name()))
		}
		stopping := w.stopping
		w.mu.Unlock()
		close(p.done)
		if !expected && !stopping {
			// Keep the load going; the run fails on the unexpected exit anyway.
			time.Sleep(200 * time.Millisecond)
			w.start(slot)
		}
	}()
	return nil
}

// kill SIGKILLs the process in slot (its whole group) and waits until it is
// reaped. It returns false if the slot is down.
func (w *workers) kill(slot int, inWindow bool) (Kill, bool) {
	w.mu.Lock()
	p := w.slots[slot]
	w.mu.Unlock()
	if p == nil {
		return Kill{}, false
	}
	p.expect()
	k := Kill{Slot: slot, PID: p.pid, At: time.Now(), InWindow: inWindow}
	syscall.Kill(-p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
	w.mu.Lock()
	w.kills = append(w.kills, k)
	w.mu.Unlock()
	return k, true
}

// pause stops the process in slot (SIGSTOP) for d, then lets it go on
// (SIGCONT). It returns false if the slot is down.
func (w *workers) pause(slot int, d time.Duration, inWindow bool) (Pause, bool) {
	w.mu.Lock()
	p := w.slots[slot]
	w.mu.Unlock()
	if p == nil {
		return Pause{}, false
	}
	pa := Pause{Slot: slot, PID: p.pid, At: time.Now(), For: d, InWindow: inWindow}
	syscall.Kill(-p.pid, syscall.SIGSTOP)
	select {
	case <-p.done:
	case <-time.After(d):
	}
	syscall.Kill(-p.pid, syscall.SIGCONT)
	pa.For = time.Since(pa.At) // as long as it lasted, to the SIGCONT
	w.mu.Lock()
	w.pauses = append(w.pauses, pa)
	w.mu.Unlock()
	return pa, true
}

// pid returns the pid of the process in slot, if it is up.
func (w *workers) pid(slot int) (int, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if p := w.slots[slot]; p != nil {
		return p.pid, true
	}
	return 0, false
}

// killCount returns the number of kills so far.
func (w *workers) killCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.kills)
}

// pauseCount returns the number of pauses so far.
func (w *workers) pauseCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.pauses)
}

// live returns the slots with a running process.
func (w *workers) live() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	var s []int
	for i, p := range w.slots {
		if p != nil {
			s = append(s, i)
		}
	}
	return s
}

// stop ends every process: SIGTERM to each group, then SIGKILL to those
// still running after grace. Safe to call more than once.
func (w *workers) stop(grace time.Duration) {
	w.mu.Lock()
	w.stopping = true
	all := append([]*proc(nil), w.all...)
	w.mu.Unlock()
	for _, p := range all {
		p.expect()
		select {
		case <-p.done:
		default:
			syscall.Kill(-p.pid, syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(grace)
	for _, p := range all {
		select {
		case <-p.done:
		case <-time.After(time.Until(deadline)):
			syscall.Kill(-p.pid, syscall.SIGKILL)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
			}
		}
	}
	select {
	case <-w.quit:
	default:
		close(w.quit)
	}
}

func (w *workers) report() (kills []Kill, pauses []Pause, unexpected []string, started int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]Kill(nil), w.kills...), append([]Pause(nil), w.pauses...), append([]string(nil), w.unexpected...), len(w.all)
}
