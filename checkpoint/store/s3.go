package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config locates an S3-compatible bucket.
type S3Config struct {
	// Endpoint is host:port.
	Endpoint string
	// Bucket is created if missing.
	Bucket string
	// Prefix is prepended to every key ("" for the bucket root).
	Prefix string
	// AccessKey and SecretKey are static credentials.
	AccessKey, SecretKey string
	// Insecure selects plain http. The zero value is https: checkpoint images hold process
	// memory, and the signed manifest only detects tampering, it does not hide the bytes.
	// Only a loopback test store (the local minio) should set it.
	Insecure bool
	// Region defaults to us-east-1.
	Region string
}

// S3 is a Backend on S3-compatible object storage, through minio-go. Objects
// are streamed: Put uploads from the reader (multipart for large objects)
// and Get returns the object body as it downloads.
type S3 struct {
	c      *minio.Client
	bucket string
	prefix string
}

// NewS3 connects to cfg's endpoint and makes sure the bucket exists.
func NewS3(ctx context.Context, cfg S3Config) (*S3, error) {
	if cfg.Endpoint == "" || cfg.Bucket == "" {
		return nil, fmt.Errorf("s3 config: Endpoint %q and Bucket %q are required", cfg.Endpoint, cfg.Bucket)
	}
	region := cfg.Region
	if region == "" {
		region = "us-east-1"
	}
	c, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  credentials.NewStaticV4(cfg.AccessKey, cfg.SecretKey, ""),
		Secure: !cfg.Insecure,
		Region: region,
	})
	if err != nil {
		return nil, fmt.Errorf("s3 client for %q: %w", cfg.Endpoint, err)
	}
	ok, err := c.BucketExists(ctx, cfg.Bucket)
	if err != nil {
		return nil, fmt.Errorf("s3 bucket %q: %w", cfg.Bucket, err)
	}
	if !ok {
		if err := c.MakeBucket(ctx, cfg.Bucket, minio.MakeBucketOptions{Region: region}); err != nil {
			return nil, fmt.Errorf("s3 create bucket %q: %w", cfg.Bucket, err)
		}
	}
	return &S3{c: c, bucket: cfg.Bucket, prefix: cfg.Prefix}, nil
}

func (s *S3) key(k string) string { return s.prefix + k }

func notFound(err error) bool {
	var r minio.ErrorResponse
	return errors.As(err, &r) && (r.StatusCode == http.StatusNotFound || r.Code == "NoSuchKey")
}

// Put implements Backend. S3 makes a PUT visible only when complete.
func (s *S3) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	if _, err := s.c.PutObject(ctx, s.bucket, s.key(key), r, size, minio.PutObjectOptions{ContentType: "application/octet-stream"}); err != nil {
		return fmt.Errorf("s3 put %q: %w", key, err)
	}
	return nil
}

// Get implements Backend.
func (s *S3) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	o, err := s.c.GetObject(ctx, s.bucket, s.key(key), minio.GetObjectOptions{})
	if err == nil {
		// GetObject is lazy: Stat surfaces a missing key now.
		_, err = o.Stat()
	}
	if err != nil {
		if o != nil {
			o.Close()
		}
		if notFound(err) {
			return nil, fmt.Errorf("s3 get %q: %w", key, ErrNotFound)
		}
		return nil, fmt.Errorf("s3 get %q: %w", key, err)
	}
	return o, nil
}

// Exists implements Backend.
func (s *S3) Exists(ctx context.Context, key string) (bool, error) {
	_, err := s.c.StatObject(ctx, s.bucket, s.key(key), minio.StatObjectOptions{})
	if err == nil {
		return true, nil
	}
	if notFound(err) {
		return false, nil
	}
	return false, fmt.Errorf("s3 stat %q: %w", key, err)
}

// List implements Backend.
func (s *S3) List(ctx context.Context, prefix string) ([]Object, error) {
	var out []Object
	for o := range s.c.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.key(prefix), Recursive: true}) {
		if o.Err != nil {
			return nil, fmt.Errorf("s3 list %q: %w", prefix, o.Err)
		}
		out = append(out, Object{Key: o.Key[len(s.prefix):], Size: o.Size, ModTime: o.LastModified})
	}
	return out, nil
}

// Delete implements Backend.
func (s *S3) Delete(ctx context.Context, key string) error {
	if err := s.c.RemoveObject(ctx, s.bucket, s.key(key), minio.RemoveObjectOptions{}); err != nil && !notFound(err) {
		return fmt.Errorf("s3 delete %q: %w", key, err)
	}
	return nil
}

// Remote implements Backend: S3 is across the network.
func (s *S3) Remote() bool { return true }
