package serving

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// start serves h under p on a loopback port and returns its address.
func start(t *testing.T, p Policy, h http.Handler) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := p.Server("", h)
	go func() { _ = s.Serve(l) }()
	t.Cleanup(func() { _ = s.Close() })
	return l.Addr().String()
}

// closedWithin reports whether the server closes c within d (reads return EOF or a reset).
func closedWithin(c net.Conn, d time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(d))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	return !(errors.As(err, &ne) && ne.Timeout())
}

func fast(p Policy) Policy {
	p.ReadHeaderTimeout, p.IdleTimeout = 200*time.Millisecond, 300*time.Millisecond
	return p
}

func TestSlowlorisCutByReadHeaderTimeout(t *testing.T) {
	for name, p := range map[string]Policy{"admin": fast(Admin()), "stream": fast(Stream(time.Second))} {
		t.Run(name, func(t *testing.T) {
			addr := start(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			// One header byte every 50 ms: the headers never end within ReadHeaderTimeout.
			stop := make(chan struct{})
			defer close(stop)
			go func() {
				_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n")
				for {
					select {
					case <-stop:
						return
					case <-time.After(50 * time.Millisecond):
						if _, err := io.WriteString(c, "X"); err != nil {
							return
						}
					}
				}
			}()
			t0 := time.Now()
			if !closedWithin(c, 3*time.Second) {
				t.Fatal("slow header client still connected after 3 s")
			}
			if d := time.Since(t0); d > 2*time.Second {
				t.Errorf("cut after %v, want about ReadHeaderTimeout (200ms)", d)
			}
		})
	}
}

func TestIdleKeepAliveClosed(t *testing.T) {
	for name, p := range map[string]Policy{"admin": fast(Admin()), "stream": fast(Stream(time.Second))} {
		t.Run(name, func(t *testing.T) {
			addr := start(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			t0 := time.Now()
			_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, err := br.ReadByte(); err == nil || time.Since(t0) > 2*time.Second {
				t.Fatalf("idle keep-alive connection not closed by IdleTimeout: err %v after %v", err, time.Since(t0))
			}
		})
	}
}

// chunks writes and flushes a 256 KiB chunk every 20 ms for run, and returns the first error.
func chunks(w http.ResponseWriter, run time.Duration) error {
	return chunksVia(w, run, false)
}

// chunksVia is chunks; with writeFlush, each chunk goes out through WriteFlusher.
func chunksVia(w http.ResponseWriter, run time.Duration, writeFlush bool) error {
	rc := http.NewResponseController(w)
	b := []byte(strings.Repeat("x", 256<<10))
	for t0 := time.Now(); time.Since(t0) < run; time.Sleep(20 * time.Millisecond) {
		if writeFlush {
			wf, ok := w.(WriteFlusher)
			if !ok {
				return errors.New("the response writer is no WriteFlusher")
			}
			if err := wf.WriteFlush(b); err != nil {
				return err
			}
			continue
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
		if err := rc.Flush(); err != nil {
			return err
		}
	}
	return nil
}

func TestStreamStallTimeout(t *testing.T) {
	const stall = 300 * time.Millisecond
	admin := Admin()
	admin.WriteTimeout = stall
	cases := []struct {
		name    string
		p       Policy
		read    bool // the client reads the stream
		wantErr bool // the handler's writes fail
		wf      bool // the handler writes through WriteFlusher
	}{
		{"stream, client reading: not cut", Stream(stall), true, false, false},
		{"stream, client stalled: cut", Stream(stall), false, true, false},
		{"stream WriteFlush, client reading: not cut", Stream(stall), true, false, true},
		{"stream WriteFlush, client stalled: cut", Stream(stall), false, true, true},
		{"admin, client reading: cut at WriteTimeout", admin, true, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errc := make(chan error, 1)
			addr := start(t, tc.p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				errc <- chunksVia(w, 6*stall, tc.wf)
			}))
			c, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
			if tc.read {
				go func() { _, _ = io.Copy(io.Discard, c) }()
			} else {
				_ = c.(*net.TCPConn).SetReadBuffer(4 << 10)
			}
			select {
			case err := <-errc:
				if (err != nil) != tc.wantErr {
					t.Fatalf("handler write error %v, want error: %v", err, tc.wantErr)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("handler still writing after 10 s")
			}
		})
	}
}

func TestStreamLongWaitKeepsContext(t *testing.T) {
	p := Stream(time.Second)
	p.ReadTimeout = 100 * time.Millisecond
	addr := start(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		select {
		case <-r.Context().Done():
			http.Error(w, "cancelled", http.StatusInternalServerError)
		case <-time.After(400 * time.Millisecond):
			_, _ = io.WriteString(w, "done")
		}
	}))
	for _, body := range []string{"", "request body"} {
		resp, err := http.Post("http://"+addr+"/", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if string(b) != "done" {
			t.Errorf("body %q: a wait past ReadTimeout answered %q, want done", body, b)
		}
	}
}

func TestStreamHijackClearsDeadlines(t *testing.T) {
	p := Stream(100 * time.Millisecond)
	p.ReadTimeout = 100 * time.Millisecond
	got := make(chan string, 1)
	addr := start(t, p, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			got <- err.Error()
			return
		}
		defer c.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n\r\n")
		_ = brw.Flush()
		line, err := brw.ReadString('\n')
		if err != nil {
			got <- err.Error()
			return
		}
		got <- line
	}))
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _ = io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
	time.Sleep(300 * time.Millisecond) // past ReadTimeout and the stall timeout
	_, _ = io.WriteString(c, "hello\n")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	select {
	case s := <-got:
		if s != "hello\n" {
			t.Fatalf("hijacked connection read %q, want hello (deadlines left set?)", s)
		}
	case <-ctx.Done():
		t.Fatal("no read on the hijacked connection")
	}
}

// TestStreamHTTP2 runs the stall rule over cleartext HTTP/2: a stream that outlasts the stall
// timeout (with pauses between writes longer than it, after Write and Flush and after
// WriteFlush) is not reset while the client reads.
func TestStreamHTTP2(t *testing.T) {
	const stall = 100 * time.Millisecond
	errc := make(chan error, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := Stream(stall).Server("", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		for i := range 4 {
			if i%2 == 1 { // every other chunk through WriteFlusher
				if err := w.(WriteFlusher).WriteFlush([]byte("chunk\n")); err != nil {
					errc <- err
					return
				}
				time.Sleep(2 * stall)
				continue
			}
			if _, err := io.WriteString(w, "chunk\n"); err != nil {
				errc <- err
				return
			}
			if err := rc.Flush(); err != nil {
				errc <- err
				return
			}
			time.Sleep(2 * stall)
		}
		errc <- nil
	}))
	s.Protocols = &http.Protocols{}
	s.Protocols.SetUnencryptedHTTP2(true)
	go func() { _ = s.Serve(l) }()
	defer s.Close()
	tr := &http.Transport{Protocols: &http.Protocols{}}
	tr.Protocols.SetUnencryptedHTTP2(true)
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + l.Addr().String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.ProtoMajor != 2 || err != nil || strings.Count(string(b), "chunk") != 4 {
		t.Fatalf("HTTP/%d stream: %q, %v", resp.ProtoMajor, b, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("handler write: %v", err)
	}
}

// TestBound sends a body at one byte per 50 ms, 400 ms in all, past a 150 ms ReadTimeout.
func TestBound(t *testing.T) {
	p := Admin()
	p.ReadTimeout, p.WriteTimeout = 150*time.Millisecond, 150*time.Millisecond
	cases := []struct {
		name    string
		bound   bool
		wantErr bool
	}{
		{"slow body, bound: cut", true, true},
		{"slow body, unbound: read", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errc := make(chan error, 1)
			var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, err := io.ReadAll(r.Body)
				errc <- err
			})
			if tc.bound {
				h = p.Bound(h)
			}
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			s := &http.Server{Handler: h, ReadHeaderTimeout: time.Second}
			go func() { _ = s.Serve(l) }()
			defer s.Close()
			c, err := net.Dial("tcp", l.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			_, _ = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 8\r\n\r\n")
			go func() {
				for range 8 {
					time.Sleep(50 * time.Millisecond)
					if _, err := io.WriteString(c, "x"); err != nil {
						return
					}
				}
			}()
			select {
			case err := <-errc:
				if (err != nil) != tc.wantErr {
					t.Fatalf("body read error %v, want error: %v", err, tc.wantErr)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("handler still reading after 5 s")
			}
		})
	}
}
