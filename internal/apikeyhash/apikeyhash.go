// Package apikeyhash is the one definition of how a Tenant's API keys are hashed and how the
// controller publishes those hashes for the gateway: the controller (controller/apikeys) reads
// the API-key Secrets and writes one ConfigMap per tenant namespace into its own namespace; the
// gateway reads those ConfigMaps and holds no Secret right. Only SHA-256 hashes are published,
// never a key.
package apikeyhash

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

const (
	// Label marks the published ConfigMaps (value "true").
	Label = "neuronetes.io/api-key-hashes"
	// NamespaceAnnotation names the tenant namespace whose Secrets a ConfigMap publishes.
	NamespaceAnnotation = "neuronetes.io/api-keys-namespace"
	// NamePrefix starts the name of every published ConfigMap: NamePrefix + tenant namespace.
	NamePrefix = "api-keys."
)

// Problems of a Secret named by a Tenant, as published.
const (
	// ProblemNotFound: the Secret does not exist.
	ProblemNotFound = "NotFound"
	// ProblemNotLabelled: the Secret exists but lacks v1alpha1.APIKeysSecretLabel.
	ProblemNotLabelled = "NotLabelled"
)

// ConfigMapName is the name of the ConfigMap that publishes the API-key Secrets of namespace ns.
func ConfigMapName(ns string) string { return NamePrefix + ns }

// Hash returns the hex SHA-256 of an API key. API keys are high-entropy secrets, so an unsalted
// fast hash keeps them safe at rest while letting a lookup be one map access.
func Hash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// ParseStored turns a Secret value into a key hash: "sha256:<64 hex>" is taken as a hash,
// anything else as the key itself. Surrounding whitespace (a trailing newline) is ignored.
func ParseStored(v string) (string, error) {
	v = strings.TrimSpace(v)
	if v == "" {
		return "", fmt.Errorf("empty API key")
	}
	if h, ok := strings.CutPrefix(v, "sha256:"); ok {
		return parseHex(h)
	}
	return Hash(v), nil
}

func parseHex(h string) (string, error) {
	if len(h) != 64 {
		return "", fmt.Errorf("sha256: hash must be 64 hex digits, got %d characters", len(h))
	}
	if _, err := hex.DecodeString(h); err != nil {
		return "", fmt.Errorf("sha256: hash is not hex: %w", err)
	}
	return strings.ToLower(h), nil
}

// Entry is what is published of one Secret: the hash of each of its keys, or why there is none.
type Entry struct {
	// Hashes maps a data key of the Secret to the hex SHA-256 of its API key.
	Hashes map[string]string `json:"hashes,omitempty"`
	// Errors maps a data key whose value is no usable key to the reason.
	Errors map[string]string `json:"errors,omitempty"`
	// Problem is ProblemNotFound or ProblemNotLabelled when the Secret cannot be used at all.
	Problem string `json:"problem,omitempty"`
}

// FromData builds the entry of a labelled Secret's data.
func FromData(data map[string][]byte) Entry {
	e := Entry{}
	for k, v := range data {
		h, err := ParseStored(string(v))
		if err != nil {
			if e.Errors == nil {
				e.Errors = map[string]string{}
			}
			e.Errors[k] = err.Error()
			continue
		}
		if e.Hashes == nil {
			e.Hashes = map[string]string{}
		}
		e.Hashes[k] = h
	}
	return e
}

// SortedKeys returns the data keys of e.Hashes in order.
func (e Entry) SortedKeys() []string {
	keys := make([]string, 0, len(e.Hashes))
	for k := range e.Hashes {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Encode returns the ConfigMap data publishing entries (by Secret name).
func Encode(entries map[string]Entry) (map[string]string, error) {
	out := make(map[string]string, len(entries))
	for name, e := range entries {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, fmt.Errorf("encode entry of Secret %s: %w", name, err)
		}
		out[name] = string(b)
	}
	return out, nil
}

// Decode reads the entries of a published ConfigMap's data. Every hash is checked for format.
func Decode(data map[string]string) (map[string]Entry, error) {
	out := make(map[string]Entry, len(data))
	for name, v := range data {
		var e Entry
		if err := json.Unmarshal([]byte(v), &e); err != nil {
			return nil, fmt.Errorf("entry of Secret %s: %w", name, err)
		}
		for k, h := range e.Hashes {
			ph, err := parseHex(h)
			if err != nil {
				return nil, fmt.Errorf("entry of Secret %s key %q: %w", name, k, err)
			}
			e.Hashes[k] = ph
		}
		out[name] = e
	}
	return out, nil
}
