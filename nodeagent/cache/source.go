package cache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
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
	// HTTPClient is used for http(s) sources; http.DefaultClient when nil.
	HTTPClient *http.Client
	// HTTPHeader is added to every http(s) request (e.g. Authorization from a Secret).
	HTTPHeader http.Header
	// S3Endpoint is "host:port" or "http(s)://host:port" of an S3-compatible server for s3:// URIs.
	S3Endpoint string
	// S3AccessKey and S3SecretKey are static credentials; anonymous access when both are empty.
	S3AccessKey, S3SecretKey string
	// S3Region is optional.
	S3Region string
	// S3Transport overrides minio-go's HTTP transport (tests, custom CAs); nil for the default.
	S3Transport http.RoundTripper
}

// NewSource returns the Source for uri: file:///path (or a bare absolute path), http(s)://..., or
// s3://bucket/key.
func NewSource(uri string, opts SourceOptions) (Source, error) {
	if strings.HasPrefix(uri, "/") {
		return FileSource{Path: uri}, nil
	}
	u, err := url.Parse(uri)
	if err != nil {
		return nil, fmt.Errorf("source uri %q: %w", uri, err)
	}
	switch u.Scheme {
	case "file":
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return nil, fmt.Errorf("source uri %q: file URI needs an absolute path", uri)
		}
		return FileSource{Path: u.Path}, nil
	case "http", "https":
		c := opts.HTTPClient
		if c == nil {
			c = http.DefaultClient
		}
		return HTTPSource{URL: uri, Client: c, Header: opts.HTTPHeader}, nil
	case "s3":
		return newS3Source(u, opts)
	default:
		return nil, fmt.Errorf("source uri %q: unsupported scheme %q (want file, http, https or s3)", uri, u.Scheme)
	}
}

// FileSource reads a local file or a mounted PV path. Resuming seeks to the offset.
type FileSource struct {
	Path string
}

// Open implements Source.
func (s FileSource) Open(_ context.Context, offset int64) (io.ReadCloser, int64, int64, error) {
	f, err := os.Open(s.Path)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("open source file: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, 0, fmt.Errorf("stat source file: %w", err)
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
func (s FileSource) String() string { return "file://" + s.Path }

// HTTPSource downloads over HTTP(S) and resumes with a Range request.
type HTTPSource struct {
	URL    string
	Client *http.Client
	// Header is added to every request; may be nil.
	Header http.Header
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
			return resp.Body, offset, total, nil
		case resp.StatusCode == http.StatusOK:
			return resp.Body, 0, resp.ContentLength, nil
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

// String implements Source.
func (s HTTPSource) String() string { return s.URL }

// S3Source reads an object from S3-compatible storage through minio-go and resumes with a ranged GET.
type S3Source struct {
	Core   *minio.Core
	Bucket string
	Key    string
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
	var creds *credentials.Credentials
	if opts.S3AccessKey != "" || opts.S3SecretKey != "" {
		creds = credentials.NewStaticV4(opts.S3AccessKey, opts.S3SecretKey, "")
	} else {
		creds = credentials.New(&credentials.Static{})
	}
	core, err := minio.NewCore(endpoint, &minio.Options{Creds: creds, Secure: secure, Region: opts.S3Region, Transport: opts.S3Transport})
	if err != nil {
		return nil, fmt.Errorf("s3 endpoint %q: %w", opts.S3Endpoint, err)
	}
	return &S3Source{Core: core, Bucket: bucket, Key: key}, nil
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
	return rc, offset, total, nil
}

// String implements Source.
func (s *S3Source) String() string { return "s3://" + s.Bucket + "/" + s.Key }
