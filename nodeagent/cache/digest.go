// Package cache is the node agent's content-addressed store of model weights.
//
// Layout under the cache root (flag --cache-dir, default /var/lib/neuronetes/models):
//
//	sha256/<hex>          a verified entry; its content hashes to <hex>. Entries only ever appear here
//	                      by an atomic rename after verification, so a reader never sees a partial file.
//	tmp/<hex>.partial     a download in progress; kept across crashes so the next attempt resumes it.
//
// The store fetches from file paths, HTTP(S) (resumed with Range requests) and S3-compatible object
// storage (minio-go), limits concurrent fetches, pins entries used by running pods and evicts the least
// recently used unpinned entries under a disk budget.
package cache

import (
	"errors"
	"fmt"
	"strings"
)

// DigestPrefix is the only digest algorithm the cache accepts.
const DigestPrefix = "sha256:"

// ErrDigestMismatch is returned when fetched content does not hash to the expected digest.
var ErrDigestMismatch = errors.New("digest mismatch")

// ParseDigest validates a "sha256:<64 lowercase hex>" digest and returns the hex part.
func ParseDigest(digest string) (string, error) {
	hex, ok := strings.CutPrefix(digest, DigestPrefix)
	if !ok {
		return "", fmt.Errorf("digest %q: want prefix %q", digest, DigestPrefix)
	}
	if err := validHex(hex); err != nil {
		return "", fmt.Errorf("digest %q: %w", digest, err)
	}
	return hex, nil
}

// validHex checks that s is exactly 64 lowercase hex characters, so it is safe as a file name.
func validHex(s string) error {
	if len(s) != 64 {
		return fmt.Errorf("want 64 hex characters, got %d", len(s))
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("invalid character %q (want lowercase hex)", c)
		}
	}
	return nil
}
