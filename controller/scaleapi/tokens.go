package scaleapi

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"fmt"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// AllNamespaces in a tokens file scopes a token to every namespace.
const AllNamespaces = "*"

// Tokens are the bearer tokens of the scale API, each scoped to namespaces. Only SHA-256 digests of
// the tokens are kept in memory.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	digest [sha256.Size]byte
	all    bool
	ns     map[string]bool
}

// ParseTokens reads a tokens file: one token per line as "<namespaces> <token>", where namespaces
// is a comma-separated list of namespace names or "*" for every namespace. Blank lines and lines
// starting with '#' are skipped. Errors name the line.
func ParseTokens(data []byte) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want \"<namespaces> <token>\" (namespaces comma-separated or %q), got %d fields", n, AllNamespaces, len(fields))
		}
		e := tokenEntry{digest: sha256.Sum256([]byte(fields[1])), ns: map[string]bool{}}
		if prev, dup := seen[e.digest]; dup {
			return nil, fmt.Errorf("line %d: the token of line %d again (give one line per token, listing its namespaces)", n, prev)
		}
		seen[e.digest] = n
		for _, ns := range strings.Split(fields[0], ",") {
			switch {
			case ns == AllNamespaces:
				e.all = true
			case len(validation.IsDNS1123Label(ns)) > 0:
				return nil, fmt.Errorf("line %d: %q is not a namespace name: %s", n, ns, strings.Join(validation.IsDNS1123Label(ns), "; "))
			default:
				e.ns[ns] = true
			}
		}
		t.entries = append(t.entries, e)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("no token: want lines \"<namespaces> <token>\"")
	}
	return t, nil
}

// LoadTokens reads and parses a tokens file.
func LoadTokens(path string) (*Tokens, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read scale API tokens: %w", err)
	}
	t, err := ParseTokens(b)
	if err != nil {
		return nil, fmt.Errorf("scale API tokens %s: %w", path, err)
	}
	return t, nil
}

// Lookup authenticates token. It returns ok=false for an unknown token; otherwise the namespaces
// the token may act on (all=true: every namespace). Every entry is compared in constant time.
func (t *Tokens) Lookup(token string) (ns map[string]bool, all, ok bool) {
	if t == nil || token == "" {
		return nil, false, false
	}
	d := sha256.Sum256([]byte(token))
	for _, e := range t.entries {
		if subtle.ConstantTimeCompare(d[:], e.digest[:]) == 1 {
			ns, all, ok = e.ns, e.all, true
		}
	}
	return ns, all, ok
}
