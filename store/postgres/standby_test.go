package postgres_test

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemguard/idemguard/internal/testing/failovertest"
	"github.com/idemguard/idemguard/internal/testing/faultproxy"
	"github.com/idemguard/idemguard/internal/testing/linz"
	"github.com/idemguard/idemguard/internal/testing/testenv"
	"github.com/idemguard/idemguard/store"
	"github.com/idemguard/idemguard/store/postgres"
)

var failoverFlag = flag.Bool("failover", false, "run TestStandbyFailover: a primary and a streaming standby of the test's own, the standby promoted under load")

// pgUser runs initdb and the servers when the test runs as root (initdb
// refuses root): the account scripts/harness.sh creates.
const pgUser = "idemguard-pg"

// pgCluster runs PostgreSQL servers of the test's own, as scripts/harness.sh
// does: the newest installed server binaries, run as pgUser when the test
// runs as root.
type pgCluster struct {
	t   *testing.T
	bin string
	dir string
	uid int // -1 when not switching users
	gid int
}

func newPgCluster(t *testing.T) *pgCluster {
	t.Helper()
	c := &pgCluster{t: t, uid: -1, gid: -1}
	c.bin = pgBinDir()
	if c.bin == "" {
		testenv.Missing(t, "no PostgreSQL server binaries (initdb, postgres) found; run scripts/harness.sh install")
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup(pgUser)
		if err != nil {
			testenv.Missing(t, "running as root without the "+pgUser+" account that runs PostgreSQL; scripts/harness.sh creates it (make test)")
		}
		c.uid, _ = strconv.Atoi(u.Uid)
		c.gid, _ = strconv.Atoi(u.Gid)
	}
	dir, err := os.MkdirTemp("", "idemguard-standby-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if c.uid >= 0 {
		if err := os.Chown(dir, c.uid, c.gid); err != nil {
			t.Fatal(err)
		}
	}
	c.dir = dir
	return c
}

// pgBinDir is the directory of the newest installed server binaries.
func pgBinDir() string {
	ok := func(d string) bool {
		for _, b := range []string{"initdb", "postgres", "pg_basebackup"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				return false
			}
		}
		return true
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		if d := strings.TrimSpace(string(out)); ok(d) {
			return d
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	for _, d := range dirs {
		if ok(d) {
			return d
		}
	}
	return ""
}

// command returns the PostgreSQL program name with args, run as pgUser
// if need be.
func (c *pgCluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	if c.uid >= 0 {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(c.uid), Gid: uint32(c.gid)}}
	}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

func (c *pgCluster) run(name string, args ...string) {
	c.t.Helper()
	if out, err := c.command(name, args...).CombinedOutput(); err != nil {
		c.t.Fatalf("%s %v: %v\n%s", name, args, err, out)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// pgServer is one running server.
type pgServer struct {
	data string
	port int
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *pgServer) addr() string { return fmt.Sprintf("127.0.0.1:%d", s.port) }

func (s *pgServer) url() string {
	return fmt.Sprintf("postgres://idemguard@%s/idemguard?sslmode=disable", s.addr())
}

// start starts a server on data with settings, and waits until it takes
// connections (to database, "postgres" before it exists).
func (c *pgCluster) start(data string, database string, settings ...string) *pgServer {
	c.t.Helper()
	s := &pgServer{data: data, port: freePort(c.t), done: make(chan struct{})}
	sock := filepath.Join(c.dir, "sock-"+filepath.Base(data))
	if err := os.MkdirAll(sock, 0o755); err != nil {
		c.t.Fatal(err)
	}
	if c.uid >= 0 {
		os.Chown(sock, c.uid, c.gid)
	}
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-c", fmt.Sprintf("port=%d", s.port),
		"-c", "unix_socket_directories=" + sock, "-c", "fsync=off", "-c", "max_connections=100"}
	for _, kv := range settings {
		args = append(args, "-c", kv)
	}
	s.cmd = c.command("postgres", args...)
	logf, err := os.Create(filepath.Join(c.dir, filepath.Base(data)+".log"))
	if err != nil {
		c.t.Fatal(err)
	}
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { s.cmd.Wait(); logf.Close(); close(s.done) }()
	c.t.Cleanup(func() { s.stop() })
	u := fmt.Sprintf("postgres://idemguard@%s/%s?sslmode=disable", s.addr(), database)
	for deadline := time.Now().Add(30 * time.Second); ; {
		select {
		case <-s.done:
			b, _ := os.ReadFile(logf.Name())
			c.t.Fatalf("postgres on %s exited:\n%s", data, b)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		conn, err := pgx.Connect(ctx, u)
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return s
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("postgres on %s did not take connections: %v", data, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// crash kills the server at once, as a lost machine.
func (s *pgServer) crash() {
	s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
}

// stop shuts the server down at once (immediate mode).
func (s *pgServer) stop() {
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		s.crash()
	}
}

// standbyRig is a primary, a streaming standby that reaches it through a
// delaying link (the replication lag a failover can lose), and a front
// proxy the clients connect to, which a failover points at the standby.
type standbyRig struct {
	primary, standby *pgServer
	link             *faultproxy.Delay
	front            *faultproxy.Postgres
	table            string
}

// newStandbyRig starts the primary, creates the store's table, takes a
// base backup and starts a standby from it, streaming through a link lag
// late; with sync, the primary then waits for the standby to flush each
// commit (synchronous_standby_names = '*', synchronous_commit = on).
func newStandbyRig(t *testing.T, lag time.Duration, sync bool) *standbyRig {
	t.Helper()
	c := newPgCluster(t)
	r := &standbyRig{table: "idem_failover"}
	pdata, sdata := filepath.Join(c.dir, "primary"), filepath.Join(c.dir, "standby")
	c.run("initdb", "--pgdata="+pdata, "--username=idemguard", "--auth=trust", "--encoding=UTF8", "--locale=C", "--no-sync")
	r.primary = c.start(pdata, "postgres", "wal_level=replica", "max_wal_senders=4", "wal_keep_size=128MB")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://idemguard@%s/postgres?sslmode=disable", r.primary.addr()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE idemguard"); err != nil {
		t.Fatal(err)
	}
	admin.Close(ctx)
	pool, err := pgxpool.New(ctx, r.primary.url())
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.CreateTable(ctx, pool, r.table); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	if r.link, err = faultproxy.NewDelay(r.primary.addr(), lag); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.link.Close() })
	c.run("pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(r.primary.port), "-U", "idemguard", "-D", sdata,
		"-X", "stream", "-R", "--no-sync", "--checkpoint=fast")
	_, lport, _ := net.SplitHostPort(r.link.Addr())
	r.standby = c.start(sdata, "idemguard", "hot_standby=on",
		fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%s user=idemguard application_name=standby", lport))
	// Wait until the primary streams to it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		conn, err := pgx.Connect(ctx, r.primary.url())
		if err == nil {
			var state string
			err = conn.QueryRow(ctx, "SELECT state FROM pg_stat_replication LIMIT 1").Scan(&state)
			conn.Close(ctx)
			if err == nil && state == "streaming" {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby does not stream: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if sync {
		conn, err := pgx.Connect(ctx, r.primary.url())
		if err != nil {
			t.Fatal(err)
		}
		for _, q := range []string{"ALTER SYSTEM SET synchronous_standby_names = '*'", "ALTER SYSTEM SET synchronous_commit = on", "SELECT pg_reload_conf()"} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		for deadline := time.Now().Add(30 * time.Second); ; {
			var state string
			err := conn.QueryRow(ctx, "SELECT sync_state FROM pg_stat_replication LIMIT 1").Scan(&state)
			if err == nil && state == "sync" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the standby is not synchronous: %q, %v", state, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		conn.Close(ctx)
	}
	if r.front, err = faultproxy.NewPostgres(r.primary.addr(), faultproxy.Config{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.front.Close() })
	return r
}

// failover loses the primary with what its link had not delivered,
// promotes the standby and sends the clients to it.
func (r *standbyRig) failover(t *testing.T) {
	t.Helper()
	r.link.Close()
	r.primary.crash()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, r.standby.url())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted); err != nil || !promoted {
		t.Fatalf("pg_promote: %v, %v", promoted, err)
	}
	if err := r.front.Retarget(r.standby.addr()); err != nil {
		t.Fatal(err)
	}
}

// runStandbyFailover drives a store through the rig's front for before,
// fails over, goes on for after, and measures what the promoted standby
// lost of the writes the primary acknowledged, as the Redis failover test
// does.
func runStandbyFailover(t *testing.T, r *standbyRig, before, after time.Duration) failovertest.Figures {
	t.Helper()
	ctx := context.Background()
	u := strings.Replace(r.primary.url(), r.primary.addr(), r.front.Addr(), 1)
	cfg, err := pgxpool.ParseConfig(u)
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 32
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	s, err := postgres.New(pool, postgres.WithTable(r.table))
	if err != nil {
		t.Fatal(err)
	}
	return failovertest.Run(t, s, failovertest.Config{
		Before: before, After: after, Failover: r.failover,
		Promoted: func(t *testing.T) store.Store {
			direct, err := pgxpool.New(ctx, r.standby.url())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(direct.Close)
			promoted, err := postgres.New(direct, postgres.WithTable(r.table))
			if err != nil {
				t.Fatal(err)
			}
			return promoted
		},
		Precision: linz.Precision{Expiry: time.Microsecond, Lease: time.Microsecond},
	})
}

// standbyLag is the lag of the replication link in the failover runs.
const standbyLag = 50 * time.Millisecond

// TestStandbyFailover measures what promoting a streaming standby loses
// (docs/postgres.md, Failover): a standby fed through a link 50 ms late is
// promoted (pg_promote) after the primary is killed, while writers claim
// and complete keys and a recorder plays guards on hot keys; the clients
// then reach the promoted standby. With asynchronous replication (the
// default) the commits of the last lag's worth of time are gone, claims
// among them; with synchronous_standby_names set on the primary every
// commit the store acknowledged is on the standby.
//
// It starts two servers of its own and takes about 20 s, so it runs only
// with -failover (make failover).
func TestStandbyFailover(t *testing.T) {
	if !*failoverFlag {
		t.Skip("run with -failover (make failover)")
	}
	t.Run("async", func(t *testing.T) {
		r := newStandbyRig(t, standbyLag, false)
		fig := runStandbyFailover(t, r, 2*time.Second, time.Second)
		t.Logf("asynchronous standby: %s", fig)
		if fig.LostClaims+fig.LostCompletions == 0 {
			t.Errorf("no acknowledged commit was lost behind a %v replication lag; the failover did not land in the lag (%s)", standbyLag, fig)
		}
	})
	t.Run("synchronous", func(t *testing.T) {
		r := newStandbyRig(t, standbyLag, true)
		fig := runStandbyFailover(t, r, 2*time.Second, time.Second)
		t.Logf("synchronous standby: %s", fig)
		if fig.LostClaims+fig.LostCompletions != 0 {
			t.Errorf("with a synchronous standby, %d claims and %d completions the store acknowledged are not on the promoted standby", fig.LostClaims, fig.LostCompletions)
		}
		if fig.Claims == 0 {
			t.Errorf("no claim was acknowledged before the failover")
		}
	})
}
