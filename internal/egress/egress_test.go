package egress

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"testing"
	"time"
)

func TestCheckAddr(t *testing.T) {
	cluster := []netip.Prefix{netip.MustParsePrefix("34.118.224.0/20")}
	allow := []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("127.0.0.1/32")}
	for _, tc := range []struct {
		addr   string
		allow  []netip.Prefix
		reason string // "" = allowed
	}{
		{"8.8.8.8", nil, ""},
		{"2001:4860:4860::8888", nil, ""},
		{"127.0.0.1", nil, "loopback"},
		{"::1", nil, "loopback"},
		{"::ffff:127.0.0.1", nil, "loopback"},
		{"169.254.169.254", nil, "link-local"},
		{"fe80::1", nil, "link-local"},
		{"10.0.0.5", nil, "private"},
		{"172.16.3.4", nil, "private"},
		{"192.168.1.1", nil, "private"},
		{"fd00::1", nil, "private"},
		{"100.64.1.1", nil, "shared (CGNAT)"},
		{"0.0.0.0", nil, "unspecified"},
		{"0.1.2.3", nil, "unspecified (\"this network\")"},
		{"::", nil, "unspecified"},
		{"224.0.0.1", nil, "multicast"},
		{"255.255.255.255", nil, "broadcast"},
		{"240.1.1.1", nil, "reserved"},
		{"64:ff9b::a00:1", nil, "NAT64"},
		{"34.118.230.1", nil, "cluster (egress.clusterCIDRs)"},
		{"10.100.0.1", allow, ""},
		{"127.0.0.1", allow, ""},
		{"127.0.0.2", allow, "loopback"},
	} {
		p := &Policy{AllowCIDRs: tc.allow, DenyCIDRs: cluster}
		err := p.CheckAddr("", netip.MustParseAddr(tc.addr))
		var de *DeniedError
		switch {
		case tc.reason == "" && err != nil:
			t.Errorf("%s: denied: %v", tc.addr, err)
		case tc.reason != "" && !errors.As(err, &de):
			t.Errorf("%s: want denied (%s), got %v", tc.addr, tc.reason, err)
		case tc.reason != "" && (de.Reason != tc.reason || !errors.Is(err, ErrDenied)):
			t.Errorf("%s: reason %q, want %q", tc.addr, de.Reason, tc.reason)
		}
	}
}

func TestHostAllowed(t *testing.T) {
	p := &Policy{AllowHosts: []string{"minio.storage.svc", "*.Corp.Example."}}
	for host, want := range map[string]bool{
		"minio.storage.svc": true, "MINIO.storage.svc.": true, "minio.storage.svc.evil.com": false,
		"a.corp.example": true, "a.b.corp.example": true, "corp.example": false, "xcorp.example": false,
	} {
		if got := p.HostAllowed(host); got != want {
			t.Errorf("HostAllowed(%q) = %v, want %v", host, got, want)
		}
	}
}

// TestClient dials the loopback test server through policies; "localhost" is a name that
// resolves to a denied address, and redirects lead from an admitted host to denied ones.
func TestClient(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if to := r.URL.Query().Get("to"); to != "" {
			http.Redirect(w, r, to, http.StatusFound)
			return
		}
		io.WriteString(w, "ok")
	}))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	byName := "http://localhost:" + port + "/"
	for _, tc := range []struct {
		name      string
		policy    *Policy
		redirects int
		url       string
		wantErr   string // "" = success
	}{
		{"loopback literal denied", &Policy{}, 0, srv.URL, "127.0.0.1 is a loopback address"},
		{"name resolving to loopback denied", &Policy{}, 0, byName, "is a loopback address"},
		{"loopback allowed by CIDR", &Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}}, 0, byName, ""},
		{"allowed host", &Policy{AllowHosts: []string{"localhost"}}, 0, byName, ""},
		{"redirect to a name resolving to loopback denied", &Policy{AllowHosts: []string{"127.0.0.1"}}, 3, srv.URL + "/?to=" + url.QueryEscape(byName), "is a loopback address"},
		{"redirect to loopback literal denied", &Policy{AllowHosts: []string{"localhost"}}, 3, byName + "?to=" + url.QueryEscape("http://127.0.0.2:"+port+"/"), "127.0.0.2 is a loopback address"},
		{"redirect refused by default", &Policy{AllowHosts: []string{"localhost"}}, 0, byName + "?to=/", "follows no redirects"},
		{"redirect within the cap", &Policy{AllowHosts: []string{"localhost"}}, 1, byName + "?to=/", ""},
		{"redirect to another scheme", &Policy{AllowHosts: []string{"localhost"}}, 3, byName + "?to=" + url.QueryEscape("file:///etc/passwd"), "scheme \"file\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.policy.Client(ClientOptions{Timeout: 5 * time.Second, MaxRedirects: tc.redirects})
			resp, err := c.Get(tc.url)
			if err == nil {
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if tc.wantErr != "" {
					t.Fatalf("got %s %q, want error %q", resp.Status, body, tc.wantErr)
				}
				if string(body) != "ok" {
					t.Fatalf("body %q", body)
				}
				return
			}
			if tc.wantErr == "" || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("err %v, want %q", err, tc.wantErr)
			}
		})
	}
}

func TestResponseHeaderTimeout(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	p := &Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	c := p.Client(ClientOptions{ResponseHeaderTimeout: 100 * time.Millisecond})
	start := time.Now()
	_, err := c.Get(srv.URL)
	if err == nil || time.Since(start) > 3*time.Second {
		t.Fatalf("err %v after %s, want a response-header timeout", err, time.Since(start))
	}
}

func TestStallReader(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "first")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	p := &Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	resp, err := p.Client(ClientOptions{}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	rc := StallReader(resp.Body, 150*time.Millisecond)
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if !errors.Is(err, ErrStalled) || string(b) != "first" {
		t.Fatalf("read %q, %v; want \"first\" then ErrStalled", b, err)
	}
}

func TestFailureCache(t *testing.T) {
	now := time.Unix(1000, 0)
	c := &FailureCache[string]{TTL: time.Minute, Now: func() time.Time { return now }}
	boom := errors.New("boom")
	c.Put("a", boom)
	if err, ok := c.Get("a"); !ok || err != boom {
		t.Fatalf("Get = %v, %v", err, ok)
	}
	now = now.Add(time.Minute)
	if _, ok := c.Get("a"); ok {
		t.Fatal("failure still cached after its TTL")
	}
	c.Put("b", boom)
	c.Put("b", nil)
	if _, ok := c.Get("b"); ok {
		t.Fatal("Put(nil) did not forget")
	}
}

func TestFlags(t *testing.T) {
	for _, tc := range []struct {
		cidrs, hosts, cluster string
		wantErr               string
	}{
		{"127.0.0.1, 10.0.0.0/8,::1", "minio.svc,*.corp.example", "34.0.0.0/8", ""},
		{"10.0.0.0/33", "", "", "--egress-allow-cidrs"},
		{"", "http://x", "", "--egress-allow-hosts"},
		{"", "*", "", "--egress-allow-hosts"},
		{"", "", "nope", "--egress-cluster-cidrs"},
	} {
		f := Flags{allowCIDRs: tc.cidrs, allowHosts: tc.hosts, denyCIDRs: tc.cluster}
		_, err := f.Policy()
		if (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%+v: err %v, want %q", tc, err, tc.wantErr)
		}
	}
}

func TestPodURL(t *testing.T) {
	for _, tc := range []struct {
		ip, port, path string
		want           string // "" = refused
	}{
		{"10.88.0.7", "8000", "/metrics", "http://10.88.0.7:8000/metrics"},
		{"fd00::7", "9400", "/a/b", "http://[fd00::7]:9400/a/b"},
		{"10.88.0.7", "8000@169.254.169.254", "/metrics", ""},
		{"10.88.0.7", "08000", "/metrics", ""},
		{"10.88.0.7", "70000", "/metrics", ""},
		{"10.88.0.7", "8000", "@169.254.169.254/latest", ""},
		{"10.88.0.7", "8000", "metrics", ""},
		{"10.88.0.7", "8000", "/m?x=http://169.254.169.254/", ""},
		{"10.88.0.7", "8000", "/../../etc", ""},
		{"pod.example", "8000", "/metrics", ""},
	} {
		got, err := PodURL("annotation x", tc.ip, tc.port, tc.path)
		if (tc.want == "") != (err != nil) || got != tc.want {
			t.Errorf("PodURL(%s, %s, %s) = %q, %v; want %q", tc.ip, tc.port, tc.path, got, err, tc.want)
		}
	}
}

func TestWithHosts(t *testing.T) {
	base := &Policy{AllowHosts: []string{"a.example"}}
	q := base.WithHosts("nats://nats.queues.svc:4222,nats://n2:4222", "kafka-0:9092,kafka-1:9092", "redis://r.svc:6379/0", "", "10.0.0.9:6379",
		"kafkas://u:p%2Cw@k2:9093,k3:9093?sasl=scram-sha-256")
	want := []string{"a.example", "nats.queues.svc", "n2", "kafka-0", "kafka-1", "r.svc", "10.0.0.9", "k2", "k3"}
	if strings.Join(q.AllowHosts, ",") != strings.Join(want, ",") {
		t.Fatalf("AllowHosts %v, want %v", q.AllowHosts, want)
	}
	if len(base.AllowHosts) != 1 {
		t.Fatalf("WithHosts changed its receiver: %v", base.AllowHosts)
	}
}
