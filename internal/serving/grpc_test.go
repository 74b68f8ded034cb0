package serving

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
)

// h2 frame types and flags used by the raw client below.
const (
	frameSettings      = 0x4
	framePing          = 0x6
	frameGoAway        = 0x7
	flagAck            = 0x1
	settingMaxStreams  = 0x3
	errEnhanceYourCalm = 0xb
)

func writeFrame(c net.Conn, typ, flags byte, payload []byte) error {
	h := make([]byte, 9, 9+len(payload))
	h[0], h[1], h[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
	h[3], h[4] = typ, flags
	_, err := c.Write(append(h, payload...))
	return err
}

// h2Conn is a raw HTTP/2 client connection: it can send pings as fast as it likes, which gRPC's
// own client refuses to do.
type h2Conn struct {
	c          net.Conn
	maxStreams uint32
	goAway     chan []byte // code (4 bytes) + debug data
}

func dialH2(t *testing.T, addr string) *h2Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := io.WriteString(c, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeFrame(c, frameSettings, 0, nil); err != nil {
		t.Fatal(err)
	}
	h := &h2Conn{c: c, goAway: make(chan []byte, 1)}
	settings := make(chan struct{})
	go h.read(settings)
	select {
	case <-settings:
	case <-time.After(5 * time.Second):
		t.Fatal("no SETTINGS from the server")
	}
	return h
}

// read reads frames: it acknowledges the server's SETTINGS (closing settings after the first)
// and reports a GOAWAY.
func (h *h2Conn) read(settings chan struct{}) {
	hdr := make([]byte, 9)
	for {
		if _, err := io.ReadFull(h.c, hdr); err != nil {
			return
		}
		n := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		p := make([]byte, n)
		if _, err := io.ReadFull(h.c, p); err != nil {
			return
		}
		switch {
		case hdr[3] == frameSettings && hdr[4]&flagAck == 0:
			for i := 0; i+6 <= len(p); i += 6 {
				if binary.BigEndian.Uint16(p[i:]) == settingMaxStreams {
					h.maxStreams = binary.BigEndian.Uint32(p[i+2:])
				}
			}
			_ = writeFrame(h.c, frameSettings, flagAck, nil)
			if settings != nil {
				close(settings)
				settings = nil
			}
		case hdr[3] == frameGoAway && len(p) >= 8:
			h.goAway <- p[4:]
			return
		}
	}
}

func TestGRPCPolicy(t *testing.T) {
	cases := []struct {
		name        string
		minInterval time.Duration
		every       time.Duration
		wantGoAway  bool
	}{
		{"pings faster than MinPingInterval: too_many_pings", time.Hour, time.Millisecond, true},
		{"pings slower than MinPingInterval: kept", 20 * time.Millisecond, 100 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := GRPC()
			p.MinPingInterval, p.MaxConcurrentStreams = tc.minInterval, 7
			s := grpc.NewServer(p.ServerOptions()...)
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go func() { _ = s.Serve(l) }()
			t.Cleanup(s.Stop)
			h := dialH2(t, l.Addr().String())
			if h.maxStreams != 7 {
				t.Errorf("server advertises MAX_CONCURRENT_STREAMS %d, want 7", h.maxStreams)
			}
			for range 6 {
				if err := writeFrame(h.c, framePing, 0, make([]byte, 8)); err != nil && !errors.Is(err, net.ErrClosed) {
					break
				}
				time.Sleep(tc.every)
			}
			select {
			case g := <-h.goAway:
				code := binary.BigEndian.Uint32(g)
				if !tc.wantGoAway {
					t.Fatalf("GOAWAY code %#x %q, want the connection kept", code, g[4:])
				}
				if code != errEnhanceYourCalm || string(g[4:]) != "too_many_pings" {
					t.Fatalf("GOAWAY code %#x %q, want ENHANCE_YOUR_CALM too_many_pings", code, g[4:])
				}
			case <-time.After(time.Second):
				if tc.wantGoAway {
					t.Fatal("no GOAWAY after 6 rapid pings")
				}
			}
		})
	}
}
