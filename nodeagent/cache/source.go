package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"

	"github.com/neuronetes/neuronetes/internal/egress"
)

// Source is where an entry's bytes come from.
type Source interface {
	// Open returns a reader of the content starting at byte start, which is offset when the source
	// honoured the requested offset and 0 when it could only serve the whole content. total is the full
	// content length, or -1 when unknown.
	Open(ctx context.Context, offset int64) (rc io.ReadCloser, start, total int64, err error)
	// String names the source for logs (no credentials).
	String() string
}

// SourceOptions carries what some URI schemes need besides the URI itself.
type SourceOptions struct {
	// FileRoots are the directories file:// and bare-path sources may read below (admin flag
	// --file-source-roots); empty refuses every file source.
	FileRoots []string
	// Egress decides which addresses http(s) and s3 sources may reach; nil is the zero policy
	// (public addresses only).
	Egress *egress.Policy
	// HTTPClient is used for http(s) sources; when nil, a client of Egress with the default
	// timeouts. A client given here must enforce the egress policy itself.
	HTTPClient *http.Client
	// StallTimeout fails a download whose source sends no bytes for this long
	// (DefaultStallTimeout when 0).
	StallTimeout time.Duration
	// HTTPHeader is added to every http(s) request (e.g. Authorization from a Secret).
	HTTPHeader http.Header
	// S3Endpoint is "host:port" or "http(s)://host:port" of an S3-compatible server for s3:// URIs.
	S3Endpoint string
	// S3AccessKey and S3SecretKey are static credentials; anonymous access when both are empty.
	S3AccessKey, S3SecretKey string
	// S3Region is optional.
	S3Region string
	// S3Transport overrides the transport of s3 sources (tests, custom CAs); nil for a transport
	// of Egress. A transport given here must enforce the egress policy itself.
	S3Transport http.RoundTripper
}

// DefaultStallTimeout is how long a download may go without a byte before it fails.
const DefaultStallTimeout = time.Minute

// maxSourceRedirects is how many redirects an http(s) source follows (hubs redirect to CDNs);
// each target goes through the egress policy.
const maxSourceRedirects = 5

// NewHTTPClient returns the client http(s) sources use by default: dials through p, connect,
// TLS-handshake and response-header timeouts, at most maxSourceRedirects redirects.
func NewHTTPClient(p *egress.Policy) *http.Client {
	return p.Client(egress.ClientOptions{MaxRedirects: maxSourceRedirects})
}

// NewSource returns the Source for uri: file:///path (or a bare absolute path), http(s)://..., or
// s3://bucket/key.
//
// File sources are admitted only below opts.FileRoots; http(s) and s3 sources only reach
// addresses opts.Egress admits. Errors name spec.source.uri and the admin setting involved.
func NewSource(uri string, opts SourceOptions) (Source, error) {
	if strings.HasPrefix(uri, "/") {
		return newFileSource(uri, uri, opts.FileRoots)
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("spec.source.uri %q: %w", uri, err)
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return nil, fmt.Errorf("spec.source.uri %q: a file URI names no host (file:///path)", uri)
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("spec.source.uri %q: file URI needs an absolute path", uri)
		}
		return newFileSource(uri, u.Path, opts.FileRoots)
	case "http", "https":
		if err := opts.Egress.CheckURLHost(u.Hostname()); err != nil {
			return nil, fmt.Errorf("spec.source.uri %q: %w", uri, err)
		}
		c := opts.HTTPClient
		if c == nil {
			c = NewHTTPClient(opts.Egress)
		}
		return HTTPSource{URL: uri, Client: c, Header: opts.HTTPHeader, StallTimeout: opts.StallTimeout}, nil
	case "s3":
		return newS3Source(u, opts)
	default:
		return nil, fmt.Errorf("spec.source.uri %q: unsupported scheme %q (want file, http, https or s3)", uri, u.Scheme)
	}
}

// FileSource reads a regular file below an admin-listed root (a mounted PV, a host directory of
// weights). Resuming seeks to the offset.
type FileSource struct {
	// Root is the admin-listed directory; Rel is the path below it. The file is opened through
	// os.Root, so neither ".." nor a symbolic link leads out of Root.
	Root, Rel string
}

// newFileSource admits path when it lies below one of roots (lexically; Open enforces it
// again against symbolic links).
func newFileSource(uri, path string, roots []string) (FileSource, error) {
	if len(roots) == 0 {
		return FileSource{}, fmt.Errorf("spec.source.uri %q: file sources are disabled on this node; an admin lists the directories Models may read with nodeagent.fileSourceRoots (--file-source-roots)", uri)
	}
	clean := filepath.Clean(path)
	for _, r := range roots {
		r = filepath.Clean(r)
		rel, err := filepath.Rel(r, clean)
		if err != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
			continue
		}
		return FileSource{Root: r, Rel: rel}, nil
	}
	return FileSource{}, fmt.Errorf("spec.source.uri %q: not below a directory of nodeagent.fileSourceRoots (--file-source-roots=%s)", uri, strings.Join(roots, ","))
}

// Open implements Source.
func (s FileSource) Open(_ context.Context, offset int64) (io.ReadCloser, int64, int64, error) {
	root, err := os.OpenRoot(s.Root)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open file-source root: %w", err)
	}
	defer root.Close()
	f, err := root.Open(s.Rel)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open source file %s: %w", s, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, fmt.Errorf("stat source file: %w", err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, 0, 0, fmt.Errorf("source file %s: not a regular file", s)
	}
	if offset > st.Size() {
		offset = 0
	}
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		f.Close()
		return nil, 0, 0, fmt.Errorf("seek source file: %w", err)
	}
	return f, offset, st.Size(), nil
}

// String implements Source.
func (s FileSource) String() string { return "file://" + filepath.Join(s.Root, s.Rel) }

// HTTPSource downloads over HTTP(S) and resumes with a Range request.
type HTTPSource struct {
	URL    string
	Client *http.Client
	// Header is added to every request; may be nil.
	Header http.Header
	// StallTimeout fails the body when no byte arrives for this long (DefaultStallTimeout when 0).
	StallTimeout time.Duration
}

// Open implements Source. A 206 reply resumes at offset; a 200 reply restarts from 0; a 416 reply to a
// resume (the partial is at least as long as the content) restarts from 0 as well.
func (s HTTPSource) Open(ctx context.Context, offset int64) (io.ReadCloser, int64, int64, error) {
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL, nil)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("http request: %w", err)
		}
		for k, vs := range s.Header {
			req.Header[k] = vs
		}
		if offset > 0 {
			req.Header.Set("Range", fmt.Sprintf("bytes=%d-", offset))
		}
		resp, err := s.Client.Do(req)
		if err != nil {
			return nil, 0, 0, fmt.Errorf("http get: %w", err)
		}
		switch {
		case resp.StatusCode == http.StatusPartialContent && offset > 0:
			total := int64(-1)
			var a, b int64
			if _, err := fmt.Sscanf(resp.Header.Get("Content-Range"), "bytes %d-%d/%d", &a, &b, &total); err != nil || a != offset {
				resp.Body.Close()
				return nil, 0, 0, fmt.Errorf("http get: bad Content-Range %q for offset %d", resp.Header.Get("Content-Range"), offset)
			}
			return egress.StallReader(resp.Body, s.stall()), offset, total, nil
		case resp.StatusCode == http.StatusOK:
			return egress.StallReader(resp.Body, s.stall()), 0, resp.ContentLength, nil
		case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable && offset > 0:
			resp.Body.Close()
			offset = 0
			continue
		default:
			resp.Body.Close()
			return nil, 0, 0, fmt.Errorf("http get %s: status %s", s.URL, resp.Status)
		}
	}
}

func (s HTTPSource) stall() time.Duration {
	if s.StallTimeout > 0 {
		return s.StallTimeout
	}
	return DefaultStallTimeout
}

// String implements Source.
func (s HTTPSource) String() string { return s.URL }

// S3Source reads an object from S3-compatible storage through minio-go and resumes with a ranged GET.
type S3Source struct {
	Core   *minio.Core
	Bucket string
	Key    string
	// StallTimeout fails the body when no byte arrives for this long (DefaultStallTimeout when 0).
	StallTimeout time.Duration
}

func newS3Source(u *url.URL, opts SourceOptions) (*S3Source, error) {
	bucket, key := u.Host, strings.TrimPrefix(u.Path, "/")
	if bucket == "" || key == "" {
		return nil, fmt.Errorf("source uri %q: want s3://bucket/key", u.String())
	}
	endpoint, secure := opts.S3Endpoint, true
	if endpoint == "" {
		return nil, fmt.Errorf("source uri %q: no S3 endpoint given", u.String())
	}
	if e, ok := strings.CutPrefix(endpoint, "http://"); ok {
		endpoint, secure = e, false
	} else if e, ok := strings.CutPrefix(endpoint, "https://"); ok {
		endpoint = e
	}
	endpoint = strings.TrimSuffix(endpoint, "/")
	host := endpoint
	if h, _, err := net.SplitHostPort(endpoint); err == nil {
		host = h
	}
	if err := opts.Egress.CheckURLHost(host); err != nil {
		return nil, fmt.Errorf("s3 endpoint %q: %w", opts.S3Endpoint, err)
	}
	tr := opts.S3Transport
	if tr == nil {
		tr = opts.Egress.Transport(egress.ClientOptions{})
	}
	var creds *credentials.Credentials
	if opts.S3AccessKey != "" || opts.S3SecretKey != "" {
		creds = credentials.NewStaticV4(opts.S3AccessKey, opts.S3SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{})
	}
	core, err := minio.NewCore(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: opts.S3Region, Transport: tr})
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %q: %w", opts.S3Endpoint, err)
	}
	return &S3Source{Core: core, Bucket: bucket, Key: key, StallTimeout: opts.StallTimeout}, nil
}

// Open implements Source.
func (s *S3Source) Open(ctx context.Context, offset int64) (io.ReadCloser, int64, int64, error) {
	var o minio.GetObjectOptions
	if offset > 0 {
		if err := o.SetRange(offset, 0); err != nil {
			return nil, 0, 0, fmt.Errorf("s3 range: %w", err)
		}
	}
	rc, info, hdr, err := s.Core.GetObject(ctx, s.Bucket, s.Key, o)
	if err != nil {
		var er minio.ErrorResponse
		if offset > 0 && errors.As(err, &er) && er.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			return s.Open(ctx, 0)
		}
		return nil, 0, 0, fmt.Errorf("s3 get %s: %w", s, err)
	}
	total := offset + info.Size
	if cr := hdr.Get("Content-Range"); cr != "" { // "bytes a-b/total"
		var a, b, n int64
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &a, &b, &n); err == nil {
			if a != offset {
				rc.Close()
				return nil, 0, 0, fmt.Errorf("s3 get %s: Content-Range %q does not start at %d", s, cr, offset)
			}
			total = n
		}
	}
	stall := s.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	return egress.StallReader(rc, stall), offset, total, nil
}

// String implements Source.
func (s *S3Source) String() string { return "s3://" + s.Bucket + "/" + s.Key }
