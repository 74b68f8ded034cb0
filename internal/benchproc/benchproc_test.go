package benchproc

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// helperEnv names the mode the test binary runs in when it is re-executed as a child.
const helperEnv = "BENCHPROC_HELPER"

// helperFails is what the "exit" helper logs before it fails.
const helperFails = "helper failing on purpose: port taken"

// TestMain runs the test binary as a child helper when helperEnv is set (its listen address in
// BENCHPROC_ADDR), and as the tests otherwise.
func TestMain(m *testing.M) {
	if mode := os.Getenv(helperEnv); mode != "" {
		os.Exit(helper(mode, os.Getenv("BENCHPROC_ADDR")))
	}
	os.Exit(m.Run())
}

// helper is a child process's behaviour: serve HTTP, accept TCP, exit at once, or ignore SIGTERM
// once it listens.
func helper(mode, addr string) int {
	switch mode {
	case "http":
		mux := http.NewServeMux()
		mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		fmt.Println(http.ListenAndServe(addr, mux))
		return 1
	case "tcp", "ignore-term":
		if mode == "ignore-term" {
			signal.Ignore(syscall.SIGTERM)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			fmt.Println(err)
			return 1
		}
		for {
			c, err := l.Accept()
			if err != nil {
				return 1
			}
			c.Close()
		}
	case "exit":
		fmt.Println("starting up")
		fmt.Println(helperFails)
		return 3
	case "silent":
		time.Sleep(time.Minute)
		return 0
	}
	fmt.Println("unknown helper mode", mode)
	return 2
}

// startHelper starts the test binary as a child in mode, serving on a free address.
func startHelper(t *testing.T, mode string) *Proc {
	t.Helper()
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := Start("helper-"+mode, t.TempDir(), addr, []string{helperEnv + "=" + mode, "BENCHPROC_ADDR=" + addr}, os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Kill)
	return p
}

func TestWait(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		http       bool          // WaitHTTP on /readyz, else WaitTCP
		timeout    time.Duration // how long the wait may take
		want       []string      // in the error; none: no error
	}{
		{name: "http ready", mode: "http", http: true, timeout: 20 * time.Second},
		{name: "tcp ready", mode: "tcp", timeout: 20 * time.Second},
		{name: "http on a child that exits", mode: "exit", http: true, timeout: 20 * time.Second,
			want: []string{"helper-exit exited before it was ready", "helper-exit.log", helperFails}},
		{name: "tcp on a child that exits", mode: "exit", timeout: 20 * time.Second,
			want: []string{"helper-exit exited before it listened", "helper-exit.log", helperFails}},
		{name: "http on a child that never listens", mode: "silent", http: true, timeout: 300 * time.Millisecond,
			want: []string{"helper-silent not ready at http://", "after 300ms"}},
		{name: "tcp on a child that never listens", mode: "silent", timeout: 300 * time.Millisecond,
			want: []string{"helper-silent not listening on 127.0.0.1:", "after 300ms"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startHelper(t, tc.mode)
			t0 := time.Now()
			var err error
			if tc.http {
				err = p.WaitHTTP("http://"+p.Addr+"/readyz", tc.timeout)
			} else {
				err = p.WaitTCP(tc.timeout)
			}
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("wait: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("wait succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not hold %q", err, w)
				}
			}
			if took := time.Since(t0); took > tc.timeout+5*time.Second {
				t.Errorf("the wait took %s, its timeout %s", took, tc.timeout)
			}
		})
	}
}

func TestStop(t *testing.T) {
	const short = 300 * time.Millisecond
	for _, tc := range []struct {
		name, mode string
		stop       func(*Proc)
		grace      time.Duration
		min, max   time.Duration // how long stopping takes
	}{
		{name: "stop: exits on SIGTERM, before the grace", mode: "tcp", stop: (*Proc).Stop, grace: DefaultGrace, max: DefaultGrace - time.Second},
		{name: "stop: ignores SIGTERM, killed after the grace", mode: "ignore-term", stop: (*Proc).Stop, grace: short, min: short, max: short + 5*time.Second},
		{name: "kill: ignores SIGTERM, killed at once", mode: "ignore-term", stop: (*Proc).Kill, grace: DefaultGrace, max: DefaultGrace - time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := startHelper(t, tc.mode)
			p.Grace = tc.grace
			if err := p.WaitTCP(20 * time.Second); err != nil { // it has set up its signals
				t.Fatal(err)
			}
			t0 := time.Now()
			tc.stop(p)
			took := time.Since(t0)
			select {
			case <-p.Done():
			default:
				t.Fatal("the process is still running")
			}
			if took < tc.min || took > tc.max {
				t.Errorf("stopping took %s, want %s to %s", took, tc.min, tc.max)
			}
			tc.stop(p) // again: a no-op
		})
	}
	var nilProc *Proc
	nilProc.Stop()
	nilProc.Kill()
	Group{nil, nil}.Stop()
}

func TestGroup(t *testing.T) {
	g := Group{startHelper(t, "tcp"), startHelper(t, "tcp")}
	for _, p := range g {
		if err := p.WaitTCP(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if cpu := g.CPU(); cpu < 0 {
		t.Errorf("group CPU %g < 0", cpu)
	}
	g.Stop()
	for _, p := range g {
		select {
		case <-p.Done():
		default:
			t.Errorf("%s still running after Group.Stop", p.Name)
		}
	}
}

func TestStartErrors(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, procName, logDir, bin, want string
	}{
		{name: "no name", logDir: dir, bin: "true", want: "name is empty"},
		{name: "no binary", procName: "x", logDir: dir, want: "bin is empty"},
		{name: "missing binary", procName: "x", logDir: dir, bin: filepath.Join(dir, "absent"), want: "starting x"},
		{name: "missing log dir", procName: "x", logDir: filepath.Join(dir, "absent"), bin: "true", want: "x log"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Start(tc.procName, tc.logDir, "", nil, tc.bin)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Start: %v, want an error holding %q", err, tc.want)
			}
		})
	}
}

func TestFreeAddr(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Fatalf("FreeAddr = %q (%v), want 127.0.0.1 and a port", addr, err)
	}
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	l.Close()
}

func TestCPU(t *testing.T) {
	t0 := time.Now()
	for x := 0; time.Since(t0) < 200*time.Millisecond; x++ { // burn a little CPU to read back
		_ = x * x
	}
	if s := SelfCPU(); s <= 0 {
		t.Errorf("SelfCPU = %g, want > 0", s)
	}
	if s := CPUOf(os.Getpid()); s <= 0 {
		t.Errorf("CPUOf(self) = %g, want > 0", s)
	}
	if s := CPUOf(-1); s != 0 {
		t.Errorf("CPUOf(-1) = %g, want 0", s)
	}
}

func TestCPUOfStat(t *testing.T) {
	// Fields after the name: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
	// utime stime ...
	for _, tc := range []struct {
		name, stat string
		want       float64
	}{
		{name: "plain", stat: "42 (sleep) S 1 42 42 0 -1 4194304 90 0 0 0 150 25 0 0 20 0", want: 1.75},
		{name: "name with spaces and parens", stat: "42 (a (b) c) R 1 42 42 0 -1 0 0 0 0 0 300 100 0 0", want: 4},
		{name: "no name", stat: "42 sleep S 1", want: 0},
		{name: "truncated", stat: "42 (sleep) S 1 42 42 0", want: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := cpuOfStat(tc.stat); got != tc.want {
				t.Errorf("cpuOfStat = %g, want %g", got, tc.want)
			}
		})
	}
}

func TestTail(t *testing.T) {
	dir := t.TempDir()
	long := strings.Repeat("a", 3000) + "END"
	for _, tc := range []struct {
		name, content, want string
	}{
		{name: "short", content: "one line\n", want: "one line\n"},
		{name: "long", content: long, want: long[len(long)-2000:]},
		{name: "missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.name != "missing" {
				if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			if got := Tail(path); got != tc.want {
				t.Errorf("Tail = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestLoadAvg(t *testing.T) {
	if _, err := os.Stat("/proc/loadavg"); err != nil {
		t.Skip("no /proc/loadavg")
	}
	var v float64
	if _, err := fmt.Sscanf(LoadAvg(), "%g", &v); err != nil {
		t.Errorf("LoadAvg = %q, not a number: %v", LoadAvg(), err)
	}
}
